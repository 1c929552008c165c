//! Adopting the application's rings: the one place the emulator hands memory libmlx5 allocated
//! to the device model (`Hw::create_cq` / `create_sq` / `create_rq` take raw addresses).
//!
//! The kernel pins such memory (`ib_umem_get`, `mlx5_ib_db_map_user`); the emulator cannot, so
//! it checks that every page is mapped and relies on the protocol libmlx5 follows: a ring and
//! its doorbell record are freed only after the destroy command for their object returned
//! (`providers/mlx5/verbs.c: mlx5_destroy_cq`, `mlx5_destroy_qp`, `mlx5_destroy_wq` call the
//! command first, then `mlx5_free_buf` / `mlx5_free_db`). A program that frees a live ring
//! breaks the device on real hardware too.

#![allow(unsafe_code)]

use rawq::dv::model::hw::{CqDesc, Hw, RqDesc, SqDesc};

use crate::umem::check_mapped;
use crate::Errno;

/// Errno for an error of the model (`Unsupported` → EOPNOTSUPP, anything else → EINVAL).
pub fn hw_errno(e: &rawq::Error) -> Errno {
    match e {
        rawq::Error::Unsupported(_) => libc::EOPNOTSUPP,
        // The model says which errno the kernel gives (EEXIST for a flow conflicting with one
        // of its table: mlx5 core fs_core.c `check_conflicting_ftes`).
        rawq::Error::Os { source, .. } => source.raw_os_error().unwrap_or(libc::EINVAL),
        _ => libc::EINVAL,
    }
}

/// A CQ over the application's CQE buffer and doorbell record.
///
/// # Errors
/// EFAULT for unmapped memory; the model's refusal as [`hw_errno`].
pub fn adopt_cq(hw: &Hw, d: CqDesc) -> Result<u32, Errno> {
    check_mapped(d.buf as u64, u64::from(d.cqe_cnt) * u64::from(d.cqe_size))?;
    check_mapped(d.dbrec as u64, 8)?;
    // SAFETY: buffer and doorbell record are mapped (checked above) and stay so until
    // DESTROY_CQ returns (module docs); the model only plays the device's side of the CQ
    // protocol on them.
    unsafe { hw.create_cq(d) }.map_err(|e| hw_errno(&e))
}

/// An SQ over the application's WQE ring, doorbell record word and UAR page.
///
/// # Errors
/// As [`adopt_cq`].
pub fn adopt_sq(hw: &Hw, d: SqDesc) -> Result<u32, Errno> {
    check_mapped(d.buf as u64, u64::from(d.wqe_cnt) * 64)?;
    check_mapped(d.dbrec as u64, 4)?;
    // SAFETY: as in adopt_cq, until DESTROY_QP; the UAR page is the emulator's own map of the
    // command memfd (mmap::Uars), which lives as long as the context.
    unsafe { hw.create_sq(d) }.map_err(|e| hw_errno(&e))
}

/// An RQ over the application's receive WQE ring and doorbell record word.
///
/// # Errors
/// As [`adopt_cq`].
pub fn adopt_rq(hw: &Hw, d: RqDesc) -> Result<u32, Errno> {
    check_mapped(d.buf as u64, u64::from(d.wqe_cnt) * u64::from(d.stride))?;
    check_mapped(d.dbrec as u64, 4)?;
    // SAFETY: as in adopt_cq, until DESTROY_QP / DESTROY_WQ.
    unsafe { hw.create_rq(d) }.map_err(|e| hw_errno(&e))
}
