//! Multi-buffer frames (jumbo frames larger than one UMEM chunk), kernel 6.6 or later.
//!
//! A port opened with an MTU ([`PortBuilder::mtu`](crate::PortBuilder::mtu)) whose frames do
//! not fit one chunk binds its sockets with `XDP_USE_SG` and loads its steering program with
//! `BPF_F_XDP_HAS_FRAGS` (the program parses the headers in the first buffer only). The kernel
//! then hands a frame over as several rx descriptors, every one but the last flagged
//! `XDP_PKT_CONTD` in `options`, and takes one the same way on transmit
//! (Documentation/networking/af_xdp.rst, "XDP_USE_SG bind flag" and "Multi-Buffer Support";
//! include/uapi/linux/if_xdp.h). Here a received frame becomes one chained [`Packet`] over its
//! buffers, and a chained packet is sent as one descriptor per segment.
//!
//! The kernel publishes a frame's descriptors together (net/xdp/xsk.c: `__xsk_rcv` and
//! `xsk_rcv_zc` reserve every fragment and submit them at the flush), so a burst only takes
//! whole frames: one whose last descriptor is not yet visible stays in the ring for the next
//! burst. This path is taken only by multi-buffer ports: the single-buffer path is unchanged.

use super::ring::XdpDesc;
use super::umem::{Umem, XDP_PACKET_HEADROOM};
use super::XdpQueue;
use crate::config::PortConfig;
use crate::error::{Error, Result};
use crate::mempool::Mempool;
use crate::packet::{Packet, RxMeta};
use crate::stats::Counter;

/// `XDP_PKT_CONTD`: more descriptors of this frame follow.
pub(crate) const XDP_PKT_CONTD: u32 = 1;

/// In `tx_len`: the buffer is not the last of its frame (its completion ends no frame).
pub(crate) const TX_CONTD: u16 = 0x8000;

/// Most descriptors one frame may take on transmit: the kernel's `MAX_SKB_FRAGS` + 1 (17 + 1 by
/// default; net/xdp/xsk.c `xsk_build_skb` refuses more and counts the frame invalid).
const MAX_TX_FRAGS: usize = 18;

/// The first kernel with AF_XDP multi-buffer (`XDP_USE_SG`): 6.6.
const SG_KERNEL: (u32, u32) = (6, 6);

/// Whether the port needs multi-buffer sockets: an MTU whose largest frame does not fit the data
/// room of one chunk (the chunk less the kernel's `XDP_PACKET_HEADROOM`).
///
/// # Errors
/// [`Error::Unsupported`] when it does and the kernel is older than 6.6, naming both.
pub(super) fn needed(cfg: &PortConfig, umem: &Umem, _pool: &Mempool) -> Result<bool> {
    let Some(f) = cfg.max_frame() else {
        return Ok(false);
    };
    let room = umem.chunk - XDP_PACKET_HEADROOM;
    if f <= room {
        return Ok(false);
    }
    let release = kernel_release();
    match parse_version(&release) {
        Some(v) if v >= SG_KERNEL => Ok(true),
        _ => Err(Error::Unsupported(format!(
            "MTU {}: frames of up to {f} bytes do not fit one {}-byte AF_XDP buffer ({room} \
             bytes of data), and AF_XDP multi-buffer frames (XDP_USE_SG) need Linux 6.6 or \
             later; this kernel is {release}. Use an MTU of at most {} (or larger pool buffers, \
             up to 4096 bytes)",
            f - crate::config::MTU_L2_OVERHEAD,
            umem.chunk,
            room.saturating_sub(crate::config::MTU_L2_OVERHEAD)
        ))),
    }
}

/// `uname -r`.
fn kernel_release() -> String {
    // SAFETY: `utsname` is plain old data; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid utsname to write.
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown".into();
    }
    let r: Vec<u8> = u
        .release
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&r).into_owned()
}

