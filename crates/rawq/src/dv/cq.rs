//! Completion-queue polling: the ownership test, the consumer index and its doorbell record.
//!
//! A CQE at consumer index `ci` belongs to software when its opcode is not INVALID (0xF) **and**
//! its owner bit equals `(ci >> log2(cqe_cnt)) & 1`. The `op_own` load is an acquire, the read
//! barrier before the rest of the CQE is read. The 24-bit consumer index is written to the CQ's
//! doorbell record once per poll batch ([`Cq::publish`]).

use std::ptr::NonNull;

use super::mmio;
use super::rings::CqRing;
use super::wire::cqe;

/// A CQ as the data path polls it.
pub struct Cq {
    buf: *mut u8,
    mask: u32,
    log: u32,
    /// log2 of the slot size (6 or 7).
    slot_shift: u32,
    /// Offset of the 64-byte CQE inside its slot (0, or 64 for 128-byte CQEs).
    off64: usize,
    dbrec: NonNull<u32>,
    /// Free-running consumer index.
    pub ci: u32,
    published: u32,
}

// SAFETY: the CQ memory is owned by the queue's control objects (kept alive with the queue) and
// this poller is its only CPU-side user.
unsafe impl Send for Cq {}

impl Cq {
    /// A poller over `ring`, starting at consumer index 0.
    ///
    /// # Errors
    /// [`crate::Error::Config`] if the ring geometry is not a power of two or the CQE size is
    /// neither 64 nor 128.
    pub fn new(ring: &CqRing) -> crate::Result<Cq> {
        if !ring.cqe_cnt.is_power_of_two() || ring.cqe_cnt > 1 << 24 {
            return Err(crate::Error::Config(format!(
                "CQ with {} entries: must be a power of two up to 2^24",
                ring.cqe_cnt
            )));
        }
        let (slot_shift, off64) = match ring.cqe_size {
            64 => (6, 0),
            128 => (7, 64),
            s => {
                return Err(crate::Error::Config(format!(
                    "CQE size {s}: must be 64 or 128"
                )))
            }
        };
        Ok(Cq {
            buf: ring.buf.as_ptr(),
            mask: ring.cqe_cnt - 1,
            log: ring.cqe_cnt.trailing_zeros(),
            slot_shift,
            off64,
            dbrec: ring.dbrec,
            ci: 0,
            published: 0,
        })
    }

    /// Number of entries.
    #[inline]
    pub fn len(&self) -> u32 {
        self.mask + 1
    }

    /// Always false (a CQ has at least one entry).
    #[inline]
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Pointer to the 64-byte CQE at consumer index `i`.
    #[inline(always)]
    pub(crate) fn slot(&self, i: u32) -> *mut u8 {
        let o = ((i & self.mask) as usize) << self.slot_shift;
        self.buf.wrapping_add(o + self.off64)
    }

    /// Bytes from one CQE to the next (64 or 128).
    #[inline(always)]
    pub(crate) fn slot_size(&self) -> usize {
        1 << self.slot_shift
    }

    /// The owner bit software expects at consumer index `i`.
    #[inline(always)]
    pub(crate) fn owner_at(&self, i: u32) -> u8 {
        ((i >> self.log) & 1) as u8
    }

    /// The slots from consumer index `ci` to the end of the ring, for a loop that walks them
    /// with a pointer: (the CQE at `ci`, slots up to the ring end, bytes from one CQE to the
    /// next, the owner bit software expects on all of them).
    #[inline(always)]
    pub(crate) fn run_from(&self, ci: u32) -> (*const u8, u32, usize, u8) {
        (
            self.slot(ci),
            self.mask + 1 - (ci & self.mask),
            1 << self.slot_shift,
            self.owner_at(ci),
        )
    }

    /// The CQE at `ci` if software owns it, else `None`.
    ///
    /// The reference stays valid (and the entry unchanged) until the consumer index is
    /// published past it: the device does not rewrite a slot software has not released.
    #[inline(always)]
    pub(crate) fn peek<'a>(&self) -> Option<&'a [u8; 64]> {
        self.peek_at(self.ci)
    }

