//! The model as hardware: device objects (CQ, SQ, RQ, TIR, flow, MR) created one by one over
//! rings that live anywhere: the model's own memory (what rawq's `ModelPort` does) or an
//! application's buffers handed over by the emulated kernel (the `rawq-emu` crate, which decodes
//! the uverbs commands libibverbs/libmlx5 write and calls these methods).
//!
//! This is the contract between the emulated kernel and the device engine. Names follow the
//! mlx5 PRM / rdma-core: a RAW_PACKET QP is an SQ (plus optionally an RQ and a TIR pointing at
//! it); an ibv_wq is an RQ; an RSS QP is a TIR over an indirection table of RQs; a flow steers
//! matching frames to a TIR (or drops them).
//!
//! Objects are addressed by the numbers the create calls return (cqn, sqn, rqn, tirn, flow id,
//! lkey). Every method validates its arguments and answers [`Error::Config`] /
//! [`Error::Unsupported`] rather than panic; the emulator maps those to the kernel's errno.
//!
//! Every data-path behaviour is in the model's engine (`model/src/engine`), each with the
//! vendor source it follows.
//!
//! # Notes for the emulated kernel
//! * A RAW_PACKET QP's `qp_num` must be its sqn: libmlx5 writes `qp_num` into every control
//!   segment and the device checks it (LOCAL_QP_OP_ERR otherwise).
//! * The SQ and RQ of one QP carry the QP's user index (`mlx5_ib_create_qp.uidx`); duplicates
//!   are allowed.
//! * CQ sizes are the slot counts libmlx5 allocated (`align_queue_size(cqe + 1)`), not the
//!   `cqe` the application asked for.
//! * CQ arming is seen through the arm word `dbrec[1]` (the creator leaves an impossible arm
//!   word there before [`Hw::create_cq`], after libmlx5 zeroed it; the device never writes
//!   the record) together with the CQ doorbell on the UAR ([`Hw::set_cq_uar`]): the record
//!   alone arms nothing. One [`HwEvent::Completion`] per arm.
//! * RSS QP: [`Hw::create_tir`] refuses the field combinations the kernel refuses (EINVAL).
//!   The TIR hashes plain Toeplitz over the key the application gave, as the model does: the
//!   kernel set `rx_hash_symmetric` on RSS QP TIRs until 2019 and no longer does ("IB/mlx5:
//!   Fix RSS Toeplitz setup to be aligned with the HW specification", Yishai Hadas, mainline
//!   in 2019, also in the 4.14 / 4.19 / 5.2 stable trees: forcing the symmetric variant gave the wrong
//!   distribution; an application wanting symmetry uses a symmetric key). Linux
//!   drivers/infiniband/hw/mlx5/qp.c `create_rss_raw_qp_tir` sets only `rx_hash_fn` Toeplitz
//!   and the key; the model's hash values are the Microsoft RSS verification suite's
//!   (`flow/toeplitz.rs` tests).
//! * `IBV_WQ_FLAGS_CVLAN_STRIPPING`: [`Hw::set_rq_vlan_strip`].
//! * Nothing happens unless [`Hw::process`] runs (or a thread from [`Hw::spawn`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;

use super::engine::HwState;
pub use super::engine::HwTuning;
use super::{ModelCounters, ModelThread};
pub use crate::config::NetdevPath;

pub use crate::desc::{
    CqDesc, FlowDesc, FlowSpec, HwEvent, HwOptions, Masked, QueueState, RqDesc, RssHash, SqDesc,
    TirDesc,
};

/// The device: a cheap handle (`Clone + Send + Sync`).
#[derive(Clone)]
pub struct Hw {
    inner: Arc<HwShared>,
}

type Sink = Box<dyn FnMut(HwEvent) + Send>;

