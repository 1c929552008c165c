//! The object tables of one open command fd (the kernel's `ufile->idr`, `rdma_core.c`): one
//! handle space for every object type, the lowest free handle first (`xa_alloc`), and use
//! counts that make a destroy of an object in use fail with EBUSY (`ib_destroy_usecnt`).
//!
//! A lookup of a missing handle or one of another type is EINVAL where an object is used
//! (`uobj_get_obj_read` returns NULL) and ENOENT where it is destroyed (`uobj_perform_destroy`
//! → `lookup_get_idr_uobject`).

use std::collections::BTreeMap;
use std::sync::Arc;

use libc::{EBUSY, EINVAL, ENOENT, ENOMEM};

use crate::pin::Pinned;
use crate::Errno;

/// A protection domain.
#[derive(Clone, Debug)]
pub struct Pd {
    /// `pdn` reported to libmlx5.
    pub pdn: u32,
}

/// A memory region.
#[derive(Clone, Debug)]
pub struct Mr {
    /// Owning PD handle.
    pub pd: u32,
    /// Start address.
    pub addr: u64,
    /// Length.
    pub len: u64,
    /// lkey (= rkey).
    pub lkey: u32,
    /// Registered with the device model.
    pub on_hw: bool,
    /// Its pages, pinned until it is deregistered.
    pub pins: Arc<Pinned>,
}

/// A completion queue.
#[derive(Clone, Debug)]
pub struct Cq {
    /// CQ number.
    pub cqn: u32,
    /// Entries (power of two).
    pub entries: u32,
    /// CQE size.
    pub cqe_size: u32,
    /// The application's `cq_context` (completion events carry it).
    pub user_handle: u64,
    /// Completion channel fd (the application's end), if any.
    pub channel: Option<i32>,
    /// Created on the device model.
    pub on_hw: bool,
    /// Its buffer and doorbell record, pinned until it is gone.
    pub pins: Arc<Pinned>,
}

/// Queue state as `ibv_qp_state` / `ibv_wq_state` numbers.
pub type VerbsState = u32;

/// A queue pair: RAW_PACKET (an SQ and maybe an RQ) or RSS (a TIR over a table).
#[derive(Clone, Debug)]
pub struct Qp {
    /// QP number (the SQ number for a RAW_PACKET QP with an SQ).
    pub qpn: u32,
    /// PD handle.
    pub pd: u32,
    /// CQ handles it uses.
    pub cqs: Vec<u32>,
    /// Device SQ, RQ and TIR numbers it created.
    pub sqn: Option<u32>,
    /// See `sqn`.
    pub rqn: Option<u32>,
    /// See `sqn`.
    pub tirn: Option<u32>,
    /// Indirection table handle (RSS QPs).
    pub ind_tbl: Option<u32>,
    /// Current state.
    pub state: VerbsState,
    /// The application's `qp_context`.
    pub user_handle: u64,
    /// Objects on the device model.
    pub on_hw: bool,
    /// Its rings and doorbell record, pinned until it is gone.
    pub pins: Arc<Pinned>,
}

/// A work queue (an RQ).
#[derive(Clone, Debug)]
pub struct Wq {
    /// WQ number (= the device's RQ number).
    pub wqn: u32,
    /// PD handle.
    pub pd: u32,
    /// CQ handle.
    pub cq: u32,
    /// Current state.
    pub state: VerbsState,
    /// Created on the device model.
    pub on_hw: bool,
    /// Its ring and doorbell record, pinned until it is gone.
    pub pins: Arc<Pinned>,
}

/// A receive WQ indirection table.
#[derive(Clone, Debug)]
pub struct IndTbl {
    /// Table number.
    pub num: u32,
    /// WQ handles.
    pub wqs: Vec<u32>,
}

/// A flow rule.
#[derive(Clone, Debug)]
pub struct Flow {
    /// QP handle.
    pub qp: u32,
    /// Device flow id.
    pub id: Option<u32>,
    /// The counters object its `IBV_FLOW_SPEC_ACTION_COUNT` spec named (a use of it).
    pub counters: Option<u32>,
}