    /// As [`Cq::peek`] at consumer index `ci` (a caller keeping the index in a local).
    #[inline(always)]
    pub(crate) fn peek_at<'a>(&self, ci: u32) -> Option<&'a [u8; 64]> {
        let p = self.slot(ci);
        // SAFETY: `p` is a CQE of the live CQ ring (index masked); byte 63 is `op_own`.
        let op = unsafe { mmio::op_own_load(p.add(cqe::field::OP_OWN)) };
        if op >> 4 == cqe::OP_INVALID || op & 1 != self.owner_at(ci) {
            return None;
        }
        // SAFETY: the acquire load above orders every later read of the entry after the
        // ownership check; the entry is 64 bytes inside the ring, and the device leaves it alone
        // until software publishes a consumer index past it (see above).
        Some(unsafe { &*(p as *const [u8; 64]) })
    }

    /// Whether software owns the CQE at the consumer index (what [`Cq::peek`] tests), as one
    /// test: an empty poll takes the same instructions whether the slot holds an invalidated
    /// entry or one of the previous lap.
    #[inline(always)]
    pub(crate) fn ready(&self) -> bool {
        let p = self.slot(self.ci);
        // SAFETY: `p` is a CQE of the live CQ ring (index masked); byte 63 is `op_own`.
        let op = unsafe { mmio::op_own_load(p.add(cqe::field::OP_OWN)) };
        // The owner bit's mismatch moved above the opcode: one comparison for both.
        let x = op as u32 | ((op ^ self.owner_at(self.ci)) as u32 & 1) << 8;
        x < (cqe::OP_INVALID as u32) << 4
    }

    /// Copies the 64 bytes at consumer index `i` without an ownership test (mini-CQE arrays of a
    /// compressed session, which carry no owner bit).
    #[inline(always)]
    pub(crate) fn read_raw(&self, i: u32) -> [u8; 64] {
        let mut c = [0u8; 64];
        // SAFETY: slot `i` is inside the ring; it belongs to a session whose title software owns.
        unsafe { std::ptr::copy_nonoverlapping(self.slot(i), c.as_mut_ptr(), 64) };
        c
    }

    /// Marks the `n` slots from consumer index `i` on invalid (`op_own = 0xF0`) so that a stale
    /// entry never looks valid later: a pointer walk per run up to the ring end (a compressed
    /// session's slots after its title; DPDK invalidates every slot of a consumed session
    /// too, drivers/net/mlx5/mlx5_rx.c `mlx5_rx_poll_len`, `op_own = MLX5_CQE_INVALIDATE`).
    /// One copy per slot size, eight stores an iteration: a session of 64 has 63 slots to
    /// invalidate, and a store, a pointer step and a loop test each cost as much as the store.
    #[inline(always)]
    pub(crate) fn scrub_run(&self, i: u32, n: u32) {
        if self.slot_shift == 6 {
            self.scrub::<64>(i, n)
        } else {
            self.scrub::<128>(i, n)
        }
    }

    /// [`Cq::scrub_run`] with `STEP`-byte slots.
    #[inline(always)]
    fn scrub<const STEP: usize>(&self, i: u32, n: u32) {
        let (mut i, mut left) = (i, n);
        while left > 0 {
            let (first, to_end, _, _) = self.run_from(i);
            let run = left.min(to_end);
            let mut p = first.wrapping_add(cqe::field::OP_OWN) as *mut u8;
            let mut k = run;
            while k >= 8 {
                for j in 0..8 {
                    // SAFETY: `j < 8 <= k`, and the `k` slots from `p` lie before the ring's end
                    // (`run <= to_end`): each is the `op_own` byte of a slot inside the ring,
                    // consumed by software and not yet published.
                    unsafe { mmio::op_own_store(p.add(j * STEP), cqe::OP_OWN_INVALID) };
                }
                p = p.wrapping_add(8 * STEP);
                k -= 8;
            }
            // The last `k < 8`: four, two and one by the bits of `k` (no loop test a slot).
            for b in [4usize, 2, 1] {
                if k as usize & b != 0 {
                    for j in 0..b {
                        // SAFETY: `j < b`, and the `b <= k` slots from `p` are among the run's
                        // last `k`, inside the ring as above.
                        unsafe { mmio::op_own_store(p.add(j * STEP), cqe::OP_OWN_INVALID) };
                    }
                    p = p.wrapping_add(b * STEP);
                }
            }
            i = i.wrapping_add(run);
            left -= run;
        }
    }

