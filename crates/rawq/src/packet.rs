//! Packets: owned handles to pool buffers.
//!
//! A [`Packet`] owns one buffer (or a chain of them) of a [`Mempool`](crate::Mempool) and returns
//! it to the pool when dropped. Handing a packet to a queue (`tx_burst`) moves it, so a packet can
//! never be touched after it has been given to the NIC.
//!
//! Buffer layout: `[8-byte rawq header][headroom ...][data ...][tailroom]`. The header links the
//! segments of a multi-buffer packet (`next` index, offset and length of that segment's data). It
//! is kept only on the buffers of a chain (`segment_count() > 1`): a single-buffer packet has its
//! offset and length in the handle, and its header bytes are left as they are (a receive path
//! does not have to write them).

use crate::buf::{Shared, BUF_HEADER};
use crate::error::{Error, Result};

pub mod checksum;
mod fresh;
pub(crate) mod local;
mod meta;
mod offload;

pub(crate) use fresh::fresh_template;

#[cfg(feature = "mlx5")]
pub(crate) use meta::ticks_to_ns;
pub use meta::RxMeta;
// Each backend uses some of these.
#[cfg_attr(
    not(all(feature = "verbs", feature = "mlx5", feature = "xdp")),
    allow(unused_imports)
)]
pub(crate) use offload::{
    check_untagged, fill_checksums, fill_packet_checksums, insert_vlan, tso_header_len,
    MAX_TSO_HEADER,
};

/// "No next segment".
const NO_NEXT: u32 = u32::MAX;

/// Transmit offloads requested for a packet.
///
/// (`repr(C)`: the two checksum flags are adjacent bytes, which a send path tests as one word.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct TxOffload {
    /// Have the device compute the IPv4 header checksum.
    pub l3_csum: bool,
    /// Have the device compute the TCP/UDP checksum.
    pub l4_csum: bool,
    /// TCP segmentation (TSO / LSO): the packet is one TCP super-frame (Ethernet, IPv4 or
    /// IPv6, TCP, then the payload) that the port cuts into segments of at most this many
    /// payload bytes, each with the headers replicated, its own IP id / sequence number /
    /// lengths, FIN and PSH on the last only, and checksums filled (see `PortInfo::offloads`
    /// for which backends do it in hardware). `None`: send the frame as it is. `Some(0)`, a
    /// header that is not Ethernet + IP + TCP, or a header longer than 192 bytes is refused
    /// with an error naming the fault, nothing sent.
    pub tso_mss: Option<u16>,
    /// 802.1Q tag insertion: the TCI (priority, DEI, VLAN id) of a tag to insert after the
    /// MAC addresses on the way out (the device does it on dv; rawq in software on verbs,
    /// AF_XDP and loopback, using 4 bytes of headroom: see `PortInfo::offloads`). A frame that
    /// already carries a tag (ethertype 0x8100 / 0x88a8) is refused with an error.
    pub vlan_insert: Option<u16>,
}

impl TxOffload {
    /// Whether TSO or VLAN insertion is asked for (the requests a send path's plain WQE cannot
    /// carry). Bitwise `|`, not `||`: one test of the two flags together, no branch each.
    #[inline(always)]
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    pub(crate) fn special(&self) -> bool {
        self.tso_mss.is_some() | self.vlan_insert.is_some()
    }

    /// The two checksum flags as one 16-bit word (equal words: equal requests; adjacent bytes
    /// in the `repr(C)` struct, so one load).
    #[inline(always)]
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    pub(crate) fn csum_word(&self) -> u16 {
        u16::from_ne_bytes([self.l3_csum as u8, self.l4_csum as u8])
    }
}

/// An owned packet buffer (possibly a chain of buffers).
///
/// (`repr(C)`, 64 bytes: what a receive path writes the same for every packet of a queue comes
/// first, then the per-packet words, so that building one takes few, wide stores.)
#[repr(C)]
pub struct Packet {
    pool: &'static Shared,
    /// Offset of the data from the start of the buffer.
    off: u16,
    nb_segs: u16,
    /// Transmit offloads to request (read by `tx_burst`).
    pub offload: TxOffload,
    /// Bytes of data in this (the first) buffer.
    seg_len: u16,
    idx: u32,
    /// Bytes over all segments.
    pkt_len: u32,
    /// Receive metadata (filled by `rx_burst`).
    pub meta: RxMeta,
}

