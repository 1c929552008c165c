//! The `bpf()` system call: the XSKMAP, program loading, test runs, and the XDP link.
//!
//! Each command takes its own prefix of `union bpf_attr` (`include/uapi/linux/bpf.h`); the
//! structs below are those prefixes, `#[repr(C)]`, passed with their own size (the kernel treats
//! missing trailing fields as zero).
//!
//! Every object is an [`OwnedFd`]: closing it releases the kernel object. In particular the
//! [`XdpLink`] detaches the program from the interface when its fd closes, which also happens
//! when the process dies, so a killed rawq process never leaves a program behind.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::insn::{to_bytes, Insn};
use crate::error::{Error, Result};

// Commands (enum bpf_cmd).
const BPF_MAP_CREATE: i32 = 0;
const BPF_MAP_UPDATE_ELEM: i32 = 2;
const BPF_MAP_DELETE_ELEM: i32 = 3;
const BPF_PROG_LOAD: i32 = 5;
const BPF_PROG_TEST_RUN: i32 = 10;
const BPF_OBJ_GET_INFO_BY_FD: i32 = 15;
const BPF_LINK_CREATE: i32 = 28;
const BPF_LINK_UPDATE: i32 = 29;
/// `BPF_F_REPLACE`: `BPF_LINK_UPDATE` swaps only if the link still runs `old_prog_fd`'s program.
const BPF_F_REPLACE: u32 = 1 << 2;

/// `BPF_MAP_TYPE_XSKMAP`.
const MAP_TYPE_XSKMAP: u32 = 17;
/// `BPF_PROG_TYPE_XDP`.
const PROG_TYPE_XDP: u32 = 6;
/// `BPF_XDP` (enum bpf_attach_type).
const ATTACH_TYPE_XDP: u32 = 37;

/// XDP return codes (enum xdp_action).
pub mod action {
    /// Error: the frame is dropped and a tracepoint fires.
    pub const ABORTED: u32 = 0;
    /// The frame is dropped.
    pub const DROP: u32 = 1;
    /// The frame continues to the kernel stack.
    pub const PASS: u32 = 2;
    /// The frame is sent back out of the interface.
    pub const TX: u32 = 3;
    /// The frame was redirected (here: to an AF_XDP socket).
    pub const REDIRECT: u32 = 4;
}

/// Helper number of `bpf_redirect_map`.
pub const HELPER_REDIRECT_MAP: i32 = 51;
/// Helper number of `bpf_ktime_get_ns` (CLOCK_MONOTONIC).
pub const HELPER_KTIME_GET_NS: i32 = 5;
/// Helper number of `bpf_xdp_adjust_meta`.
pub const HELPER_XDP_ADJUST_META: i32 = 54;
/// `BPF_F_XDP_DEV_BOUND_ONLY` (`prog_flags` of `BPF_PROG_LOAD`, kernel 6.3): the program is
/// bound to the device `prog_ifindex` names and may call its XDP metadata kfuncs.
pub const PROG_F_XDP_DEV_BOUND_ONLY: u32 = 1 << 6;
/// `BPF_F_XDP_HAS_FRAGS` (`prog_flags` of `BPF_PROG_LOAD`, kernel 5.18): the program handles
/// multi-buffer frames (it sees only their first buffer through `data`/`data_end`), so a
/// driver may give it frames larger than a page, and a veth or NIC with an MTU above one
/// buffer takes it (include/uapi/linux/bpf.h; veth.c `veth_xdp_set` refuses a program without
/// it when the peer's MTU is too large).
pub const PROG_F_XDP_HAS_FRAGS: u32 = 1 << 5;

#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; 16],
}

#[repr(C)]
#[derive(Default)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    // Explicit: the kernel rejects non-zero bytes past the last field it knows.
    _pad: u32,
}

#[repr(C)]
#[derive(Default)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// `link_update` of `union bpf_attr` (`include/uapi/linux/bpf.h`, kernel 5.7).
#[repr(C)]
#[derive(Default)]
struct LinkUpdateAttr {
    link_fd: u32,
    new_prog_fd: u32,
    flags: u32,
    old_prog_fd: u32,
}

