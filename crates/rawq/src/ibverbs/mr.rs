//! Memory regions (`ibv_mr`): the packet pool registered once.

use std::io;
use std::ptr::NonNull;

use super::ffi::*;

use super::pd::Pd;
use crate::error::{Error, Result};
use crate::mempool::Mempool;

/// A registration of a whole [`Mempool`] region with a device. Keeps the pool's memory and the
/// PD alive; deregistered on drop.
pub struct Mr {
    mr: NonNull<ibv_mr>,
    lkey: u32,
    len: usize,
    _pd: Pd,
    _pool: Mempool,
}

// SAFETY: an MR handle may be used from any thread; it is only deregistered in `Drop`.
unsafe impl Send for Mr {}
// SAFETY: see `Send`; `&self` methods only read copied fields.
unsafe impl Sync for Mr {}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mr")
            .field("lkey", &self.lkey)
            .field("len", &self.len)
            .finish()
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered by `ibv_reg_mr`; every queue that posts with this lkey holds an
        // `Arc<Mr>` and its QP is destroyed first.
        let rc = unsafe { ibv_dereg_mr(self.mr.as_ptr()) };
        if rc != 0 {
            log::warn!(
                "ibv_dereg_mr failed: {}",
                std::io::Error::from_raw_os_error(rc)
            );
        }
    }
}

impl Mr {
    /// Registers all of `pool`'s region in `pd` with local write access (the device writes
    /// received frames into it).
    ///
    /// # Errors
    /// [`Error::MemLock`] on ENOMEM (the locked-memory limit, `ulimit -l`, is below the pool
    /// size); [`Error::Permission`] on EPERM/EACCES; [`Error::Os`] otherwise (EINVAL: bad range).
    pub fn register_pool(pd: &Pd, pool: &Mempool) -> Result<Mr> {
        let (addr, len) = pool.region();
        let access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 as libc::c_int;
        // SAFETY: `addr..addr+len` is the pool's live mapping, kept alive by the `Mempool` handle
        // stored in the returned `Mr`; the PD is alive.
        let mr = unsafe { ibv_reg_mr(pd.as_raw(), addr.cast(), len, access) };
        let mr = NonNull::new(mr)
            .ok_or_else(|| Error::registration("ibv_reg_mr", len, io::Error::last_os_error()))?;
        // SAFETY: `mr` was just returned by `ibv_reg_mr`.
        let lkey = unsafe { (*mr.as_ptr()).lkey };
        Ok(Mr {
            mr,
            lkey,
            len,
            _pd: pd.clone(),
            _pool: pool.clone(),
        })
    }

    /// The local key to put in every scatter/gather entry.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// The raw `ibv_mr`, valid while `self` lives.
    pub fn as_raw(&self) -> *mut ibv_mr {
        self.mr.as_ptr()
    }
}