/// The layout of the `repr(C)` [`Packet`] handle for a receive path that builds a burst of
/// handles from one 64-byte template (copies it, then writes the words that differ between the
/// packets at these byte offsets): `seg_len` (u16), `idx` (u32), `pkt_len` (u32), the receive
/// metadata and, in it, the RSS hash (u32, as the device wrote it). Any backend's receive path
/// may use it; the DV backend's compressed-CQE path does.
#[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
pub(crate) mod layout {
    use super::{Packet, RxMeta};
    pub(crate) const SEG_LEN: usize = std::mem::offset_of!(Packet, seg_len);
    pub(crate) const IDX: usize = std::mem::offset_of!(Packet, idx);
    pub(crate) const PKT_LEN: usize = std::mem::offset_of!(Packet, pkt_len);
    pub(crate) const HASH: usize = std::mem::offset_of!(Packet, meta) + RxMeta::HASH_AT;
    /// The receive metadata (an `RxMeta`).
    pub(crate) const META: usize = std::mem::offset_of!(Packet, meta);
}

// Segment header kept in the first BUF_HEADER bytes of each buffer.
#[derive(Clone, Copy)]
struct SegHeader {
    next: u32,
    off: u16,
    len: u16,
}

#[allow(unsafe_code)]
mod raw {
    //! The only place that touches buffer bytes through raw pointers.
    use super::*;

    #[inline]
    pub(super) fn read_header(pool: &Shared, idx: u32) -> SegHeader {
        let p = pool.buf_ptr(idx);
        let mut b = [0u8; BUF_HEADER];
        // SAFETY: `p` is the start of buffer `idx` inside the mapped region and every buffer is at
        // least 512 bytes; the header bytes belong to whoever owns the buffer (the caller).
        unsafe { std::ptr::copy_nonoverlapping(p, b.as_mut_ptr(), BUF_HEADER) };
        SegHeader {
            next: u32::from_ne_bytes([b[0], b[1], b[2], b[3]]),
            off: u16::from_ne_bytes([b[4], b[5]]),
            len: u16::from_ne_bytes([b[6], b[7]]),
        }
    }

    #[inline]
    pub(super) fn write_header(pool: &Shared, idx: u32, h: SegHeader) {
        let p = pool.buf_ptr(idx);
        let mut b = [0u8; BUF_HEADER];
        b[0..4].copy_from_slice(&h.next.to_ne_bytes());
        b[4..6].copy_from_slice(&h.off.to_ne_bytes());
        b[6..8].copy_from_slice(&h.len.to_ne_bytes());
        // SAFETY: as in `read_header`: `p` is the start of buffer `idx`, owned by the caller,
        // inside the mapping.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), p, BUF_HEADER) };
    }

    /// Bytes `off..off + len` of buffer `idx` (never the header: `off >= BUF_HEADER`).
    ///
    /// Callers must own buffer `idx` (a `Packet` or a backend holding its index).
    #[inline]
    pub(super) fn bytes(pool: &Shared, idx: u32, off: u16, len: u16) -> &[u8] {
        debug_assert!(off as usize >= BUF_HEADER);
        debug_assert!(off as usize + len as usize <= pool.buf_size() as usize);
        // SAFETY: the range lies inside buffer `idx` (offsets are validated when set), which is
        // inside the live mapping; the caller owns the buffer, so no one writes it concurrently,
        // and the range excludes the header, the only bytes written through `&Packet`.
        unsafe { std::slice::from_raw_parts(pool.buf_ptr(idx).add(off as usize), len as usize) }
    }

    /// Mutable bytes `off..off + len` of buffer `idx`; the caller owns it exclusively.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub(super) fn bytes_mut(pool: &Shared, idx: u32, off: u16, len: u16) -> &mut [u8] {
        debug_assert!(off as usize >= BUF_HEADER);
        debug_assert!(off as usize + len as usize <= pool.buf_size() as usize);
        // SAFETY: as in `bytes`; the caller's exclusive ownership of the buffer (a `&mut Packet`)
        // guarantees there is no other reference to these bytes.
        unsafe { std::slice::from_raw_parts_mut(pool.buf_ptr(idx).add(off as usize), len as usize) }
    }
}

