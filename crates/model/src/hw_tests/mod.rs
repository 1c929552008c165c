//! [`Hw`] driven directly, with rings built by hand in the layouts libmlx5 writes (rdma-core
//! providers/mlx5/qp.c `_mlx5_post_send` / `mlx5_post_wq_recv`, mlx5dv.h structs), byte by
//! byte, without rawq's own segment writers: an independent oracle for the engine.

use std::sync::{Arc, Mutex};

use memmap2::MmapMut;

use super::hw::*;
use super::ModelWire;
use crate::MiniCqeFormat;

const CQ0: usize = 0;
const SQ: usize = 0x20000;
const RQ: usize = 0x30000;
const DB: usize = 0x40000;
/// A UAR page: the SQ's doorbell register is at +0x800 (libmlx5's first bfreg of a page), the
/// CQ doorbell at +0x20 (`MLX5_CQ_DOORBELL`).
const UAR: usize = 0x48000;
const DATA: usize = 0x50000;
const LEN: usize = 0x100000;

/// One anonymous mapping holding CQs (8 KiB apart from CQ0), an SQ, RQs (4 KiB apart), doorbell
/// records (64 bytes apart) and registered data.
struct Rig {
    _map: MmapMut,
    base: usize,
    hw: Hw,
    lkey: u32,
    /// Which half of the doorbell register the next doorbell goes to.
    bf_half: std::cell::Cell<usize>,
}

impl Rig {
    fn new(o: HwOptions) -> Rig {
        let mut map = MmapMut::map_anon(LEN).unwrap();
        let base = map.as_mut_ptr() as usize;
        let hw = Hw::new(o).unwrap();
        let lkey = hw
            .reg_mr((base + DATA) as u64, (LEN - DATA) as u64)
            .unwrap();
        Rig {
            _map: map,
            base,
            hw,
            lkey,
            bf_half: std::cell::Cell::new(0),
        }
    }

    fn at(&self, off: usize) -> usize {
        self.base + off
    }

    #[allow(clippy::mut_from_ref)]
    fn bytes(&self, off: usize, len: usize) -> &mut [u8] {
        // SAFETY: inside the mapping the rig owns; tests are single-threaded over it.
        unsafe { std::slice::from_raw_parts_mut((self.base + off) as *mut u8, len) }
    }

    fn be32(&self, off: usize, v: u32) {
        self.bytes(off, 4).copy_from_slice(&v.to_be_bytes());
    }

    /// A CQ `k` of `cnt` slots of `size` bytes, initialised as libmlx5 does
    /// (`mlx5_alloc_cq_buf`: op_own = MLX5_CQE_INVALID << 4 in every CQE).
    fn cq(&self, k: usize, cnt: u32, size: u32, comp: Option<MiniCqeFormat>) -> u32 {
        let off = CQ0 + k * 0x8000;
        for i in 0..cnt as usize {
            self.bytes(off + i * size as usize + size as usize - 1, 1)[0] = 0xf0;
        }
        // The arm word starts as the impossible arm (ARM_SENTINEL), as Hw::create_cq asks.
        self.be32(DB + 64 * k + 4, 0xffff_ffff);
        // SAFETY: ring and dbrec inside the rig's mapping, which outlives the device.
        unsafe {
            self.hw.create_cq(CqDesc {
                buf: self.at(off),
                cqe_cnt: cnt,
                cqe_size: size,
                dbrec: self.at(DB + 64 * k),
                compression: comp,
            })
        }
        .unwrap()
    }

    fn sq(&self, cqn: u32, uidx: u32) -> u32 {
        // SAFETY: as in `cq`.
        let sqn = unsafe {
            self.hw.create_sq(SqDesc {
                buf: self.at(SQ),
                wqe_cnt: 64,
                dbrec: self.at(DB + 0x800),
                uar: self.at(UAR + 0x800),
                cqn,
                user_index: uidx,
            })
        }
        .unwrap();
        self.hw.set_sq_state(sqn, QueueState::Ready).unwrap();
        sqn
    }

