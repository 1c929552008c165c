//! Typed views of the mlx5 ring formats the device reads and writes (send WQE segments, CQEs,
//! mini-CQEs).
//!
//! Every format is written from the vendor sources, with the Linux kernel's names and a source
//! per field and constant: the completion formats the device writes (`cqe.rs`, `mini_cqe.rs`:
//! include/linux/mlx5/device.h `struct mlx5_cqe64`, `struct mlx5_mini_cqe8`), judged also by
//! DPDK's mlx5 PMD, which decodes what the model writes (tests/emu/dpdk_decode.rs), and the
//! send WQE segments the device reads (`ctrl.rs`, `data.rs`, `eth.rs`, `inline.rs`:
//! include/linux/mlx5/qp.h `struct mlx5_wqe_ctrl_seg`, `mlx5_wqe_data_seg`, `mlx5_wqe_eth_seg`,
//! `mlx5_wqe_inline_seg`). The model imports nothing from rawq. `oracle.rs` checks all of them
//! against rdma-core's `mlx5dv.h` with a C program
//! (`model/tests/c/wire_oracle.c`): every offset and constant that header defines, the vendor's
//! WQE segment writers against the model's readers, the model's CQE writers against the
//! vendor's struct and accessors; what the header does not define is listed there.
//!
//! One file per format, in the smoltcp `wire` style: a view `Seg<T: AsRef<[u8]>> { buf: T }` with
//! the field offsets named in a small `mod field`, getters that need `AsRef<[u8]>`, setters that
//! need `AsMut<[u8]>`. Every multi-byte field is **big-endian** in memory. Use `new_checked` on
//! bytes of unknown length (it checks the length once, so no accessor can panic afterwards);
//! `new_unchecked` is for buffers whose length the type already guarantees (`[u8; 16]`, ...).
//!
//! The layouts, with their sources, are in `docs/mlx5-dataplane.md` (§2 send WQEs, §5 CQEs, §7
//! receive WQEs, §8 mini-CQEs). rawq's own side of these formats (src/dv/wire: it writes the
//! WQEs and reads the CQEs) is judged the same way by its `tests/dv/oracle.rs`.

pub mod cqe;
pub mod ctrl;
pub mod data;
pub mod eth;
pub mod inline;
pub mod mini_cqe;

pub use cqe::Cqe;
pub use ctrl::CtrlSeg;
pub use data::DataSeg;
pub use eth::EthSeg;
pub use inline::InlineSeg;
pub use mini_cqe::MiniCqe;

/// The buffer given to a `new_checked` is shorter than the format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Truncated {
    /// Bytes the format needs.
    pub need: usize,
    /// Bytes that were given.
    pub got: usize,
}

impl std::fmt::Display for Truncated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "buffer of {} bytes is shorter than the {}-byte format",
            self.got, self.need
        )
    }
}

impl std::error::Error for Truncated {}

#[inline(always)]
pub(crate) fn check_len(got: usize, need: usize) -> Result<(), Truncated> {
    if got < need {
        Err(Truncated { need, got })
    } else {
        Ok(())
    }
}

#[inline(always)]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    let mut x = [0u8; 2];
    x.copy_from_slice(&b[at..at + 2]);
    u16::from_be_bytes(x)
}

#[inline(always)]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_be_bytes(x)
}

#[inline(always)]
pub(crate) fn be64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(x)
}

#[inline(always)]
pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline(always)]
pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

#[inline(always)]
pub(crate) fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

#[cfg(test)]
mod oracle;