struct HwShared {
    st: Mutex<HwState>,
    /// Events handed from the state to the sink (swapped with the state's, no allocation).
    spare: Mutex<Vec<HwEvent>>,
    sink: Mutex<Option<Sink>>,
    /// [`ModelCounters::work_ns`], added to by the device's thread outside the state's lock.
    work_ns: AtomicU64,
    /// Control commands waiting for the device to finish its round ([`Hw::commands_waiting`]).
    waiting: AtomicU64,
    /// The test hold on the device's rounds ([`Hw::hold_rounds`]).
    hold: Arc<HoldState>,
}

/// A hold on the device's rounds ([`Hw::hold_rounds`]).
#[derive(Default)]
struct HoldState {
    /// Armed: the next round waits (inside, the device's lock held) until released.
    armed: AtomicBool,
    /// (a round is waiting in the hold, released)
    st: Mutex<(bool, bool)>,
    cv: std::sync::Condvar,
}

/// A hold on the device's rounds, from [`Hw::hold_rounds`]: the next round the device starts
/// stops inside, the device's lock held, as a device thread taken off its CPU in the middle of
/// its work would, until [`RoundHold::release`] (or the hold is dropped).
pub struct RoundHold {
    hold: Arc<HoldState>,
}

impl RoundHold {
    /// Waits up to `timeout` until a round is held; whether one is.
    pub fn wait_held(&self, timeout: std::time::Duration) -> bool {
        let g = relock(&self.hold.st);
        let (g, _) = self
            .hold
            .cv
            .wait_timeout_while(g, timeout, |s| !s.0)
            .unwrap_or_else(|p| p.into_inner());
        g.0
    }

    /// Lets the held round (and every later one) run.
    pub fn release(&self) {
        self.hold.armed.store(false, Ordering::SeqCst);
        relock(&self.hold.st).1 = true;
        self.hold.cv.notify_all();
    }
}

impl Drop for RoundHold {
    fn drop(&mut self) {
        self.release();
    }
}

impl std::fmt::Debug for RoundHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RoundHold").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Hw {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hw")
            .field("counters", &self.counters())
            .finish_non_exhaustive()
    }
}