    /// Rings the SQ's doorbell as rdma-core providers/mlx5/qp.c `post_send_db` does: the
    /// record takes the producer counter `pi`, then the register (alternate halves) the first
    /// 8 bytes of the last WQE, which start at WQEBB `last`.
    fn ring(&self, pi: u32, last: u32) {
        self.be32(DB + 0x800, pi);
        let mut w = [0u8; 8];
        w.copy_from_slice(self.bytes(SQ + 64 * (last as usize % 64), 8));
        let half = self.bf_half.get();
        self.bytes(UAR + 0x800 + half, 8).copy_from_slice(&w);
        self.bf_half.set(half ^ 256);
    }

    /// RQ `k`: 16 WQEs of `stride` bytes.
    fn rq(&self, k: usize, cqn: u32, stride: u32, uidx: u32) -> u32 {
        // SAFETY: as in `cq`.
        let rqn = unsafe {
            self.hw.create_rq(RqDesc {
                buf: self.at(RQ + k * 0x1000),
                wqe_cnt: 16,
                stride,
                dbrec: self.at(DB + 0x900 + 64 * k),
                cqn,
                striding: None,
                user_index: uidx,
            })
        }
        .unwrap();
        self.hw.set_rq_state(rqn, QueueState::Ready).unwrap();
        rqn
    }

    /// Posts receive WQE `idx` of RQ `k` as `mlx5_post_wq_recv` does: one data segment per
    /// (len, data offset), then a terminator if the list is shorter than the WQE holds; the
    /// doorbell record takes the new head.
    fn post_recv(&self, k: usize, stride: u32, idx: u16, sges: &[(u32, usize)]) {
        let w = RQ + k * 0x1000 + (idx as usize % 16) * stride as usize;
        for (j, &(len, off)) in sges.iter().enumerate() {
            self.data_seg(w + 16 * j, len, self.lkey, self.at(off) as u64);
        }
        if sges.len() < stride as usize / 16 {
            self.data_seg(w + 16 * sges.len(), 0, 0x100, 0);
        }
        self.be32(DB + 0x900 + 64 * k, idx as u32 + 1);
    }

    fn data_seg(&self, at: usize, len: u32, lkey: u32, addr: u64) {
        self.be32(at, len);
        self.be32(at + 4, lkey);
        self.bytes(at + 8, 8).copy_from_slice(&addr.to_be_bytes());
    }

    /// A control segment as `_mlx5_post_send` writes it for a signaled SEND.
    fn ctrl(&self, at: usize, idx: u16, sqn: u32, ds: u32) {
        self.be32(at, (idx as u32) << 8 | 0x0a);
        self.be32(at + 4, sqn << 8 | ds);
        self.bytes(at + 8, 8)
            .copy_from_slice(&[0, 0, 0, 8, 0, 0, 0, 0]);
    }

    /// The 64 bytes of CQE `i` of CQ `k` (the second half of a 128-byte slot).
    fn cqe(&self, k: usize, size: usize, i: usize) -> [u8; 64] {
        let mut c = [0u8; 64];
        c.copy_from_slice(self.bytes(CQ0 + k * 0x8000 + i * size + size - 64, 64));
        c
    }
}

fn opts(min_inline: u16) -> HwOptions {
    HwOptions {
        min_inline,
        max_frame: 1518,
        flow_control: false,
        wire_capacity: 64,
        wire: ModelWire::Loopback,
        netdev: None,
        clock_khz: 0,
    }
}

/// A UDP/IPv4 frame to `dst`:`dport` from port `sport`, `len` bytes.
fn udp(dst: [u8; 4], sport: u16, dport: u16, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[16..18].copy_from_slice(&((len - 14) as u16).to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[192, 0, 2, 1]);
    f[30..34].copy_from_slice(&dst);
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&dport.to_be_bytes());
    f[38..40].copy_from_slice(&((len - 34) as u16).to_be_bytes());
    for (i, b) in f[42..].iter_mut().enumerate() {
        *b = i as u8;
    }
    f
}

