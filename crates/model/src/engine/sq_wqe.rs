//! The device's send side, WQE parsing: reads one send WQE from the ring as the hardware
//! would check it (control, Ethernet, inline and data segments; TSO) into the frames it puts
//! on the wire, or the syndrome of its error CQE. The doorbells, the SQ's progress, the wire
//! and the send CQEs are in `sq.rs`.
//!
//! WQEs are parsed as both rawq and libmlx5 write them: rdma-core providers/mlx5/qp.c
//! `_mlx5_post_send` for IBV_QPT_RAW_PACKET lays out the control segment, the Ethernet segment
//! (`copy_eth_inline_headers`: `inline_hdr_sz` = the device's `eth_min_inline_size`, 0 or 18,
//! the header bytes from `inline_hdr_start`, the segment then `(16 + inl_hdr_size) & ~15`
//! bytes long), then either one inline segment (`set_data_inl_seg`: byte count |
//! `MLX5_INLINE_SEG` 0x80000000, data following, wrapping at the end of the ring) or data
//! segments (`set_data_ptr_seg`, zero-length entries skipped, the first one past the bytes
//! already inlined), with the DS count in `qpn_ds`.

use super::*;
use crate::wire::{cqe, ctrl, data, eth, inline, CtrlSeg, DataSeg, EthSeg, InlineSeg};

/// Set in a `Fail` syndrome (no syndrome has bit 7: PRM, mlx5dv.h `MLX5_CQE_SYNDROME_*`
/// are at most 0x22) for a WQE refused for a zero-length data segment.
pub(super) const ZERO_LENGTH: u8 = 0x80;

/// Why a WQE failed: syndrome.
pub(super) struct Fail(pub(super) u8);

/// A parsed good WQE.
pub(super) struct Parsed {
    pub(super) bbs: u32,
    pub(super) opcode: u8,
    pub(super) ce: u8,
}