    /// Whether the entry at the consumer index (which software owns) is a compressed session's
    /// title (CQE format 3).
    #[inline(always)]
    pub(crate) fn title_at_ci(&self) -> bool {
        // SAFETY: as in `ready`.
        let op = unsafe { mmio::op_own_load(self.slot(self.ci).add(cqe::field::OP_OWN)) };
        (op >> 2) & 3 == cqe::FORMAT_COMPRESSED
    }

    /// Writes the consumer index to the CQ doorbell record if it moved.
    #[inline(always)]
    pub fn publish(&mut self) {
        if self.ci != self.published {
            self.published = self.ci;
            mmio::dbrec_store(self.dbrec, self.ci & 0x00ff_ffff);
        }
    }
}

/// A device's free-running clock: what CQE timestamps count (mlx5dv.h `struct mlx5_cqe64`
/// `timestamp`, read by [`RxMeta::hw_timestamp`](crate::RxMeta::hw_timestamp)), and a reading
/// of it now, for stamping send times in the same time base (MoonGen-style: the sender reads
/// the device clock in software; the receiver takes the device's completion timestamp).
#[derive(Clone, Debug)]
pub struct DeviceClock {
    khz: u64,
    read: ClockRead,
}

#[derive(Clone)]
enum ClockRead {
    /// The device model's clock: `khz` ticks per millisecond since `epoch` (the formula of the
    /// model's own CQE writer, so the two readings agree).
    Since(std::time::Instant),
    /// A verbs device's free-running clock, read through the provider's `query_rt_values`
    /// (libmlx5 `mlx5_query_rt_values`: the internal timer from the mapped core clock page,
    /// returned as `raw_clock.tv_nsec` with `tv_sec` 0). The context is kept open.
    Verbs {
        ctx: crate::ibverbs::context::Context,
        query: RtValuesFn,
    },
}

/// `verbs_context.query_rt_values` (verbs.h).
type RtValuesFn = unsafe extern "C" fn(
    *mut crate::ibverbs::ffi::ibv_context,
    *mut crate::ibverbs::ffi::ibv_values_ex,
) -> i32;

impl std::fmt::Debug for ClockRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClockRead::Since(e) => f.debug_tuple("Since").field(e).finish(),
            ClockRead::Verbs { ctx, .. } => f.debug_tuple("Verbs").field(&ctx.name()).finish(),
        }
    }
}

/// The address of member `field` of the `struct verbs_context` around `ctx`, if the provider's
/// extended context is that large: verbs.h `verbs_get_ctx_op` (`container_of(ctx, struct
/// verbs_context, context)`, valid only when `ctx->abi_compat` is `__VERBS_ABI_IS_EXTENDED`,
/// `(void *)UINTPTR_MAX`, and `vctx->sz` covers the member). Offsets are taken from the end of
/// the struct (the `context` member), where verbs.h keeps them stable: new ops are added at
/// the front.
///
/// # Safety
/// `ctx` must be an open context.
unsafe fn verbs_op(ctx: *mut crate::ibverbs::ffi::ibv_context, field: usize) -> Option<*const u8> {
    use crate::ibverbs::ffi::verbs_context;
    let ctx_off = std::mem::offset_of!(verbs_context, context);
    let sz_off = std::mem::offset_of!(verbs_context, sz);
    // SAFETY: `ctx` is open (caller); `abi_compat` is a plain member of `ibv_context`.
    if unsafe { (*ctx).abi_compat } as usize != usize::MAX {
        return None;
    }
    let base = (ctx as *const u8).wrapping_sub(ctx_off);
    // SAFETY: an extended context lies inside its `verbs_context`, whose `sz` member sits just
    // before `context` (verbs.h).
    let sz = unsafe { std::ptr::read_unaligned(base.wrapping_add(sz_off) as *const usize) };
    let from_end = std::mem::size_of::<verbs_context>() - field;
    (sz >= from_end).then(|| base.wrapping_add(field))
}

