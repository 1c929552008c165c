//! The model's ring formats judged by the vendor's own header: `model/tests/c/wire_oracle.c`
//! includes rdma-core's `mlx5dv.h`, writes the send WQE segments the model reads
//! (`mlx5dv_set_ctrl_seg`, `mlx5dv_set_data_seg`, `mlx5dv_set_eth_seg`), reads the CQEs the
//! model writes (`struct mlx5_cqe64`, `struct mlx5_err_cqe`, the `mlx5dv_get_cqe_*` accessors),
//! and prints the offsets and constants of those structs and enums. The send doorbell the
//! model decodes (the QPN in a control segment's first 8 bytes) is checked on the vendor's
//! segments too.
//!
//! Not covered, because `mlx5dv.h` does not define them: the RSS hash result and type and the
//! raw checksum of the CQE (Linux include/linux/mlx5/device.h `struct mlx5_cqe64` has them), the
//! L4 header types, the stripped-VLAN and fragment bits, the compressed-CQE format, the
//! striding-RQ byte count, the mini-CQE (`struct mlx5_mini_cqe8`), the enhanced MPSW opcode,
//! the "CQE and EQE" completion mode, the Ethernet segment's software-parser offsets and its
//! VLAN-insertion form (Linux include/linux/mlx5/qp.h has these three), and the inline
//! segment's data padding (only its flag and header size are in `mlx5dv.h`).
//! Of these, DPDK's mlx5 PMD judges what it reads (the hash, the ok bits, the header types, the
//! fragment and stripped-VLAN bits, both mini-CQE formats, the striding byte count) by decoding
//! the model's CQEs in tests/emu/dpdk_decode.rs.
//!
//! No C compiler or headers is a test failure that says what to install, never a silent skip.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::{cqe, ctrl, data, eth, inline, Cqe, CtrlSeg, DataSeg, EthSeg};

fn oracle() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let src =
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/wire_oracle.c");
            // Next to this test binary (target/*/deps), built under a name of this process and
            // renamed, so that two runs at once do not write one file.
            let exe = std::env::current_exe().expect("the test binary's path");
            let dir = exe.parent().expect("the test binary's directory");
            let out = dir.join("rawq_model_wire_oracle");
            let tmp = dir.join(format!("rawq_model_wire_oracle.{}", std::process::id()));
            let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
            match Command::new(&cc)
                .args(["-O1", "-Wall", "-o"])
                .arg(&tmp)
                .arg(&src)
                .output()
            {
                Err(e) => panic!(
                    "cannot run the C compiler `{cc}` ({e}): install build-essential (or set \
                     CC) and the rdma-core headers (libibverbs-dev)"
                ),
                Ok(o) if !o.status.success() => panic!(
                    "`{cc}` failed to build {} (are the rdma-core headers, libibverbs-dev, \
                     installed?):\n{}",
                    src.display(),
                    String::from_utf8_lossy(&o.stderr)
                ),
                Ok(_) => {
                    std::fs::rename(&tmp, &out).expect("move the oracle into place");
                    out
                }
            }
        })
        .clone()
}

