//! The one-WQEBB SEND WQE of a single-buffer packet, written as a handful of 8- and 16-byte
//! stores from constants computed once per queue (the template idea of VPP's rdma plugin).
//!
//! Two layouts, both one WQEBB:
//!
//! | bytes | no inline (DS 3) | 18-byte inline header (DS 4) |
//! |---|---|---|
//! | 0..16 | control segment | control segment |
//! | 16..32 | Ethernet segment, `inline_hdr_sz` 0 | Ethernet segment, `inline_hdr_sz` 18, frame bytes 0..2 |
//! | 32..48 | data segment (whole frame) | frame bytes 2..18 |
//! | 48..64 | (unused) | data segment (frame from byte 18) |
//!
//! Every per-packet value goes in with one store per 8-byte word: the control segment's first
//! word is `idx << 40 | (opcode, QPN, DS)` in big-endian order, the data segment's first word
//! `len << 32 | lkey`. The byte layout is the one [`CtrlSeg`](super::CtrlSeg),
//! [`EthSeg`](super::EthSeg) and [`DataSeg`](super::DataSeg) write (checked by the tests below).

use super::{ctrl, data, eth, put16, put32, put64, put_raw64, DS, WQEBB};

/// Offset of the Ethernet segment in the WQE.
const ETH: usize = DS;

/// Ethernet segment bytes 0..8 with `cs_flags = cs`, as a memory-order word.
const fn cs_word(cs: u8) -> u64 {
    let mut b = [0u8; 8];
    b[eth::field::CS_FLAGS] = cs;
    u64::from_ne_bytes(b)
}

/// Bytes 4..8 of a data segment's first word: the lkey, big-endian.
const fn lkey_hi_bytes(lkey: u32) -> [u8; 8] {
    let k = lkey.to_be_bytes();
    [0, 0, 0, 0, k[0], k[1], k[2], k[3]]
}

/// The memory-order word whose bytes 0..4 are `v` big-endian and 4..8 zero: one byte swap
/// and no shift on a little-endian CPU.
#[inline(always)]
fn be_low(v: u32) -> u64 {
    if cfg!(target_endian = "little") {
        v.swap_bytes() as u64
    } else {
        (v as u64) << 32
    }
}

/// Precomputed words of a single-buffer SEND WQE of one queue.
#[derive(Debug, Clone, Copy)]
pub struct SendTemplate {
    /// Control word 0..8 without the WQE index: opmod 0, opcode SEND, QPN, DS.
    ctrl0: u64,
    /// Data segment word 0..8 without the byte count, in memory order (the lkey's big-endian
    /// bytes at 4..8), to OR with [`be_low`] of the byte count.
    lkey_raw: u64,
    /// The same word for the data after an 18-byte inline header, less 18 bytes: adding
    /// `frame_len << 32` gives `(frame_len - 18) << 32 | lkey`.
    lkey_after_inline: u64,
    /// Ethernet segment bytes 0..8 (software-parser offsets, `cs_flags`, MSS), in memory order,
    /// for each checksum request: index bit 0 = L3, bit 1 = L4 (all 0 without checksum offload).
    eth0: [u64; 4],
}

impl SendTemplate {
    /// The template for SQ `sqn`, buffers under `lkey`, with the 18-byte inline header when
    /// `inline` is set; checksum requests are honoured when `csum` is set (the device offers
    /// checksum offload), else ignored.
    pub const fn new(sqn: u32, lkey: u32, inline: bool, csum: bool) -> SendTemplate {
        let ds: u64 = if inline { 4 } else { 3 };
        let (l3, l4) = if csum {
            (cs_word(eth::CS_L3), cs_word(eth::CS_L4))
        } else {
            (0, 0)
        };
        SendTemplate {
            ctrl0: (ctrl::OPCODE_SEND as u64) << 32 | ((sqn & 0x00ff_ffff) as u64) << 8 | ds,
            lkey_raw: u64::from_ne_bytes(lkey_hi_bytes(lkey)),
            lkey_after_inline: (lkey as u64).wrapping_sub((eth::L2_INLINE as u64) << 32),
            eth0: [0, l3, l4, l3 | l4],
        }
    }

    /// The checksum request index [`SendTemplate::write`] takes: bit 0 L3, bit 1 L4.
    #[inline(always)]
    pub const fn cs_index(l3: bool, l4: bool) -> usize {
        l3 as usize | (l4 as usize) << 1
    }