impl Packet {
    /// Takes ownership of buffer `idx`, just taken off a free list, as an empty packet.
    #[inline]
    pub(crate) fn from_free_index(pool: &'static Shared, idx: u32) -> Packet {
        Packet::from_raw_parts(pool, idx, pool.headroom(), 0)
    }

    /// Takes ownership of buffer `idx` holding `len` data bytes at offset `off` (what a device
    /// wrote). The caller must own the buffer (it came off a free list or back from the device).
    #[inline]
    pub(crate) fn from_raw_parts(pool: &'static Shared, idx: u32, off: u16, len: u16) -> Packet {
        Packet::from_device_in(pool, idx, off, len as u32, RxMeta::default())
    }

    /// As [`Packet::from_raw_parts`] (`len` below 64 KiB), with the receive metadata the device
    /// reported: only the handle is written (a single buffer keeps no in-buffer header).
    #[inline(always)]
    pub(crate) fn from_device_in(
        pool: &'static Shared,
        idx: u32,
        off: u16,
        len: u32,
        meta: RxMeta,
    ) -> Packet {
        debug_assert!(
            len <= u16::MAX as u32,
            "a single buffer holds less than 64 KiB"
        );
        Packet {
            pool,
            idx,
            off,
            seg_len: len as u16,
            pkt_len: len,
            nb_segs: 1,
            meta,
            offload: TxOffload::default(),
        }
    }

    /// Gives up ownership without returning the buffer(s); the caller now owns buffer
    /// [`Packet::buffer_index`] and the chain behind it (see [`SegmentIter`]).
    #[inline]
    pub(crate) fn into_raw(self) -> u32 {
        let idx = self.idx;
        std::mem::forget(self);
        idx
    }

    /// Consumes the packet, yielding the indices of all its buffers, without freeing them.
    #[inline]
    pub(crate) fn into_buffer_indices(self) -> ChainIndices {
        let pool = self.pool;
        let next = self.next_index();
        let idx = self.into_raw();
        ChainIndices {
            pool,
            head: Some(idx),
            next,
        }
    }

    /// The index of the second buffer, or `NO_NEXT` for a single buffer (whose header is not
    /// kept).
    #[inline]
    fn next_index(&self) -> u32 {
        if self.nb_segs == 1 {
            NO_NEXT
        } else {
            raw::read_header(self.pool, self.idx).next
        }
    }

    /// Keeps the in-buffer header of the first segment of a chain equal to `off`/`seg_len` (a
    /// single buffer keeps none).
    #[inline]
    fn sync_header(&mut self) {
        if self.nb_segs == 1 {
            return;
        }
        let next = raw::read_header(self.pool, self.idx).next;
        raw::write_header(
            self.pool,
            self.idx,
            SegHeader {
                next,
                off: self.off,
                len: self.seg_len,
            },
        );
    }

    /// Total length in bytes over all segments.
    #[inline]
    pub fn len(&self) -> usize {
        self.pkt_len as usize
    }

