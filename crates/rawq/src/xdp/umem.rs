//! The UMEM: rawq's whole pool region registered once with the first AF_XDP socket.
//!
//! Aligned-chunk mode: chunk *i* is pool buffer *i* (`chunk_size = buf_size`, 2048 or 4096),
//! and a UMEM address is an offset from the start of the region, so
//! `buffer index = addr >> log2(buf_size)` and `offset in buffer = addr & (buf_size - 1)`.
//!
//! Where the kernel writes received frames: at `chunk + umem headroom + XDP_PACKET_HEADROOM`
//! (the latter is 256 bytes, reserved for XDP programs to grow headers into). rawq registers a
//! UMEM headroom of 0, so received data starts 256 bytes into the buffer, well past rawq's
//! 8-byte buffer header ([`BUF_HEADER`](crate::mempool::BUF_HEADER)) at offset 0, which the
//! kernel therefore never overwrites. The largest frame a buffer can receive is
//! `buf_size - 256` (1792 bytes with 2 KiB buffers). Transmitted frames start wherever the
//! packet's data starts (the pool headroom, 128 by default); the kernel only requires that a
//! frame does not cross its chunk.

use crate::error::{Error, Result};
use crate::mempool::Mempool;

/// Bytes the kernel keeps in front of received data in every chunk (`XDP_PACKET_HEADROOM`).
pub const XDP_PACKET_HEADROOM: u32 = 256;

/// Headroom rawq registers with the UMEM (on top of [`XDP_PACKET_HEADROOM`]).
pub const UMEM_HEADROOM: u32 = 0;

/// `struct xdp_umem_reg` (with `tx_metadata_len`, 32 bytes; older kernels take the same size).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct UmemReg {
    pub addr: u64,
    pub len: u64,
    pub chunk_size: u32,
    pub headroom: u32,
    pub flags: u32,
    pub tx_metadata_len: u32,
}

/// Geometry of the pool region as a UMEM.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Umem {
    /// Start of the region (page aligned: it comes from mmap).
    pub base: u64,
    /// Length of the region.
    pub len: u64,
    /// Chunk (= buffer) size.
    pub chunk: u32,
    /// log2(chunk).
    pub shift: u32,
    /// Number of chunks.
    pub count: u32,
}

impl Umem {
    /// The UMEM view of `pool`.
    ///
    /// # Errors
    /// [`Error::Config`] if the pool's buffers are not 2048 or 4096 bytes (what aligned AF_XDP
    /// chunks can be with 4 KiB pages).
    pub(crate) fn of(pool: &Mempool) -> Result<Umem> {
        let bs = pool.buf_size();
        if bs != 2048 && bs != 4096 {
            return Err(Error::Config(format!(
                "the AF_XDP backend needs 2048- or 4096-byte pool buffers (UMEM chunks); this \
                 pool has {bs}-byte buffers (MempoolConfig::buf_size)"
            )));
        }
        if (pool.headroom() as u32) + 64 > bs {
            return Err(Error::Config(
                "pool headroom leaves no room for data".into(),
            ));
        }
        let (base, len) = pool.region();
        Ok(Umem {
            base: base as u64,
            len: len as u64,
            chunk: bs,
            shift: bs.trailing_zeros(),
            count: pool.capacity(),
        })
    }

    /// The registration record.
    pub(crate) fn reg(&self) -> UmemReg {
        UmemReg {
            addr: self.base,
            len: self.len,
            chunk_size: self.chunk,
            headroom: UMEM_HEADROOM,
            flags: 0,
            tx_metadata_len: 0,
        }
    }

    /// UMEM address of the start of buffer `idx` (what goes into the fill ring).
    #[inline]
    pub(crate) fn chunk_addr(&self, idx: u32) -> u64 {
        (idx as u64) << self.shift
    }

    /// Buffer index and offset inside it of UMEM address `addr`, if it lies in the region.
    #[inline]
    pub(crate) fn split(&self, addr: u64) -> Option<(u32, u32)> {
        if addr >= self.len {
            return None;
        }
        Some((
            (addr >> self.shift) as u32,
            (addr & (self.chunk as u64 - 1)) as u32,
        ))
    }

    /// UMEM address of the virtual address `va`, if it lies in the region.
    #[inline]
    pub(crate) fn addr_of(&self, va: u64) -> Option<u64> {
        va.checked_sub(self.base).filter(|&a| a < self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mempool::{HugePages, MempoolConfig, BUF_HEADER};

    #[test]
    fn addresses_map_to_buffers_and_rx_data_misses_the_header() {
        let pool = crate::mempool::test_pool(16);
        let u = Umem::of(&pool).unwrap();
        assert_eq!(u.base % 4096, 0, "UMEM must be page aligned");
        assert_eq!(u.chunk_addr(3), 3 * 2048);
        assert_eq!(u.split(3 * 2048 + 256), Some((3, 256)));
        assert_eq!(u.split(16 * 2048), None);
        assert_eq!(u.addr_of(u.base + 5000), Some(5000));
        assert_eq!(u.addr_of(u.base - 1), None);
        assert!((XDP_PACKET_HEADROOM + UMEM_HEADROOM) as usize >= BUF_HEADER);
        assert_eq!(u.chunk - XDP_PACKET_HEADROOM - UMEM_HEADROOM, 1792);

        let bad = Mempool::new(&MempoolConfig {
            buffers: 4,
            buf_size: 1024,
            huge_pages: HugePages::Never,
            ..Default::default()
        })
        .unwrap();
        assert!(matches!(Umem::of(&bad), Err(Error::Config(_))));
    }
}
