//! TSO (LSO) send WQEs, off the single-buffer fast path: one WQE per super-frame, which the
//! device cuts into MSS-sized TCP segments.
//!
//! Layout (rdma-core providers/mlx5/qp.c `set_tso_eth_seg` for `IBV_WR_TSO`; DPDK
//! drivers/net/mlx5/mlx5_tx.h `mlx5_tx_packet_multi_tso` with `mlx5_tx_eseg_data` under
//! `MLX5_TXOFF_CONFIG_TSO`; Linux en_tx.c `mlx5e_sq_xmit_wqe` for a GSO skb): control segment
//! with opcode `MLX5_OPCODE_TSO` (mlx5dv.h), opmod 0; Ethernet segment with `cs_flags` L3 + L4
//! (DPDK's checksum table asks for both with TSO: mlx5_rxtx.c `mlx5_set_cksum_table`), the
//! MSS at bytes 6..8, `inline_hdr_sz` = the whole L2..TCP header, copied from byte 14 on and
//! continuing over the following 16-byte units (wrapping at the ring's end like every other
//! unit); then one data segment per buffer for the payload, the first starting after the
//! header.

use super::{ctrl, data, eth, Tx, MAX_DS};
use crate::error::TxRefusal;
use crate::packet::{check_untagged, tso_header_len, Packet, MAX_TSO_HEADER};

/// A TSO request that can go into one WQE.
pub(super) struct TsoPlan {
    mss: u16,
    hdr: usize,
    /// DS of the whole WQE.
    ds: u32,
}

impl Tx {
    /// Checks `p`'s TSO request against this queue: the device segments (its `max_tso`), the
    /// header (`tso_header_len`), the segments fit the port's MTU, and the WQE fits [`MAX_DS`].
    pub(super) fn tso_plan(&self, p: &Packet, mss: u16) -> Result<TsoPlan, TxRefusal> {
        if self.max_tso == 0 {
            return Err(TxRefusal::TsoNotSegmented {
                by: "this device (max_tso 0)",
            });
        }
        let hdr = tso_header_len(p, mss, self.max_tso)?;
        crate::mtu::check_tso_segments(hdr, mss, self.max_frame)?;
        // A tag to insert goes into the inline header, which the device replicates.
        let tag = if p.offload.vlan_insert.is_some() {
            check_untagged(p)?;
            4
        } else {
            0
        };
        let eth_ds = (eth::size_for_inline(hdr + tag) / 16) as u32;
        let mut nd = 0u32;
        let mut skip = hdr;
        for s in p.segments() {
            if s.data.len() > skip {
                nd += 1;
            }
            skip = skip.saturating_sub(s.data.len());
        }
        let ds = 1 + eth_ds + nd;
        if ds > MAX_DS {
            return Err(TxRefusal::TsoTooManyBuffers {
                buffers: p.segment_count(),
                header: hdr,
                max: MAX_DS - 1 - eth_ds,
            });
        }
        Ok(TsoPlan { mss, hdr, ds })
    }

    /// Writes `p` as one TSO WQE at `pi` per `plan`. `None`: no room (stop the burst);
    /// `Some(start)`: written.
    pub(super) fn write_tso(&mut self, p: &Packet, plan: &TsoPlan) -> Option<u16> {
        let bbs = plan.ds.div_ceil(4);
        if bbs > self.free_bbs() {
            return None;
        }
        let pi = self.pi;
        // Control and Ethernet segments (with the inline header) built here, then copied unit
        // by unit: the header may run past the ring's end.
        let vlan = p.offload.vlan_insert;
        let inl = plan.hdr + if vlan.is_some() { 4 } else { 0 };
        let eth_len = eth::size_for_inline(inl);
        let mut head = [0u8; 16 + 16 + MAX_TSO_HEADER + 16];
        ctrl::CtrlSeg::new_unchecked(&mut head[..16]).fill(
            0,
            pi,
            ctrl::OPCODE_TSO,
            self.sqn,
            plan.ds as u8,
            ctrl::CE_ONLY_FIRST_ERR,
            // Buffers this WQE holds (see `close_wqe`).
            p.segment_count() as u32,
        );
        {
            let mut e = eth::EthSeg::new_unchecked(&mut head[16..16 + eth_len]);
            e.fill(eth::CS_L3 | eth::CS_L4, inl as u16);
            e.set_mss(plan.mss);
            // `tso_plan` checked the header lies in the first buffer.
            let (d, h) = (p.data(), e.inline_hdr_mut());
            match vlan {
                None => h[..plan.hdr].copy_from_slice(&d[..plan.hdr]),
                Some(tci) => {
                    h[..12].copy_from_slice(&d[..12]);
                    h[12..14].copy_from_slice(&0x8100u16.to_be_bytes());
                    h[14..16].copy_from_slice(&tci.to_be_bytes());
                    h[16..inl].copy_from_slice(&d[12..plan.hdr]);
                }
            }
        }
        let head_ds = ((16 + eth_len) / 16) as u32;
        for k in 0..head_ds {
            let at = k as usize * 16;
            self.ds(pi, k).copy_from_slice(&head[at..at + 16]);
        }
        let mut k = head_ds;
        let mut skip = plan.hdr;
        let lkey = self.lkey;
        for s in p.segments() {
            let l = s.data.len();
            if l > skip {
                let d = self.ds(pi, k);
                data::DataSeg::new_unchecked(&mut d[..]).fill(
                    (l - skip) as u32,
                    lkey,
                    s.addr + skip as u64,
                );
                k += 1;
            }
            skip = skip.saturating_sub(l);
            self.push_buf(s.index);
        }
        debug_assert_eq!(k, plan.ds);
        self.close_wqe(pi, bbs, 1, p.len() as u64);
        Some(pi)
    }

    /// The TSO packet `p` (with MSS `mss`) as one WQE, with `write_general`'s answer:
    /// `None`: no room; `Some(None)`: refused (the reason kept for the queue's error);
    /// `Some(Some(start))`: written.
    pub(super) fn write_tso_or_refuse(&mut self, p: &Packet, mss: u16) -> Option<Option<u16>> {
        if !self.basic_ok(p) {
            return Some(None);
        }
        match self.tso_plan(p, mss) {
            Ok(plan) => self.write_tso(p, &plan).map(Some),
            Err(why) => {
                self.refused.get_or_insert(why);
                Some(None)
            }
        }
    }
}