fn op(c: &[u8; 64]) -> u8 {
    c[63] >> 4
}
fn uidx(c: &[u8; 64]) -> u32 {
    u32::from_be_bytes([c[32], c[33], c[34], c[35]]) & 0xff_ffff
}
fn byte_cnt(c: &[u8; 64]) -> u32 {
    u32::from_be_bytes([c[44], c[45], c[46], c[47]])
}
fn flow_tag(c: &[u8; 64]) -> u32 {
    u32::from_be_bytes([c[56], c[57], c[58], c[59]]) & 0xff_ffff
}

/// A catch-all flow to a one-RQ TIR.
fn catch_all(hw: &Hw, rqn: u32) -> u32 {
    let tirn = hw
        .create_tir(TirDesc {
            rqns: vec![rqn],
            hash: None,
        })
        .unwrap();
    hw.create_flow(FlowDesc {
        tirn,
        priority: 0,
        dont_trap: false,
        specs: vec![],
    })
    .unwrap()
}

#[test]
fn libmlx5_send_with_inline_l2_header_reaches_a_3_entry_scatter_list() {
    let r = Rig::new(opts(18));
    let txcq = r.cq(0, 8, 128, None);
    let rxcq = r.cq(1, 8, 64, None);
    let sqn = r.sq(txcq, 0x123);
    let rqn = r.rq(0, rxcq, 64, 0x456);
    catch_all(&r.hw, rqn);
    // 3 scatter entries of 20 + 30 + 200 bytes (room for 4: a terminator follows); the entry
    // after the terminator is garbage the device must not read.
    r.post_recv(
        0,
        64,
        0,
        &[
            (20, DATA + 0x8000),
            (30, DATA + 0x9000),
            (200, DATA + 0xa000),
        ],
    );
    let f = udp([10, 0, 0, 2], 1000, 2000, 120);
    r.bytes(DATA, 120).copy_from_slice(&f);
    // _mlx5_post_send, RAW_PACKET, eth_min_inline 18: ctrl (1 DS), eth segment with 18 header
    // bytes from inline_hdr_start ((16 + 18) & ~15 = 32 bytes, 2 DS), one data segment for the
    // rest of the SGE (offset 18): DS = 4.
    r.ctrl(SQ, 0, sqn, 4);
    let eth = SQ + 16;
    r.bytes(eth, 32).fill(0);
    r.bytes(eth + 12, 2).copy_from_slice(&18u16.to_be_bytes());
    r.bytes(eth + 14, 18).copy_from_slice(&f[..18]);
    r.data_seg(SQ + 48, 102, r.lkey, r.at(DATA + 18) as u64);
    r.ring(1, 0);
    r.hw.process();
    r.hw.process();
    // The send CQE is the second half of the 128-byte slot; the first half is untouched.
    assert!(
        r.bytes(CQ0, 64).iter().all(|&b| b == 0),
        "first half written"
    );
    let c = r.cqe(0, 128, 0);
    assert_eq!(op(&c), 0, "REQ");
    assert_eq!(c[63] & 1, 0, "owner bit of the first pass");
    assert_eq!(uidx(&c), 0x123, "SQ user index echoed");
    assert_eq!(u16::from_be_bytes([c[60], c[61]]), 0, "wqe_counter");
    // The frame, scattered over the three entries.
    let c = r.cqe(1, 64, 0);
    assert_eq!(op(&c), 2, "RESP_SEND");
    assert_eq!(uidx(&c), 0x456, "RQ user index echoed");
    assert_eq!(byte_cnt(&c), 120);
    assert_eq!(flow_tag(&c), 0, "no Tag spec: tag 0");
    let mut got = r.bytes(DATA + 0x8000, 20).to_vec();
    got.extend_from_slice(r.bytes(DATA + 0x9000, 30));
    got.extend_from_slice(r.bytes(DATA + 0xa000, 70));
    assert_eq!(got, f);
    assert_eq!(r.hw.counters().tx_frames, 1);
}