    /// Control word 0..8 (opmod 0, WQE index `idx`, opcode SEND, QPN, DS) as the value whose
    /// big-endian bytes are the segment's first 8 bytes. Consecutive indices differ by
    /// [`SendTemplate::IDX_STEP`] as long as the 16-bit index does not wrap.
    #[inline(always)]
    pub const fn ctrl_word(&self, idx: u16) -> u64 {
        (idx as u64) << 40 | self.ctrl0
    }

    /// The difference between the control words of consecutive WQE indices.
    pub const IDX_STEP: u64 = 1 << 40;

    /// Control word 0..8 for WQE index `idx` in memory order: the word [`SendTemplate::write`]
    /// stores as it is.
    #[inline(always)]
    pub const fn ctrl_raw(&self, idx: u16) -> u64 {
        u64::from_ne_bytes(self.ctrl_word(idx).to_be_bytes())
    }

    /// The difference between the memory-order control words of consecutive WQE indices
    /// ([`SendTemplate::ctrl_raw`]) as long as the index's low byte does not wrap: on a
    /// little-endian CPU the index's low byte is bits 16..24 of the word, and a carry out of it
    /// would go the wrong way. A loop stepping by it stops at every multiple of 256.
    pub const IDX_STEP_RAW: u64 = if cfg!(target_endian = "little") {
        1 << 16
    } else {
        1 << 40
    };

    /// Ethernet segment bytes 0..8 (memory order) for a packet asking for checksums `l3` /
    /// `l4`: zero when it asks for none (a predictable branch instead of a table load).
    #[inline(always)]
    pub fn eth_word(&self, l3: bool, l4: bool) -> u64 {
        if !(l3 | l4) {
            0
        } else {
            self.eth0[Self::cs_index(l3, l4)]
        }
    }

    /// Control segment: memory-order control word `cw` ([`SendTemplate::ctrl_raw`]), `fm_ce_se`
    /// [`ctrl::CE_ONLY_FIRST_ERR`], immediate [`SendTemplate::IMM`].
    #[inline(always)]
    fn ctrl(&self, w: &mut [u8; WQEBB], cw: u64) {
        put_raw64(w, ctrl::field::OPMOD_IDX_OPCODE.start, cw);
        // Signature 0, DCI stream 0, fm_ce_se, then the immediate.
        put64(w, ctrl::field::SIGNATURE, Self::SIG_TO_IMM);
    }

    /// Bytes 8..16 of the control segment, as one big-endian word: signature and DCI stream 0,
    /// completion mode "only the first error" (what DPDK puts in every WQE that does not ask for
    /// a completion: drivers/net/mlx5/mlx5_tx.h, `mlx5_tx_cseg_init`, MLX5_COMP_ONLY_FIRST_ERR),
    /// the immediate.
    const SIG_TO_IMM: u64 = (ctrl::CE_ONLY_FIRST_ERR as u64) << 32 | Self::IMM as u64;

    /// The immediate of every WQE written here. The immediate of an Ethernet SEND is free for
    /// software; the driver keeps the number of pool buffers the WQE holds there (here one).
    pub const IMM: u32 = 1;

    /// Data segment at `at`: `count_lkey` = `byte_count << 32 | lkey`, address `addr`.
    #[inline(always)]
    fn dseg(&self, w: &mut [u8; WQEBB], at: usize, count_lkey: u64, addr: u64) {
        put64(w, at + data::field::BYTE_COUNT.start, count_lkey);
        put64(w, at + data::field::ADDR.start, addr);
    }

    /// Writes the WQE with memory-order control word `cw` ([`SendTemplate::ctrl_raw`]) and
    /// Ethernet word `eth` ([`SendTemplate::eth_word`]), no inline header: `frame_len` bytes at
    /// `addr`.
    #[inline(always)]
    pub fn write(&self, w: &mut [u8; WQEBB], cw: u64, eth: u64, frame_len: u32, addr: u64) {
        self.ctrl(w, cw);
        // Software-parser offsets 0, cs_flags, software-parser flags 0, MSS 0.
        put_raw64(w, ETH + eth::field::SWP_OFFS.start, eth);
        // Metadata 0, inline_hdr_sz 0, two unused inline bytes.
        put64(w, ETH + eth::field::METADATA.start, 0);
        // Byte count and lkey, big-endian, as one memory-order word.
        put_raw64(
            w,
            ETH + DS + data::field::BYTE_COUNT.start,
            be_low(frame_len) | self.lkey_raw,
        );
        put64(w, ETH + DS + data::field::ADDR.start, addr);
    }

