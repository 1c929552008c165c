//! CREATE_QP (legacy and extended, RAW_PACKET and RSS), MODIFY_QP, DESTROY_QP.
//!
//! Kernel: `uverbs_cmd.c: create_qp`, `modify_qp`, `ib_uverbs_destroy_qp`; `verbs.c:
//! ib_modify_qp_is_ok`; `mlx5/qp.c: create_raw_packet_qp`, `create_rss_raw_qp_tir`,
//! `set_user_buf_size`, `get_qp_user_index`, `modify_raw_packet_qp`. libmlx5 builds the
//! request in `verbs.c: create_qp` (RAW_PACKET: the RQ at `buf_addr`, the SQ at `sq_buf_addr`,
//! doorbell record `[MLX5_RCV_DBR, MLX5_SND_DBR]` at `db_addr`) and `create_rss_qp`.
//!
//! A RAW_PACKET QP becomes, on the model, an SQ (if it sends), an RQ and a TIR over it (if it
//! receives); an RSS QP a TIR over its indirection table's RQs.

use std::sync::Arc;

use libc::{EINVAL, ENOSYS, EOPNOTSUPP, EPERM};

use rawq_model::hw::{QueueState, RqDesc, RssHash, SqDesc, TirDesc};

use super::{Attrs, CmdResult, Ctx};
use crate::caps;
use crate::objects::{Obj, Qp};
use crate::pin::Pinned;
use crate::rings::hw_errno;
use crate::uapi::*;
use crate::umem::Access;
use crate::{offsetofend, Errno};

/// `enum ib_qp_state`.
pub(super) mod state {
    pub const RESET: u32 = 0;
    pub const INIT: u32 = 1;
    pub const RTR: u32 = 2;
    pub const RTS: u32 = 3;
    pub const ERR: u32 = 6;
}
/// `enum ib_qp_attr_mask`.
const QP_STATE: u32 = 1;
const QP_CUR_STATE: u32 = 2;
const QP_PORT: u32 = 1 << 5;
/// `IB_USER_LEGACY_LAST_QP_ATTR_MASK` (`IB_QP_DEST_QPN`).
const LEGACY_ATTR_MASK: u32 = (1 << 21) - 1;
/// `MLX5_USER_ASSIGNED_UIDX_MASK`.
const UIDX_MASK: u32 = 0x00ff_ffff;

/// The core request fields both forms carry.
struct CoreQp {
    user_handle: u64,
    pd: u32,
    send_cq: u32,
    recv_cq: u32,
    max_send_wr: u32,
    max_recv_wr: u32,
    max_send_sge: u32,
    max_recv_sge: u32,
    max_inline: u32,
    qp_type: u8,
    is_srq: u8,
    ind_tbl: Option<u32>,
    create_flags: u32,
}

fn legacy_core(r: &ib_uverbs_create_qp) -> CoreQp {
    CoreQp {
        user_handle: r.user_handle,
        pd: r.pd_handle,
        send_cq: r.send_cq_handle,
        recv_cq: r.recv_cq_handle,
        max_send_wr: r.max_send_wr,
        max_recv_wr: r.max_recv_wr,
        max_send_sge: r.max_send_sge,
        max_recv_sge: r.max_recv_sge,
        max_inline: r.max_inline_data,
        qp_type: r.qp_type,
        is_srq: r.is_srq,
        ind_tbl: None,
        create_flags: 0,
    }
}

/// What CREATE_QP answers beyond the handle.
struct Created {
    handle: u32,
    qpn: u32,
    /// The kernel's bfreg number (0 for an RSS QP, which has no SQ).
    bfreg: u32,
    rss: bool,
    sqn: Option<u32>,
    rqn: Option<u32>,
    tirn: Option<u32>,
}