#[test]
fn libmlx5_inline_data_segment_without_l2_header() {
    let r = Rig::new(opts(0));
    let txcq = r.cq(0, 8, 64, None);
    let rxcq = r.cq(1, 8, 64, None);
    let sqn = r.sq(txcq, 1);
    let rqn = r.rq(0, rxcq, 16, 2);
    catch_all(&r.hw, rqn);
    r.post_recv(0, 16, 0, &[(256, DATA + 0x8000)]);
    let f = udp([10, 0, 0, 2], 1, 2, 70);
    // eth_min_inline 0: the eth segment is 16 bytes with inline_hdr_sz 0; IBV_SEND_INLINE puts
    // one inline segment (byte count | MLX5_INLINE_SEG) and the bytes: DS = 1 + 1 + 5.
    r.ctrl(SQ, 0, sqn, 7);
    r.bytes(SQ + 16, 16).fill(0);
    r.be32(SQ + 32, 70 | 0x8000_0000);
    r.bytes(SQ + 36, 70).copy_from_slice(&f);
    r.ring(2, 0);
    r.hw.process();
    r.hw.process();
    assert_eq!(op(&r.cqe(0, 64, 0)), 0);
    assert_eq!(byte_cnt(&r.cqe(1, 64, 0)), 70);
    assert_eq!(r.bytes(DATA + 0x8000, 70), &f[..]);
}

/// A frame shorter than the Ethernet minimum goes on the wire padded with zeros to 60 bytes
/// (64 with the FCS), as the MAC pads it: the receiver's CQE counts 60 bytes (Linux mlx5e
/// relies on it: drivers/net/ethernet/mellanox/mlx5/core/en_rx.c `mlx5e_handle_csum` treats
/// frames of at most ETH_ZLEN + ETH_FCS_LEN bytes as padded, whose checksum does not cover the
/// pad). The send side counts the bytes the WQE gave.
#[test]
fn a_short_frame_is_padded_to_60_bytes_on_the_wire() {
    let r = Rig::new(opts(0));
    let txcq = r.cq(0, 8, 64, None);
    let rxcq = r.cq(1, 8, 64, None);
    let sqn = r.sq(txcq, 1);
    let rqn = r.rq(0, rxcq, 16, 2);
    catch_all(&r.hw, rqn);
    r.post_recv(0, 16, 0, &[(256, DATA + 0x8000)]);
    r.bytes(DATA + 0x8000, 256).fill(0xee);
    let f = udp([10, 0, 0, 2], 1, 2, 42);
    // One inline segment of 42 bytes: DS = 1 + 1 + 3.
    r.ctrl(SQ, 0, sqn, 5);
    r.bytes(SQ + 16, 16).fill(0);
    r.be32(SQ + 32, 42 | 0x8000_0000);
    r.bytes(SQ + 36, 42).copy_from_slice(&f);
    // The doorbell record counts WQEBBs: 5 DS take two.
    r.ring(2, 0);
    r.hw.process();
    r.hw.process();
    let c = r.cqe(0, 64, 0);
    assert_eq!((op(&c), c[55]), (0, 0), "send CQE (opcode, syndrome)");
    assert_eq!(byte_cnt(&r.cqe(1, 64, 0)), 60);
    assert_eq!(r.bytes(DATA + 0x8000, 42), &f[..]);
    assert!(r.bytes(DATA + 0x8000 + 42, 18).iter().all(|&b| b == 0));
    let k = r.hw.counters();
    assert_eq!((k.tx_bytes, k.rx_bytes), (42, 60));
}

#[test]
fn a_bad_lkey_is_a_protection_error_then_flushes_until_reset() {
    let r = Rig::new(opts(0));
    let cq = r.cq(0, 8, 64, None);
    let sqn = r.sq(cq, 7);
    for (i, lkey) in [(0u16, 0xdead), (1, r.lkey)] {
        let w = SQ + 64 * i as usize;
        r.ctrl(w, i, sqn, 3);
        r.bytes(w + 16, 16).fill(0);
        r.data_seg(w + 32, 60, lkey, r.at(DATA) as u64);
    }
    r.ring(2, 1);
    r.hw.process();
    let c = r.cqe(0, 64, 0);
    assert_eq!((op(&c), c[55]), (0xd, 0x04), "REQ_ERR, LOCAL_PROT_ERR");
    assert_eq!(uidx(&c), 7);
    let c = r.cqe(0, 64, 1);
    assert_eq!((op(&c), c[55]), (0xd, 0x05), "then WR_FLUSH_ERR");
    assert_eq!(r.hw.sq_state(sqn).unwrap(), QueueState::Error);
    assert!(
        r.hw.set_sq_state(sqn, QueueState::Ready).is_err(),
        "ERR -> RDY"
    );
    r.hw.set_sq_state(sqn, QueueState::Reset).unwrap();
    assert_eq!(
        r.hw.sq_counters(sqn).unwrap(),
        Default::default(),
        "reset zeroes"
    );
    r.hw.set_sq_state(sqn, QueueState::Ready).unwrap();
    assert_eq!(r.hw.counters().tx_error_cqes, 1, "device counters stay");
}