impl DeviceClock {
    /// The clock of the verbs device behind `ctx`: its frequency from `ibv_query_device_ex`
    /// (`hca_core_clock`, kHz) and readings through `ibv_query_rt_values_ex`
    /// (`IBV_VALUES_MASK_RAW_CLOCK`), both reached through the provider's extended context as
    /// verbs.h's inline wrappers do.
    ///
    /// # Errors
    /// [`crate::Error::Unsupported`] if the provider has neither op or reports no clock
    /// frequency; [`crate::Error::Os`] with the errno of a failed query.
    pub fn of_verbs(ctx: &crate::ibverbs::context::Context) -> crate::Result<DeviceClock> {
        use crate::ibverbs::ffi::{ibv_device_attr_ex, ibv_values_ex, verbs_context};
        type QueryDeviceEx = unsafe extern "C" fn(
            *mut crate::ibverbs::ffi::ibv_context,
            *const crate::ibverbs::ffi::ibv_query_device_ex_input,
            *mut ibv_device_attr_ex,
            usize,
        ) -> i32;
        let raw = ctx.as_raw();
        let unsupported = |what: &str| {
            crate::Error::Unsupported(format!(
                "{}: the provider offers no {what}, so there is no device clock to read",
                ctx.name()
            ))
        };
        // SAFETY: `raw` is open while `ctx` lives.
        let qd = unsafe { verbs_op(raw, std::mem::offset_of!(verbs_context, query_device_ex)) }
            .ok_or_else(|| unsupported("query_device_ex"))?;
        // SAFETY: the member is an `Option<fn>` (verbs.h: a function pointer, NULL if absent).
        let qd: Option<QueryDeviceEx> = unsafe { std::ptr::read_unaligned(qd as *const _) };
        let qd = qd.ok_or_else(|| unsupported("query_device_ex"))?;
        // SAFETY: plain old data; all-zero is valid.
        let mut a: ibv_device_attr_ex = unsafe { std::mem::zeroed() };
        // SAFETY: the provider's op on its open context, with an output buffer of the size
        // passed (verbs.h `ibv_query_device_ex` passes `sizeof(*attr)` the same way).
        let rc = unsafe { qd(raw, std::ptr::null(), &mut a, std::mem::size_of_val(&a)) };
        if rc != 0 {
            return Err(crate::Error::os(
                "ibv_query_device_ex",
                std::io::Error::from_raw_os_error(rc),
            ));
        }
        if a.hca_core_clock == 0 {
            return Err(unsupported("core clock frequency (hca_core_clock 0)"));
        }
        // SAFETY: as above.
        let rt = unsafe { verbs_op(raw, std::mem::offset_of!(verbs_context, query_rt_values)) }
            .ok_or_else(|| unsupported("query_rt_values"))?;
        // SAFETY: as above.
        let rt: Option<RtValuesFn> = unsafe { std::ptr::read_unaligned(rt as *const _) };
        let query = rt.ok_or_else(|| unsupported("query_rt_values"))?;
        let c = DeviceClock {
            khz: a.hca_core_clock,
            read: ClockRead::Verbs {
                ctx: ctx.clone(),
                query,
            },
        };
        // One reading now, so that a clock that cannot be read fails here, not per burst.
        // SAFETY: plain old data; all-zero is valid.
        let mut v: ibv_values_ex = unsafe { std::mem::zeroed() };
        v.comp_mask = crate::ibverbs::ffi::ibv_values_mask::IBV_VALUES_MASK_RAW_CLOCK.0;
        // SAFETY: the provider's op on its open context with a valid output.
        let rc = unsafe { query(raw, &mut v) };
        if rc != 0 {
            return Err(crate::Error::os(
                "ibv_query_rt_values_ex",
                std::io::Error::from_raw_os_error(rc),
            ));
        }
        Ok(c)
    }
}