fn relock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Hw {
    /// A device with its wire.
    ///
    /// # Errors
    /// [`Error::Config`] for bad options; [`Error::Os`] if the wire or netdev cannot be opened.
    pub fn new(opts: HwOptions) -> Result<Hw> {
        Hw::with_tuning(opts, HwTuning::default())
    }

    /// A device with its wire and non-default properties.
    ///
    /// # Errors
    /// As [`Hw::new`].
    pub fn with_tuning(opts: HwOptions, tune: HwTuning) -> Result<Hw> {
        let st = HwState::new(opts, tune)?;
        Ok(Hw {
            inner: Arc::new(HwShared {
                st: Mutex::new(st),
                spare: Mutex::new(Vec::with_capacity(256)),
                sink: Mutex::new(None),
                work_ns: AtomicU64::new(0),
                waiting: AtomicU64::new(0),
                hold: Arc::default(),
            }),
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, HwState> {
        relock(&self.inner.st)
    }

    /// The device's lock for a control command (a queue's state change): counted in
    /// [`Hw::commands_waiting`] while it waits for the device to finish its round.
    fn command(&self) -> MutexGuard<'_, HwState> {
        self.inner.waiting.fetch_add(1, Ordering::SeqCst);
        let g = self.lock();
        self.inner.waiting.fetch_sub(1, Ordering::SeqCst);
        g
    }

    /// Queue state commands ([`Hw::set_sq_state`], [`Hw::stop_sq`], [`Hw::set_rq_state`])
    /// waiting now for the device to finish the round it is in (a driver closing a queue while
    /// the device works, for tests: see [`Hw::hold_rounds`]).
    pub fn commands_waiting(&self) -> u64 {
        self.inner.waiting.load(Ordering::SeqCst)
    }

    /// Holds the device's next round (for tests): the round starts, takes the device's lock
    /// and waits there until the returned hold is released, as a device thread taken off its
    /// CPU in the middle of its work would. Commands wait for it meanwhile
    /// ([`Hw::commands_waiting`]); a driver polling its completions sees none.
    pub fn hold_rounds(&self) -> RoundHold {
        let h = self.inner.hold.clone();
        *relock(&h.st) = (false, false);
        h.armed.store(true, Ordering::SeqCst);
        RoundHold { hold: h }
    }

    /// In a round: waits while a hold is armed (see [`Hw::hold_rounds`]).
    fn held(&self) {
        let h = &self.inner.hold;
        if !h.armed.load(Ordering::Relaxed) {
            return;
        }
        let mut g = relock(&h.st);
        g.0 = true;
        h.cv.notify_all();
        while !g.1 {
            g = h.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Cables two devices to each other (replacing both wires).
    pub fn connect(a: &Hw, b: &Hw) {
        let ia = a.lock().inbox.clone();
        let ib = b.lock().inbox.clone();
        a.lock().link = super::engine::Link::Peer(ib);
        b.lock().link = super::engine::Link::Peer(ia);
    }

    /// The wire becomes `fd`, a connected `SOCK_SEQPACKET` socket whose every message is one
    /// frame (replacing the wire): frames sent go to the other end, frames it sends come in;
    /// a frame the socket refuses (full, the other end gone) is a wire drop.
    pub fn plug_socket(&self, fd: std::os::fd::OwnedFd) {
        let new = super::engine::Link::Bridge(super::link::AfPacket::connected(fd));
        // The old wire is closed after the lock is let go.
        let old = std::mem::replace(&mut self.lock().link, new);
        drop(old);
    }

    /// Registers `len` bytes at `addr` in protection domain 0, writable by the device;
    /// returns the lkey the device will check.
    ///
    /// # Errors
    /// [`Error::Config`] for an empty or wrapping range.
    pub fn reg_mr(&self, addr: u64, len: u64) -> Result<u32> {
        self.lock().reg_mr_in(addr, len, 0, true)
    }

    /// Registers `len` bytes at `addr` in protection domain `pd`; `local_write`: the device
    /// may write it (`IBV_ACCESS_LOCAL_WRITE`, the mkey context's `lw` bit: Linux
    /// drivers/infiniband/hw/mlx5/mr.c `set_mkc_access_pd_addr_fields`). Returns the lkey: the
    /// mkey index above an 8-bit variant that changes with every registration (mr.c
    /// `assign_mkey_variant`), so a key kept past its deregistration does not name a later
    /// region. Queues use a region only through a key of their own PD
    /// ([`Hw::set_sq_pd`], [`Hw::set_rq_pd`]), and receive only into writable ones; any other
    /// use is a LOCAL_PROT_ERR completion.
    ///
    /// # Errors
    /// [`Error::Config`] for an empty or wrapping range.
    pub fn reg_mr_in(&self, addr: u64, len: u64, pd: u32, local_write: bool) -> Result<u32> {
        self.lock().reg_mr_in(addr, len, pd, local_write)
    }

    /// The protection domain of SQ `sqn` (0 unless set): the PD its data segments' keys must
    /// belong to.
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown SQ.
    pub fn set_sq_pd(&self, sqn: u32, pd: u32) -> Result<()> {
        self.lock().sq_mut(sqn)?.pd = pd;
        Ok(())
    }

    /// The protection domain of RQ `rqn` (0 unless set), as [`Hw::set_sq_pd`].
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown RQ.
    pub fn set_rq_pd(&self, rqn: u32, pd: u32) -> Result<()> {
        self.lock().rq_mut(rqn)?.pd = pd;
        Ok(())
    }

    /// The lkey of a region registered with exactly this `addr` and `len`, if any.
    pub fn find_mr(&self, addr: u64, len: u64) -> Option<u32> {
        self.lock().find_mr(addr, len)
    }

    /// Removes a registration.
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown lkey.
    pub fn dereg_mr(&self, lkey: u32) -> Result<()> {
        self.lock().dereg_mr(lkey)
    }

    /// Creates a CQ over the caller's memory; returns the cqn. The caller leaves 0xffffffff
    /// (an impossible arm) in the arm word `dbrec[1]` so that the device sees every
    /// `mlx5_arm_cq` write; the device only reads the record (it may be read-only).
    ///
    /// # Safety
    /// `d.buf` (`cqe_cnt * cqe_size` bytes) and `d.dbrec` (8 bytes) stay valid, and are only
    /// accessed as the driver side of the mlx5 protocol, until [`Hw::destroy_cq`] returns.
    ///
    /// # Errors
    /// [`Error::Config`] for a bad geometry or null pointers.
    pub unsafe fn create_cq(&self, d: CqDesc) -> Result<u32> {
        self.lock().create_cq(d)
    }

    /// Creates an SQ (in [`QueueState::Reset`]); returns the sqn (which the WQEs' control
    /// segments must carry as their QPN).
    ///
    /// # Safety
    /// As [`Hw::create_cq`], for the SQ ring, its doorbell word and the doorbell register's
    /// `2 * BF_SIZE` bytes (read with 8-byte atomic loads), until
    /// [`Hw::destroy_sq`] returns. Every data segment's address+length inside a region
    /// registered with [`Hw::reg_mr`] must stay valid while registered.
    ///
    /// # Errors
    /// [`Error::Config`] for a bad geometry or an unknown CQ.
    pub unsafe fn create_sq(&self, d: SqDesc) -> Result<u32> {
        self.lock().create_sq(d)
    }

    /// Creates an RQ (in [`QueueState::Reset`]); returns the rqn.
    ///
    /// # Safety
    /// As [`Hw::create_cq`], for the RQ ring and its doorbell word, until [`Hw::destroy_rq`].
    ///
    /// # Errors
    /// [`Error::Config`] for a bad geometry or an unknown CQ.
    pub unsafe fn create_rq(&self, d: RqDesc) -> Result<u32> {
        self.lock().create_rq(d)
    }

    /// Strips one 802.1Q tag on receive on this RQ (`IBV_WQ_FLAGS_CVLAN_STRIPPING`).
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown RQ.
    pub fn set_rq_vlan_strip(&self, rqn: u32, on: bool) -> Result<()> {
        self.lock().rq_mut(rqn)?.vlan_strip = on;
        Ok(())
    }

    /// Makes CQ `cqn` ignore overrun (or check it again): the CQ context's `oi` bit, which the
    /// kernel sets for a CQ created with `IB_UVERBS_CQ_FLAGS_IGNORE_OVERRUN` (Linux
    /// drivers/infiniband/hw/mlx5/cq.c, `mlx5_ib_create_cq`). The device then writes every
    /// CQE due, over unread ones when the CQ is full, and raises no CQ error.
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown CQ.
    pub fn set_cq_ignore_overrun(&self, cqn: u32, on: bool) -> Result<()> {
        self.lock().cq_mut(cqn)?.ignore_overrun = on;
        Ok(())
    }

    /// Where the CQ doorbell of `cqn` lands: the address of `MLX5_CQ_DOORBELL` (offset 0x20)
    /// in the UAR page its driver arms it through (libmlx5: the context's `cq_uar_reg`,
    /// handed out as `mlx5dv_cq.cq_uar`). A CQ is armed only once the arm word is in its
    /// doorbell record *and* the doorbell carrying that word and the cqn was written here;
    /// without this call it is never armed.
    ///
    /// # Safety
    /// `addr` must stay readable (8 bytes, 8-byte aligned) until the CQ is destroyed.
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown CQ or an unaligned address.
    pub unsafe fn set_cq_uar(&self, cqn: u32, addr: usize) -> Result<()> {
        if !addr.is_multiple_of(8) {
            return Err(crate::error::Error::Config(format!(
                "CQ doorbell register {addr:#x}: not 8-byte aligned"
            )));
        }
        self.lock().cq_mut(cqn)?.uar_db = addr;
        Ok(())
    }

    /// Creates a TIR over existing RQs; returns the tirn.
    ///
    /// # Errors
    /// [`Error::Config`] for unknown RQs, an empty table, several RQs without a hash, a key
    /// that is not 40 bytes, or fields the kernel refuses for an RSS QP (IPv4 with IPv6, TCP
    /// with UDP); [`Error::Unsupported`] for hash fields beyond the IPv4/IPv6 address and
    /// TCP/UDP port bits.
    pub fn create_tir(&self, d: TirDesc) -> Result<u32> {
        self.lock().create_tir(d, true)
    }

    /// As [`Hw::create_tir`], without the kernel's one-protocol-per-RSS-QP rule (the model's
    /// own port hashes IPv4 and IPv6, TCP and UDP through one TIR).
    pub fn create_tir_any(&self, d: TirDesc) -> Result<u32> {
        self.lock().create_tir(d, false)
    }

    /// Attaches a flow rule; returns its id.
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown TIR or contradictory specs (two of one layer, an L3/L4
    /// spec under another protocol, a tag over 24 bits).
    pub fn create_flow(&self, d: FlowDesc) -> Result<u32> {
        self.lock().create_flow(d)
    }

    /// Moves an SQ to `state` (Reset zeroes its position and counters; Error flushes what is
    /// posted; Error → Ready is refused: reset first).
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown SQ or a transition the hardware refuses.
    pub fn set_sq_state(&self, sqn: u32, state: QueueState) -> Result<()> {
        self.command().set_sq_state(sqn, state)
    }

    /// Stops SQ `sqn` for good, as a ConnectX's modify-to-RESET / DESTROY_SQ does: a command
    /// the device answers between two rounds of its work (never in the middle of one), after
    /// which it processes nothing of this SQ (it is in [`QueueState::Reset`], until made ready
    /// again). Returns the WQE counter the device reached: every WQE before it was carried
    /// out (its frames are on the wire, its completion written if one was asked for, or held
    /// back by [`Hw::delay_tx_completions`]), none from it on was, or ever will be. A driver
    /// that reads its CQ once more after this knows the fate of every send it posted.
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown SQ.
    pub fn stop_sq(&self, sqn: u32) -> Result<u16> {
        let mut st = self.command();
        let s = st.sq_mut(sqn)?;
        let to = s.sent_to();
        s.set_state(QueueState::Reset)?;
        Ok(to)
    }

    /// Moves an RQ to `state` (as [`Hw::set_sq_state`]).
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown RQ or a transition the hardware refuses.
    pub fn set_rq_state(&self, rqn: u32, state: QueueState) -> Result<()> {
        self.command().set_rq_state(rqn, state)
    }

    /// The state of an SQ (it moves to Error by itself after a send error or a CQ overrun).
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown SQ.
    pub fn sq_state(&self, sqn: u32) -> Result<QueueState> {
        Ok(self.lock().sq_mut(sqn)?.state)
    }

    /// The state of an RQ.
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown RQ.
    pub fn rq_state(&self, rqn: u32) -> Result<QueueState> {
        Ok(self.lock().rq_mut(rqn)?.state)
    }

    /// Destroys a CQ (refused while an SQ or RQ uses it).
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown or busy CQ.
    pub fn destroy_cq(&self, cqn: u32) -> Result<()> {
        self.lock().destroy_cq(cqn)
    }

    /// Destroys an SQ.
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown SQ.
    pub fn destroy_sq(&self, sqn: u32) -> Result<()> {
        self.lock().destroy_sq(sqn)
    }

    /// Destroys an RQ (refused while a TIR uses it).
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown or busy RQ.
    pub fn destroy_rq(&self, rqn: u32) -> Result<()> {
        self.lock().destroy_rq(rqn)
    }

    /// Destroys a TIR (refused while a flow uses it).
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown or busy TIR.
    pub fn destroy_tir(&self, tirn: u32) -> Result<()> {
        self.lock().destroy_tir(tirn)
    }

    /// Detaches a flow rule.
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown flow.
    pub fn destroy_flow(&self, id: u32) -> Result<()> {
        self.lock().destroy_flow(id)
    }

    /// Frames flow `id` has taken since it was created: delivered to its TIR (whether or not
    /// the RQ had a buffer) or dropped by a drop flow; a frame held for flow control counts
    /// once, when delivered. The flow counter of a verbs flow created with
    /// `IBV_FLOW_SPEC_ACTION_COUNT` (Linux drivers/infiniband/hw/mlx5/counters.c
    /// `read_flow_counters`).
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown flow.
    pub fn flow_hits(&self, id: u32) -> Result<u64> {
        self.lock().flow_hits(id)
    }

    /// How many flows and TIRs the device holds (a driver that adds and removes rules can
    /// check it leaks none).
    pub fn flow_and_tir_count(&self) -> (usize, usize) {
        let s = self.lock();
        (s.flows.live(), s.tirs.live())
    }

    /// Registers the receiver of [`HwEvent`]s (called from the thread running
    /// [`Hw::process`], outside the device lock: it may call the device).
    pub fn set_event_sink(&self, sink: Box<dyn FnMut(HwEvent) + Send>) {
        *relock(&self.inner.sink) = Some(sink);
    }

    /// The device clock that stamps this device's CQEs, to read from any thread without the
    /// device's lock; `None` without a clock (`clock_khz` 0).
    pub fn device_clock(&self) -> Option<crate::clock::DeviceClock> {
        let s = self.lock();
        (s.opts.clock_khz > 0).then(|| crate::clock::DeviceClock::since(s.epoch, s.opts.clock_khz))
    }

    /// The device clock now, in ticks of `clock_khz` (0 without a clock).
    pub fn clock_ticks(&self) -> u64 {
        self.lock().clock_ticks()
    }

    /// One round of device work in the calling thread; returns the work items handled.
    pub fn process(&self) -> usize {
        self.run(false)
    }

    /// As [`Hw::process`], also checking each doorbell's UAR write (for a driver stepped in
    /// the same thread, which cannot race the check).
    pub fn process_stepped(&self) -> usize {
        self.run(true)
    }

    fn run(&self, check_uar: bool) -> usize {
        let n;
        {
            let mut st = self.lock();
            self.held();
            n = st.process(check_uar);
            st.counters.polls += 1;
            st.counters.idle_polls += (n == 0) as u64;
            if st.events.is_empty() {
                return n;
            }
            let mut spare = relock(&self.inner.spare);
            std::mem::swap(&mut st.events, &mut *spare);
        }
        let mut spare = relock(&self.inner.spare);
        let mut sink = relock(&self.inner.sink);
        for e in spare.drain(..) {
            if let Some(s) = sink.as_mut() {
                s(e);
            }
        }
        n
    }

    /// Runs the device in a thread of its own (pinned to `cpu` with `sched_setaffinity` if
    /// given) until the handle is dropped. `None` if the thread could not be started.
    ///
    /// Between rounds that find nothing to do, the thread waits as a polling driver would.
    /// Pinned (a CPU of its own), it keeps polling for [`SPIN_IDLE`] after its last work, as
    /// hardware never leaves the ring, then sleeps 50 µs between polls; it never yields, as a
    /// yield hands the CPU to any other runnable task for the rest of its time slice
    /// (milliseconds, in which the driver fills the ring and waits). Not pinned (it shares
    /// CPUs with the driver), it yields between polls at once, and after 64 such polls sleeps
    /// 50 µs between polls.
    pub fn spawn(&self, cpu: Option<usize>) -> Option<ModelThread> {
        let stop = Arc::new(AtomicBool::new(false));
        let s2 = stop.clone();
        let hw = self.clone();
        let pinned = cpu.is_some();
        let handle = std::thread::Builder::new()
            .name("rawq-mlx5-model".into())
            .spawn(move || {
                if let Some(c) = cpu {
                    pin_to(c);
                }
                let mut idle = 0u32;
                // One clock read per round: the time from one read to the next is the round
                // just run, plus its wait when it was idle (and then not counted).
                let mut t = std::time::Instant::now();
                let mut last_work = t;
                let mut busy = false;
                while !s2.load(Ordering::Relaxed) {
                    let now = std::time::Instant::now();
                    if busy {
                        let ns = now.duration_since(t).as_nanos() as u64;
                        hw.inner.work_ns.fetch_add(ns, Ordering::Relaxed);
                        last_work = now;
                    }
                    t = now;
                    busy = hw.process() > 0;
                    if busy {
                        idle = 0;
                    } else if pinned {
                        if now.duration_since(last_work) < SPIN_IDLE {
                            std::hint::spin_loop();
                        } else {
                            std::thread::sleep(std::time::Duration::from_micros(50));
                        }
                    } else {
                        idle += 1;
                        if idle > 64 {
                            std::thread::sleep(std::time::Duration::from_micros(50));
                        } else {
                            std::thread::yield_now();
                        }
                    }
                }
            })
            .ok()?;
        Some(ModelThread {
            stop,
            handle: Some(handle),
        })
    }

    /// The device's counters.
    pub fn counters(&self) -> ModelCounters {
        let mut c = self.lock().counters;
        c.work_ns = self.inner.work_ns.load(Ordering::Relaxed);
        c
    }

    /// The counters of one SQ (since its last reset).
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown SQ.
    pub fn sq_counters(&self, sqn: u32) -> Result<ModelCounters> {
        Ok(self.lock().sq_mut(sqn)?.ctr)
    }

    /// The counters of one RQ (since its last reset).
    ///
    /// # Errors
    /// [`Error::Config`] for an unknown RQ.
    pub fn rq_counters(&self, rqn: u32) -> Result<ModelCounters> {
        Ok(self.lock().rq_mut(rqn)?.ctr)
    }

    /// Makes the `nth` send WQE from now on `sqn` fail with `syndrome` (unknown SQ: nothing).
    pub fn inject_tx_error(&self, sqn: u32, nth: u64, syndrome: u8) {
        if let Ok(s) = self.lock().sq_mut(sqn) {
            s.inject_fault(nth, syndrome);
        }
    }

    /// Holds back the send completions of `sqn` for `steps` rounds of [`Hw::process`].
    pub fn delay_tx_completions(&self, sqn: u32, steps: u64) {
        if let Ok(s) = self.lock().sq_mut(sqn) {
            s.set_delay(steps);
        }
    }

    /// Makes SQ `sqn` slow: at most `wqes` of its WQEs per round of [`Hw::process`] (0: no
    /// limit). Unknown SQ: nothing.
    pub fn limit_tx_per_round(&self, sqn: u32, wqes: u32) {
        if let Ok(s) = self.lock().sq_mut(sqn) {
            s.set_per_round(wqes);
        }
    }

    /// Turns flow control (pause rather than drop) on or off.
    pub fn set_flow_control(&self, on: bool) {
        self.lock().opts.flow_control = on;
    }

    /// Puts `frame` on the wire in front of the port, as if received (dropped if the wire is
    /// full).
    pub fn inject_frame(&self, frame: &[u8]) {
        let inbox = self.lock().inbox.clone();
        inbox.push(frame);
    }

    /// Puts `frame` on the wire in front of the port if the wire has room (as
    /// [`Hw::inject_frame`]); false, and nothing done, if it is full: a source inside the
    /// device's process (the emulator's frame generator) waits and offers it again instead of
    /// losing it before the port.
    pub fn offer_frame(&self, frame: &[u8]) -> bool {
        let inbox = self.lock().inbox.clone();
        inbox.push(frame)
    }
}

/// How long a pinned device thread keeps polling without giving its CPU away after its last
/// work (see [`Hw::spawn`]).
pub const SPIN_IDLE: std::time::Duration = std::time::Duration::from_millis(1);

/// Pins the calling thread to `cpu` (best effort: an impossible CPU leaves it unpinned).
fn pin_to(cpu: usize) {
    if cpu >= libc::CPU_SETSIZE as usize {
        return;
    }
    // SAFETY: cpu_set_t is plain data; zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` < CPU_SETSIZE, checked above.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu_set_t of the size passed; 0 = the calling thread.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
}

/// The CPUs the calling thread may run on (for tests of the pinning).
pub fn current_affinity() -> Vec<usize> {
    // SAFETY: as in `pin_to`.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `c` < CPU_SETSIZE.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}