#[test]
fn flows_match_under_masks_by_priority_with_dont_trap_drop_and_tag() {
    let r = Rig::new(opts(0));
    let cqa = r.cq(0, 64, 64, None);
    let cqb = r.cq(1, 64, 64, None);
    let rqa = r.rq(0, cqa, 16, 10);
    let rqb = r.rq(1, cqb, 16, 11);
    for i in 0..16u16 {
        r.post_recv(0, 16, i, &[(2048, DATA + 0x10000 + 2048 * i as usize)]);
        r.post_recv(1, 16, i, &[(2048, DATA + 0x30000 + 2048 * i as usize)]);
    }
    let tir = |rq| {
        r.hw.create_tir(TirDesc {
            rqns: vec![rq],
            hash: None,
        })
        .unwrap()
    };
    let (ta, tb) = (tir(rqa), tir(rqb));
    let udp_dst = |p: u16| FlowSpec::Udp {
        src: Masked::default(),
        dst: Masked {
            value: p,
            mask: 0xffff,
        },
    };
    // Priority 5: UDP dst 9000 -> A, tag 7.
    r.hw.create_flow(FlowDesc {
        tirn: ta,
        priority: 5,
        dont_trap: false,
        specs: vec![udp_dst(9000), FlowSpec::Tag(7)],
    })
    .unwrap();
    // Priority 1: IPv4 dst 10/8 (value bits beyond the mask ignored) -> B, DONT_TRAP, tag 9.
    r.hw.create_flow(FlowDesc {
        tirn: tb,
        priority: 1,
        dont_trap: true,
        specs: vec![
            FlowSpec::Ipv4 {
                src: Masked::default(),
                dst: Masked {
                    value: [10, 99, 99, 99],
                    mask: [255, 0, 0, 0],
                },
                proto: Masked::default(),
                tos: Masked::default(),
            },
            FlowSpec::Tag(9),
        ],
    })
    .unwrap();
    // Priority 0: UDP dst 53 dropped.
    r.hw.create_flow(FlowDesc {
        tirn: ta,
        priority: 0,
        dont_trap: false,
        specs: vec![udp_dst(53), FlowSpec::Drop],
    })
    .unwrap();
    for f in [
        udp([10, 1, 2, 3], 1, 9000, 64),    // B (dont_trap) then A
        udp([192, 168, 0, 1], 1, 9000, 64), // A
        udp([10, 1, 2, 3], 1, 53, 64),      // dropped
        udp([192, 168, 0, 1], 1, 1234, 64), // kernel
        udp([10, 0, 0, 1], 1, 1234, 64),    // B and the kernel
    ] {
        r.hw.inject_frame(&f);
    }
    r.hw.process();
    let c = r.hw.counters();
    assert_eq!((c.rx_rule_drop, c.rx_to_kernel), (1, 2));
    assert_eq!(r.hw.rq_counters(rqa).unwrap().rx_frames, 2);
    assert_eq!(r.hw.rq_counters(rqb).unwrap().rx_frames, 2);
    assert_eq!(flow_tag(&r.cqe(0, 64, 0)), 7);
    assert_eq!(flow_tag(&r.cqe(0, 64, 1)), 7);
    assert_eq!(flow_tag(&r.cqe(1, 64, 0)), 9);
    assert_eq!(flow_tag(&r.cqe(1, 64, 1)), 9);
}

