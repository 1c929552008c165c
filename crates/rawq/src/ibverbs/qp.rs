//! RAW_PACKET queue pairs (`IBV_QPT_RAW_PACKET`): Ethernet frames in and out as they are.

use std::io;
use std::mem;
use std::ptr::NonNull;
use std::sync::Arc;

use super::ffi::*;

use super::cq::Cq;
use super::pd::Pd;
use crate::error::{Error, Result};

/// Anything a flow rule can be attached to: a RAW_PACKET QP or an RSS hashing QP.
pub trait QueuePair: Send + Sync {
    /// The raw `ibv_qp`, valid while `self` lives.
    fn as_raw(&self) -> *mut ibv_qp;
}

/// Sizes of a RAW_PACKET QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCaps {
    /// Send work requests the SQ holds.
    pub max_send_wr: u32,
    /// Receive work requests the RQ holds (0 when receives go to a WQ instead).
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send WR (segments of a chained packet).
    pub max_send_sge: u32,
    /// Bytes of frame that may be copied into the WQE instead of read by DMA.
    pub max_inline_data: u32,
    /// Longest TSO header a send WR may carry (0: no `IBV_WR_TSO` on this QP). libmlx5
    /// refuses a TSO header longer than the QP was created for (providers/mlx5/qp.c
    /// `set_tso_eth_seg`, `qp->max_tso_header` from `IBV_QP_INIT_ATTR_MAX_TSO_HEADER`).
    pub max_tso_header: u16,
}

/// A RAW_PACKET QP. Keeps its PD and both CQs alive (a CQ cannot be destroyed while a QP uses
/// it); destroyed on drop.
pub struct RawQp {
    qp: NonNull<ibv_qp>,
    caps: QpCaps,
    _pd: Pd,
    _send_cq: Arc<Cq>,
    _recv_cq: Arc<Cq>,
}

// SAFETY: QP handles may be used from any thread; posting to the SQ or RQ happens only from the
// queue that owns that side (`&mut`), and the pointer is freed only in `Drop`.
unsafe impl Send for RawQp {}
// SAFETY: see `Send`.
unsafe impl Sync for RawQp {}

impl std::fmt::Debug for RawQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawQp")
            .field("qpn", &self.qp_num())
            .field("caps", &self.caps)
            .finish()
    }
}

impl Drop for RawQp {
    fn drop(&mut self) {
        // SAFETY: flows attached to this QP hold an `Arc<RawQp>`, so they are gone already.
        let rc = unsafe { ibv_destroy_qp(self.qp.as_ptr()) };
        if rc != 0 {
            log::warn!(
                "ibv_destroy_qp failed: {}",
                std::io::Error::from_raw_os_error(rc)
            );
        }
    }
}

impl QueuePair for RawQp {
    fn as_raw(&self) -> *mut ibv_qp {
        self.qp.as_ptr()
    }
}

fn modify(qp: *mut ibv_qp, attr: &mut ibv_qp_attr, mask: u32, op: &'static str) -> Result<()> {
    // SAFETY: `qp` is alive (the caller holds it) and `attr` is a valid attribute block.
    let rc = unsafe { ibv_modify_qp(qp, attr, mask as libc::c_int) };
    if rc != 0 {
        return Err(Error::os(op, io::Error::from_raw_os_error(rc)));
    }
    Ok(())
}

/// `ibv_create_qp_ex` for the QP `a` describes, with what only it can give: `max_tso_header`
/// (`IBV_QP_INIT_ATTR_MAX_TSO_HEADER`, when not 0) and `create_flags`
/// (`IBV_QP_INIT_ATTR_CREATE_FLAGS`, when not 0); the caps the provider gave are written back
/// to `a`.
fn create_ex(
    pd: &Pd,
    a: &mut ibv_qp_init_attr,
    max_tso_header: u16,
    create_flags: u32,
) -> Result<NonNull<ibv_qp>> {
    // SAFETY: plain old data; all-zero is a valid start.
    let mut x: ibv_qp_init_attr_ex = unsafe { mem::zeroed() };
    x.send_cq = a.send_cq;
    x.recv_cq = a.recv_cq;
    x.qp_type = a.qp_type;
    x.sq_sig_all = a.sq_sig_all;
    x.cap = a.cap;
    x.comp_mask = ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0;
    x.pd = pd.as_raw();
    if max_tso_header > 0 {
        x.comp_mask |= ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_MAX_TSO_HEADER.0;
        x.max_tso_header = max_tso_header;
    }
    if create_flags != 0 {
        x.comp_mask |= ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_CREATE_FLAGS.0;
        x.create_flags = create_flags;
    }
    // SAFETY: the PD and both CQs are alive and kept so by the caller's returned value.
    let qp = unsafe { super::ffi::ibv_create_qp_ex(pd.context().as_raw(), &mut x) };
    let qp = NonNull::new(qp).ok_or_else(|| Error::last_os("ibv_create_qp_ex(RAW_PACKET)"))?;
    a.cap = x.cap;
    Ok(qp)
}