impl DeviceClock {
    /// A clock of `khz` kHz that counted 0 at `epoch` (the device model's).
    pub(crate) fn since(epoch: std::time::Instant, khz: u64) -> DeviceClock {
        DeviceClock {
            khz,
            read: ClockRead::Since(epoch),
        }
    }

    /// The clock's frequency in kHz.
    pub fn khz(&self) -> u64 {
        self.khz
    }

    /// The clock now, in ticks.
    #[inline]
    pub fn now_ticks(&self) -> u64 {
        match &self.read {
            ClockRead::Since(epoch) => {
                let ns = epoch.elapsed().as_nanos();
                (ns * self.khz as u128 / 1_000_000).min(u64::MAX as u128) as u64
            }
            ClockRead::Verbs { ctx, query } => {
                // SAFETY: plain old data; all-zero is valid.
                let mut v: crate::ibverbs::ffi::ibv_values_ex = unsafe { std::mem::zeroed() };
                v.comp_mask = crate::ibverbs::ffi::ibv_values_mask::IBV_VALUES_MASK_RAW_CLOCK.0;
                // SAFETY: the provider's op (checked in `of_verbs`) on its context, kept open
                // by `ctx`, with a valid output.
                let rc = unsafe { query(ctx.as_raw(), &mut v) };
                if rc != 0 {
                    return 0; // read before: `of_verbs` checked that the clock reads
                }
                v.raw_clock.tv_nsec as u64
            }
        }
    }

    /// `ticks` of this clock in nanoseconds (of the device's time base).
    #[inline]
    pub fn ticks_to_ns(&self, ticks: u64) -> u64 {
        crate::packet::ticks_to_ns(ticks, self.khz)
    }

    /// The clock now, in nanoseconds of the device's time base.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        self.ticks_to_ns(self.now_ticks())
    }
}

/// Arming a CQ for one completion event, as mlx5 requires it and as rawq must do it itself
/// (libmlx5's `ibv_req_notify_cq` arms with libmlx5's own consumer index, which knows nothing
/// of the CQEs rawq consumed). Follows rdma-core providers/mlx5/cq.c `mlx5_arm_cq` and DPDK
/// drivers/net/mlx5/mlx5_rxq.c `mlx5_arm_cq` (called by `mlx5_rx_intr_enable`):
///
/// 1. the arm word `sn << 28 | cmd | ci` (`sn` the 2-bit arm sequence number, `cmd`
///    `MLX5_CQ_DB_REQ_NOT` = 0 for every completion, `ci` the 24-bit consumer index) into
///    `dbrec[MLX5_CQ_ARM_DB]`, the record's second word;
/// 2. a write barrier (`mmio_wc_start` / `rte_io_wmb`), so that the record is in memory before
///    the device sees the doorbell;
/// 3. the 64-bit doorbell `arm word << 32 | cqn`, big-endian, at `MLX5_CQ_DOORBELL` (0x20) of
///    the CQ's UAR page (`mlx5dv_cq.cq_uar`), then a flush (`mmio_flush_writes`).
///
/// The sequence number goes up by one for each completion event taken (libmlx5
/// `mlx5_cq_event`, DPDK `mlx5_rx_intr_disable`: `rxq->cq_arm_sn++`), so that each arm after an
/// event is a new word the device can tell from the last.
#[derive(Debug)]
pub struct CqArm {
    /// `dbrec[MLX5_CQ_ARM_DB]`.
    arm_rec: NonNull<u32>,
    /// `cq_uar + MLX5_CQ_DOORBELL`.
    doorbell: NonNull<u8>,
    cqn: u32,
    sn: u32,
}

