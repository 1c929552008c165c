//! Installed flow rules (`ibv_flow`): an already compiled `ibv_flow_attr` + specs buffer
//! attached to a QP.
//!
//! The rule → bytes compiler lives in `crate::flow::verbs`; this file only checks that a buffer
//! is well formed enough for libibverbs to walk, and owns the resulting rule.

use std::mem;
use std::ptr::NonNull;
use std::sync::Arc;

use super::ffi::*;

use super::ffi::{ibv_create_flow, ibv_destroy_flow};

use super::qp::QueuePair;
use crate::error::{Error, Result};

/// Size of `struct ibv_flow_attr`, the header of a compiled rule.
pub const FLOW_ATTR_SIZE: usize = mem::size_of::<ibv_flow_attr>();
/// Size of the header every spec starts with (`type: u32, size: u16`, padded).
const SPEC_HDR_SIZE: usize = 8;

/// Checks that `bytes` is an `ibv_flow_attr` followed by `num_of_specs` specs that each lie
/// inside the buffer. Returns the number of bytes the rule uses.
///
/// # Errors
/// [`Error::Config`] naming what is malformed.
pub fn check_attr(bytes: &[u8]) -> Result<usize> {
    if bytes.len() < FLOW_ATTR_SIZE {
        return Err(Error::Config(format!(
            "compiled flow rule of {} bytes is shorter than ibv_flow_attr ({FLOW_ATTR_SIZE})",
            bytes.len()
        )));
    }
    // `num_of_specs` is the byte after comp_mask (4), type (4), size (2), priority (2).
    let nspecs = bytes[12];
    let mut off = FLOW_ATTR_SIZE;
    for i in 0..nspecs {
        let hdr = bytes.get(off..off + SPEC_HDR_SIZE).ok_or_else(|| {
            Error::Config(format!("flow spec {i} starts past the end of the rule"))
        })?;
        let size = u16::from_ne_bytes([hdr[4], hdr[5]]) as usize;
        if size < SPEC_HDR_SIZE || off + size > bytes.len() || !size.is_multiple_of(4) {
            return Err(Error::Config(format!(
                "flow spec {i} at offset {off} has bad size {size} (rule is {} bytes)",
                bytes.len()
            )));
        }
        off += size;
    }
    Ok(off)
}

/// One rule attached to a QP. Detached (`ibv_destroy_flow`) on drop; keeps the QP alive.
pub struct Flow {
    flow: NonNull<ibv_flow>,
    /// Still attached (`ibv_destroy_flow` not yet called).
    attached: bool,
    _qp: Arc<dyn QueuePair>,
}

// SAFETY: a flow handle is only used to destroy it, which libibverbs allows from any thread.
unsafe impl Send for Flow {}
// SAFETY: `&Flow` exposes only the pointer value.
unsafe impl Sync for Flow {}

impl std::fmt::Debug for Flow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Flow").field("flow", &self.flow).finish()
    }
}

impl Drop for Flow {
    fn drop(&mut self) {
        if let Err(e) = self.detach() {
            log::warn!("{e}");
        }
    }
}

impl Flow {
    /// Attaches the compiled rule in `bytes` (an `ibv_flow_attr` followed by its specs, as
    /// `crate::flow::verbs::compile` produces) to `qp`.
    ///
    /// # Errors
    /// [`Error::Config`] for a malformed buffer; [`Error::Permission`] without CAP_NET_RAW;
    /// [`Error::Os`]: EINVAL when the device rejects the spec combination, EOPNOTSUPP when it
    /// has no flow steering (or the provider lacks `ibv_create_flow`), ENOMEM when its steering
    /// tables are full.
    pub fn create(qp: Arc<dyn QueuePair>, bytes: &mut [u8]) -> Result<Flow> {
        let used = check_attr(bytes)?;
        // Copy into 8-byte aligned storage: the provider reads the header and specs as structs.
        let mut aligned = vec![0u64; used.div_ceil(8)];
        // SAFETY: `aligned` has at least `used` bytes; the regions do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), aligned.as_mut_ptr().cast::<u8>(), used)
        };
        let attr = aligned.as_mut_ptr().cast::<ibv_flow_attr>();
        // SAFETY: `attr` points at a checked, aligned rule that outlives the call; the QP is
        // alive.
        let f = unsafe { ibv_create_flow(qp.as_raw(), attr) };
        let flow = NonNull::new(f).ok_or_else(|| Error::last_os("ibv_create_flow"))?;
        // Give back what the provider may have written (nothing, in practice).
        // SAFETY: same `used` bytes as above, back the other way.
        unsafe {
            std::ptr::copy_nonoverlapping(aligned.as_ptr().cast::<u8>(), bytes.as_mut_ptr(), used)
        };
        Ok(Flow {
            flow,
            attached: true,
            _qp: qp,
        })
    }

    /// Detaches the rule now (`ibv_destroy_flow`), saying whether the device did.
    ///
    /// # Errors
    /// [`Error::Os`] with the errno of `ibv_destroy_flow`; the handle is then given up (the
    /// provider freed or kept it; it cannot be used again either way).
    pub fn destroy(mut self) -> Result<()> {
        self.detach()
    }

    fn detach(&mut self) -> Result<()> {
        if !std::mem::replace(&mut self.attached, false) {
            return Ok(());
        }
        // SAFETY: created by `ibv_create_flow`, destroyed once (`attached` was true and is now
        // false); the QP is still alive (held).
        let rc = unsafe { ibv_destroy_flow(self.flow.as_ptr()) };
        if rc != 0 {
            return Err(Error::os(
                "ibv_destroy_flow",
                std::io::Error::from_raw_os_error(rc),
            ));
        }
        Ok(())
    }

    /// The raw `ibv_flow`, valid while `self` lives.
    pub fn as_raw(&self) -> *mut ibv_flow {
        self.flow.as_ptr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(specs: &[(u32, u16)]) -> Vec<u8> {
        let mut b = vec![0u8; FLOW_ATTR_SIZE];
        b[12] = specs.len() as u8;
        for &(ty, size) in specs {
            let mut s = vec![0u8; size as usize];
            s[0..4].copy_from_slice(&ty.to_ne_bytes());
            s[4..6].copy_from_slice(&size.to_ne_bytes());
            b.extend(s);
        }
        b
    }

    #[test]
    fn attr_layout_is_what_the_checker_assumes() {
        assert_eq!(FLOW_ATTR_SIZE, 20);
        assert_eq!(mem::offset_of!(ibv_flow_attr, num_of_specs), 12);
        assert_eq!(mem::size_of::<ibv_flow_spec_eth>(), 40);
    }

    #[test]
    fn checker_accepts_good_rules_and_rejects_overruns() {
        let good = rule(&[(0x20, 40), (0x30, 24)]);
        assert_eq!(check_attr(&good).unwrap(), good.len());
        assert!(check_attr(&good[..10]).is_err());
        assert!(check_attr(&good[..good.len() - 1]).is_err());
        let mut bad = good.clone();
        bad[FLOW_ATTR_SIZE + 4] = 2; // spec size below the header
        assert!(check_attr(&bad).is_err());
        let mut more = good.clone();
        more[12] = 3; // claims a spec that is not there
        assert!(check_attr(&more).is_err());
    }
}
