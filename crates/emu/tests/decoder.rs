//! The write() decoder against hand-made commands: header checks, sizes, handles and pointers
//! get the errno `uverbs_main.c: ib_uverbs_write` / `verify_hdr` and `uverbs_cmd.c` give, and no
//! input makes it panic.

use rawq_emu::config::Config;
use rawq_emu::device::Device;
use rawq_emu::uapi::*;

use libc::{EBADF, EFAULT, EINVAL, ENOENT, ENOSPC, EOPNOTSUPP};

const HDR: usize = 8;

/// A legacy command: header + body (body starts with the response pointer where there is one).
fn legacy(cmd: u32, body: &[u8], out_words: u16) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend(cmd.to_ne_bytes());
    v.extend((((HDR + body.len()) / 4) as u16).to_ne_bytes());
    v.extend(out_words.to_ne_bytes());
    v.extend(body);
    v
}

/// An extended command.
fn ex(cmd: u32, resp: u64, core: &[u8], out_words: u16, drv_out_words: u16) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend((cmd | IB_USER_VERBS_CMD_FLAG_EXTENDED).to_ne_bytes());
    v.extend(((core.len() / 8) as u16).to_ne_bytes());
    v.extend(out_words.to_ne_bytes());
    v.extend(resp.to_ne_bytes());
    v.extend(0u16.to_ne_bytes()); // provider_in_words
    v.extend(drv_out_words.to_ne_bytes());
    v.extend(0u32.to_ne_bytes()); // cmd_hdr_reserved
    v.extend(core);
    v
}

struct Emu {
    dev: Device,
    fd: i32,
}

impl Emu {
    fn new() -> Emu {
        let dev = Device::new(Config::default());
        let fd = dev.open(true).expect("open");
        Emu { dev, fd }
    }

    fn write(&self, b: &[u8]) -> Result<usize, i32> {
        self.dev.write(self.fd, b.as_ptr() as u64, b.len())
    }

    /// GET_CONTEXT with a v2 mlx5 request for 16 bfregs and CQE version 1.
    fn context(&self) -> Result<usize, i32> {
        let mut resp = [0u8; 512];
        let mut body = (resp.as_mut_ptr() as u64).to_ne_bytes().to_vec();
        let mut req = [0u8; 32];
        req[0] = 16; // total_num_bfregs
        req[4] = 4; // num_low_latency_bfregs
        req[16] = 1; // max_cqe_version
        body.extend(req);
        let out = (8 + std::mem::size_of::<mlx5_ib_alloc_ucontext_resp>()) / 4;
        self.write(&legacy(IB_USER_VERBS_CMD_GET_CONTEXT, &body, out as u16))
    }

    fn query_port(&self, port: u8, resp: &mut [u8]) -> Result<usize, i32> {
        let mut body = (resp.as_mut_ptr() as u64).to_ne_bytes().to_vec();
        body.extend([port, 0, 0, 0, 0, 0, 0, 0]);
        self.write(&legacy(
            IB_USER_VERBS_CMD_QUERY_PORT,
            &body,
            (resp.len() / 4) as u16,
        ))
    }
}

impl Drop for Emu {
    fn drop(&mut self) {
        self.dev.release(self.fd);
    }
}

#[test]
fn header_checks() {
    let e = Emu::new();
    assert_eq!(e.write(&[0; 4]), Err(EINVAL), "shorter than a header");
    assert_eq!(e.write(&legacy(99, &[0; 8], 0)), Err(EOPNOTSUPP), "unknown");
    assert_eq!(
        e.write(&legacy(
            0x4000_0000 | IB_USER_VERBS_CMD_QUERY_PORT,
            &[0; 16],
            0
        )),
        Err(EINVAL),
        "unknown flag bits"
    );
    let mut c = legacy(IB_USER_VERBS_CMD_QUERY_PORT, &[0; 16], 64);
    c[4] += 1; // in_words no longer matches the write size
    assert_eq!(e.write(&c), Err(EINVAL));
    assert_eq!(e.dev.write(-5, 0, 8), Err(EBADF), "not a command fd");
}