/// Calls `bpf(cmd, attr, sizeof attr)`.
fn bpf<T>(cmd: i32, attr: &mut T) -> io::Result<i32> {
    // SAFETY: `attr` is a live, initialized `#[repr(C)]` prefix of `union bpf_attr` for `cmd`, and
    // its size is passed along, so the kernel reads and writes only inside it. Pointers inside it
    // (buffers, keys) are set by the callers to memory that outlives this call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as libc::c_long,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>() as libc::c_long,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as i32)
    }
}

fn fd_from(rc: i32) -> OwnedFd {
    // SAFETY: `rc` is a new file descriptor the kernel just returned to us; nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(rc) }
}

fn name16(name: &str) -> [u8; 16] {
    let mut b = [0u8; 16];
    // The kernel accepts [A-Za-z0-9_.], at most 15 bytes plus the NUL.
    for (d, s) in b.iter_mut().zip(name.bytes().take(15)) {
        *d = if s.is_ascii_alphanumeric() || s == b'_' || s == b'.' {
            s
        } else {
            b'_'
        };
    }
    b
}

/// An `XSKMAP`: netdev rx queue index → AF_XDP socket.
#[derive(Debug)]
pub struct XskMap {
    fd: OwnedFd,
    entries: u32,
}

impl XskMap {
    /// Creates a map with `entries` slots (keys `0..entries`).
    ///
    /// # Errors
    /// [`Error::Permission`] without CAP_BPF / CAP_NET_ADMIN; [`Error::Os`] otherwise.
    pub fn create(entries: u32) -> Result<XskMap> {
        let mut a = MapCreateAttr {
            map_type: MAP_TYPE_XSKMAP,
            key_size: 4,
            value_size: 4,
            max_entries: entries.max(1),
            map_name: name16("rawq_xsks"),
            ..Default::default()
        };
        let fd = bpf(BPF_MAP_CREATE, &mut a).map_err(|e| Error::os("bpf(BPF_MAP_CREATE)", e))?;
        Ok(XskMap {
            fd: fd_from(fd),
            entries: entries.max(1),
        })
    }

    /// Number of slots.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// Puts socket `xsk_fd` at `key`.
    ///
    /// # Errors
    /// [`Error::Os`] (e.g. EINVAL for a key out of range or an unbound socket).
    pub fn insert(&self, key: u32, xsk_fd: RawFd) -> Result<()> {
        let k = key;
        let v = xsk_fd as u32;
        let mut a = MapElemAttr {
            map_fd: self.fd.as_raw_fd() as u32,
            key: &k as *const u32 as u64,
            value: &v as *const u32 as u64,
            ..Default::default()
        };
        bpf(BPF_MAP_UPDATE_ELEM, &mut a).map_err(|e| Error::os("bpf(BPF_MAP_UPDATE_ELEM)", e))?;
        Ok(())
    }

    /// Removes the socket at `key` (ENOENT if there is none).
    ///
    /// # Errors
    /// [`Error::Os`].
    pub fn remove(&self, key: u32) -> Result<()> {
        let k = key;
        let mut a = MapElemAttr {
            map_fd: self.fd.as_raw_fd() as u32,
            key: &k as *const u32 as u64,
            ..Default::default()
        };
        bpf(BPF_MAP_DELETE_ELEM, &mut a).map_err(|e| Error::os("bpf(BPF_MAP_DELETE_ELEM)", e))?;
        Ok(())
    }

    /// The map's file descriptor (what `lddw` with `BPF_PSEUDO_MAP_FD` names).
    pub fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// A loaded XDP program.
#[derive(Debug)]
pub struct Program {
    fd: OwnedFd,
}

impl Program {
    /// Loads `insns` as an XDP program named `name` under the GPL license.
    ///
    /// The program is first loaded without a log; if the verifier rejects it, it is loaded again
    /// with a 1 MiB log so that the error carries the verifier's explanation.
    ///
    /// # Errors
    /// [`Error::Verifier`] with the log when the verifier says no (EINVAL / EACCES / E2BIG);
    /// [`Error::Permission`] without CAP_BPF, or without CAP_PERFMON when the verifier refuses
    /// what only a privileged program may do.
    pub fn load(insns: &[Insn], name: &str) -> Result<Program> {
        Program::load_with(insns, name, None)
    }