fn create(c: &mut Ctx<'_>, a: &Attrs, q: &CoreQp) -> Result<Created, Errno> {
    // Only RAW_PACKET QPs are emulated (the device is an Ethernet port).
    if u32::from(q.qp_type) != IB_UVERBS_QPT_RAW_PACKET {
        return Err(EOPNOTSUPP);
    }
    // create_qp(): RAW_PACKET needs CAP_NET_RAW.
    if !crate::sys::has_net_raw() {
        return Err(EPERM);
    }
    if let Some(t) = q.ind_tbl {
        c.file.objs.pd(q.pd)?;
        return create_rss(c, a, q, t);
    }
    // Of the create flags, the device does CVLAN stripping (on the QP's RQ).
    if q.create_flags & !IB_UVERBS_QP_CREATE_CVLAN_STRIPPING != 0 || q.is_srq != 0 {
        return Err(EOPNOTSUPP);
    }
    let pdn = c.file.objs.pd(q.pd)?.pdn;
    let send_cq = c.file.objs.cq(q.send_cq)?.cqn;
    let recv_cq = c.file.objs.cq(q.recv_cq)?.cqn;
    if q.max_send_wr > caps::MAX_QP_WR
        || q.max_recv_wr > caps::MAX_QP_WR
        || q.max_send_sge > caps::MAX_SGE
        || q.max_recv_sge > caps::MAX_SGE
        || q.max_inline > caps::MAX_INLINE
    {
        return Err(EINVAL);
    }
    let d: mlx5_ib_create_qp = a.udata();
    let cqe_v1 = a.drv_in.len() >= offsetofend!(mlx5_ib_create_qp, uidx);
    // get_qp_user_index(): the index must come with cqe_version 1, and fit 24 bits.
    if !cqe_v1 || d.uidx > UIDX_MASK {
        return Err(EINVAL);
    }
    // set_user_buf_size() / set_rq_size().
    if (d.sq_wqe_count != 0 && !d.sq_wqe_count.is_power_of_two())
        || d.sq_wqe_count > caps::MAX_QP_WR
        || (d.rq_wqe_count != 0 && !d.rq_wqe_count.is_power_of_two())
        || d.rq_wqe_count > caps::MAX_QP_WR
        || d.rq_wqe_shift > 31
        || (q.max_recv_wr == 0 && d.rq_wqe_count != 0)
    {
        return Err(EINVAL);
    }
    let sq_buf = super::u64_at(
        &a.drv_in,
        std::mem::offset_of!(mlx5_ib_create_qp, __bindgen_anon_1),
    );
    // create_raw_packet_qp(): ib_umem_get() of each ring with access 0 (the device reads
    // WQEs), mlx5_ib_db_map_user() of the doorbell record ([RQ, SQ] words).
    let mut pins = Pinned::default();
    if d.sq_wqe_count != 0 {
        pins.add(sq_buf, u64::from(d.sq_wqe_count) * 64, Access::Read)?;
    }
    if d.rq_wqe_count != 0 {
        let len = u64::from(d.rq_wqe_count) << d.rq_wqe_shift;
        pins.add(d.buf_addr, len, Access::Read)?;
    }
    pins.add_dbrec(d.db_addr, 8)?;
    // The QP's bfreg, as the kernel's create_user_qp() takes it (qp.c `alloc_bfreg`); given
    // for good once the QP exists. Without a model no register is watched: bfreg 1.
    let bfreg = c
        .file
        .ctx
        .as_ref()
        .and_then(|x| x.uars.as_ref())
        .map_or(1, |u| u.next_bfreg());
    let mut made = Created {
        handle: 0,
        qpn: 0,
        bfreg,
        rss: false,
        sqn: None,
        rqn: None,
        tirn: None,
    };
    let on_hw = match c.dev.hw() {
        Some(hw) => {
            let uar = c
                .file
                .ctx
                .as_ref()
                .and_then(|x| x.uars.as_ref())
                .map_or(0, |u| u.register_of_bfreg(bfreg));
            let r = (|| -> Result<(), Errno> {
                if d.sq_wqe_count != 0 {
                    let sd = SqDesc {
                        buf: sq_buf as usize,
                        wqe_cnt: d.sq_wqe_count,
                        // dbrec[MLX5_SND_DBR]: the second word.
                        dbrec: d.db_addr.wrapping_add(4) as usize,
                        uar,
                        cqn: send_cq,
                        user_index: d.uidx,
                    };
                    let sqn = crate::rings::adopt_sq(hw, sd)?;
                    made.sqn = Some(sqn);
                    // The SQ's context names the QP's PD (its data segments' mkeys must be
                    // of it: Linux mlx5 qp.c `create_raw_packet_qp_sq` sets the SQ's pd).
                    hw.set_sq_pd(sqn, pdn).map_err(|e| hw_errno(&e))?;
                    if let Some((nth, syndrome)) = c.dev.cfg.tx_error {
                        hw.inject_tx_error(sqn, nth, syndrome);
                    }
                }
                if d.rq_wqe_count != 0 {
                    let rd = RqDesc {
                        buf: d.buf_addr as usize,
                        wqe_cnt: d.rq_wqe_count,
                        stride: 1 << d.rq_wqe_shift,
                        dbrec: d.db_addr as usize,
                        cqn: recv_cq,
                        striding: None,
                        user_index: d.uidx,
                    };
                    let rqn = crate::rings::adopt_rq(hw, rd)?;
                    made.rqn = Some(rqn);
                    hw.set_rq_pd(rqn, pdn).map_err(|e| hw_errno(&e))?;
                    if q.create_flags & IB_UVERBS_QP_CREATE_CVLAN_STRIPPING != 0 {
                        hw.set_rq_vlan_strip(rqn, true).map_err(|e| hw_errno(&e))?;
                    }
                    made.tirn = Some(
                        hw.create_tir(TirDesc {
                            rqns: vec![rqn],
                            hash: None,
                        })
                        .map_err(|e| hw_errno(&e))?,
                    );
                }
                Ok(())
            })();
            if let Err(e) = r {
                undo_hw(c, &made);
                return Err(e);
            }
            true
        }
        None => {
            if d.sq_wqe_count != 0 {
                made.sqn = Some(c.dev.next_num());
            }
            if d.rq_wqe_count != 0 {
                made.rqn = Some(c.dev.next_num());
                made.tirn = Some(c.dev.next_num());
            }
            false
        }
    };
    made.qpn = made.sqn.or(made.rqn).unwrap_or_else(|| c.dev.next_num());
    let qp = Qp {
        qpn: made.qpn,
        pd: q.pd,
        cqs: vec![q.send_cq, q.recv_cq],
        sqn: made.sqn,
        rqn: made.rqn,
        tirn: made.tirn,
        ind_tbl: None,
        state: state::RESET,
        user_handle: q.user_handle,
        on_hw,
        pins: Arc::new(pins),
    };
    made.handle = match c.file.objs.insert(Obj::Qp(qp)) {
        Ok(h) => h,
        Err(e) => {
            undo_hw(c, &made);
            return Err(e);
        }
    };
    if let Some(u) = c.file.ctx.as_mut().and_then(|x| x.uars.as_mut()) {
        u.take(bfreg, made.qpn);
    }
    Ok(made)
}