#[test]
fn a_context_first_and_only_once() {
    let e = Emu::new();
    let mut resp = [0u8; 64];
    assert_eq!(e.query_port(1, &mut resp), Err(EINVAL), "no context yet");
    assert!(e.context().is_ok());
    assert_eq!(e.context(), Err(EINVAL), "second GET_CONTEXT");
}

#[test]
fn sizes_pointers_and_trailing_bytes() {
    let e = Emu::new();
    e.context().unwrap();
    let rsize = std::mem::size_of::<ib_uverbs_query_port_resp>();
    let mut resp = vec![0u8; rsize];
    assert_eq!(e.query_port(1, &mut resp), Ok(24));
    assert_eq!(
        resp[std::mem::offset_of!(ib_uverbs_query_port_resp, state)],
        4
    );
    assert_eq!(
        resp[std::mem::offset_of!(ib_uverbs_query_port_resp, link_layer)],
        2
    );
    assert_eq!(e.query_port(2, &mut resp), Err(EINVAL), "no port 2");
    // Response shorter than the core struct: ENOSPC.
    let mut small = vec![0u8; rsize - 8];
    assert_eq!(e.query_port(1, &mut small), Err(ENOSPC));
    // Request shorter than the core struct: ENOSPC.
    assert_eq!(
        e.write(&legacy(IB_USER_VERBS_CMD_QUERY_PORT, &[0; 8], 16)),
        Err(ENOSPC)
    );
    // Unmapped response pointer: EFAULT.
    let mut body = 16u64.to_ne_bytes().to_vec();
    body.extend([1, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(
        e.write(&legacy(
            IB_USER_VERBS_CMD_QUERY_PORT,
            &body,
            (rsize / 4) as u16
        )),
        Err(EFAULT)
    );
    // Non-zero bytes past the struct: EOPNOTSUPP (uverbs_request).
    let mut body = (resp.as_mut_ptr() as u64).to_ne_bytes().to_vec();
    body.extend([1, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(
        e.write(&legacy(
            IB_USER_VERBS_CMD_QUERY_PORT,
            &body,
            (rsize / 4) as u16
        )),
        Err(EOPNOTSUPP)
    );
}

#[test]
fn extended_header_checks() {
    let e = Emu::new();
    e.context().unwrap();
    let mut resp = vec![0u8; std::mem::size_of::<ib_uverbs_ex_query_device_resp>()];
    let rp = resp.as_mut_ptr() as u64;
    let words = (resp.len() / 8) as u16;
    let q = IB_USER_VERBS_EX_CMD_QUERY_DEVICE;
    assert!(e.write(&ex(q, rp, &[0; 8], words, 0)).is_ok());
    let at = std::mem::offset_of!(ib_uverbs_ex_query_device_resp, response_length);
    let len = u32::from_ne_bytes(resp[at..at + 4].try_into().unwrap());
    assert_eq!(len as usize, resp.len(), "response_length");
    // comp_mask must be 0.
    assert_eq!(
        e.write(&ex(q, rp, &[1, 0, 0, 0, 0, 0, 0, 0], words, 0)),
        Err(EINVAL)
    );
    // A response size but no response pointer, and the reverse.
    assert_eq!(e.write(&ex(q, 0, &[0; 8], words, 0)), Err(EINVAL));
    assert_eq!(e.write(&ex(q, rp, &[0; 8], 0, 0)), Err(EINVAL));
    // Response smaller than comp_mask + response_length: ENOSPC.
    assert_eq!(e.write(&ex(q, rp, &[0; 8], 0, 1)), Err(ENOSPC));
    // The declared sizes do not add up to the write.
    let mut c = ex(q, rp, &[0; 8], words, 0);
    c.extend([0; 8]);
    assert_eq!(e.write(&c), Err(EINVAL));
    // cmd_hdr_reserved.
    let mut c = ex(q, rp, &[0; 8], words, 0);
    c[20] = 1;
    assert_eq!(e.write(&c), Err(EINVAL));
    assert_eq!(e.write(&ex(60, rp, &[0; 8], words, 0)), Err(EOPNOTSUPP));
}

#[test]
fn handles_einval_where_used_enoent_where_destroyed() {
    let e = Emu::new();
    e.context().unwrap();
    let mut resp = [0u8; 64];
    let rp = resp.as_mut_ptr() as u64;
    // ALLOC_PD: handle 0.
    let pd = legacy(IB_USER_VERBS_CMD_ALLOC_PD, &rp.to_ne_bytes(), 3);
    assert!(e.write(&pd).is_ok());
    assert_eq!(u32::from_ne_bytes(resp[0..4].try_into().unwrap()), 0);
    // DEREG_MR of the PD's handle (wrong type) and DEALLOC_PD of a free handle: ENOENT.
    assert_eq!(
        e.write(&legacy(IB_USER_VERBS_CMD_DEREG_MR, &[0; 8], 0)),
        Err(ENOENT)
    );
    assert_eq!(
        e.write(&legacy(
            IB_USER_VERBS_CMD_DEALLOC_PD,
            &[7, 0, 0, 0, 0, 0, 0, 0],
            0
        )),
        Err(ENOENT)
    );
    // REG_MR in a PD that does not exist: EINVAL.
    let buf = vec![0u8; 8192];
    let mut body = rp.to_ne_bytes().to_vec();
    body.extend((buf.as_ptr() as u64).to_ne_bytes()); // start
    body.extend(4096u64.to_ne_bytes()); // length
    body.extend((buf.as_ptr() as u64).to_ne_bytes()); // hca_va
    body.extend(9u32.to_ne_bytes()); // pd_handle
    body.extend(1u32.to_ne_bytes()); // access: local write
    assert_eq!(
        e.write(&legacy(IB_USER_VERBS_CMD_REG_MR, &body, 6)),
        Err(EINVAL)
    );
    assert_eq!(
        e.write(&legacy(IB_USER_VERBS_CMD_DEALLOC_PD, &[0; 8], 0)),
        Ok(16)
    );
}

#[test]
fn random_commands_never_panic() {
    let e = Emu::new();
    e.context().unwrap();
    let mut scratch = vec![0u8; 4096];
    let sp = scratch.as_mut_ptr() as u64;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..5000 {
        let len = (8 + (next() % 200) as usize) & !3;
        let mut c: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let cmd = (next() % 56) as u32;
        let is_ex = next() % 2 == 0;
        c[0..4].copy_from_slice(
            &(cmd
                | if is_ex {
                    IB_USER_VERBS_CMD_FLAG_EXTENDED
                } else {
                    0
                })
            .to_ne_bytes(),
        );
        if next() % 4 != 0 {
            // Mostly consistent sizes and a real response buffer, so handlers run.
            if is_ex && len >= 24 {
                c[4..6].copy_from_slice(&(((len - 24) / 8) as u16).to_ne_bytes());
                c[6..8].copy_from_slice(&8u16.to_ne_bytes());
                c[8..16].copy_from_slice(&sp.to_ne_bytes());
                c[16..18].copy_from_slice(&0u16.to_ne_bytes());
                c[18..20].copy_from_slice(&8u16.to_ne_bytes());
                c[20..24].copy_from_slice(&0u32.to_ne_bytes());
                c.truncate(24 + (len - 24) / 8 * 8);
            } else if len >= 16 {
                c[4..6].copy_from_slice(&((len / 4) as u16).to_ne_bytes());
                c[6..8].copy_from_slice(&16u16.to_ne_bytes());
                c[8..16].copy_from_slice(&sp.to_ne_bytes());
            }
        }
        let _ = e.write(&c);
    }
    scratch[0] = 1;
}
