//! Receive work queues (`ibv_wq`, type RQ): the receive side of a queue when RSS spreads
//! traffic over several queues through an indirection table.

use std::io;
use std::mem;
use std::ptr::NonNull;
use std::sync::Arc;

use super::ffi::*;

use super::ffi::{ibv_create_wq, ibv_destroy_wq, ibv_modify_wq};

use super::cq::Cq;
use super::pd::Pd;
use crate::error::{Error, Result};

/// A receive WQ. Keeps its PD and CQ alive; destroyed on drop.
pub struct Wq {
    wq: NonNull<ibv_wq>,
    max_wr: u32,
    _pd: Pd,
    _cq: Arc<Cq>,
}

// SAFETY: WQ handles may be used from any thread; only the owning queue posts to it (`&mut`).
unsafe impl Send for Wq {}
// SAFETY: see `Send`.
unsafe impl Sync for Wq {}

impl std::fmt::Debug for Wq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wq").field("max_wr", &self.max_wr).finish()
    }
}

impl Drop for Wq {
    fn drop(&mut self) {
        // SAFETY: indirection tables naming this WQ hold an `Arc<Wq>`, so they are gone.
        let rc = unsafe { ibv_destroy_wq(self.wq.as_ptr()) };
        if rc != 0 {
            log::warn!(
                "ibv_destroy_wq failed: {}",
                std::io::Error::from_raw_os_error(rc)
            );
        }
    }
}

impl Wq {
    /// Creates a receive WQ of `max_wr` single-SGE work requests completing into `cq`, and moves
    /// it to the ready state.
    ///
    /// # Errors
    /// [`Error::Os`]: EOPNOTSUPP when the device has no WQs, EINVAL for sizes past its limits.
    #[cfg_attr(not(feature = "internals"), allow(dead_code))] // the internals' tests
    pub fn create(pd: &Pd, cq: Arc<Cq>, max_wr: u32) -> Result<Wq> {
        Wq::create_sg(pd, cq, max_wr, 1)
    }

    /// As [`Wq::create`], with work requests of up to `max_sge` scatter entries
    /// (`ibv_wq_init_attr.max_sge`; libmlx5 sizes the WQE for them, rdma-core
    /// providers/mlx5/verbs.c `mlx5_calc_rwq_size`, and refuses more than the device holds).
    ///
    /// # Errors
    /// As [`Wq::create`].
    pub fn create_sg(pd: &Pd, cq: Arc<Cq>, max_wr: u32, max_sge: u32) -> Result<Wq> {
        Wq::create_flags(pd, cq, max_wr, max_sge, 0)
    }

    /// As [`Wq::create_sg`], with the device stripping one 802.1Q tag from each frame the WQ
    /// receives (`IBV_WQ_FLAGS_CVLAN_STRIPPING`; the tag is reported in the completion's CVLAN
    /// field, which only an extended CQ reads: `cq` should be [`Cq::with_cvlan`]). The kernel
    /// refuses the flag (EOPNOTSUPP) on a device without `eth_net_offloads` and `vlan_cap`,
    /// and otherwise leaves the RQ context's `vsd` (VLAN strip disable) bit clear (Linux
    /// drivers/infiniband/hw/mlx5/qp.c `create_rq`).
    ///
    /// # Errors
    /// As [`Wq::create`].
    pub fn create_cvlan_stripping(pd: &Pd, cq: Arc<Cq>, max_wr: u32, max_sge: u32) -> Result<Wq> {
        let flags = ibv_wq_flags::IBV_WQ_FLAGS_CVLAN_STRIPPING.0;
        Wq::create_flags(pd, cq, max_wr, max_sge, flags)
    }