    /// As [`Program::load`], device-bound to interface `ifindex` (`BPF_F_XDP_DEV_BOUND_ONLY`,
    /// kernel 6.3): what a program calling the device's XDP metadata kfuncs
    /// (`bpf_xdp_metadata_rx_timestamp`) must be. It can then only be attached to that
    /// interface, in native (driver) mode.
    ///
    /// # Errors
    /// As [`Program::load`]; a kernel before 6.3 refuses the flag (EINVAL, with a verifier
    /// log saying nothing, or "unknown func").
    pub fn load_for_device(insns: &[Insn], name: &str, ifindex: u32) -> Result<Program> {
        Program::load_with(insns, name, Some(ifindex))
    }

    fn load_with(insns: &[Insn], name: &str, dev_bound: Option<u32>) -> Result<Program> {
        Program::load_flags(insns, name, dev_bound, false)
    }

    /// As [`Program::load`] / [`Program::load_for_device`] (`dev_bound`), marked as handling
    /// multi-buffer frames when `frags` ([`PROG_F_XDP_HAS_FRAGS`]).
    ///
    /// # Errors
    /// As [`Program::load`].
    pub fn load_flags(
        insns: &[Insn],
        name: &str,
        dev_bound: Option<u32>,
        frags: bool,
    ) -> Result<Program> {
        let code = to_bytes(insns);
        let license = b"GPL\0";
        let mut a = ProgLoadAttr {
            prog_type: PROG_TYPE_XDP,
            insn_cnt: insns.len() as u32,
            insns: code.as_ptr() as u64,
            license: license.as_ptr() as u64,
            prog_name: name16(name),
            expected_attach_type: ATTACH_TYPE_XDP,
            prog_flags: dev_bound.map_or(0, |_| PROG_F_XDP_DEV_BOUND_ONLY)
                | if frags { PROG_F_XDP_HAS_FRAGS } else { 0 },
            prog_ifindex: dev_bound.unwrap_or(0),
            ..Default::default()
        };
        match bpf(BPF_PROG_LOAD, &mut a) {
            Ok(fd) => return Ok(Program { fd: fd_from(fd) }),
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                return Err(Error::os("bpf(BPF_PROG_LOAD)", e))
            }
            Err(_) => {}
        }
        let mut log = vec![0u8; 1 << 20];
        a.log_level = 1;
        a.log_size = log.len() as u32;
        a.log_buf = log.as_mut_ptr() as u64;
        match bpf(BPF_PROG_LOAD, &mut a) {
            Ok(fd) => Ok(Program { fd: fd_from(fd) }),
            Err(e) => {
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                let text = String::from_utf8_lossy(&log[..end]).into_owned();
                match e.raw_os_error() {
                    Some(libc::EPERM) => Err(Error::os("bpf(BPF_PROG_LOAD)", e)),
                    // The verifier refuses what only a privileged loader may do ("... prohibited
                    // for !root"): packet-pointer arithmetic needs CAP_PERFMON (the kernel's
                    // bpf_allow_ptr_leaks / allow_ptr_leaks is perfmon_capable()).
                    Some(libc::EACCES) if text.contains("!root") => Err(Error::Permission {
                        op: "bpf(BPF_PROG_LOAD): the verifier allows the steering program's \
                             packet-pointer arithmetic only with CAP_PERFMON",
                        source: e,
                    }),
                    _ => Err(Error::Verifier {
                        source: e,
                        log: text,
                    }),
                }
            }
        }
    }

    /// Runs the program once on `frame` with `BPF_PROG_TEST_RUN` and returns its return value.
    /// The kernel requires at least 14 bytes (an Ethernet header).
    ///
    /// # Errors
    /// [`Error::Os`] (EINVAL for frames shorter than 14 bytes or longer than a page).
    pub fn test_run(&self, frame: &[u8]) -> Result<u32> {
        self.run_once(frame, None).map(|(retval, _)| retval)
    }