// SAFETY: the record and the UAR page are owned by the queue's control objects, alive as long
// as the queue; only the thread driving the queue arms it.
unsafe impl Send for CqArm {}

/// `MLX5_CQ_DOORBELL`: the CQ doorbell's offset in a UAR page (Linux
/// include/linux/mlx5/doorbell.h).
pub const MLX5_CQ_DOORBELL: usize = 0x20;

impl CqArm {
    /// Arms the CQ `cqn` whose doorbell record is `dbrec` (the consumer-index word; the arm
    /// word follows it) through the UAR page `cq_uar`.
    ///
    /// # Safety
    /// `dbrec` must be the live 8-byte doorbell record of CQ `cqn` and `cq_uar` its live UAR
    /// page (at least `MLX5_CQ_DOORBELL + 8` bytes, mapped writable), both for as long as the
    /// returned value is used.
    pub unsafe fn new(dbrec: NonNull<u32>, cq_uar: NonNull<u8>, cqn: u32) -> CqArm {
        CqArm {
            // SAFETY: the record is two words (caller).
            arm_rec: unsafe { dbrec.add(1) },
            // SAFETY: inside the UAR page (caller).
            doorbell: unsafe { cq_uar.add(MLX5_CQ_DOORBELL) },
            cqn,
            sn: 0,
        }
    }

    /// Arms for the next completion past consumer index `ci` (which the caller published).
    pub fn arm(&self, ci: u32) {
        let word = (self.sn & 3) << 28 | (ci & 0x00ff_ffff);
        mmio::dbrec_store(self.arm_rec, word);
        mmio::wc_flush();
        let db = (u64::from(word) << 32 | u64::from(self.cqn)).to_be_bytes();
        // SAFETY: `doorbell` is the CQ doorbell register of a live UAR page, 8-byte aligned
        // (0x20 into a page).
        unsafe { mmio::uar_write64(self.doorbell.as_ptr(), db) };
        mmio::wc_flush();
    }

    /// `n` completion events were taken: the next arm carries the next sequence number.
    pub fn events_taken(&mut self, n: u32) {
        self.sn = self.sn.wrapping_add(n);
    }

    /// The arm sequence number (2 bits of it go into the arm word).
    pub fn sn(&self) -> u32 {
        self.sn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `scrub_run` invalidates exactly the slots asked for, across the ring's end, in 64- and
    /// 128-byte slots (the 64-byte CQE being the second half of a 128-byte slot), for runs
    /// shorter than, equal to and longer than its eight-store step, and the whole ring.
    #[test]
    fn scrub_run_invalidates_exactly_its_slots_across_the_wrap() {
        const CNT: usize = 32;
        // (free-running start, slots): 61 is slot 29 on the second lap.
        for (start, n) in [
            (61u32, 6u32),
            (5, 20),
            (59, 25),
            (0, 32),
            (40, 8),
            (3, 0),
            (7, 17),
            (9, 15),
        ] {
            for size in [64usize, 128] {
                let mut mem = vec![0x55u8; CNT * size];
                let mut db = 0u32;
                let ring = CqRing {
                    buf: NonNull::new(mem.as_mut_ptr()).unwrap(),
                    cqe_cnt: CNT as u32,
                    cqe_size: size as u32,
                    dbrec: NonNull::from(&mut db),
                    cqn: 1,
                };
                let cq = Cq::new(&ring).unwrap();
                cq.scrub_run(start, n);
                for s in 0..CNT {
                    let inside = (s + CNT - start as usize % CNT) % CNT < n as usize;
                    let want = if inside { cqe::OP_OWN_INVALID } else { 0x55 };
                    let op_own = mem[s * size + size - 1];
                    assert_eq!(
                        op_own, want,
                        "{size}-byte slots, {n} from {start}: slot {s}"
                    );
                    assert!(mem[s * size..s * size + size - 1]
                        .iter()
                        .all(|&b| b == 0x55));
                }
            }
        }
    }
}