impl HwState {
    /// Reads and checks the WQE at `ci` into `tx`: its frames and bytes, and, if the wire reads
    /// them, the frames as pieces (inline bytes of the WQE, or address + length in registered
    /// memory); on failure gives the syndrome and its size in WQEBBs. Syndromes as the hardware reports them (PRM; rdma-core cq.c
    /// `mlx5_handle_error_cqe`): LOCAL_QP_OP_ERR for a malformed WQE (opcode, DS, index, QPN,
    /// missing minimum inline header), LOCAL_PROT_ERR for a bad lkey or address,
    /// LOCAL_LENGTH_ERR for a bad frame length.
    pub(super) fn parse_wqe(
        &self,
        sqn: u32,
        ci: u16,
        avail: u32,
        tx: &mut TxScratch,
    ) -> std::result::Result<Parsed, (Fail, u32)> {
        let record = self.wire_reads();
        let TxScratch {
            wqe,
            nframes,
            nbytes,
            pieces,
            frames,
            ..
        } = tx;
        *nframes = 0;
        *nbytes = 0;
        pieces.clear();
        frames.clear();
        let Some(s) = self.sqs.get(sqn) else {
            return Err((Fail(cqe::SYND_LOCAL_QP_OP_ERR), 1));
        };
        let mut mrs = MrCache::new(s.pd);
        let w = &mut wqe[..];
        read_at(s.bb(ci as u32), &mut w[..64]);
        let mut cb = [0u8; 16];
        cb.copy_from_slice(&w[..16]);
        let c = CtrlSeg::new_unchecked(&cb);
        let ds = c.ds() as u32;
        let qp_op = |bbs: u32| Err((Fail(cqe::SYND_LOCAL_QP_OP_ERR), bbs.clamp(1, avail)));
        let prot = |bbs: u32| Err((Fail(cqe::SYND_LOCAL_PROT_ERR), bbs));
        let length = |bbs: u32| Err((Fail(cqe::SYND_LOCAL_LENGTH_ERR), bbs));
        if ds == 0 || ds > u32::from(ctrl::DS_MASK) {
            return qp_op(1);
        }
        let bbs = ds.div_ceil(4);
        // The control segment carries the WQE index and the QPN (rdma-core qp.c
        // `_mlx5_post_send`: `opmod_idx_opcode`, `qpn_ds`).
        if bbs > avail || c.wqe_index() != ci || c.qpn() != sqn {
            return qp_op(bbs);
        }
        for k in 1..bbs {
            read_at(
                s.bb(ci as u32 + k),
                &mut w[k as usize * 64..k as usize * 64 + 64],
            );
        }
        let w = &w[..ds as usize * 16];
        let opcode = c.opcode();
        let ok = Ok(Parsed {
            bbs,
            opcode,
            ce: c.ce(),
        });
        if c.opmod() != 0 {
            return qp_op(bbs);
        }
        let max = self.opts.max_frame as usize;
        let csum = eth::L3_CSUM | eth::L4_CSUM;
        match opcode {
            ctrl::OPCODE_NOP => ok,
            ctrl::OPCODE_SEND => {
                if ds < 2 {
                    return qp_op(bbs);
                }
                // VLAN insertion (`eth::INSERT_VLAN`, only with no inline header: with one, the
                // driver puts the tag in the inline bytes itself).
                let fixed = EthSeg::new_unchecked(&w[16..32]);
                let vlan =
                    (fixed.insert_type() & eth::INSERT_VLAN != 0).then(|| fixed.insert_vlan_tci());
                if vlan.is_some() && fixed.insert_type() != eth::INSERT_VLAN {
                    return qp_op(bbs);
                }
                let e = match vlan {
                    Some(_) => fixed,
                    None => match EthSeg::new_checked(&w[16..]) {
                        Ok(e) => e,
                        Err(_) => return qp_op(bbs),
                    },
                };
                let inl = if vlan.is_some() {
                    0
                } else {
                    e.inline_hdr_sz() as usize
                };
                let mut at = 16 + eth::size_for_inline(inl);
                if at > w.len() || e.mss() != 0 || e.swp_offsets() != [0; 4] {
                    return qp_op(bbs);
                }
                let cs = e.cs_flags();
                // The inline header lies inside the segment (`at` covers it).
                let mut len = inl;
                if inl > 0 && record {
                    pieces.push(Piece::Wqe {
                        at: 16 + eth::field::INLINE_HDR_START,
                        len: inl,
                    });
                }
                while at < w.len() {
                    let d = DataSeg::new_unchecked(&w[at..at + 16]);
                    if d.byte_count() & inline::INLINE_SEG != 0 {
                        let Ok(seg) = InlineSeg::new_checked(&w[at..]) else {
                            return qp_op(bbs);
                        };
                        if len + seg.len() > max {
                            return length(bbs);
                        }
                        if record {
                            pieces.push(Piece::Wqe {
                                at: at + inline::field::DATA,
                                len: seg.len(),
                            });
                        }
                        len += seg.len();
                        at += 16 * inline::ds_for(seg.len());
                        continue;
                    }
                    let l = d.byte_count();
                    // Byte count 0 means 2^31 bytes (PRM). No vendor source says more: libmlx5
                    // (`_mlx5_post_send` skips empty SGEs) and DPDK's PMD never write one. A
                    // gather of 2 GiB is longer than any frame: LOCAL_LENGTH_ERR, counted.
                    if l == 0 {
                        return Err((Fail(cqe::SYND_LOCAL_LENGTH_ERR | ZERO_LENGTH), bbs));
                    }
                    if !mrs.ok(self, d.lkey(), d.addr(), l) {
                        return prot(bbs);
                    }
                    if len + l as usize > max {
                        return length(bbs);
                    }
                    if record {
                        pieces.push(Piece::Mem {
                            addr: d.addr(),
                            len: l,
                        });
                    }
                    len += l as usize;
                    at += data::SIZE;
                }
                // The device demands `eth_min_inline` header bytes inline (mlx5-abi.h
                // `eth_min_inline`; libmlx5 copies them, qp.c `copy_eth_inline_headers`).
                if inl < (self.opts.min_inline as usize).min(len) {
                    return qp_op(bbs);
                }
                if len < 14 || len > max {
                    return length(bbs);
                }
                if cs & csum != 0 && !self.tune.tx_csum {
                    return qp_op(bbs);
                }
                let mut first = 0;
                if let Some(tci) = vlan {
                    // The tag goes after the MAC addresses.
                    if len + 4 > max {
                        return length(bbs);
                    }
                    if record {
                        let np = pieces.len();
                        push_range(pieces, np, 0, 12);
                        pieces.push(Piece::Tag { tci });
                        push_range(pieces, np, 12, len as u64);
                        first = np;
                    }
                    len += 4;
                }
                *nframes = 1;
                *nbytes = len as u64;
                if record {
                    frames.push(TxFrame {
                        first: first as u32,
                        pieces: (pieces.len() - first) as u32,
                        len: len as u32,
                        cs: cs & csum,
                        tso: None,
                    });
                }
                ok
            }
            ctrl::OPCODE_ENHANCED_MPSW => {
                // Enhanced MPW (DPDK drivers/net/mlx5/mlx5_tx.h `mlx5_tx_burst_empw_*`): one
                // Ethernet segment without inline header, then one data or inline segment per
                // frame; refused when the device needs an inline header.
                if !self.tune.empw || self.opts.min_inline != 0 || ds < 3 {
                    return qp_op(bbs);
                }
                let e = EthSeg::new_unchecked(&w[16..32]);
                if e.inline_hdr_sz() != 0 || e.mss() != 0 {
                    return qp_op(bbs);
                }
                let cs = e.cs_flags();
                if cs != 0 && !self.tune.tx_csum {
                    return qp_op(bbs);
                }
                let mut at = 32;
                while at < w.len() {
                    let d = DataSeg::new_unchecked(&w[at..at + 16]);
                    let len;
                    let piece;
                    if d.byte_count() & inline::INLINE_SEG != 0 {
                        let Ok(seg) = InlineSeg::new_checked(&w[at..]) else {
                            return qp_op(bbs);
                        };
                        len = seg.len();
                        piece = Piece::Wqe {
                            at: at + inline::field::DATA,
                            len,
                        };
                        at += 16 * inline::ds_for(len);
                    } else {
                        let l = d.byte_count();
                        if !mrs.ok(self, d.lkey(), d.addr(), l) {
                            return prot(bbs);
                        }
                        if l < 14 || l as usize > max {
                            return length(bbs);
                        }
                        len = l as usize;
                        piece = Piece::Mem {
                            addr: d.addr(),
                            len: l,
                        };
                        at += data::SIZE;
                    }
                    *nframes += 1;
                    *nbytes += len as u64;
                    if record {
                        pieces.push(piece);
                        frames.push(TxFrame {
                            first: pieces.len() as u32 - 1,
                            pieces: 1,
                            len: len as u32,
                            cs: cs & csum,
                            tso: None,
                        });
                    }
                }
                ok
            }
            ctrl::OPCODE_TSO => {
                let Some(frames_bytes) = self.parse_tso(w, &mut mrs, record, pieces, frames) else {
                    return qp_op(bbs);
                };
                match frames_bytes {
                    Ok((n, b)) => {
                        *nframes = n;
                        *nbytes = b;
                        ok
                    }
                    Err(TsoFail::Prot) => prot(bbs),
                    Err(TsoFail::Length) => length(bbs),
                }
            }
            _ => qp_op(bbs),
        }
    }

