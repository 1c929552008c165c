//! Protection domains (`ibv_pd`).

use std::ptr::NonNull;
use std::sync::Arc;

use super::ffi::*;

use super::context::Context;
use crate::error::{Error, Result};

pub(crate) struct PdInner {
    pd: NonNull<ibv_pd>,
    ctx: Context,
}

// SAFETY: a PD handle may be used from any thread; it is only deallocated in `Drop`.
unsafe impl Send for PdInner {}
// SAFETY: see `Send`; `&self` methods only read the pointer.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: every object created in this PD holds an `Arc` to it, so none is left.
        let rc = unsafe { ibv_dealloc_pd(self.pd.as_ptr()) };
        if rc != 0 {
            log::warn!(
                "ibv_dealloc_pd failed: {}",
                std::io::Error::from_raw_os_error(rc)
            );
        }
    }
}

/// A protection domain. Cheap to clone; keeps its [`Context`] open.
#[derive(Clone)]
pub struct Pd {
    inner: Arc<PdInner>,
}

impl std::fmt::Debug for Pd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pd")
            .field("device", &self.inner.ctx.name())
            .finish()
    }
}

impl Pd {
    /// Allocates a protection domain on `ctx`.
    ///
    /// # Errors
    /// [`Error::Os`]: ENOMEM when the device is out of PDs.
    pub fn new(ctx: &Context) -> Result<Pd> {
        // SAFETY: the context is open (the handle keeps it so).
        let pd = unsafe { ibv_alloc_pd(ctx.as_raw()) };
        let pd = NonNull::new(pd).ok_or_else(|| Error::last_os("ibv_alloc_pd"))?;
        Ok(Pd {
            inner: Arc::new(PdInner {
                pd,
                ctx: ctx.clone(),
            }),
        })
    }

    /// A PD over a fake `ibv_pd` for data-path tests; never deallocated.
    #[cfg(test)]
    pub(crate) fn fake(ctx: &Context, pd: NonNull<ibv_pd>) -> Pd {
        let p = Pd {
            inner: Arc::new(PdInner {
                pd,
                ctx: ctx.clone(),
            }),
        };
        std::mem::forget(p.clone());
        p
    }

    /// The context the PD belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The raw `ibv_pd`, valid while this handle lives.
    pub fn as_raw(&self) -> *mut ibv_pd {
        self.inner.pd.as_ptr()
    }
}
