//! Flow counters (`ibv_counters`): the object a rule's flow counts into, read back with
//! `ibv_read_counters`. Control path only: one object per rule, made when the rule is added
//! and destroyed after its flows.
//!
//! The sequence is rdma-core's (libibverbs man pages `ibv_create_counters`,
//! `ibv_attach_counters_point_flow`, `ibv_read_counters`; libmlx5 providers/mlx5/verbs.c
//! `mlx5_create_counters`, `mlx5_attach_counters_point_flow`, `mlx5_create_flow`): create the
//! object, describe what goes where (`IBV_COUNTER_PACKETS` at index 0) before any flow uses
//! it, name it in an `IBV_FLOW_SPEC_ACTION_COUNT` spec of each flow of the rule (libmlx5 passes
//! the description with the first flow; the kernel binds the object to the flow's hardware
//! counter: Linux drivers/infiniband/hw/mlx5/counters.c `mlx5_ib_flow_counters_set_data`), and
//! destroy it once no flow uses it (the kernel refuses earlier with EBUSY:
//! core/uverbs_std_types_counters.c `uverbs_free_counters`).

use std::ptr::NonNull;

use crate::ibverbs::ffi::{
    ibv_attach_counter, ibv_counters, ibv_create_counters, ibv_destroy_counters, ibv_read_counters,
};

use super::pd::Pd;
use crate::error::{Error, Result};

/// `IBV_COUNTER_PACKETS` (verbs.h `enum ibv_counter_description`).
const COUNTER_PACKETS: i32 = 0;
/// `IBV_FLOW_SPEC_ACTION_COUNT` and the size of `struct ibv_flow_spec_counter_action`
/// (type, size, padding, then the object pointer).
const SPEC_ACTION_COUNT: u32 = 0x1003;
const SPEC_SIZE: usize = 16;

/// One counters object counting frames at index 0. Destroyed on drop (after the flows that
/// use it, which the owner drops first).
pub(crate) struct Counters {
    ptr: NonNull<ibv_counters>,
    /// Keeps the context alive.
    _pd: Pd,
}

// SAFETY: the object is only read and destroyed through libibverbs calls, which take their own
// locks (libmlx5 guards the object with its mutex); the pointer is not shared otherwise.
unsafe impl Send for Counters {}
// SAFETY: as above; `&Counters` only reads the counters.
unsafe impl Sync for Counters {}

impl Counters {
    /// A counters object on `pd`'s device, counting frames at index 0; `Ok(None)` when the
    /// device (or its provider, or its kernel) has no flow counters: EOPNOTSUPP, ENOSYS,
    /// EPROTONOSUPPORT.
    ///
    /// # Errors
    /// [`Error::Os`] for any other failure of `ibv_create_counters` or of the attach.
    pub(crate) fn create(pd: &Pd) -> Result<Option<Counters>> {
        // SAFETY: the context is alive (held by `pd`).
        let p = unsafe { ibv_create_counters(pd.context().as_raw()) };
        let Some(ptr) = NonNull::new(p) else {
            let e = std::io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EOPNOTSUPP | libc::ENOSYS | libc::EPROTONOSUPPORT) => Ok(None),
                _ => Err(Error::os("ibv_create_counters", e)),
            };
        };
        let c = Counters {
            ptr,
            _pd: pd.clone(),
        };
        // SAFETY: a live object, not yet bound to a flow (attach is allowed only then).
        let rc = unsafe { ibv_attach_counter(c.ptr.as_ptr(), COUNTER_PACKETS, 0) };
        if rc != 0 {
            return Err(Error::os(
                "ibv_attach_counters_point_flow",
                std::io::Error::from_raw_os_error(rc),
            ));
        }
        Ok(Some(c))
    }

    /// Appends an `IBV_FLOW_SPEC_ACTION_COUNT` spec naming this object to a compiled rule
    /// (an `ibv_flow_attr` and its specs, as `crate::flow::verbs` builds it: its `size` is the
    /// whole buffer, `num_of_specs` at byte 12).
    pub(crate) fn add_spec(&self, rule: &mut Vec<u8>) {
        let mut spec = [0u8; SPEC_SIZE];
        spec[0..4].copy_from_slice(&SPEC_ACTION_COUNT.to_ne_bytes());
        spec[4..6].copy_from_slice(&(SPEC_SIZE as u16).to_ne_bytes());
        spec[8..16].copy_from_slice(&(self.ptr.as_ptr() as u64).to_ne_bytes());
        rule.extend_from_slice(&spec);
        rule[12] = rule[12].wrapping_add(1);
        let size = u16::from_ne_bytes([rule[8], rule[9]]).wrapping_add(SPEC_SIZE as u16);
        rule[8..10].copy_from_slice(&size.to_ne_bytes());
    }

    /// Frames counted so far (read from the device: no cached value).
    ///
    /// # Errors
    /// [`Error::Os`] with the errno of `ibv_read_counters`.
    pub(crate) fn packets(&self) -> Result<u64> {
        let mut v = [0u64; 1];
        // SAFETY: a live object; `v` holds the one value asked for.
        let rc = unsafe { ibv_read_counters(self.ptr.as_ptr(), v.as_mut_ptr(), 1, 0) };
        if rc != 0 {
            return Err(Error::os(
                "ibv_read_counters",
                std::io::Error::from_raw_os_error(rc),
            ));
        }
        Ok(v[0])
    }
}

impl Drop for Counters {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_counters, destroyed once; its flows are gone (the owner
        // drops them first).
        let rc = unsafe { ibv_destroy_counters(self.ptr.as_ptr()) };
        if rc != 0 {
            log::warn!(
                "ibv_destroy_counters: {}",
                std::io::Error::from_raw_os_error(rc)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_spec_layout_is_rdma_cores() {
        assert_eq!(
            std::mem::size_of::<crate::ibverbs::ffi::ibv_flow_spec_counter_action>(),
            SPEC_SIZE
        );
        assert_eq!(
            std::mem::offset_of!(crate::ibverbs::ffi::ibv_flow_spec_counter_action, counters),
            8
        );
        assert_eq!(
            crate::ibverbs::ffi::ibv_flow_spec_type::IBV_FLOW_SPEC_ACTION_COUNT,
            SPEC_ACTION_COUNT
        );
    }
}
