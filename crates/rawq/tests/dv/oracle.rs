//! Differential test of the mlx5 wire writers and readers against the vendor's own helpers.
//!
//! `tests/c/mlx5_oracle.c` includes `/usr/include/infiniband/mlx5dv.h` and evaluates
//! `mlx5dv_set_ctrl_seg`, `mlx5dv_set_data_seg`, `mlx5dv_set_eth_seg`, the CQE accessors and the
//! vendor struct fields on cases we generate; we compare byte for byte with `rawq::dv::wire`.
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use support::Rng;

use rawq::dv::wire::{self, Cqe, CtrlSeg, DataSeg, EthSeg, SrqNextSeg};

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn build_oracle() -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let src =
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/mlx5_oracle.c");
            let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("mlx5_oracle");
            support::cc::compile(&src, &out, &["-O1", "-Wall"])
        })
        .clone()
}

fn run_oracle(input: &str) -> Vec<String> {
    support::cc::run(&build_oracle(), input)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn wire_matches_mlx5dv_helpers() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut input = String::new();
    let mut expected = Vec::new();
    const N: usize = 1500;

    for _ in 0..N {
        // Control segment.
        let pi = rng.below(1 << 16) as u16;
        let opcode = [0x00u8, 0x0a, 0x0e, 0x29][rng.below(4) as usize];
        let opmod = rng.below(256) as u8;
        let qpn = rng.below(1 << 24) as u32;
        let fm = rng.below(256) as u8;
        let ds = rng.below(64) as u8;
        let sig = rng.below(256) as u8;
        let imm = rng.next() as u32;
        input += &format!("C {pi} {opcode} {opmod} {qpn} {fm} {ds} {sig} {imm}\n");
        let mut b = [0u8; 16];
        let mut c = CtrlSeg::new_unchecked(&mut b);
        c.set_opmod_idx_opcode(opmod, pi, opcode);
        c.set_qpn_ds(qpn, ds);
        c.set_signature(sig);
        c.set_fm_ce_se(fm);
        c.set_imm(imm);
        // Readers give back what was written.
        let r = CtrlSeg::new_checked(&b[..]).unwrap();
        assert_eq!(
            (
                r.wqe_index(),
                r.opcode(),
                r.opmod(),
                r.qpn(),
                r.ds(),
                r.fm_ce_se(),
                r.imm()
            ),
            (pi, opcode, opmod, qpn, ds, fm, imm)
        );
        // `fill` (the hot-path writer) agrees when the signature is 0.
        let mut b2 = [0xffu8; 16];
        CtrlSeg::new_unchecked(&mut b2).fill(opmod, pi, opcode, qpn, ds, fm, imm);
        let mut b3 = b;
        b3[8] = 0;
        assert_eq!(b2, b3);
        expected.push(hex(&b));

        // Data segment.
        let len = rng.next() as u32 & 0x7fff_ffff;
        let lkey = rng.next() as u32;
        let addr = rng.next();
        input += &format!("D {len} {lkey} {addr}\n");
        let mut b = [0u8; 16];
        DataSeg::new_unchecked(&mut b).fill(len, lkey, addr);
        let r = DataSeg::new_checked(&b[..]).unwrap();
        assert_eq!((r.byte_count(), r.lkey(), r.addr()), (len, lkey, addr));
        expected.push(hex(&b));

        // Ethernet segment.
        let cs = [0u8, 0x40, 0x80, 0xc0, rng.below(256) as u8][rng.below(5) as usize];
        let mss = if rng.below(4) == 0 {
            rng.below(1 << 16) as u16
        } else {
            0
        };
        let sz = [0usize, 18, rng.below(19) as usize][rng.below(3) as usize];
        let inl: Vec<u8> = (0..sz).map(|_| rng.next() as u8).collect();
        input += &format!(
            "E {cs} {mss} {sz} {}\n",
            if sz == 0 { "-".to_string() } else { hex(&inl) }
        );
        let mut b = [0u8; 32];
        {
            let mut e = EthSeg::new_unchecked(&mut b);
            e.fill(cs, sz as u16);
            e.set_mss(mss);
            e.inline_hdr_mut()[..sz].copy_from_slice(&inl);
        }
        let r = EthSeg::new_checked(&b[..]).unwrap();
        assert_eq!((r.cs_flags(), r.mss(), r.inline_hdr()), (cs, mss, &inl[..]));
        expected.push(hex(&b));

        // Striding RQ next segment.
        let next = rng.below(1 << 16) as u16;
        input += &format!("N {next}\n");
        let mut b = [0xaau8; 16];
        SrqNextSeg::new_unchecked(&mut b).fill(next);
        assert_eq!(
            SrqNextSeg::new_checked(&b[..]).unwrap().next_wqe_index(),
            next
        );
        expected.push(hex(&b));

        // CQE readers on random bytes (with op_own biased toward meaningful values).
        let mut q = [0u8; 64];
        for x in q.iter_mut() {
            *x = rng.next() as u8;
        }
        if rng.below(2) == 0 {
            q[63] = wire::cqe::op_own(
                [0u8, 2, 13, 14, 15][rng.below(5) as usize],
                rng.below(4) as u8,
                rng.below(2) as u8,
            );
        }
        input += &format!("Q {}\n", hex(&q));
        let c = Cqe::new_checked(&q[..]).unwrap();
        expected.push(format!(
            "{} {} {} {} {} {} {} {} {} {} {} {} {} {} {}",
            c.owner(),
            c.se(),
            c.format(),
            c.opcode(),
            c.wqe_id(),
            c.wqe_counter(),
            c.byte_cnt(),
            c.sop_drop_qpn(),
            c.vlan_info(),
            c.hds_ip_ext(),
            c.l4_hdr_type_etc(),
            c.srqn_uidx(),
            c.timestamp(),
            c.syndrome(),
            c.vendor_err_synd()
        ));
    }

    let got = run_oracle(&input);
    assert_eq!(got.len(), expected.len(), "one oracle line per case");
    let lines: Vec<&str> = input.lines().collect();
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(g, e, "case {i}: `{}`", lines[i]);
    }
}

#[test]
fn cqe_writers_round_trip() {
    let mut rng = Rng(7);
    for _ in 0..1000 {
        let mut b = [0u8; 64];
        let (len, strides, filler) = (
            rng.next() as u16,
            rng.below(1 << 14) as u16,
            rng.below(2) == 1,
        );
        let mut c = Cqe::new_unchecked(&mut b);
        c.set_byte_cnt(wire::cqe::mprq_byte_cnt(len, strides, filler));
        c.set_wqe_counter(len);
        c.set_syndrome(1, 5);
        c.set_op_own(wire::cqe::op_own(14, 3, 1));
        let r = Cqe::new_unchecked(&b);
        assert_eq!(wire::cqe::mprq_decode(r.byte_cnt()), (len, strides, filler));
        assert_eq!(
            (r.opcode(), r.format(), r.owner(), r.syndrome()),
            (14, 3, 1, 5)
        );
        assert!(Cqe::new_checked(&b[..63]).is_err());
    }
}