    /// A TSO WQE (`w`, its DS): the Ethernet segment with the MSS and the L2..TCP header
    /// inline, then data (or inline) segments holding the payload (rdma-core providers/mlx5/
    /// qp.c `set_tso_eth_seg`, then the SG list as for a SEND). Records one frame per segment
    /// (tso.rs makes each from the header and its share of the payload). `None`: malformed
    /// (LOCAL_QP_OP_ERR: no MSS, a header the device cannot segment); else the frames and bytes
    /// it puts on the wire, or the failure of a data segment.
    fn parse_tso(
        &self,
        w: &[u8],
        mrs: &mut MrCache,
        record: bool,
        pieces: &mut Vec<Piece>,
        frames: &mut Vec<TxFrame>,
    ) -> Option<std::result::Result<(u32, u64), TsoFail>> {
        if !self.tune.tso || w.len() < 32 {
            return None;
        }
        let e = EthSeg::new_checked(&w[16..]).ok()?;
        let (inl, mss) = (e.inline_hdr_sz() as usize, e.mss());
        let mut at = 16 + eth::size_for_inline(inl);
        if at > w.len() || mss == 0 || e.swp_offsets() != [0; 4] {
            return None;
        }
        let hdr_at = 16 + eth::field::INLINE_HDR_START;
        let h = super::tso::parse(&w[hdr_at..hdr_at + inl])?;
        let mut payload = 0u64;
        while at < w.len() {
            let d = DataSeg::new_unchecked(&w[at..at + 16]);
            let piece = if d.byte_count() & inline::INLINE_SEG != 0 {
                let seg = InlineSeg::new_checked(&w[at..]).ok()?;
                let p = Piece::Wqe {
                    at: at + inline::field::DATA,
                    len: seg.len(),
                };
                at += 16 * inline::ds_for(seg.len());
                p
            } else {
                let l = d.byte_count();
                if l > 0 && !mrs.ok(self, d.lkey(), d.addr(), l) {
                    return Some(Err(TsoFail::Prot));
                }
                at += data::SIZE;
                Piece::Mem {
                    addr: d.addr(),
                    len: l,
                }
            };
            let l = piece.len();
            if l > 0 && record {
                pieces.push(piece);
            }
            payload += l;
        }
        // The payload is at most the `max_tso` the device reports (ibv_query_device_ex
        // `tso_caps.max_tso`; libmlx5 qp.c `_mlx5_post_send` refuses more with EINVAL), and no
        // segment may exceed the largest frame.
        let seg_max = inl as u64 + payload.min(mss as u64);
        if payload > super::tso::MAX_TSO as u64 || seg_max > self.opts.max_frame as u64 {
            return Some(Err(TsoFail::Length));
        }
        let n = super::tso::segments(payload, mss);
        if record {
            let np = pieces.len();
            for i in 0..n {
                let off = i * mss as u64;
                let end = (off + mss as u64).min(payload);
                let first = pieces.len();
                pieces.push(Piece::Wqe {
                    at: hdr_at,
                    len: inl,
                });
                push_range(pieces, np, off, end);
                frames.push(TxFrame {
                    first: first as u32,
                    pieces: (pieces.len() - first) as u32,
                    len: (inl as u64 + end.saturating_sub(off)) as u32,
                    cs: 0,
                    tso: Some((h, i as u32, off as u32, i == n - 1)),
                });
            }
        }
        Some(Ok((n as u32, n * inl as u64 + payload)))
    }
}