    /// Writes the WQE with memory-order control word `cw` and Ethernet word `eth`, inlining
    /// the first 18 bytes of `frame` (which must be longer than that), whose first byte is at
    /// `addr`.
    #[inline(always)]
    pub fn write_inline18(&self, w: &mut [u8; WQEBB], cw: u64, eth: u64, frame: &[u8], addr: u64) {
        self.ctrl(w, cw);
        put_raw64(w, ETH + eth::field::SWP_OFFS.start, eth);
        put32(w, ETH + eth::field::METADATA.start, 0);
        put16(
            w,
            ETH + eth::field::INLINE_HDR_SZ.start,
            eth::L2_INLINE as u16,
        );
        let hdr = ETH + eth::field::INLINE_HDR.start;
        w[hdr..hdr + eth::L2_INLINE].copy_from_slice(&frame[..eth::L2_INLINE]);
        // `frame.len() > 18`: the sum is `(frame.len() - 18) << 32 | lkey`.
        let count_lkey = ((frame.len() as u64) << 32).wrapping_add(self.lkey_after_inline);
        self.dseg(w, ETH + eth::SIZE, count_lkey, addr + eth::L2_INLINE as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dv::wire::{CtrlSeg, DataSeg, EthSeg};

    #[test]
    fn template_writes_what_the_segment_views_write() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..200 {
            let (sqn, lkey) = (next() as u32 & 0xff_ffff, next() as u32);
            let idx = next() as u16;
            let (l3, l4, csum) = (next() & 1 != 0, next() & 1 != 0, next() & 1 != 0);
            let cs = if csum {
                ((l3 as u8) * eth::CS_L3) | ((l4 as u8) * eth::CS_L4)
            } else {
                0
            };
            let _ = SendTemplate::cs_index(l3, l4);
            let addr = next();
            let frame: Vec<u8> = (0..19 + next() % 100).map(|_| next() as u8).collect();
            let (t, i) = (SendTemplate::new(sqn, lkey, false, true), idx & 0xfffe);
            assert_eq!(t.ctrl_word(i + 1), t.ctrl_word(i) + SendTemplate::IDX_STEP);
            // The memory-order step, within a run of indices that does not wrap the low byte.
            let j = idx & 0xff00 | (idx as u8).min(0xfe) as u16;
            assert_eq!(
                t.ctrl_raw(j + 1),
                t.ctrl_raw(j).wrapping_add(SendTemplate::IDX_STEP_RAW),
                "{j:#x}"
            );
            for inline in [false, true] {
                let t = SendTemplate::new(sqn, lkey, inline, csum);
                let mut got = [0xa5u8; 64];
                let mut want = [0xa5u8; 64];
                let ds = if inline { 4 } else { 3 };
                CtrlSeg::new_unchecked(&mut want[0..16]).fill(
                    0,
                    idx,
                    ctrl::OPCODE_SEND,
                    sqn,
                    ds,
                    ctrl::CE_ONLY_FIRST_ERR,
                    SendTemplate::IMM,
                );
                if inline {
                    t.write_inline18(&mut got, t.ctrl_raw(idx), t.eth_word(l3, l4), &frame, addr);
                    let mut e = EthSeg::new_unchecked(&mut want[16..48]);
                    e.fill(cs, 18);
                    e.inline_hdr_mut()[..18].copy_from_slice(&frame[..18]);
                    DataSeg::new_unchecked(&mut want[48..64]).fill(
                        frame.len() as u32 - 18,
                        lkey,
                        addr + 18,
                    );
                } else {
                    let (len, eth) = (frame.len() as u32, t.eth_word(l3, l4));
                    t.write(&mut got, t.ctrl_raw(idx), eth, len, addr);
                    EthSeg::new_unchecked(&mut want[16..32]).fill(cs, 0);
                    // Bytes 14..16 of a segment with no inline header are unused: write 0.
                    want[30..32].fill(0);
                    DataSeg::new_unchecked(&mut want[32..48]).fill(frame.len() as u32, lkey, addr);
                }
                assert_eq!(got, want, "inline {inline}");
            }
        }
    }
}