/// (major, minor) of a release such as `6.18.44-fc`.
fn parse_version(r: &str) -> Option<(u32, u32)> {
    let mut it = r.split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

impl XdpQueue {
    /// [`XdpQueue::rx`] for multi-buffer sockets: up to `max` whole frames, each a chained
    /// packet over its descriptors' buffers.
    pub(super) fn rx_sg(&mut self, out: &mut Vec<Packet>, max: usize) -> usize {
        let n = self.xsk.rx.peek(u32::MAX);
        let (mut got, mut bytes) = (0u64, 0u64);
        // Descriptors consumed: every one up to the end of the last whole frame taken.
        let mut used = 0u32;
        let mut i = 0u32;
        while i < n && (got as usize) < max {
            // The frame's extent: descriptors i..end.
            let mut end = i;
            while end < n && self.xsk.rx.read(end).options & XDP_PKT_CONTD != 0 {
                end += 1;
            }
            if end == n {
                break; // its last descriptor is not visible yet
            }
            let mut head: Option<Packet> = None;
            let mut bad = false;
            for k in i..=end {
                let d = self.xsk.rx.read(k);
                let Some((idx, off)) = self.umem.split(d.addr) else {
                    bad = true;
                    continue;
                };
                if off as u64 + d.len as u64 > self.umem.chunk as u64 || !self.home.release(idx) {
                    bad = true;
                    continue;
                }
                let p = Packet::from_device_in(self.shared, idx, off as u16, d.len, {
                    if k == i && self.stamps {
                        self.take_meta(idx, off)
                    } else {
                        RxMeta::default()
                    }
                });
                match head.as_mut() {
                    None => head = Some(p),
                    // Same pool, single buffer: `chain` cannot refuse it.
                    Some(h) => drop(h.chain(p)),
                }
            }
            match head {
                Some(p) if !bad => {
                    bytes += p.len() as u64;
                    got += 1;
                    out.push(p);
                }
                // A descriptor that is not ours: the frame is not trusted (its buffers home).
                _ => self.stats.add(Counter::RxErrors, 1),
            }
            i = end + 1;
            used = i;
        }
        if used > 0 {
            self.xsk.rx.release(used);
        }
        self.refill();
        if got > 0 {
            self.stats.rx(got, bytes);
        }
        got as usize
    }

    /// [`XdpQueue::tx`] for multi-buffer sockets: a chained packet goes as one descriptor per
    /// segment (`XDP_PKT_CONTD` on all but the last). A packet in this UMEM is sent in place;
    /// another pool's is copied segment by segment (`tx_copies`). One with more segments than
    /// the kernel takes, or a segment no chunk holds, is dropped and counted in `tx_drops`.
    pub(super) fn tx_sg(&mut self, pkts: &mut Vec<Packet>) -> usize {
        self.reclaim_completions();
        let mut room = self.xsk.tx.free(u32::MAX) as usize;
        let headroom = self.pool.headroom();
        let copy_room = self.umem.chunk as usize - headroom as usize;
        let chunk = self.umem.chunk as u64;
        let (mut k, mut used, mut frames, mut dropped, mut copies) = (0u32, 0, 0, 0u64, 0u64);
        let mut descs = [XdpDesc::default(); MAX_TX_FRAGS];
        let mut idxs = [0u32; MAX_TX_FRAGS];
        while used < pkts.len() {
            let p = &pkts[used];
            let nseg = p.segment_count();
            if nseg > MAX_TX_FRAGS || p.is_empty() {
                dropped += 1;
                used += 1;
                continue;
            }
            if nseg > room {
                break;
            }
            let in_place = p.segments().all(|s| {
                self.umem
                    .addr_of(s.addr)
                    .is_some_and(|a| (a & (chunk - 1)) + s.data.len() as u64 <= chunk)
            });
            if !in_place && p.segments().any(|s| s.data.len() > copy_room) {
                dropped += 1;
                used += 1;
                continue;
            }
            let mut short = false;
            for (j, s) in p.segments().enumerate() {
                let (addr, idx) = if in_place {
                    let a = self.umem.addr_of(s.addr).unwrap_or(0);
                    (a, (a / chunk) as u32)
                } else {
                    let Some(idx) = self.home.cache.get() else {
                        // No buffer free now: give back the copies made and leave the packet.
                        for &b in &idxs[..j] {
                            self.home.cache.put(b);
                        }
                        short = true;
                        break;
                    };
                    // SAFETY: buffer `idx` was just taken from the cache, so this queue owns
                    // it; `headroom + len <= chunk` was checked above.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            s.data.as_ptr(),
                            self.shared.buf_ptr(idx).add(headroom as usize),
                            s.data.len(),
                        );
                    }
                    (self.umem.chunk_addr(idx) + headroom as u64, idx)
                };
                let last = j + 1 == nseg;
                descs[j] = XdpDesc {
                    addr,
                    len: s.data.len() as u32,
                    options: if last { 0 } else { XDP_PKT_CONTD },
                };
                idxs[j] = idx;
            }
            if short {
                break;
            }
            for j in 0..nseg {
                self.xsk.tx.write(k, descs[j]);
                self.home.hold(idxs[j]);
                // `len` fits a chunk (at most 4096 bytes, below TX_CONTD).
                let contd = if j + 1 < nseg { TX_CONTD } else { 0 };
                self.tx_len[idxs[j] as usize] = descs[j].len as u16 | contd;
                k += 1;
            }
            if !in_place {
                copies += 1;
            }
            room -= nseg;
            frames += 1;
            used += 1;
        }
        // Sent in place: the buffers now belong to the kernel. Copied or dropped: freed here.
        for p in pkts.drain(..used) {
            if self.tx_holds(&p) {
                // The kernel holds every buffer; they come home through the completion ring.
                std::mem::forget(p);
            }
        }
        if k > 0 {
            self.xsk.tx.submit(k);
        }
        if dropped > 0 {
            self.stats.add(Counter::TxDrops, dropped);
        }
        if copies > 0 {
            self.stats.add(Counter::TxCopies, copies);
        }
        self.kick_tx();
        frames
    }

    /// Whether every buffer of `p` is now held by the kernel for transmit.
    fn tx_holds(&self, p: &Packet) -> bool {
        let chunk = self.umem.chunk as u64;
        p.segments().all(|s| {
            self.umem.addr_of(s.addr).is_some_and(|a| {
                let idx = a / chunk;
                let (w, b) = ((idx >> 6) as usize, idx & 63);
                self.home.held.get(w).is_some_and(|x| x & (1 << b) != 0)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_versions_parse() {
        assert_eq!(parse_version("6.18.44-fc-v595"), Some((6, 18)));
        assert_eq!(parse_version("6.6.0"), Some((6, 6)));
        assert!(parse_version("5.15.0-91-generic").unwrap() < SG_KERNEL);
        assert_eq!(parse_version("x"), None);
    }
}