    /// True if the packet holds no data.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pkt_len == 0
    }

    /// Number of buffers in the chain.
    #[inline]
    pub fn segment_count(&self) -> usize {
        self.nb_segs as usize
    }

    /// Whether this is one buffer asking for no checksum: the segment count and the two
    /// checksum flags after it (`offload` follows `nb_segs` in the `repr(C)` handle, its
    /// flags first) tested as one 32-bit word, for a send loop's plainest WQE.
    #[inline(always)]
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    pub(crate) fn single_no_csum(&self) -> bool {
        self.segs_csum_word() == 1
    }

    /// The segment count and the checksum flags as one word (see
    /// [`Packet::single_no_csum`]): equal words, the same number of buffers and the same
    /// checksum requests.
    #[inline(always)]
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    pub(crate) fn segs_csum_word(&self) -> u32 {
        self.nb_segs as u32 | (self.offload.csum_word() as u32) << 16
    }

    /// Index of the (first) buffer in its pool.
    #[inline]
    pub fn buffer_index(&self) -> u32 {
        self.idx
    }

    /// Bytes free in front of the data.
    #[inline]
    pub fn headroom(&self) -> usize {
        self.off as usize - BUF_HEADER
    }

    /// Bytes free after the data of the first segment.
    #[inline]
    pub fn tailroom(&self) -> usize {
        self.pool.buf_size() as usize - self.off as usize - self.seg_len as usize
    }

    /// The data of the first segment (all of it for a single-buffer packet).
    #[inline]
    pub fn data(&self) -> &[u8] {
        raw::bytes(self.pool, self.idx, self.off, self.seg_len)
    }

    /// The data of the first segment, mutable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        raw::bytes_mut(self.pool, self.idx, self.off, self.seg_len)
    }

    /// Sets the length of a single-buffer packet (the bytes are whatever the buffer holds).
    ///
    /// # Errors
    /// [`Error::Config`] if `len` does not fit in the buffer or the packet is chained.
    #[inline]
    pub fn set_len(&mut self, len: usize) -> Result<()> {
        if self.nb_segs != 1 {
            return Err(Error::Config("set_len on a multi-segment packet".into()));
        }
        let room = self.pool.buf_size() as usize - self.off as usize;
        if len > room {
            return Err(Error::Config(format!(
                "packet length {len} exceeds the {room} bytes a buffer holds after headroom"
            )));
        }
        self.seg_len = len as u16;
        self.pkt_len = len as u32;
        self.sync_header();
        Ok(())
    }

    /// Replaces the contents with `bytes` (single buffer).
    ///
    /// # Errors
    /// As [`Packet::set_len`].
    #[inline]
    pub fn copy_from_slice(&mut self, bytes: &[u8]) -> Result<()> {
        self.set_len(bytes.len())?;
        self.data_mut().copy_from_slice(bytes);
        Ok(())
    }

    /// Grows the data `n` bytes to the front and returns them.
    ///
    /// # Errors
    /// [`Error::Config`] if there is not enough headroom.
    #[inline]
    pub fn prepend(&mut self, n: usize) -> Result<&mut [u8]> {
        if n > self.headroom() {
            return Err(Error::Config(format!(
                "prepend {n} bytes: only {} bytes of headroom",
                self.headroom()
            )));
        }
        self.off -= n as u16;
        self.seg_len += n as u16;
        self.pkt_len += n as u32;
        self.sync_header();
        Ok(&mut self.data_mut()[..n])
    }

    /// Removes `n` bytes from the front of the first segment.
    ///
    /// # Errors
    /// [`Error::Config`] if the first segment is shorter than `n`.
    #[inline]
    pub fn trim_front(&mut self, n: usize) -> Result<()> {
        if n > self.seg_len as usize {
            return Err(Error::Config(format!(
                "trim {n} bytes from a {}-byte segment",
                self.seg_len
            )));
        }
        self.off += n as u16;
        self.seg_len -= n as u16;
        self.pkt_len -= n as u32;
        self.sync_header();
        Ok(())
    }

    /// Virtual address of the first data byte (what goes into a descriptor with the pool's key).
    #[inline]
    pub fn data_addr(&self) -> u64 {
        self.pool.buf_ptr(self.idx) as u64 + self.off as u64
    }

    /// A fresh single-buffer packet of this packet's pool (from the calling thread's cache), to
    /// [`Packet::chain`] onto it (a frame longer than one buffer).
    ///
    /// # Errors
    /// [`Error::PoolExhausted`] when the pool has no free buffer.
    pub fn alloc_segment(&self) -> Result<Packet> {
        local::alloc_in(self.pool)
    }

    /// Appends `seg` (a single-buffer packet of the same pool) as the next segment.
    ///
    /// # Errors
    /// [`Error::Config`] if `seg` is itself chained or comes from another pool.
    pub fn chain(&mut self, seg: Packet) -> Result<()> {
        if seg.nb_segs != 1 || !std::ptr::eq(seg.pool, self.pool) {
            return Err(Error::Config(
                "chain: the segment must be a single buffer of the same pool".into(),
            ));
        }
        let add = seg.pkt_len;
        // The new last buffer gets its header (a single buffer keeps none).
        raw::write_header(
            self.pool,
            seg.idx,
            SegHeader {
                next: NO_NEXT,
                off: seg.off,
                len: seg.seg_len,
            },
        );
        let seg_idx = seg.into_raw();
        if self.nb_segs == 1 {
            // The head becomes a chain: its header starts now.
            raw::write_header(
                self.pool,
                self.idx,
                SegHeader {
                    next: seg_idx,
                    off: self.off,
                    len: self.seg_len,
                },
            );
        } else {
            // Walk to the last buffer and link the new one.
            let mut last = self.idx;
            loop {
                let h = raw::read_header(self.pool, last);
                if h.next == NO_NEXT {
                    break;
                }
                last = h.next;
            }
            let mut h = raw::read_header(self.pool, last);
            h.next = seg_idx;
            raw::write_header(self.pool, last, h);
        }
        self.nb_segs += 1;
        self.pkt_len += add;
        Ok(())
    }

    /// The segments as (data address, length) pairs, in order: what a scatter list needs.
    pub fn segments(&self) -> SegmentIter<'_> {
        SegmentIter {
            pool: self.pool,
            head: Some((self.idx, self.off, self.seg_len)),
            next: self.next_index(),
            _p: std::marker::PhantomData,
        }
    }

    /// Copies all segments into `out` (cleared first).
    pub fn copy_to_vec(&self, out: &mut Vec<u8>) {
        out.clear();
        for s in self.segments() {
            out.extend_from_slice(s.data);
        }
    }

    /// All bytes of all segments as a new vector (allocates; for tests and slow paths).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        self.copy_to_vec(&mut v);
        v
    }
}