/// Runs the oracle with `args` and `input` on its standard input; its output lines.
fn run(args: &[&str], input: &str) -> Vec<String> {
    let exe = oracle();
    let mut child = Command::new(&exe)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {}: {e}", exe.display()));
    let mut stdin = child.stdin.take().expect("stdin");
    let input = input.to_owned();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("oracle output");
    writer.join().expect("writer").expect("write the cases");
    assert!(out.status.success(), "{} failed", exe.display());
    String::from_utf8(out.stdout)
        .expect("UTF-8")
        .lines()
        .map(str::to_owned)
        .collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// xorshift64: the cases are the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[test]
fn offsets_sizes_and_constants_are_mlx5dv_hs() {
    let got: HashMap<String, u64> = run(&["layout"], "")
        .iter()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.parse().expect("a number")))
        .collect();
    let want: &[(&str, u64)] = &[
        ("sizeof.mlx5_cqe64", cqe::field::OP_OWN as u64 + 1),
        ("mlx5_cqe64.wqe_id", cqe::field::WQE_ID.start as u64),
        ("mlx5_cqe64.hds_ip_ext", cqe::field::HDS_IP_EXT as u64),
        (
            "mlx5_cqe64.l4_hdr_type_etc",
            cqe::field::L4_L3_HDR_TYPE as u64,
        ),
        ("mlx5_cqe64.vlan_info", cqe::field::VLAN_INFO.start as u64),
        ("mlx5_cqe64.srqn_uidx", cqe::field::SRQN_UIDX.start as u64),
        ("mlx5_cqe64.byte_cnt", cqe::field::BYTE_CNT.start as u64),
        ("mlx5_cqe64.timestamp", cqe::field::TIMESTAMP.start as u64),
        (
            "mlx5_cqe64.sop_drop_qpn",
            cqe::field::SOP_DROP_QPN.start as u64,
        ),
        (
            "mlx5_cqe64.wqe_counter",
            cqe::field::WQE_COUNTER.start as u64,
        ),
        ("mlx5_cqe64.op_own", cqe::field::OP_OWN as u64),
        (
            "mlx5_err_cqe.vendor_err_synd",
            cqe::field::VENDOR_ERR_SYND as u64,
        ),
        ("mlx5_err_cqe.syndrome", cqe::field::SYNDROME as u64),
        ("sizeof.mlx5_wqe_ctrl_seg", 16),
        (
            "mlx5_wqe_ctrl_seg.opmod_idx_opcode",
            ctrl::field::OPMOD_IDX_OPCODE.start as u64,
        ),
        ("mlx5_wqe_ctrl_seg.qpn_ds", ctrl::field::QPN_DS.start as u64),
        ("mlx5_wqe_ctrl_seg.fm_ce_se", ctrl::field::FM_CE_SE as u64),
        ("sizeof.mlx5_wqe_data_seg", data::SIZE as u64),
        (
            "mlx5_wqe_data_seg.byte_count",
            data::field::BYTE_COUNT.start as u64,
        ),
        ("mlx5_wqe_data_seg.lkey", data::field::LKEY.start as u64),
        ("mlx5_wqe_data_seg.addr", data::field::ADDR.start as u64),
        ("mlx5_wqe_eth_seg.cs_flags", eth::field::CS_FLAGS as u64),
        ("mlx5_wqe_eth_seg.mss", eth::field::MSS.start as u64),
        (
            "mlx5_wqe_eth_seg.inline_hdr_sz",
            eth::field::INLINE_HDR_SZ.start as u64,
        ),
        (
            "mlx5_wqe_eth_seg.inline_hdr_start",
            eth::field::INLINE_HDR_START as u64,
        ),
        ("MLX5_CQE_REQ", cqe::OP_REQ.into()),
        ("MLX5_CQE_RESP_SEND", cqe::OP_RESP_SEND.into()),
        ("MLX5_CQE_REQ_ERR", cqe::OP_REQ_ERR.into()),
        ("MLX5_CQE_RESP_ERR", cqe::OP_RESP_ERR.into()),
        // A fresh CQE's op_own: MLX5_CQE_INVALID in the opcode nibble (mlx5_alloc_cq_buf).
        ("MLX5_CQE_INVALID", (cqe::OP_OWN_INVALID >> 4).into()),
        (
            "MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR",
            cqe::SYND_LOCAL_LENGTH_ERR.into(),
        ),
        (
            "MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR",
            cqe::SYND_LOCAL_QP_OP_ERR.into(),
        ),
        (
            "MLX5_CQE_SYNDROME_LOCAL_PROT_ERR",
            cqe::SYND_LOCAL_PROT_ERR.into(),
        ),
        (
            "MLX5_CQE_SYNDROME_WR_FLUSH_ERR",
            cqe::SYND_WR_FLUSH_ERR.into(),
        ),
        ("MLX5_CQE_L2_OK", cqe::L2_OK.into()),
        ("MLX5_CQE_L3_OK", cqe::L3_OK.into()),
        ("MLX5_CQE_L4_OK", cqe::L4_OK.into()),
        ("MLX5_CQE_L3_HDR_TYPE_IPV6", cqe::L3_IPV6.into()),
        ("MLX5_CQE_L3_HDR_TYPE_IPV4", cqe::L3_IPV4.into()),
        ("MLX5_OPCODE_NOP", ctrl::OPCODE_NOP.into()),
        ("MLX5_OPCODE_SEND", ctrl::OPCODE_SEND.into()),
        ("MLX5_OPCODE_TSO", ctrl::OPCODE_TSO.into()),
        ("MLX5_INVALID_LKEY", data::INVALID_LKEY.into()),
        ("sizeof.mlx5_wqe_inl_data_seg", inline::field::DATA as u64),
        (
            "mlx5_wqe_eth_seg.inline_hdr",
            (eth::field::INLINE_HDR_START + eth::INLINE_HDR_START_SZ) as u64,
        ),
        ("MLX5_WQE_CTRL_CQ_UPDATE", ctrl::CQ_UPDATE.into()),
        ("MLX5_INLINE_SEG", inline::INLINE_SEG.into()),
        ("MLX5_ETH_WQE_L3_CSUM", eth::L3_CSUM.into()),
        ("MLX5_ETH_WQE_L4_CSUM", eth::L4_CSUM.into()),
    ];
    for &(name, v) in want {
        assert_eq!(got.get(name), Some(&v), "{name}: mlx5dv.h vs the model");
    }
    assert_eq!(
        got.len(),
        want.len(),
        "every number the oracle prints is compared"
    );
}