impl RawQp {
    /// Creates a RAW_PACKET QP in `pd` completing into `send_cq` / `recv_cq`.
    ///
    /// # Errors
    /// [`Error::Permission`] (EPERM): RAW_PACKET QPs need CAP_NET_RAW. [`Error::Os`]: EINVAL when
    /// a size exceeds the device's limits, ENOMEM, EOPNOTSUPP on an InfiniBand-only port.
    pub fn create(pd: &Pd, send_cq: Arc<Cq>, recv_cq: Arc<Cq>, caps: QpCaps) -> Result<RawQp> {
        RawQp::create_sg(pd, send_cq, recv_cq, caps, 1)
    }

    /// As [`RawQp::create`], with receive WRs of up to `max_recv_sge` scatter entries (a frame
    /// scattered over that many pool buffers).
    ///
    /// # Errors
    /// As [`RawQp::create`]; EINVAL also when `max_recv_sge` exceeds the device's `max_sge`.
    pub fn create_sg(
        pd: &Pd,
        send_cq: Arc<Cq>,
        recv_cq: Arc<Cq>,
        caps: QpCaps,
        max_recv_sge: u32,
    ) -> Result<RawQp> {
        RawQp::create_flags(pd, send_cq, recv_cq, caps, max_recv_sge, 0)
    }

    /// As [`RawQp::create_sg`], with the device stripping one 802.1Q tag from each frame its
    /// RQ receives (`IBV_QP_CREATE_CVLAN_STRIPPING`; the tag is reported in the completion's
    /// CVLAN field, which only an extended CQ reads: `recv_cq` should be [`Cq::with_cvlan`]).
    /// The kernel takes the flag on a RAW_PACKET QP of a device with `eth_net_offloads` and
    /// `vlan_cap` and clears the RQ context's `vsd` (VLAN strip disable) bit for it (Linux
    /// drivers/infiniband/hw/mlx5/qp.c `process_create_flags`, `create_raw_packet_qp_rq`);
    /// libmlx5 passes it through (providers/mlx5/verbs.c `create_qp`).
    ///
    /// # Errors
    /// As [`RawQp::create`]; EOPNOTSUPP/EINVAL when the device cannot strip.
    pub fn create_cvlan_stripping(
        pd: &Pd,
        send_cq: Arc<Cq>,
        recv_cq: Arc<Cq>,
        caps: QpCaps,
        max_recv_sge: u32,
    ) -> Result<RawQp> {
        let flags = ibv_qp_create_flags::IBV_QP_CREATE_CVLAN_STRIPPING.0;
        RawQp::create_flags(pd, send_cq, recv_cq, caps, max_recv_sge, flags)
    }

    fn create_flags(
        pd: &Pd,
        send_cq: Arc<Cq>,
        recv_cq: Arc<Cq>,
        caps: QpCaps,
        max_recv_sge: u32,
        create_flags: u32,
    ) -> Result<RawQp> {
        // SAFETY: `ibv_qp_init_attr` is plain old data; all-zero is a valid start.
        let mut a: ibv_qp_init_attr = unsafe { mem::zeroed() };
        a.send_cq = send_cq.as_raw();
        a.recv_cq = recv_cq.as_raw();
        a.qp_type = ibv_qp_type::IBV_QPT_RAW_PACKET;
        a.sq_sig_all = 0;
        a.cap = ibv_qp_cap {
            max_send_wr: caps.max_send_wr,
            max_recv_wr: caps.max_recv_wr,
            max_send_sge: caps.max_send_sge,
            max_recv_sge: max_recv_sge.max(1),
            max_inline_data: caps.max_inline_data,
        };
        let qp = if caps.max_tso_header > 0 || create_flags != 0 {
            create_ex(pd, &mut a, caps.max_tso_header, create_flags)?
        } else {
            // SAFETY: the PD and both CQs are alive and kept so by the returned value.
            let qp = unsafe { ibv_create_qp(pd.as_raw(), &mut a) };
            NonNull::new(qp).ok_or_else(|| Error::last_os("ibv_create_qp(RAW_PACKET)"))?
        };
        // The provider writes back what it actually gave (e.g. a larger max_inline_data).
        let caps = QpCaps {
            max_send_wr: a.cap.max_send_wr,
            max_recv_wr: a.cap.max_recv_wr,
            max_send_sge: a.cap.max_send_sge,
            max_inline_data: a.cap.max_inline_data,
            max_tso_header: caps.max_tso_header,
        };
        Ok(RawQp {
            qp,
            caps,
            _pd: pd.clone(),
            _send_cq: send_cq,
            _recv_cq: recv_cq,
        })
    }