fn create_rss(c: &mut Ctx<'_>, a: &Attrs, q: &CoreQp, t: u32) -> Result<Created, Errno> {
    let table = c.file.objs.ind_tbl(t)?.clone();
    // uverbs_cmd.c create_qp(): an RSS QP has no receive side of its own (receive work
    // requests or an SRQ: EINVAL; the receive CQ handle is not looked at). A send side
    // (`max_send_wr`) makes uverbs look up the send CQ (EINVAL without one), and mlx5 refuses
    // an RSS QP with a send CQ (qp.c `check_qp_attr`): EINVAL either way.
    if q.max_recv_wr != 0 || q.max_recv_sge != 0 || q.is_srq != 0 || q.max_send_wr != 0 {
        return Err(EINVAL);
    }
    // qp.c `process_create_flags`: no create flag on an RSS QP (uverbs refuses unknown ones
    // with EINVAL too).
    if q.create_flags != 0 {
        return Err(EINVAL);
    }
    // create_rss_raw_qp_tir().
    if a.drv_in.len() < offsetofend!(mlx5_ib_create_qp_rss, flags) {
        return Err(EINVAL);
    }
    // process_udata_size(): bytes past the struct must be zero.
    if a.drv_in.len() > std::mem::size_of::<mlx5_ib_create_qp_rss>()
        && a.drv_in[std::mem::size_of::<mlx5_ib_create_qp_rss>()..]
            .iter()
            .any(|&b| b != 0)
    {
        return Err(EINVAL);
    }
    let d: mlx5_ib_create_qp_rss = a.udata();
    // process_vendor_flags(): an RSS QP may carry only TUNNEL_OFFLOADS (if the device has
    // stateless tunnel offloads, which the emulated one does not) and the two TIR
    // self-loopback flags; any other flag is EINVAL. The kernel takes the self-loopback flags
    // (the TIR's `self_lb_block`); the model does not block self-loopback, so they are refused
    // as not supported rather than ignored.
    let self_lb = MLX5_QP_FLAG_TIR_ALLOW_SELF_LB_UC | MLX5_QP_FLAG_TIR_ALLOW_SELF_LB_MC;
    if d.flags & !self_lb != 0 {
        return Err(EINVAL);
    }
    if d.flags != 0 {
        return Err(EOPNOTSUPP);
    }
    // create_rss_raw_qp_tir().
    if d.comp_mask != 0 {
        return Err(EOPNOTSUPP);
    }
    if u32::from(d.rx_hash_function) != MLX5_RX_HASH_FUNC_TOEPLITZ {
        return Err(EOPNOTSUPP);
    }
    if usize::from(d.rx_key_len) != caps::RSS_KEY_LEN {
        return Err(EINVAL);
    }
    let f = d.rx_hash_fields_mask;
    let v4 = u64::from(MLX5_RX_HASH_SRC_IPV4 | MLX5_RX_HASH_DST_IPV4);
    let v6 = u64::from(MLX5_RX_HASH_SRC_IPV6 | MLX5_RX_HASH_DST_IPV6);
    let tcp = u64::from(MLX5_RX_HASH_SRC_PORT_TCP | MLX5_RX_HASH_DST_PORT_TCP);
    let udp = u64::from(MLX5_RX_HASH_SRC_PORT_UDP | MLX5_RX_HASH_DST_PORT_UDP);
    if f & !(v4 | v6 | tcp | udp) != 0 {
        return Err(EOPNOTSUPP);
    }
    if (f & v4 != 0 && f & v6 != 0) || (f & tcp != 0 && f & udp != 0) {
        return Err(EINVAL);
    }
    let mut rqns = Vec::with_capacity(table.wqs.len());
    for w in &table.wqs {
        rqns.push(c.file.objs.wq(*w)?.wqn);
    }
    let hash = RssHash {
        key: d.rx_hash_key[..caps::RSS_KEY_LEN].to_vec(),
        fields: f,
    };
    let (tirn, on_hw) = match c.dev.hw() {
        Some(hw) => (
            hw.create_tir(TirDesc {
                rqns,
                hash: Some(hash),
            })
            .map_err(|e| hw_errno(&e))?,
            true,
        ),
        None => (c.dev.next_num(), false),
    };
    let qpn = c.dev.next_num();
    let qp = Qp {
        qpn,
        pd: q.pd,
        cqs: Vec::new(),
        sqn: None,
        rqn: None,
        tirn: Some(tirn),
        ind_tbl: Some(t),
        state: state::RESET,
        user_handle: q.user_handle,
        on_hw,
        pins: Arc::default(),
    };
    let made = Created {
        handle: 0,
        qpn,
        bfreg: 0,
        rss: true,
        sqn: None,
        rqn: None,
        tirn: Some(tirn),
    };
    let handle = match c.file.objs.insert(Obj::Qp(qp)) {
        Ok(h) => h,
        Err(e) => {
            undo_hw(c, &made);
            return Err(e);
        }
    };
    Ok(Created { handle, ..made })
}