/// The first segment's bytes, as [`Packet::data`] (all of a single-buffer packet; a chained
/// packet's other segments are not in this slice): so that a `Packet` can be handed to code
/// generic over `AsRef<[u8]>`, such as smoltcp's wire views.
impl AsRef<[u8]> for Packet {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        self.data()
    }
}

/// The first segment's bytes, mutable, as [`Packet::data_mut`].
impl AsMut<[u8]> for Packet {
    #[inline]
    fn as_mut(&mut self) -> &mut [u8] {
        self.data_mut()
    }
}

impl std::fmt::Debug for Packet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packet")
            .field("buffer", &self.idx)
            .field("len", &self.pkt_len)
            .field("segments", &self.nb_segs)
            .field("meta", &self.meta)
            .finish()
    }
}

impl Drop for Packet {
    #[inline]
    fn drop(&mut self) {
        if self.nb_segs == 1 {
            local::put_local(self.pool, self.idx);
        } else {
            self.drop_chain();
        }
    }
}

impl Packet {
    #[cold]
    fn drop_chain(&mut self) {
        let mut idx = self.idx;
        for _ in 0..self.nb_segs {
            let next = raw::read_header(self.pool, idx).next;
            local::put_local(self.pool, idx);
            if next == NO_NEXT {
                break;
            }
            idx = next;
        }
    }

    /// Offset of the data in the first buffer, and bytes of data there (a send loop that
    /// computes the address from loop-invariant pool geometry).
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    #[inline(always)]
    pub(crate) fn first_seg(&self) -> (u16, u16) {
        (self.off, self.seg_len)
    }

    /// Whether the packet's buffers belong to `pool`.
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    #[inline(always)]
    pub(crate) fn is_from(&self, pool: &Shared) -> bool {
        std::ptr::eq(self.pool, pool)
    }

    /// True for a single-buffer packet.
    #[inline]
    pub(crate) fn is_single(&self) -> bool {
        self.nb_segs == 1
    }
}

/// One segment of a packet.
#[derive(Clone, Copy, Debug)]
pub struct Segment<'a> {
    /// Buffer index in the pool.
    pub index: u32,
    /// Virtual address of the segment's first data byte.
    pub addr: u64,
    /// The segment's data.
    pub data: &'a [u8],
}

/// Iterator over the segments of a packet.
pub struct SegmentIter<'a> {
    pool: &'static Shared,
    /// The first segment (index, offset, length), from the handle.
    head: Option<(u32, u16, u16)>,
    /// The buffer after the one last yielded (headers from the second buffer on).
    next: u32,
    _p: std::marker::PhantomData<&'a Packet>,
}

impl<'a> Iterator for SegmentIter<'a> {
    type Item = Segment<'a>;
    fn next(&mut self) -> Option<Segment<'a>> {
        let (idx, off, len) = match self.head.take() {
            Some(h) => h,
            None => {
                if self.next == NO_NEXT {
                    return None;
                }
                let h = raw::read_header(self.pool, self.next);
                let idx = self.next;
                self.next = h.next;
                (idx, h.off, h.len)
            }
        };
        let data = raw::bytes(self.pool, idx, off, len);
        Some(Segment {
            index: idx,
            addr: data.as_ptr() as u64,
            data,
        })
    }
}