/// What libmlx5 writes (the vendor's inline writers), the model's readers give back.
#[test]
fn the_model_reads_what_mlx5dv_h_writes() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut input = String::new();
    let mut cases = Vec::new();
    for _ in 0..1000 {
        let (pi, opcode, opmod) = (rng.below(1 << 16), rng.below(256), rng.below(256));
        let (qpn, fm, ds, sig) = (
            rng.below(1 << 24),
            rng.below(256),
            rng.below(64),
            rng.below(256),
        );
        input += &format!(
            "C {pi} {opcode} {opmod} {qpn} {fm} {ds} {sig} {}\n",
            rng.next() as u32
        );
        cases.push(('C', vec![pi, opcode, opmod, qpn, ds, fm], Vec::new()));
        let (len, lkey, addr) = (rng.below(1 << 31), rng.next() as u32 as u64, rng.next());
        input += &format!("D {len} {lkey} {addr}\n");
        cases.push(('D', vec![len, lkey, addr], Vec::new()));
        let cs =
            [0, eth::L3_CSUM, eth::L4_CSUM, eth::L3_CSUM | eth::L4_CSUM][rng.below(4) as usize];
        let mss = rng.below(1 << 16);
        let sz = [0, 18, rng.below(19)][rng.below(3) as usize];
        let inl: Vec<u8> = (0..sz).map(|_| rng.next() as u8).collect();
        let text = if sz == 0 { "-".into() } else { hex(&inl) };
        input += &format!("E {cs} {mss} {sz} {text}\n");
        cases.push(('E', vec![cs.into(), mss, sz], inl));
    }
    let got = run(&[], &input);
    assert_eq!(got.len(), cases.len(), "one oracle line per case");
    for (i, (line, (kind, v, inl))) in got.iter().zip(&cases).enumerate() {
        let b = unhex(line);
        let seen: Vec<u64> = match kind {
            'C' => {
                let c = CtrlSeg::new_unchecked(&b[..]);
                vec![
                    c.wqe_index().into(),
                    c.opcode().into(),
                    c.opmod().into(),
                    c.qpn().into(),
                    c.ds().into(),
                    c.fm_ce_se().into(),
                ]
            }
            'D' => {
                let d = DataSeg::new_unchecked(&b[..]);
                vec![d.byte_count().into(), d.lkey().into(), d.addr()]
            }
            _ => {
                let e = EthSeg::new_checked(&b[..]).expect("the vendor's segment fits");
                let at = eth::field::INLINE_HDR_START;
                assert_eq!(&b[at..at + inl.len()], &inl[..], "case {i}: inline header");
                vec![
                    e.cs_flags().into(),
                    e.mss().into(),
                    e.inline_hdr_sz().into(),
                ]
            }
        };
        assert_eq!(&seen, v, "case {i} ({kind}): {line}");
        if *kind == 'C' {
            // The send doorbell is the segment's first 8 bytes as they lie in memory (rdma-core
            // qp.c `post_send_db`): the QP the model starts is the one the vendor wrote.
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[..8]);
            let q = crate::engine::doorbell_qpn(u64::from_ne_bytes(w));
            assert_eq!(u64::from(q), v[3], "case {i}: doorbell QPN: {line}");
        }
    }
}

/// What the model writes into a CQE, libmlx5's structs and accessors read back.
#[test]
fn mlx5dv_h_reads_what_the_model_writes() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut input = String::new();
    let mut want = Vec::new();
    for k in 0..1000 {
        let mut q = [0u8; 64];
        let mut c = Cqe::new_unchecked(&mut q[..]);
        let err = k % 2 == 1;
        let opcode = if err {
            [cqe::OP_REQ_ERR, cqe::OP_RESP_ERR][rng.below(2) as usize]
        } else {
            [cqe::OP_REQ, cqe::OP_RESP_SEND][rng.below(2) as usize]
        };
        let (format, owner) = (rng.below(4) as u8, rng.below(2) as u8);
        let (counter, qpn, uidx) = (rng.next() as u16, rng.next() as u32, rng.next() as u32);
        c.set_wqe_counter(counter);
        c.set_sop_drop_qpn(qpn);
        c.set_srqn_uidx(uidx);
        let mut line = format!("{owner} 0 {format} {opcode} {counter} {qpn} {uidx} ");
        if err {
            let (vendor, synd) = (rng.next() as u8, rng.next() as u8);
            c.set_syndrome(vendor, synd);
            line += &format!("{synd} {vendor}");
        } else {
            let (id, cnt, vlan) = (rng.next() as u16, rng.next() as u32, rng.next() as u16);
            let (hds, l4, ts) = (rng.next() as u8, rng.next() as u8, rng.next());
            c.set_wqe_id(id);
            c.set_byte_cnt(cnt);
            c.set_vlan_info(vlan);
            c.set_hds_ip_ext(hds);
            c.set_l4_l3_hdr_type(l4);
            c.set_timestamp(ts);
            line += &format!("{id} {cnt} {vlan} {hds} {l4} {ts}");
        }
        c.set_op_own(cqe::op_own(opcode, format, owner));
        input += &format!("{} {}\n", if err { 'R' } else { 'Q' }, hex(&q));
        want.push(line);
    }
    let got = run(&[], &input);
    assert_eq!(got.len(), want.len(), "one oracle line per case");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "case {i}");
    }
}
