//! Just enough of the BPF Type Format to find a kernel function's BTF id: the id a
//! `BPF_PSEUDO_KFUNC_CALL` instruction names.
//!
//! The layout (Documentation/bpf/btf.rst, `include/uapi/linux/btf.h`): a header
//! (`magic` 0xeB9F, `version`, `flags`, `hdr_len`, then the offsets and lengths of the type and
//! string sections, both counted from the end of the header), a type section of variable-length
//! records, and a string section of NUL-terminated names. Each type record starts with
//! `name_off`, `info` (bits 0..16 `vlen`, bits 24..29 `kind`) and `size`/`type`, followed by
//! kind-specific data whose length depends on the kind and `vlen`. Type ids count the records
//! from 1 (0 is `void`). A `FUNC` record (kind 12) names a function; its id is what a kfunc
//! call takes.
//!
//! Every read is bounds-checked: a truncated or malformed blob is an error, never a panic.

use crate::error::{Error, Result};

/// `BTF_MAGIC`.
pub const MAGIC: u16 = 0xeb9f;
/// `BTF_KIND_FUNC`.
pub const KIND_FUNC: u32 = 12;
/// Where the running kernel publishes its own BTF.
pub const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

/// Bytes that follow the 12-byte common record of a type of `kind` with `vlen` members
/// (`None` for a kind this parser does not know, which it cannot step over).
fn extra_len(kind: u32, vlen: u32) -> Option<usize> {
    let v = vlen as usize;
    Some(match kind {
        1 => 4,                    // INT: encoding word
        2 | 7..=12 | 16 | 18 => 0, // PTR, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, FLOAT, TYPE_TAG
        3 => 12,                   // ARRAY: struct btf_array
        4 | 5 => v * 12,           // STRUCT, UNION: struct btf_member
        6 => v * 8,                // ENUM: struct btf_enum
        13 => v * 8,               // FUNC_PROTO: struct btf_param
        14 => 4,                   // VAR: struct btf_var
        15 => v * 12,              // DATASEC: struct btf_var_secinfo
        17 => 4,                   // DECL_TAG: struct btf_decl_tag
        19 => v * 12,              // ENUM64: struct btf_enum64
        _ => return None,
    })
}

fn bad(why: String) -> Error {
    Error::Unsupported(format!("malformed BTF: {why}"))
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// The type and string sections of a BTF blob.
struct Sections<'a> {
    types: &'a [u8],
    strings: &'a [u8],
}

fn sections(blob: &[u8]) -> Result<Sections<'_>> {
    let magic = u16_at(blob, 0).ok_or_else(|| bad("shorter than its header".into()))?;
    if magic != MAGIC {
        return Err(bad(format!(
            "magic {magic:#06x}, expected {MAGIC:#06x} (little-endian BTF)"
        )));
    }
    let field = |at: usize| u32_at(blob, at).ok_or_else(|| bad("header truncated".into()));
    let hdr_len = field(4)? as usize;
    let (type_off, type_len) = (field(8)? as usize, field(12)? as usize);
    let (str_off, str_len) = (field(16)? as usize, field(20)? as usize);
    if hdr_len < 24 {
        return Err(bad(format!("header length {hdr_len} < 24")));
    }
    let section = |off: usize, len: usize, what: &str| {
        hdr_len
            .checked_add(off)
            .and_then(|s| Some((s, s.checked_add(len)?)))
            .and_then(|(s, e)| blob.get(s..e))
            .ok_or_else(|| {
                bad(format!(
                    "{what} section ({len} bytes at {off}) runs past the {}-byte blob",
                    blob.len()
                ))
            })
    };
    Ok(Sections {
        types: section(type_off, type_len, "type")?,
        strings: section(str_off, str_len, "string")?,
    })
}

/// The NUL-terminated string at `off` of the string section.
fn name_at(strings: &[u8], off: u32) -> Option<&[u8]> {
    let s = strings.get(off as usize..)?;
    let end = s.iter().position(|&c| c == 0)?;
    Some(&s[..end])
}

/// The id of the `FUNC` named `name` in the BTF `blob`, if it has one.
///
/// # Errors
/// [`Error::Unsupported`] for a blob that is not little-endian BTF or is truncated or
/// malformed (a record past the section's end, an unknown kind, a name off the string
/// section).
pub fn find_func(blob: &[u8], name: &str) -> Result<Option<u32>> {
    let s = sections(blob)?;
    let mut at = 0usize;
    let mut id = 0u32;
    while at < s.types.len() {
        id = id
            .checked_add(1)
            .ok_or_else(|| bad("too many types".into()))?;
        let rec = |o: usize| {
            u32_at(s.types, at + o).ok_or_else(|| bad(format!("type {id} truncated at byte {at}")))
        };
        let (name_off, info) = (rec(0)?, rec(4)?);
        let (kind, vlen) = ((info >> 24) & 0x1f, info & 0xffff);
        let extra = extra_len(kind, vlen)
            .ok_or_else(|| bad(format!("type {id} has unknown kind {kind}")))?;
        if kind == KIND_FUNC {
            let n = name_at(s.strings, name_off).ok_or_else(|| {
                bad(format!(
                    "type {id}'s name offset {name_off} is off the string section"
                ))
            })?;
            if n == name.as_bytes() {
                return Ok(Some(id));
            }
        }
        at = at
            .checked_add(12 + extra)
            .filter(|&e| e <= s.types.len())
            .ok_or_else(|| bad(format!("type {id} runs past the type section")))?;
    }
    Ok(None)
}