/// An `ibv_counters` object (`UVERBS_OBJECT_COUNTERS`; mlx5's `struct mlx5_ib_mcounters`).
#[derive(Clone, Debug, Default)]
pub struct Counters {
    /// (description, index) pairs the first flow bound (`IB_COUNTER_PACKETS` / `_BYTES`, and
    /// where in the read buffer it adds).
    pub descriptions: Vec<(u32, u32)>,
    /// Highest index + 1; 0 while not bound (`cntrs_max_index`).
    pub max_index: u32,
    /// Device flows counting into it.
    pub flows: Vec<u32>,
    /// Frames of its flows already destroyed (the hardware counter outlives them).
    pub retired: u64,
}

impl Counters {
    /// Frames counted: those of its destroyed flows and of the live ones (Linux
    /// drivers/infiniband/hw/mlx5/counters.c `read_flow_counters`, one `mlx5_fc` per object;
    /// the device model counts per flow: `Hw::flow_hits`).
    pub fn packets(&self, hw: Option<&rawq_model::hw::Hw>) -> u64 {
        let live: u64 = match hw {
            Some(hw) => self
                .flows
                .iter()
                .map(|&f| hw.flow_hits(f).unwrap_or(0))
                .sum(),
            None => 0,
        };
        self.retired + live
    }
}

/// Any object.
#[derive(Clone, Debug)]
pub enum Obj {
    /// See [`Pd`].
    Pd(Pd),
    /// See [`Mr`].
    Mr(Mr),
    /// See [`Cq`].
    Cq(Cq),
    /// See [`Qp`].
    Qp(Qp),
    /// See [`Wq`].
    Wq(Wq),
    /// See [`IndTbl`].
    IndTbl(IndTbl),
    /// See [`Flow`].
    Flow(Flow),
    /// See [`Counters`].
    Counters(Counters),
}

impl Obj {
    /// Handles this object holds a use count on.
    fn uses(&self) -> Vec<u32> {
        match self {
            Obj::Pd(_) | Obj::Cq(_) | Obj::Counters(_) => Vec::new(),
            Obj::IndTbl(t) => t.wqs.clone(),
            Obj::Mr(m) => vec![m.pd],
            Obj::Qp(q) => {
                let mut v = vec![q.pd];
                v.extend(&q.cqs);
                v.extend(q.ind_tbl);
                v
            }
            Obj::Wq(w) => vec![w.pd, w.cq],
            Obj::Flow(f) => {
                let mut v = vec![f.qp];
                v.extend(f.counters);
                v
            }
        }
    }
}

struct Slot {
    obj: Obj,
    users: u32,
}

/// The handle table of one file.
#[derive(Default)]
pub struct Objects {
    slots: BTreeMap<u32, Slot>,
}

macro_rules! getter {
    ($get:ident, $get_mut:ident, $variant:ident, $t:ty) => {
        /// The object at `h` if it is of this type; EINVAL otherwise.
        ///
        /// # Errors
        /// EINVAL.
        pub fn $get(&self, h: u32) -> Result<&$t, Errno> {
            match self.slots.get(&h).map(|s| &s.obj) {
                Some(Obj::$variant(o)) => Ok(o),
                _ => Err(EINVAL),
            }
        }

        /// As the getter, mutable.
        ///
        /// # Errors
        /// EINVAL.
        pub fn $get_mut(&mut self, h: u32) -> Result<&mut $t, Errno> {
            match self.slots.get_mut(&h).map(|s| &mut s.obj) {
                Some(Obj::$variant(o)) => Ok(o),
                _ => Err(EINVAL),
            }
        }
    };
}

impl Objects {
    getter!(pd, pd_mut, Pd, Pd);
    getter!(mr, mr_mut, Mr, Mr);
    getter!(cq, cq_mut, Cq, Cq);
    getter!(qp, qp_mut, Qp, Qp);
    getter!(wq, wq_mut, Wq, Wq);
    getter!(ind_tbl, ind_tbl_mut, IndTbl, IndTbl);
    getter!(flow, flow_mut, Flow, Flow);
    getter!(counters, counters_mut, Counters, Counters);