/// Destroys what a failed create made on the model.
fn undo_hw(c: &Ctx<'_>, m: &Created) {
    let Some(hw) = c.dev.hw() else { return };
    if let Some(t) = m.tirn {
        let _ = hw.destroy_tir(t);
    }
    if !m.rss {
        if let Some(r) = m.rqn {
            let _ = hw.destroy_rq(r);
        }
    }
    if let Some(s) = m.sqn {
        let _ = hw.destroy_sq(s);
    }
}

fn base_resp(q: &CoreQp, m: &Created) -> ib_uverbs_create_qp_resp {
    ib_uverbs_create_qp_resp {
        qp_handle: m.handle,
        qpn: m.qpn,
        max_send_wr: q.max_send_wr,
        max_recv_wr: q.max_recv_wr,
        max_send_sge: q.max_send_sge,
        max_recv_sge: q.max_recv_sge,
        max_inline_data: q.max_inline,
        ..Default::default()
    }
}

fn drv_resp(m: &Created) -> mlx5_ib_create_qp_resp {
    let mut d = mlx5_ib_create_qp_resp {
        bfreg_index: if m.rss {
            0
        } else {
            crate::mmap::Uars::lib_index(m.bfreg)
        },
        ..Default::default()
    };
    if let Some(t) = m.tirn {
        d.comp_mask |= MLX5_IB_CREATE_QP_RESP_MASK_TIRN;
        d.tirn = t;
    }
    if let Some(s) = m.sqn {
        d.comp_mask |= MLX5_IB_CREATE_QP_RESP_MASK_SQN | MLX5_IB_CREATE_QP_RESP_MASK_TISN;
        d.sqn = s;
        d.tisn = s;
    }
    if let Some(r) = m.rqn {
        d.comp_mask |= MLX5_IB_CREATE_QP_RESP_MASK_RQN;
        d.rqn = r;
    }
    d
}