/// The BTF id of kernel function `name` in the running kernel's BTF ([`VMLINUX`]).
///
/// # Errors
/// [`Error::Unsupported`] when the kernel publishes no BTF (built without
/// `CONFIG_DEBUG_INFO_BTF`) or has no such function: the message says that `what` needs it,
/// then `fix`.
pub fn vmlinux_func(name: &str, what: &str, fix: &str) -> Result<u32> {
    let blob = std::fs::read(VMLINUX).map_err(|e| {
        Error::Unsupported(format!(
            "{what} needs the kernel's BTF, and {VMLINUX} cannot be read ({e}): the kernel was \
             built without CONFIG_DEBUG_INFO_BTF (or /sys is not mounted). {fix}"
        ))
    })?;
    find_func(&blob, name)?.ok_or_else(|| {
        Error::Unsupported(format!(
            "{what} needs the kernel function {name}, which this kernel's BTF does not have. \
             {fix}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BTF blob built by hand: `int`, `int *`, a struct of 2 members, an enum of 3, a
    /// FUNC_PROTO of 2 params, the FUNCs `alpha` (id 6) and `bpf_xdp_metadata_rx_timestamp`
    /// (id 8, after a VAR).
    fn blob() -> Vec<u8> {
        let mut strs = vec![0u8];
        let mut name = |s: &str| {
            let off = strs.len() as u32;
            strs.extend_from_slice(s.as_bytes());
            strs.push(0);
            off
        };
        let (n_int, n_s, n_e, n_alpha, n_ts, n_var) = (
            name("int"),
            name("s"),
            name("e"),
            name("alpha"),
            name("bpf_xdp_metadata_rx_timestamp"),
            name("v"),
        );
        let mut t = Vec::new();
        let mut rec = |name_off: u32, kind: u32, vlen: u32, size: u32, extra: usize| {
            for w in [name_off, kind << 24 | vlen, size] {
                t.extend_from_slice(&w.to_le_bytes());
            }
            t.extend(std::iter::repeat_n(0xa5u8, extra));
        };
        rec(n_int, 1, 0, 4, 4); // 1 INT
        rec(0, 2, 0, 1, 0); // 2 PTR -> int
        rec(n_s, 4, 2, 8, 24); // 3 STRUCT, 2 members
        rec(n_e, 6, 3, 4, 24); // 4 ENUM, 3 values
        rec(0, 13, 2, 1, 16); // 5 FUNC_PROTO, 2 params
        rec(n_alpha, 12, 0, 5, 0); // 6 FUNC alpha
        rec(n_var, 14, 0, 1, 4); // 7 VAR
        rec(n_ts, 12, 0, 5, 0); // 8 FUNC bpf_xdp_metadata_rx_timestamp
        let mut b = Vec::new();
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.extend_from_slice(&[1, 0]);
        for w in [24u32, 0, t.len() as u32, t.len() as u32, strs.len() as u32] {
            b.extend_from_slice(&w.to_le_bytes());
        }
        b.extend_from_slice(&t);
        b.extend_from_slice(&strs);
        b
    }

    #[test]
    fn finds_funcs_by_name_in_a_hand_built_blob() {
        let b = blob();
        assert_eq!(find_func(&b, "alpha").unwrap(), Some(6));
        assert_eq!(
            find_func(&b, "bpf_xdp_metadata_rx_timestamp").unwrap(),
            Some(8)
        );
        // Names of other kinds are not functions; prefixes do not match.
        assert_eq!(find_func(&b, "int").unwrap(), None);
        assert_eq!(find_func(&b, "v").unwrap(), None);
        assert_eq!(find_func(&b, "alph").unwrap(), None);
        assert_eq!(find_func(&b, "nothing").unwrap(), None);
    }

    #[test]
    fn every_truncation_and_corruption_is_an_error_not_a_panic() {
        let b = blob();
        for n in 0..b.len() {
            // Cut anywhere: the header's section lengths no longer fit, an error.
            match find_func(&b[..n], "bpf_xdp_metadata_rx_timestamp") {
                Err(Error::Unsupported(m)) => assert!(m.contains("BTF"), "{m}"),
                Ok(v) => panic!("cut at {n}: {v:?}"),
                Err(e) => panic!("cut at {n}: {e}"),
            }
        }
        // Flip every byte in turn: whatever comes out, nothing panics.
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0xff;
            let _ = find_func(&c, "bpf_xdp_metadata_rx_timestamp");
        }
        let mut wrong = b.clone();
        wrong[0] = 0xeb;
        wrong[1] = 0x9f;
        assert!(find_func(&wrong, "alpha").is_err(), "big-endian magic");
        let mut unknown = b.clone();
        unknown[24 + 4 + 3] = 31; // type 1's kind
        assert!(find_func(&unknown, "alpha")
            .unwrap_err()
            .to_string()
            .contains("unknown kind"));
    }

    /// The running kernel's own BTF: it has the metadata kfunc (this kernel is 6.3 or later)
    /// and a name no kernel has is not found.
    #[test]
    fn finds_the_rx_timestamp_kfunc_in_the_live_vmlinux() {
        let Ok(b) = std::fs::read(VMLINUX) else {
            eprintln!("skipped: {VMLINUX} not readable");
            return;
        };
        let id = find_func(&b, "bpf_xdp_metadata_rx_timestamp").unwrap();
        assert!(id.is_some_and(|i| i > 0), "{id:?}");
        assert_eq!(find_func(&b, "rawq_no_such_function").unwrap(), None);
        assert_eq!(
            vmlinux_func("bpf_xdp_metadata_rx_timestamp", "test", "").unwrap(),
            id.unwrap()
        );
        let e = vmlinux_func("rawq_no_such_function", "the test", "Do X.").unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains("the test needs the kernel function rawq_no_such_function"),
            "{m}"
        );
        assert!(m.contains("Do X."), "{m}");
    }
}