/// The buffer indices of a packet given up with `into_buffer_indices`.
pub(crate) struct ChainIndices {
    pool: &'static Shared,
    /// The first buffer, not yet yielded.
    head: Option<u32>,
    /// The buffer after the one last yielded.
    next: u32,
}

impl Iterator for ChainIndices {
    type Item = u32;
    #[inline]
    fn next(&mut self) -> Option<u32> {
        if let Some(h) = self.head.take() {
            return Some(h);
        }
        if self.next == NO_NEXT {
            return None;
        }
        let idx = self.next;
        self.next = raw::read_header(self.pool, idx).next;
        Some(idx)
    }
}

#[cfg(test)]
mod tests {
    use super::RxMeta;
    use crate::mempool::{HugePages, Mempool, MempoolConfig};
    use crate::Error;

    fn pool(n: u32) -> Mempool {
        Mempool::new(&MempoolConfig {
            buffers: n,
            huge_pages: HugePages::Never,
            cache_size: 4,
            ..Default::default()
        })
        .unwrap()
    }

    #[test]
    fn alloc_write_drop_round_trip() {
        let p = pool(8);
        let mut a = p.alloc().unwrap();
        assert_eq!(a.len(), 0);
        assert_eq!(a.headroom(), 128 - 8);
        a.copy_from_slice(b"hello").unwrap();
        assert_eq!(a.data(), b"hello");
        a.prepend(2).unwrap().copy_from_slice(b">>");
        assert_eq!(a.to_vec(), b">>hello");
        a.trim_front(3).unwrap();
        assert_eq!(a.data(), b"ello");
        let too_big = vec![0u8; 4096];
        assert!(matches!(a.copy_from_slice(&too_big), Err(Error::Config(_))));
        assert!(a.trim_front(100).is_err());
        drop(a);
        p.flush_local_cache();
        assert_eq!(p.available(), 8);
    }

    #[test]
    fn as_ref_and_as_mut_are_the_packets_bytes() {
        fn checksum<T: AsRef<[u8]>>(t: &T) -> u32 {
            t.as_ref().iter().map(|&b| u32::from(b)).sum()
        }
        fn fill<T: AsMut<[u8]>>(t: &mut T, v: u8) {
            t.as_mut().fill(v);
        }
        let p = pool(2);
        let mut a = p.alloc().unwrap();
        a.copy_from_slice(b"abc").unwrap();
        assert_eq!(
            checksum(&a),
            u32::from(b'a') + u32::from(b'b') + u32::from(b'c')
        );
        fill(&mut a, 7);
        assert_eq!(a.data(), &[7, 7, 7]);
        assert_eq!(AsRef::<[u8]>::as_ref(&a).len(), a.len());
    }

    #[test]
    fn exhaustion_is_an_error_not_a_panic() {
        let p = pool(4);
        let held: Vec<_> = (0..4).map(|_| p.alloc().unwrap()).collect();
        assert!(matches!(
            p.alloc(),
            Err(Error::PoolExhausted { capacity: 4 })
        ));
        let mut v = Vec::new();
        assert!(p.alloc_bulk(&mut v, 1).is_err());
        assert!(v.is_empty());
        drop(held);
        p.alloc_bulk(&mut v, 4).unwrap();
        assert_eq!(v.len(), 4);
        drop(v);
        p.flush_local_cache();
        assert_eq!(p.available(), 4);
    }

    #[test]
    fn a_single_buffer_ignores_its_header_bytes() {
        let p = pool(8);
        let mut a = p.alloc().unwrap();
        a.copy_from_slice(b"abc").unwrap();
        let other = p.alloc().unwrap();
        // Stale bytes where a chain keeps its header (a receive path leaves them as they are).
        super::raw::write_header(
            p.shared(),
            a.buffer_index(),
            super::SegHeader {
                next: other.buffer_index(),
                off: 9,
                len: 1,
            },
        );
        let segs: Vec<_> = a.segments().map(|s| s.data.to_vec()).collect();
        assert_eq!(segs, vec![b"abc".to_vec()]);
        let mut b = p.alloc().unwrap();
        b.copy_from_slice(b"de").unwrap();
        a.chain(b).unwrap();
        assert_eq!(a.segment_count(), 2);
        assert_eq!(a.to_vec(), b"abcde");
        drop(a);
        drop(other);
        p.flush_local_cache();
        assert_eq!(p.available(), 8);
    }