pub(super) fn create_qp(c: &mut Ctx<'_>, a: &Attrs) -> CmdResult {
    let req: ib_uverbs_create_qp = a.request()?;
    let q = legacy_core(&req);
    let m = create(c, a, &q)?;
    a.response(&base_resp(&q, &m))
        .and_then(|()| a.udata_response(&drv_resp(&m)))
        .inspect_err(|_| destroy(c, m.handle))
}

pub(super) fn ex_create_qp(c: &mut Ctx<'_>, a: &Attrs) -> CmdResult {
    let req: ib_uverbs_ex_create_qp = a.request()?;
    if req.comp_mask & !IB_UVERBS_CREATE_QP_SUP_COMP_MASK != 0 {
        return Err(EINVAL);
    }
    let ind = req.comp_mask & IB_UVERBS_CREATE_QP_MASK_IND_TABLE != 0;
    let q = CoreQp {
        user_handle: req.user_handle,
        pd: req.pd_handle,
        send_cq: req.send_cq_handle,
        recv_cq: req.recv_cq_handle,
        max_send_wr: req.max_send_wr,
        max_recv_wr: req.max_recv_wr,
        max_send_sge: req.max_send_sge,
        max_recv_sge: req.max_recv_sge,
        max_inline: req.max_inline_data,
        qp_type: req.qp_type,
        is_srq: req.is_srq,
        ind_tbl: ind.then_some(req.rwq_ind_tbl_handle),
        create_flags: req.create_flags,
    };
    let m = create(c, a, &q)?;
    let r = ib_uverbs_ex_create_qp_resp {
        base: base_resp(&q, &m),
        comp_mask: 0,
        response_length: offsetofend!(ib_uverbs_ex_create_qp_resp, response_length) as u32,
    };
    a.response(&r)
        .and_then(|()| a.udata_response(&drv_resp(&m)))
        .inspect_err(|_| destroy(c, m.handle))
}

/// `IB_QP_RATE_LIMIT` (`enum ib_qp_attr_mask`).
const QP_RATE_LIMIT: u32 = 1 << 25;

/// `ib_modify_qp_is_ok` for a RAW_PACKET QP (Linux drivers/infiniband/core/verbs.c
/// `qp_state_table`, called by mlx5_ib_modify_qp): the transition must be in the table, with
/// its required attributes (RESET -> INIT: the port) and no attribute beyond them, its optional
/// ones (a rate limit from RTR or RTS) and the state. `IB_QP_CUR_STATE` is in no RAW_PACKET
/// entry, so a mask with it never passes; RESET -> ERR is not in the table.
fn transition_ok(cur: u32, next: u32, mask: u32) -> bool {
    use state::*;
    let (req, opt) = match (cur, next) {
        (RESET, RESET) => (0, 0),
        (RESET, INIT) => (QP_PORT, 0),
        (INIT, RESET | ERR | INIT | RTR) => (0, 0),
        (RTR, RESET | ERR) | (RTS, RESET | ERR) | (ERR, RESET | ERR) => (0, 0),
        (RTR, RTS) | (RTS, RTS) => (0, QP_RATE_LIMIT),
        _ => return false,
    };
    mask & req == req && mask & !(req | opt | QP_STATE) == 0
}