impl Piece {
    /// Bytes of frame the piece holds.
    fn len(&self) -> u64 {
        match *self {
            Piece::Wqe { len, .. } => len as u64,
            Piece::Mem { len, .. } => len as u64,
            Piece::Tag { .. } => 4,
        }
    }
}

/// How a TSO WQE's data segments failed.
enum TsoFail {
    /// A bad lkey or address (LOCAL_PROT_ERR).
    Prot,
    /// Too long a payload or segment (LOCAL_LENGTH_ERR).
    Length,
}

/// Pushes the bytes `off..end` of the payload that `pieces[..np]` hold, in order, as pieces.
fn push_range(pieces: &mut Vec<Piece>, np: usize, off: u64, end: u64) {
    let mut pos = 0u64;
    for j in 0..np {
        let p = pieces[j];
        let len = p.len();
        let (a, b) = (off.max(pos), end.min(pos + len));
        if a < b {
            let skip = a - pos;
            pieces.push(match p {
                Piece::Wqe { at, .. } => Piece::Wqe {
                    at: at + skip as usize,
                    len: (b - a) as usize,
                },
                Piece::Mem { addr, .. } => Piece::Mem {
                    addr: addr + skip,
                    len: (b - a) as u32,
                },
                // Never cut: tags are not in the payloads `push_range` splits.
                Piece::Tag { tci } => Piece::Tag { tci },
            });
        }
        pos += len;
        if pos >= end {
            break;
        }
    }
}

/// The lkey check of the SQ's PD (the device only reads: no write access needed) with the
/// registration last found kept at hand (a WQE's segments nearly always name one region).
struct MrCache(Option<(u32, (u64, u64))>, u32);

impl MrCache {
    fn new(pd: u32) -> MrCache {
        MrCache(None, pd)
    }

    #[inline(always)]
    fn ok(&mut self, hw: &HwState, lkey: u32, addr: u64, len: u32) -> bool {
        match self.0 {
            Some((k, r)) if k == lkey => in_range(r, addr, len),
            _ => match hw.mr_range(lkey, self.1, false) {
                Some(r) => {
                    self.0 = Some((lkey, r));
                    in_range(r, addr, len)
                }
                None => false,
            },
        }
    }
}