    /// How many objects use `h` (0 for a missing handle).
    pub fn users(&self, h: u32) -> u32 {
        self.slots.get(&h).map_or(0, |s| s.users)
    }

    /// Inserts `obj` at the lowest free handle and takes use counts on what it uses.
    ///
    /// # Errors
    /// ENOMEM when the table is full.
    pub fn insert(&mut self, obj: Obj) -> Result<u32, Errno> {
        let mut h = 0u32;
        for &k in self.slots.keys() {
            if k != h {
                break;
            }
            h += 1;
        }
        if h >= crate::caps::MAX_OBJECTS {
            return Err(ENOMEM);
        }
        for u in obj.uses() {
            if let Some(s) = self.slots.get_mut(&u) {
                s.users += 1;
            }
        }
        self.slots.insert(h, Slot { obj, users: 0 });
        Ok(h)
    }

    /// Checks that `h` holds an object `is` accepts and that nothing uses it.
    ///
    /// # Errors
    /// ENOENT (missing or other type), EBUSY (in use).
    pub fn check_destroy(&self, h: u32, is: fn(&Obj) -> bool) -> Result<&Obj, Errno> {
        let s = self.slots.get(&h).ok_or(ENOENT)?;
        if !is(&s.obj) {
            return Err(ENOENT);
        }
        if s.users != 0 {
            return Err(EBUSY);
        }
        Ok(&s.obj)
    }

    /// Removes `h` (after [`Objects::check_destroy`]) and drops its use counts.
    pub fn remove(&mut self, h: u32) -> Option<Obj> {
        let s = self.slots.remove(&h)?;
        for u in s.obj.uses() {
            if let Some(t) = self.slots.get_mut(&u) {
                t.users = t.users.saturating_sub(1);
            }
        }
        Some(s.obj)
    }

    /// Handles in destruction order (users before what they use: highest handle first works
    /// because an object can only use older ones).
    pub fn handles_rev(&self) -> Vec<u32> {
        self.slots.keys().rev().copied().collect()
    }

    /// The object at `h`, of any type.
    pub fn get(&self, h: u32) -> Option<&Obj> {
        self.slots.get(&h).map(|s| &s.obj)
    }

    /// Number of live objects.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// No live objects.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

/// Live counters objects of every file of the process (the emulator's own tally, written to
/// the stats line so that a test can see that an application destroys what it creates).
pub(crate) static COUNTERS_LIVE: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(0);

/// Counters objects the application left for the close of its file to destroy.
pub(crate) static COUNTERS_LEFT_AT_CLOSE: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(0);

/// Counters objects created and not yet destroyed, in every file.
pub fn counters_live() -> u64 {
    COUNTERS_LIVE.load(std::sync::atomic::Ordering::Relaxed)
}

/// Counters objects the application did not destroy (the close of its file did), in every
/// file so far.
pub fn counters_left_at_close() -> u64 {
    COUNTERS_LEFT_AT_CLOSE.load(std::sync::atomic::Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_use_counts_and_errnos() {
        let mut t = Objects::default();
        let pd = t.insert(Obj::Pd(Pd { pdn: 1 })).unwrap();
        assert_eq!(pd, 0);
        let mr = t
            .insert(Obj::Mr(Mr {
                pd,
                addr: 0x1000,
                len: 64,
                lkey: 7,
                on_hw: false,
                pins: Arc::default(),
            }))
            .unwrap();
        assert_eq!(mr, 1);
        assert_eq!(t.cq(pd).err(), Some(EINVAL));
        assert_eq!(
            t.check_destroy(pd, |o| matches!(o, Obj::Pd(_))).err(),
            Some(EBUSY)
        );
        assert_eq!(
            t.check_destroy(mr, |o| matches!(o, Obj::Pd(_))).err(),
            Some(ENOENT)
        );
        assert_eq!(t.check_destroy(9, |_| true).err(), Some(ENOENT));
        t.remove(mr);
        assert!(t.check_destroy(pd, |o| matches!(o, Obj::Pd(_))).is_ok());
        // The freed handle is reused first.
        assert_eq!(t.insert(Obj::Pd(Pd { pdn: 2 })).unwrap(), 1);
    }
}