    #[test]
    fn chains_keep_order_and_all_buffers_come_back() {
        let p = pool(16);
        let mut head = p.alloc().unwrap();
        head.copy_from_slice(&[1; 100]).unwrap();
        for k in 2..5u8 {
            let mut s = p.alloc().unwrap();
            s.copy_from_slice(&vec![k; 50 * k as usize]).unwrap();
            head.chain(s).unwrap();
        }
        assert_eq!(head.segment_count(), 4);
        assert_eq!(head.len(), 100 + 100 + 150 + 200);
        let segs: Vec<_> = head.segments().map(|s| (s.data[0], s.data.len())).collect();
        assert_eq!(segs, vec![(1, 100), (2, 100), (3, 150), (4, 200)]);
        let other = pool(2);
        assert!(head.chain(other.alloc().unwrap()).is_err());
        other.flush_local_cache();
        assert_eq!(
            other.available(),
            2,
            "a rejected segment goes back to its own pool"
        );
        drop(head);
        p.flush_local_cache();
        assert_eq!(p.available(), 16);
    }

    /// `RxMeta::new` round-trips every decoded value; the default knows nothing; equality and
    /// `Debug` are on the decoded values.
    #[test]
    fn rx_meta_new_decodes_to_what_it_was_given() {
        let d = RxMeta::default();
        assert_eq!(
            (
                d.rss_hash(),
                d.flow_tag(),
                d.vlan_tci(),
                d.l3_csum_ok(),
                d.l4_csum_ok()
            ),
            (0, 0, None, false, false)
        );
        for (hash, tag, vlan, l3, l4) in [
            (0u32, 0u32, None, false, false),
            (0xdead_beef, 1, Some(0), true, false),
            (1, 0x00ff_ffff, Some(0xffff), false, true),
            (u32::MAX, 77, Some(0x0123), true, true),
        ] {
            let m = RxMeta::new(hash, tag, vlan, l3, l4);
            assert_eq!(
                (
                    m.rss_hash(),
                    m.flow_tag(),
                    m.vlan_tci(),
                    m.l3_csum_ok(),
                    m.l4_csum_ok()
                ),
                (hash, tag, vlan, l3, l4)
            );
            assert_eq!(m, { m });
            assert!(format!("{m:?}").contains(&format!("rss_hash: {hash}")));
        }
        // The tag keeps 24 bits; equality ignores raw bits no accessor reads.
        assert_eq!(
            RxMeta::new(0, 0x0100_0002, None, false, false).flow_tag(),
            2
        );
        assert_eq!(
            RxMeta::from_raw(0x00e0_0000, 0, {
                let mut t = [0xffu8; 16];
                t[..12].fill(0);
                t[8..12].copy_from_slice(&0xab00_0000u32.to_be_bytes());
                t
            }),
            RxMeta::default()
        );
        assert_ne!(RxMeta::new(0, 0, None, true, false), RxMeta::default());
    }

    /// The kernel receive time is its own word: set, it is read back and changes equality;
    /// it leaves the hardware timestamp alone; the raw CQE form never has one.
    #[test]
    fn kernel_rx_time_is_apart_from_the_device_words() {
        assert_eq!(RxMeta::default().kernel_rx_ns(), None);
        let m = RxMeta::default().with_kernel_rx_ns(123_456_789);
        assert_eq!(m.kernel_rx_ns(), Some(123_456_789));
        assert_eq!(m.hw_timestamp(), None);
        assert_ne!(m, RxMeta::default());
        assert!(format!("{m:?}").contains("kernel_rx_ns: Some(123456789)"));
        let both = m.with_hw_timestamp(42);
        assert_eq!(
            (both.hw_timestamp(), both.kernel_rx_ns()),
            (Some(42), Some(123_456_789))
        );
        assert_eq!(RxMeta::from_raw(0, 0, [0xff; 16]).kernel_rx_ns(), None);
        assert_eq!(m.with_kernel_rx_ns(0).kernel_rx_ns(), None);
    }
}