impl Rig {
    /// `mlx5_arm_cq`: the arm word `sn << 28 | cmd | ci` into `dbrec[MLX5_CQ_ARM_DB]` of CQ
    /// `k`, then (when `ring`) the 64-bit doorbell `word << 32 | cqn`, big-endian, at
    /// `MLX5_CQ_DOORBELL` (0x20) of the UAR.
    fn arm(&self, k: usize, cqn: u32, word: u32, ring: bool) {
        self.be32(DB + 64 * k + 4, word);
        if ring {
            self.be32(UAR + 0x20, word);
            self.be32(UAR + 0x24, cqn);
        }
    }
}

#[test]
fn armed_cq_raises_one_completion_event_per_arm() {
    let r = Rig::new(opts(0));
    let cq = r.cq(0, 8, 64, None);
    // SAFETY: the UAR lies in the rig's mapping, which outlives the device.
    unsafe { r.hw.set_cq_uar(cq, r.at(UAR + 0x20)) }.unwrap();
    let rq = r.rq(0, cq, 16, 1);
    catch_all(&r.hw, rq);
    for i in 0..4 {
        r.post_recv(0, 16, i, &[(2048, DATA + 2048 * i as usize)]);
    }
    let ev = Arc::new(Mutex::new(Vec::new()));
    let e2 = ev.clone();
    r.hw.set_event_sink(Box::new(move |e| e2.lock().unwrap().push(e)));
    r.hw.inject_frame(&udp([1, 2, 3, 4], 1, 2, 64));
    r.hw.process();
    assert!(ev.lock().unwrap().is_empty(), "not armed: no event");
    // mlx5_arm_cq: dbrec[1] = sn << 28 | cmd | ci; sn 0, ci 0 is an all-zero word. A CQE already
    // past ci fires at once.
    r.arm(0, cq, 0, true);
    r.hw.process();
    assert_eq!(*ev.lock().unwrap(), vec![HwEvent::Completion { cqn: cq }]);
    r.hw.inject_frame(&udp([1, 2, 3, 4], 1, 2, 64));
    r.hw.process();
    assert_eq!(ev.lock().unwrap().len(), 1, "the arm was spent");
    // The consumer moved to 2 and re-armed with sn 1 (after mlx5_cq_event).
    r.be32(DB, 2);
    r.arm(0, cq, 1 << 28 | 2, true);
    r.hw.process();
    assert_eq!(ev.lock().unwrap().len(), 1, "nothing past ci yet");
    r.hw.inject_frame(&udp([1, 2, 3, 4], 1, 2, 64));
    r.hw.process();
    assert_eq!(ev.lock().unwrap().len(), 2);
}

/// The arm takes the doorbell record *and* the CQ doorbell on the UAR: an arm word written to
/// the record alone raises nothing; the doorbell naming another CQ, or carrying another word,
/// neither; the matching doorbell arms it.
#[test]
fn an_arm_written_only_to_the_record_raises_no_event() {
    let r = Rig::new(opts(0));
    let cq = r.cq(0, 8, 64, None);
    // SAFETY: the UAR lies in the rig's mapping, which outlives the device.
    unsafe { r.hw.set_cq_uar(cq, r.at(UAR + 0x20)) }.unwrap();
    let rq = r.rq(0, cq, 16, 1);
    catch_all(&r.hw, rq);
    for i in 0..4 {
        r.post_recv(0, 16, i, &[(2048, DATA + 2048 * i as usize)]);
    }
    let ev = Arc::new(Mutex::new(Vec::new()));
    let e2 = ev.clone();
    r.hw.set_event_sink(Box::new(move |e| e2.lock().unwrap().push(e)));
    r.hw.inject_frame(&udp([1, 2, 3, 4], 1, 2, 64));
    r.hw.process();
    r.arm(0, cq, 0, false);
    r.hw.process();
    r.hw.inject_frame(&udp([1, 2, 3, 4], 1, 2, 64));
    r.hw.process();
    assert!(ev.lock().unwrap().is_empty(), "record only: no event");
    // A doorbell for another CQ, then one with another arm word.
    r.be32(UAR + 0x20, 0);
    r.be32(UAR + 0x24, cq + 1);
    r.hw.process();
    r.be32(UAR + 0x20, 1 << 28);
    r.be32(UAR + 0x24, cq);
    r.hw.process();
    assert!(
        ev.lock().unwrap().is_empty(),
        "doorbell for another arm: no event"
    );
    // The doorbell matching the record.
    r.arm(0, cq, 0, true);
    r.hw.process();
    assert_eq!(*ev.lock().unwrap(), vec![HwEvent::Completion { cqn: cq }]);
}