    /// One plain `BPF_PROG_TEST_RUN` of `frame` (nothing is sent), with `ctx` as the context
    /// in and out when given: the return value and the output data (from `data_meta` when the
    /// program grew metadata), cut to the length the kernel reports.
    fn run_once(&self, frame: &[u8], ctx: Option<&mut XdpMd>) -> Result<(u32, Vec<u8>)> {
        let mut out = vec![0u8; frame.len() + 256];
        let mut a = TestRunAttr {
            prog_fd: self.fd.as_raw_fd() as u32,
            data_size_in: frame.len() as u32,
            data_size_out: out.len() as u32,
            data_in: frame.as_ptr() as u64,
            data_out: out.as_mut_ptr() as u64,
            repeat: 1,
            ..Default::default()
        };
        if let Some(c) = ctx {
            // The kernel copies the context in before the run and out after it
            // (net/bpf/test_run.c `bpf_ctx_init` / `bpf_ctx_finish`): one buffer serves both.
            let (size, ptr) = (std::mem::size_of::<XdpMd>() as u32, c as *mut XdpMd as u64);
            (a.ctx_size_in, a.ctx_in, a.ctx_size_out, a.ctx_out) = (size, ptr, size, ptr);
        }
        bpf(BPF_PROG_TEST_RUN, &mut a).map_err(|e| Error::os("bpf(BPF_PROG_TEST_RUN)", e))?;
        out.truncate((a.data_size_out as usize).min(out.len()));
        Ok((a.retval, out))
    }

    /// The kernel's id of the program (what `bpftool prog show` and netlink report).
    ///
    /// # Errors
    /// [`Error::Os`].
    pub fn id(&self) -> Result<u32> {
        prog_id_of(self.fd.as_raw_fd())
    }

    /// The program's file descriptor.
    pub fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// `bpf_prog_info.id` of the program behind `fd`.
fn prog_id_of(fd: RawFd) -> Result<u32> {
    // struct bpf_prog_info starts with `__u32 type; __u32 id;`; the kernel fills at most
    // `info_len` bytes.
    let mut info = [0u32; 2];
    let mut a = InfoAttr {
        bpf_fd: fd as u32,
        info_len: 8,
        info: info.as_mut_ptr() as u64,
    };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut a).map_err(|e| Error::os("bpf(BPF_OBJ_GET_INFO_BY_FD)", e))?;
    Ok(info[1])
}

/// A program attached to an interface through a BPF link: detached when dropped (or when the
/// process exits).
#[derive(Debug)]
pub struct XdpLink {
    fd: OwnedFd,
    ifindex: u32,
}

impl XdpLink {
    /// Attaches `prog` to interface `ifindex` (native mode where the driver has it, generic
    /// otherwise). Never replaces a program that is already there.
    ///
    /// # Errors
    /// The raw OS error: EBUSY or EEXIST when the interface already has an XDP program (see
    /// [`crate::xdp::iface::attached_prog_id`] for which one), EPERM without CAP_NET_ADMIN.
    pub fn attach(prog: &Program, ifindex: u32) -> io::Result<XdpLink> {
        let mut a = LinkCreateAttr {
            prog_fd: prog.as_raw_fd() as u32,
            target_ifindex: ifindex,
            attach_type: ATTACH_TYPE_XDP,
            flags: 0,
        };
        let fd = bpf(BPF_LINK_CREATE, &mut a)?;
        Ok(XdpLink {
            fd: fd_from(fd),
            ifindex,
        })
    }

    /// Replaces the link's program `old` by `new` in one step (`BPF_LINK_UPDATE` with
    /// `BPF_F_REPLACE`, kernel 5.9 for XDP links). The kernel swaps the interface's program
    /// pointer (net/core/dev.c `bpf_xdp_link_update` → `dev_xdp_install`); a driver reads that
    /// pointer once per frame (or per NAPI poll) under RCU, so every frame runs entirely under
    /// the old program or entirely under the new one, and none is seen by no program.
    ///
    /// # Errors
    /// The raw OS error: EPERM when the link no longer runs `old` (someone else updated it),
    /// EINVAL for a program of another type or device binding, ENOLINK when the interface is
    /// gone.
    pub fn update(&self, new: &Program, old: &Program) -> io::Result<()> {
        let mut a = LinkUpdateAttr {
            link_fd: self.fd.as_raw_fd() as u32,
            new_prog_fd: new.as_raw_fd() as u32,
            flags: BPF_F_REPLACE,
            old_prog_fd: old.as_raw_fd() as u32,
        };
        bpf(BPF_LINK_UPDATE, &mut a).map(|_| ())
    }