    /// A QP over a fake `ibv_qp` for data-path tests; never destroyed.
    #[cfg(test)]
    pub(crate) fn fake(
        qp: NonNull<ibv_qp>,
        caps: QpCaps,
        pd: &Pd,
        send_cq: Arc<Cq>,
        recv_cq: Arc<Cq>,
    ) -> Arc<RawQp> {
        let q = Arc::new(RawQp {
            qp,
            caps,
            _pd: pd.clone(),
            _send_cq: send_cq,
            _recv_cq: recv_cq,
        });
        std::mem::forget(q.clone());
        q
    }

    /// Moves the QP through INIT (bound to `port`), RTR and RTS, ready to send and receive.
    ///
    /// # Errors
    /// [`Error::Os`]: EINVAL for a port that does not exist.
    pub fn ready(&self, port: u8) -> Result<()> {
        let qp = self.qp.as_ptr();
        // SAFETY: plain old data; all-zero is a valid start.
        let mut a: ibv_qp_attr = unsafe { mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_INIT;
        a.port_num = port;
        let m = ibv_qp_attr_mask::IBV_QP_STATE.0 | ibv_qp_attr_mask::IBV_QP_PORT.0;
        modify(qp, &mut a, m, "ibv_modify_qp(INIT)")?;
        a.qp_state = ibv_qp_state::IBV_QPS_RTR;
        modify(
            qp,
            &mut a,
            ibv_qp_attr_mask::IBV_QP_STATE.0,
            "ibv_modify_qp(RTR)",
        )?;
        a.qp_state = ibv_qp_state::IBV_QPS_RTS;
        modify(
            qp,
            &mut a,
            ibv_qp_attr_mask::IBV_QP_STATE.0,
            "ibv_modify_qp(RTS)",
        )
    }

    /// Moves the QP to the error state: every outstanding work request completes with
    /// `IBV_WC_WR_FLUSH_ERR`, so its buffer can be reclaimed before the QP is destroyed.
    ///
    /// # Errors
    /// [`Error::Os`] with the errno of `ibv_modify_qp`.
    pub fn to_error(&self) -> Result<()> {
        // SAFETY: plain old data; all-zero is a valid start.
        let mut a: ibv_qp_attr = unsafe { mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_ERR;
        modify(
            self.qp.as_ptr(),
            &mut a,
            ibv_qp_attr_mask::IBV_QP_STATE.0,
            "ibv_modify_qp(ERR)",
        )
    }

    /// Resets the QP (the device lets go of every posted WQE) and brings it back to RTS on
    /// `port`: the recovery after an error completion.
    ///
    /// # Errors
    /// [`Error::Os`] with the errno of `ibv_modify_qp`.
    pub fn reset(&self, port: u8) -> Result<()> {
        // SAFETY: plain old data; all-zero is a valid start.
        let mut a: ibv_qp_attr = unsafe { mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RESET;
        modify(
            self.qp.as_ptr(),
            &mut a,
            ibv_qp_attr_mask::IBV_QP_STATE.0,
            "ibv_modify_qp(RESET)",
        )?;
        self.ready(port)
    }

    /// What the QP was created with (as the provider rounded it).
    pub fn caps(&self) -> QpCaps {
        self.caps
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: the QP is alive; `qp_num` is set at creation and never changes.
        unsafe { (*self.qp.as_ptr()).qp_num }
    }

    /// Posts a chain of send work requests.
    ///
    /// # Safety
    /// Every WR in the chain, its SGEs and the memory they name must be valid and registered; the
    /// buffers must stay untouched until their completion (unless sent inline).
    ///
    /// # Errors
    /// `Err((errno, bad))`: the WR at `bad` and all after it were not posted (ENOMEM: the SQ is
    /// full, EINVAL: a bad WR).
    #[inline]
    pub unsafe fn post_send(&self, wr: *mut ibv_send_wr) -> Result<(), (i32, *mut ibv_send_wr)> {
        let mut bad = std::ptr::null_mut();
        // SAFETY: the caller guarantees the chain; the QP is alive.
        let rc = unsafe { ibv_post_send(self.qp.as_ptr(), wr, &mut bad) };
        if rc != 0 {
            return Err((rc, bad));
        }
        Ok(())
    }

    /// Posts a chain of receive work requests to the QP's own RQ.
    ///
    /// # Safety
    /// As for [`RawQp::post_send`]; the buffers belong to the device until they complete.
    ///
    /// # Errors
    /// `Err((errno, bad))` as for [`RawQp::post_send`].
    #[inline]
    pub unsafe fn post_recv(&self, wr: *mut ibv_recv_wr) -> Result<(), (i32, *mut ibv_recv_wr)> {
        let mut bad = std::ptr::null_mut();
        // SAFETY: the caller guarantees the chain; the QP is alive.
        let rc = unsafe { ibv_post_recv(self.qp.as_ptr(), wr, &mut bad) };
        if rc != 0 {
            return Err((rc, bad));
        }
        Ok(())
    }
}