/// Two CQs arming through one UAR page within one device round: the register keeps only the
/// later doorbell, and the earlier CQ's arm (its record written, its doorbell overwritten) is
/// taken all the same, not lost.
#[test]
fn two_cqs_armed_through_one_uar_in_one_round_both_fire() {
    let r = Rig::new(opts(0));
    let (ca, cb) = (r.cq(0, 8, 64, None), r.cq(1, 8, 64, None));
    for cq in [ca, cb] {
        // SAFETY: the UAR lies in the rig's mapping, which outlives the device.
        unsafe { r.hw.set_cq_uar(cq, r.at(UAR + 0x20)) }.unwrap();
    }
    let qa = r.rq(0, ca, 16, 1);
    catch_all(&r.hw, qa);
    r.post_recv(0, 16, 0, &[(2048, DATA)]);
    let ev = Arc::new(Mutex::new(Vec::new()));
    let e2 = ev.clone();
    r.hw.set_event_sink(Box::new(move |e| e2.lock().unwrap().push(e)));
    // A's doorbell, then B's over it, before the device looks.
    r.arm(0, ca, 0, true);
    r.arm(1, cb, 0, true);
    r.hw.process();
    r.hw.inject_frame(&udp([1, 2, 3, 4], 1, 2, 64));
    r.hw.process();
    assert_eq!(*ev.lock().unwrap(), vec![HwEvent::Completion { cqn: ca }]);
}

#[test]
fn timestamps_come_from_the_free_running_clock() {
    let r = Rig::new(HwOptions {
        clock_khz: 1_000_000,
        ..opts(0)
    });
    let cq = r.cq(0, 8, 64, None);
    let rq = r.rq(0, cq, 16, 1);
    catch_all(&r.hw, rq);
    r.post_recv(0, 16, 0, &[(2048, DATA)]);
    let t0 = r.hw.clock_ticks();
    r.hw.inject_frame(&udp([1, 2, 3, 4], 1, 2, 64));
    r.hw.process();
    let c = r.cqe(0, 64, 0);
    let ts = u64::from_be_bytes(c[48..56].try_into().unwrap());
    assert!(ts >= t0 && ts <= r.hw.clock_ticks(), "{t0} <= {ts}");
    assert!(r.hw.clock_ticks() > t0);
}

#[test]
fn spawn_pins_the_device_thread_when_given_a_cpu() {
    let cpus = current_affinity();
    let Some(&cpu) = cpus.last() else {
        panic!("sched_getaffinity gave no CPU");
    };
    for (pin, want) in [(Some(cpu), vec![cpu]), (None, cpus.clone())] {
        let r = Rig::new(opts(0));
        let cq = r.cq(0, 8, 64, None);
        let rq = r.rq(0, cq, 16, 1);
        catch_all(&r.hw, rq);
        r.post_recv(0, 16, 0, &[(2048, DATA)]);
        // The sink runs on the device's thread: it reports that thread's CPU set.
        let seen = Arc::new(Mutex::new(None));
        let s2 = seen.clone();
        r.hw.set_event_sink(Box::new(move |_| {
            *s2.lock().unwrap() = Some(current_affinity())
        }));
        // SAFETY: the UAR lies in the rig's mapping, which outlives the device.
        unsafe { r.hw.set_cq_uar(cq, r.at(UAR + 0x20)) }.unwrap();
        r.arm(0, cq, 0, true);
        let t = r.hw.spawn(pin).expect("device thread");
        r.hw.inject_frame(&udp([1, 2, 3, 4], 1, 2, 64));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while seen.lock().unwrap().is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        drop(t);
        assert_eq!(seen.lock().unwrap().clone(), Some(want), "pin {pin:?}");
    }
}

mod doorbell;
mod faults;
mod flow_counters;
mod flow_rank;
mod mr;
mod tso;