    /// The interface it is attached to.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The link's file descriptor.
    pub fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

// ---- Live frames (the in-kernel traffic generator) -------------------------------------------

const BPF_MAP_LOOKUP_ELEM: i32 = 1;
/// `BPF_MAP_TYPE_PERCPU_ARRAY`.
const MAP_TYPE_PERCPU_ARRAY: u32 = 6;

/// Helper number of `bpf_map_lookup_elem`.
pub const HELPER_MAP_LOOKUP_ELEM: i32 = 1;
/// Helper number of `bpf_get_smp_processor_id`.
pub const HELPER_GET_SMP_PROCESSOR_ID: i32 = 8;
/// Helper number of `bpf_redirect(ifindex, flags)`.
pub const HELPER_REDIRECT: i32 = 23;
/// `BPF_F_TEST_XDP_LIVE_FRAMES` (`include/uapi/linux/bpf.h`, kernel 5.18): `BPF_PROG_TEST_RUN`
/// performs the program's verdict for real (redirects go out of the target interface).
pub const TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;
/// Largest `batch_size` the kernel accepts in live-frames mode (`TEST_XDP_MAX_BATCH`).
pub const LIVE_MAX_BATCH: u32 = 256;

/// The CPUs the kernel may ever bring up (`/sys/devices/system/cpu/possible`, e.g. `0-3`): a
/// per-CPU map holds one value for each.
pub fn possible_cpus() -> Result<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .map_err(|e| Error::os("read /sys/devices/system/cpu/possible", e))?;
    let mut n = 0usize;
    for part in text.trim().split(',') {
        let last = part.rsplit('-').next().unwrap_or(part);
        let last: usize = last.trim().parse().map_err(|_| {
            Error::Unsupported(format!(
                "cannot parse /sys/devices/system/cpu/possible: {text:?}"
            ))
        })?;
        n = n.max(last + 1);
    }
    Ok(n.max(1))
}

/// A `BPF_MAP_TYPE_PERCPU_ARRAY` of `u64` counters: each CPU has its own copy of every slot, so
/// a program adds to its CPU's copy without contending with the others; a read returns all
/// copies.
#[derive(Debug)]
pub struct PerCpuCounters {
    fd: OwnedFd,
    entries: u32,
    cpus: usize,
}

impl PerCpuCounters {
    /// Creates a map of `entries` counters (keys `0..entries`), all zero.
    ///
    /// # Errors
    /// [`Error::Permission`] without CAP_BPF; [`Error::Os`] otherwise.
    pub fn create(entries: u32, name: &str) -> Result<PerCpuCounters> {
        let mut a = MapCreateAttr {
            map_type: MAP_TYPE_PERCPU_ARRAY,
            key_size: 4,
            value_size: 8,
            max_entries: entries.max(1),
            map_name: name16(name),
            ..Default::default()
        };
        let fd = bpf(BPF_MAP_CREATE, &mut a).map_err(|e| Error::os("bpf(BPF_MAP_CREATE)", e))?;
        Ok(PerCpuCounters {
            fd: fd_from(fd),
            entries: entries.max(1),
            cpus: possible_cpus()?,
        })
    }

    /// Each CPU's value of counter `key` (index = CPU number).
    ///
    /// # Errors
    /// [`Error::Os`] (ENOENT for a key out of range).
    pub fn per_cpu(&self, key: u32) -> Result<Vec<u64>> {
        let k = key;
        // The kernel copies one 8-byte-aligned value per possible CPU.
        let mut vals = vec![0u64; self.cpus];
        let mut a = MapElemAttr {
            map_fd: self.fd.as_raw_fd() as u32,
            key: &k as *const u32 as u64,
            value: vals.as_mut_ptr() as u64,
            ..Default::default()
        };
        bpf(BPF_MAP_LOOKUP_ELEM, &mut a).map_err(|e| Error::os("bpf(BPF_MAP_LOOKUP_ELEM)", e))?;
        Ok(vals)
    }

