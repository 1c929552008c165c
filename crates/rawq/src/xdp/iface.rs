//! The interface under an AF_XDP port, as the backend looks it up: its index, the XDP program
//! attached to it and the process holding that program's link (for
//! [`Error::XdpAlreadyAttached`]).
//!
//! Internal (`internal_mod!`): rawq's tests read the attached program through it. An embedder
//! has [`Link`](crate::Link) for an interface's state and [`link::driver`](crate::link::driver)
//! for its driver.

use crate::error::{Error, Result};
use crate::sys::rtnetlink::link_info;

/// The index of interface `ifname` in the calling thread's network namespace.
///
/// # Errors
/// [`Error::NotFound`] listing the interfaces that exist.
pub fn ifindex(ifname: &str) -> Result<u32> {
    crate::sys::ifindex(ifname).ok_or_else(|| Error::NotFound {
        kind: "interface",
        name: ifname.to_string(),
        available: interface_names(),
    })
}

fn interface_names() -> String {
    let mut names = Vec::new();
    // SAFETY: if_nameindex returns an array terminated by a zero entry (or null); it is read up
    // to that entry and freed with if_freenameindex.
    unsafe {
        let list = libc::if_nameindex();
        if !list.is_null() {
            let mut p = list;
            while (*p).if_index != 0 && !(*p).if_name.is_null() {
                names.push(
                    std::ffi::CStr::from_ptr((*p).if_name)
                        .to_string_lossy()
                        .into_owned(),
                );
                p = p.add(1);
            }
            libc::if_freenameindex(list);
        }
    }
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// The id of the XDP program attached to `ifname` (in the calling thread's namespace), if any.
///
/// # Errors
/// [`Error::NotFound`] for an unknown interface; [`Error::Os`] if rtnetlink fails.
pub fn attached_prog_id(ifname: &str) -> Result<Option<u32>> {
    Ok(link_info(ifindex(ifname)?)?.xdp_prog_id)
}

/// The process holding a BPF link to program `prog_id`, as "pid N (comm)": found in the
/// `fdinfo` of every process's descriptors (a link's shows `link_type:` and `prog_id:`). `None`
/// when no link holds it (attached with netlink, e.g. `ip link set dev X xdp obj ...`), or when
/// /proc cannot be read.
pub fn link_holder(prog_id: u32) -> Option<String> {
    let want = format!("prog_id:\t{prog_id}\n");
    for p in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = p.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(p.path().join("fdinfo")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(info) = std::fs::read_to_string(fd.path()) else {
                continue;
            };
            if info.contains("link_type:") && info.contains(&want) {
                let comm = std::fs::read_to_string(p.path().join("comm")).unwrap_or_default();
                return Some(format!("{pid} ({})", comm.trim()));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_interface_lists_the_real_ones() {
        match ifindex("rawq-no-such-if") {
            Err(Error::NotFound {
                kind, available, ..
            }) => {
                assert_eq!(kind, "interface");
                assert!(available.contains("lo"), "{available}");
            }
            other => panic!("{other:?}"),
        }
    }
}