fn modify(c: &mut Ctx<'_>, b: &ib_uverbs_modify_qp) -> CmdResult {
    let mask = b.attr_mask;
    if (mask & QP_CUR_STATE != 0 && u32::from(b.cur_qp_state) > state::ERR)
        || (mask & QP_STATE != 0 && u32::from(b.qp_state) > state::ERR)
    {
        return Err(EINVAL);
    }
    if mask & !LEGACY_ATTR_MASK != 0 {
        return Err(EOPNOTSUPP);
    }
    let qp = c.file.objs.qp(b.qp_handle)?.clone();
    if mask & QP_PORT != 0 && b.port_num != 1 {
        return Err(EINVAL);
    }
    // mlx5_ib_modify_qp(): an RSS QP cannot be modified.
    if qp.ind_tbl.is_some() {
        return Err(ENOSYS);
    }
    let cur = if mask & QP_CUR_STATE != 0 {
        u32::from(b.cur_qp_state)
    } else {
        qp.state
    };
    let next = if mask & QP_STATE != 0 {
        u32::from(b.qp_state)
    } else {
        cur
    };
    if !transition_ok(cur, next, mask) {
        return Err(EINVAL);
    }
    // modify_raw_packet_qp(): the RQ is ready from INIT, the SQ from RTS.
    let (rq, sq) = match next {
        state::RESET => (Some(QueueState::Reset), Some(QueueState::Reset)),
        state::ERR => (Some(QueueState::Error), Some(QueueState::Error)),
        state::INIT if cur == state::RESET => (Some(QueueState::Ready), None),
        state::RTS if cur == state::RTR => (None, Some(QueueState::Ready)),
        _ => (None, None),
    };
    if qp.on_hw {
        if let Some(hw) = c.dev.hw() {
            if let (Some(s), Some(n)) = (rq, qp.rqn) {
                hw.set_rq_state(n, s).map_err(|e| hw_errno(&e))?;
            }
            if let (Some(s), Some(n)) = (sq, qp.sqn) {
                hw.set_sq_state(n, s).map_err(|e| hw_errno(&e))?;
            }
        }
    }
    c.file.objs.qp_mut(b.qp_handle)?.state = next;
    Ok(())
}

pub(super) fn modify_qp(c: &mut Ctx<'_>, a: &Attrs) -> CmdResult {
    let req: ib_uverbs_modify_qp = a.request()?;
    modify(c, &req)
}

pub(super) fn ex_modify_qp(c: &mut Ctx<'_>, a: &Attrs) -> CmdResult {
    let req: ib_uverbs_ex_modify_qp = a.request()?;
    // Rate limiting (packet pacing) is not offered.
    if req.rate_limit != 0 {
        return Err(EOPNOTSUPP);
    }
    modify(c, &req.base)?;
    let r = ib_uverbs_ex_modify_qp_resp {
        comp_mask: 0,
        response_length: offsetofend!(ib_uverbs_ex_modify_qp_resp, response_length) as u32,
    };
    a.response(&r)
}

pub(super) fn destroy_qp(c: &mut Ctx<'_>, a: &Attrs) -> CmdResult {
    let req: ib_uverbs_destroy_qp = a.request()?;
    c.file
        .objs
        .check_destroy(req.qp_handle, |o| matches!(o, Obj::Qp(_)))?;
    destroy(c, req.qp_handle);
    a.response(&ib_uverbs_destroy_qp_resp { events_reported: 0 })
}

/// Removes a QP from the table and the model.
pub(super) fn destroy(c: &mut Ctx<'_>, h: u32) {
    let Some(Obj::Qp(qp)) = c.file.objs.remove(h) else {
        return;
    };
    if let Some(u) = c.file.ctx.as_mut().and_then(|x| x.uars.as_mut()) {
        u.release(qp.qpn);
    }
    if qp.on_hw {
        undo_hw(
            c,
            &Created {
                handle: h,
                qpn: qp.qpn,
                bfreg: 0,
                rss: qp.ind_tbl.is_some(),
                sqn: qp.sqn,
                rqn: qp.rqn,
                tirn: qp.tirn,
            },
        );
    }
}