    /// Counter `key` summed over all CPUs.
    ///
    /// # Errors
    /// As [`PerCpuCounters::per_cpu`].
    pub fn sum(&self, key: u32) -> Result<u64> {
        Ok(self.per_cpu(key)?.iter().sum())
    }

    /// Number of counters.
    pub fn entries(&self) -> u32 {
        self.entries
    }

    /// The map's file descriptor (what `lddw` with `BPF_PSEUDO_MAP_FD` names).
    pub fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// `struct xdp_md` as `BPF_PROG_TEST_RUN` takes it in `ctx_in`.
#[repr(C)]
#[derive(Default)]
struct XdpMd {
    data: u32,
    data_end: u32,
    data_meta: u32,
    ingress_ifindex: u32,
    rx_queue_index: u32,
    egress_ifindex: u32,
}

impl Program {
    /// Runs the program `repeat` times in live-frames mode (`BPF_F_TEST_XDP_LIVE_FRAMES`): each
    /// run gets a copy of `frame` "received" on interface `ifindex` rx queue 0 (in the calling
    /// thread's network namespace), and the kernel carries out the verdict: `XDP_TX` and
    /// redirects transmit, `XDP_PASS` enters the stack. Runs go in batches of `batch` (1..=256),
    /// each batch flushed at its end.
    ///
    /// The kernel keeps a page pool per call and recycles the pages **without** restoring the
    /// bytes a program wrote (Documentation/bpf/bpf_prog_run.rst, "live frame mode"): a
    /// program must write every byte that varies, absolutely.
    ///
    /// A pending signal ends the call early with EINTR (the runs done so far stay done).
    ///
    /// # Errors
    /// The raw OS error: EINVAL when the kernel lacks the flag (before 5.18) or rejects the frame
    /// (shorter than 14 bytes, longer than a page less headroom), E2BIG for `batch` > 256,
    /// ENODEV for an unknown `ifindex`, EPERM without the capabilities, EINTR on a signal.
    pub fn run_live(&self, frame: &[u8], ifindex: u32, repeat: u32, batch: u32) -> io::Result<()> {
        let mut ctx = XdpMd {
            data_end: frame.len() as u32,
            ingress_ifindex: ifindex,
            ..Default::default()
        };
        let mut a = TestRunAttr {
            prog_fd: self.fd.as_raw_fd() as u32,
            data_size_in: frame.len() as u32,
            data_in: frame.as_ptr() as u64,
            repeat,
            ctx_size_in: std::mem::size_of::<XdpMd>() as u32,
            ctx_in: &mut ctx as *mut XdpMd as u64,
            flags: TEST_XDP_LIVE_FRAMES,
            batch_size: batch,
            ..Default::default()
        };
        bpf(BPF_PROG_TEST_RUN, &mut a).map(|_| ())
    }
}

impl Program {
    /// Like [`Program::test_run`], and also returns the frame as the program left it (a plain
    /// test run: a redirect or `XDP_TX` is only reported, nothing is sent).
    ///
    /// # Errors
    /// As [`Program::test_run`].
    pub fn test_run_frame(&self, frame: &[u8]) -> Result<(u32, Vec<u8>)> {
        self.run_once(frame, None)
    }
}

impl Program {
    /// Runs the program once on `frame` with `BPF_PROG_TEST_RUN` and a context whose metadata
    /// area starts empty (`data_meta == data`), and returns its return value, the metadata the
    /// program left in front of the frame, and the frame. The kernel's test run supports XDP
    /// metadata: `data_out` starts at `data_meta` and `ctx_out.data` is its length
    /// (net/bpf/test_run.c `bpf_prog_test_run_xdp`).
    ///
    /// # Errors
    /// As [`Program::test_run`].
    pub fn test_run_meta(&self, frame: &[u8]) -> Result<(u32, Vec<u8>, Vec<u8>)> {
        let mut ctx = XdpMd {
            data_end: frame.len() as u32,
            ..Default::default()
        };
        let (retval, mut out) = self.run_once(frame, Some(&mut ctx))?;
        let metalen = (ctx.data as usize).min(out.len());
        let frame_out = out.split_off(metalen);
        Ok((retval, out, frame_out))
    }
}
