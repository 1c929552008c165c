//! Adopting the application's rings: the one place the emulator hands memory libmlx5 allocated
//! to the device model (`Hw::create_cq` / `create_sq` / `create_rq` take raw addresses).
//!
//! The kernel pins such memory (`ib_umem_get`, `mlx5_ib_db_map_user`); the commands pin it in
//! [`crate::pin`] before adopting it (access checked as the kernel's pin checks it), and the
//! pin's fault handler keeps the device alive if the application unmaps or protects a page
//! while the object lives. libmlx5 itself frees a ring and its doorbell record only after the
//! destroy command returned (`providers/mlx5/verbs.c: mlx5_destroy_cq`, `mlx5_destroy_qp`,
//! `mlx5_destroy_wq` call the command first, then `mlx5_free_buf` / `mlx5_free_db`).

#![allow(unsafe_code)]

use rawq_model::hw::{CqDesc, Hw, RqDesc, SqDesc};

use crate::Errno;

/// Errno for an error of the model (`Unsupported` → EOPNOTSUPP, anything else → EINVAL).
pub fn hw_errno(e: &rawq_model::Error) -> Errno {
    match e {
        rawq_model::Error::Unsupported(_) => libc::EOPNOTSUPP,
        // The model says which errno the kernel gives (EEXIST for a flow conflicting with one
        // of its table: mlx5 core fs_core.c `check_conflicting_ftes`).
        rawq_model::Error::Os { source, .. } => source.raw_os_error().unwrap_or(libc::EINVAL),
        _ => libc::EINVAL,
    }
}

/// A CQ over the application's CQE buffer and doorbell record.
///
/// # Errors
/// The model's refusal as [`hw_errno`].
pub fn adopt_cq(hw: &Hw, d: CqDesc) -> Result<u32, Errno> {
    // SAFETY: buffer and doorbell record are pinned by the caller (crate::pin) until after
    // DESTROY_CQ returns; the model only plays the device's side of the CQ protocol on them.
    unsafe { hw.create_cq(d) }.map_err(|e| hw_errno(&e))
}

/// Where the device reads CQ `cqn`'s arm doorbell: `reg`, the CQ doorbell register in the
/// emulator's own map of a UAR page of the context (`mmap::Uars`).
///
/// # Errors
/// As [`adopt_cq`].
pub fn set_cq_uar(hw: &Hw, cqn: u32, reg: usize) -> Result<(), Errno> {
    // SAFETY: the UAR map lives as long as the context, whose CQs are destroyed before it.
    unsafe { hw.set_cq_uar(cqn, reg) }.map_err(|e| hw_errno(&e))
}

/// An SQ over the application's WQE ring, doorbell record word and UAR page.
///
/// # Errors
/// As [`adopt_cq`].
pub fn adopt_sq(hw: &Hw, d: SqDesc) -> Result<u32, Errno> {
    // SAFETY: as in adopt_cq, until DESTROY_QP; the UAR page is the emulator's own map of the
    // command memfd (mmap::Uars), which lives as long as the context.
    unsafe { hw.create_sq(d) }.map_err(|e| hw_errno(&e))
}

/// An RQ over the application's receive WQE ring and doorbell record word.
///
/// # Errors
/// As [`adopt_cq`].
pub fn adopt_rq(hw: &Hw, d: RqDesc) -> Result<u32, Errno> {
    // SAFETY: as in adopt_cq, until DESTROY_QP / DESTROY_WQ.
    unsafe { hw.create_rq(d) }.map_err(|e| hw_errno(&e))
}