    fn create_flags(pd: &Pd, cq: Arc<Cq>, max_wr: u32, max_sge: u32, flags: u32) -> Result<Wq> {
        // SAFETY: plain old data; all-zero is a valid start.
        let mut a: ibv_wq_init_attr = unsafe { mem::zeroed() };
        a.wq_type = ibv_wq_type::IBV_WQT_RQ;
        a.max_wr = max_wr;
        a.max_sge = max_sge.max(1);
        a.pd = pd.as_raw();
        a.cq = cq.as_raw();
        if flags != 0 {
            a.comp_mask |= ibv_wq_init_attr_mask::IBV_WQ_INIT_ATTR_FLAGS.0;
            a.create_flags = flags;
        }
        // SAFETY: context, PD and CQ are alive and kept so by the returned value.
        let wq = unsafe { ibv_create_wq(pd.context().as_raw(), &mut a) };
        let wq = NonNull::new(wq).ok_or_else(|| Error::last_os("ibv_create_wq"))?;
        let w = Wq {
            wq,
            max_wr: a.max_wr,
            _pd: pd.clone(),
            _cq: cq,
        };
        w.set_state(ibv_wq_state::IBV_WQS_RDY, "ibv_modify_wq(RDY)")?;
        Ok(w)
    }

    /// Takes ownership of a WQ created elsewhere (e.g. by `mlx5dv_create_wq`) and moves it to
    /// the ready state.
    ///
    /// # Safety
    /// `wq` must be a live WQ created on `pd`'s context, in `pd`, completing into `cq`, owned by
    /// nothing else (the returned value destroys it).
    ///
    /// # Errors
    /// [`Error::Os`] when the RDY transition fails (the WQ is destroyed then).
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    pub(crate) unsafe fn from_raw(
        wq: NonNull<ibv_wq>,
        pd: &Pd,
        cq: Arc<Cq>,
        max_wr: u32,
    ) -> Result<Wq> {
        let w = Wq {
            wq,
            max_wr,
            _pd: pd.clone(),
            _cq: cq,
        };
        w.set_state(ibv_wq_state::IBV_WQS_RDY, "ibv_modify_wq(RDY)")?;
        Ok(w)
    }

    fn set_state(&self, state: u32, op: &'static str) -> Result<()> {
        // SAFETY: plain old data; all-zero is a valid start.
        let mut a: ibv_wq_attr = unsafe { mem::zeroed() };
        a.attr_mask = ibv_wq_attr_mask::IBV_WQ_ATTR_STATE.0;
        a.wq_state = state;
        // SAFETY: the WQ is alive; `a` is a valid attribute block.
        let rc = unsafe { ibv_modify_wq(self.wq.as_ptr(), &mut a) };
        if rc != 0 {
            return Err(Error::os(op, io::Error::from_raw_os_error(rc)));
        }
        Ok(())
    }

    /// Moves the WQ to the error state, flushing every posted receive.
    ///
    /// # Errors
    /// [`Error::Os`] with the errno of `ibv_modify_wq`.
    pub fn to_error(&self) -> Result<()> {
        self.set_state(ibv_wq_state::IBV_WQS_ERR, "ibv_modify_wq(ERR)")
    }

    /// Resets the WQ (the device lets go of every posted receive) and makes it ready again.
    ///
    /// # Errors
    /// [`Error::Os`] with the errno of `ibv_modify_wq`.
    pub fn reset(&self) -> Result<()> {
        self.set_state(ibv_wq_state::IBV_WQS_RESET, "ibv_modify_wq(RESET)")?;
        self.set_state(ibv_wq_state::IBV_WQS_RDY, "ibv_modify_wq(RDY)")
    }

    /// Work requests the WQ holds.
    #[cfg_attr(not(feature = "internals"), allow(dead_code))] // the internals' tests
    pub fn max_wr(&self) -> u32 {
        self.max_wr
    }

    /// Posts a chain of receive work requests.
    ///
    /// # Safety
    /// Every WR, its SGE and the registered buffer it names must be valid; the buffers belong
    /// to the device until they complete.
    ///
    /// # Errors
    /// `Err((errno, bad))`: the WR at `bad` and all after it were not posted.
    #[inline]
    pub unsafe fn post_recv(&self, wr: *mut ibv_recv_wr) -> Result<(), (i32, *mut ibv_recv_wr)> {
        let mut bad = std::ptr::null_mut();
        // SAFETY: the caller guarantees the chain; the WQ is alive.
        let rc = unsafe { ibv_post_wq_recv(self.wq.as_ptr(), wr, &mut bad) };
        if rc != 0 {
            return Err((rc, bad));
        }
        Ok(())
    }

    /// The raw `ibv_wq`, valid while `self` lives.
    pub fn as_raw(&self) -> *mut ibv_wq {
        self.wq.as_ptr()
    }
}
