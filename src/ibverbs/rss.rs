//! Receive-side scaling: an indirection table of receive WQs (`ibv_rwq_ind_table`) and a hashing
//! RAW_PACKET QP that spreads matching frames over it by a Toeplitz hash.

use std::mem;
use std::ptr::NonNull;
use std::sync::Arc;

use rdma_sys::*;

use super::inline::{ibv_create_qp_ex, ibv_create_rwq_ind_table, ibv_destroy_rwq_ind_table};

use super::context::Context;
use super::pd::Pd;
use super::qp::QueuePair;
use super::wq::Wq;
use crate::error::{Error, Result};
use crate::flow::L4Proto;

/// Which header fields feed the hash (`IBV_RX_HASH_*` bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashFields(pub u64);

impl HashFields {
    /// No hashing: every frame goes to the first table entry (a one-queue "RSS").
    pub const NONE: HashFields = HashFields(0);

    /// Addresses (and ports, when `l4` is TCP or UDP) of IPv4 or IPv6 frames.
    pub fn for_ip(ipv6: bool, l4: Option<L4Proto>) -> HashFields {
        use ibv_rx_hash_fields as f;
        let mut m = if ipv6 {
            f::IBV_RX_HASH_SRC_IPV6.0 | f::IBV_RX_HASH_DST_IPV6.0
        } else {
            f::IBV_RX_HASH_SRC_IPV4.0 | f::IBV_RX_HASH_DST_IPV4.0
        };
        match l4 {
            Some(L4Proto::Udp) => {
                m |= f::IBV_RX_HASH_SRC_PORT_UDP.0 | f::IBV_RX_HASH_DST_PORT_UDP.0
            }
            Some(L4Proto::Tcp) => {
                m |= f::IBV_RX_HASH_SRC_PORT_TCP.0 | f::IBV_RX_HASH_DST_PORT_TCP.0
            }
            _ => {}
        }
        HashFields(m as u64)
    }
}

/// The table size for `n` queues: the next power of two (entries repeat the queues in order).
pub fn table_size(n: usize) -> Option<usize> {
    if n == 0 {
        return None;
    }
    n.checked_next_power_of_two()
}

/// An indirection table over receive WQs. Keeps the WQs alive.
pub struct IndTable {
    tbl: NonNull<ibv_rwq_ind_table>,
    _wqs: Vec<Arc<Wq>>,
    _ctx: Context,
}

// SAFETY: table handles may be used from any thread; freed only in `Drop`.
unsafe impl Send for IndTable {}
// SAFETY: see `Send`.
unsafe impl Sync for IndTable {}

impl std::fmt::Debug for IndTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndTable")
            .field("wqs", &self._wqs.len())
            .finish()
    }
}

impl Drop for IndTable {
    fn drop(&mut self) {
        // SAFETY: hashing QPs over this table hold an `Arc<IndTable>`, so they are gone.
        let rc = unsafe { ibv_destroy_rwq_ind_table(self.tbl.as_ptr()) };
        if rc != 0 {
            eprintln!(
                "rawq: ibv_destroy_rwq_ind_table failed: {}",
                std::io::Error::from_raw_os_error(rc)
            );
        }
    }
}

impl IndTable {
    /// Creates a table over `wqs`. Verbs tables have a power-of-two size: when `wqs.len()` is not
    /// one, the WQs are repeated in order to fill the next power of two (so the spread is uneven
    /// by at most one table slot per queue).
    ///
    /// # Errors
    /// [`Error::Config`] for an empty list; [`Error::Os`]: EINVAL when the size exceeds the
    /// device's `max_rwq_indirection_table_size`, EOPNOTSUPP without RSS support.
    pub fn new(ctx: &Context, wqs: &[Arc<Wq>]) -> Result<IndTable> {
        let size = table_size(wqs.len())
            .ok_or_else(|| Error::Config("an RSS table needs at least one queue".into()))?;
        let mut raw: Vec<*mut ibv_wq> = (0..size).map(|i| wqs[i % wqs.len()].as_raw()).collect();
        // SAFETY: plain old data; all-zero is a valid start.
        let mut a: ibv_rwq_ind_table_init_attr = unsafe { mem::zeroed() };
        a.log_ind_tbl_size = size.trailing_zeros();
        a.ind_tbl = raw.as_mut_ptr();
        // SAFETY: `raw` holds `size` live WQs and outlives the call; the context is alive.
        let t = unsafe { ibv_create_rwq_ind_table(ctx.as_raw(), &mut a) };
        let tbl = NonNull::new(t).ok_or_else(|| Error::last_os("ibv_create_rwq_ind_table"))?;
        Ok(IndTable {
            tbl,
            _wqs: wqs.to_vec(),
            _ctx: ctx.clone(),
        })
    }

    /// The raw table, valid while `self` lives.
    pub fn as_raw(&self) -> *mut ibv_rwq_ind_table {
        self.tbl.as_ptr()
    }
}

/// A hashing RAW_PACKET QP (receive only) spreading frames over an [`IndTable`]. Flow rules
/// attach to it like to any QP. Keeps the table and PD alive.
pub struct RssQp {
    qp: NonNull<ibv_qp>,
    fields: HashFields,
    _table: Arc<IndTable>,
    _pd: Pd,
}

// SAFETY: QP handles may be used from any thread; nothing is posted to a hashing QP.
unsafe impl Send for RssQp {}
// SAFETY: see `Send`.
unsafe impl Sync for RssQp {}

impl std::fmt::Debug for RssQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RssQp")
            .field("fields", &self.fields)
            .finish()
    }
}

impl Drop for RssQp {
    fn drop(&mut self) {
        // SAFETY: flows attached to this QP hold an `Arc`, so they are gone.
        let rc = unsafe { ibv_destroy_qp(self.qp.as_ptr()) };
        if rc != 0 {
            eprintln!(
                "rawq: ibv_destroy_qp(RSS) failed: {}",
                std::io::Error::from_raw_os_error(rc)
            );
        }
    }
}

impl QueuePair for RssQp {
    fn as_raw(&self) -> *mut ibv_qp {
        self.qp.as_ptr()
    }
}

impl RssQp {
    /// Creates a hashing QP over `table` with Toeplitz `key` on `fields`. It needs no state
    /// transitions: it is ready once created.
    ///
    /// # Errors
    /// [`Error::Permission`] without CAP_NET_RAW; [`Error::Os`]: EOPNOTSUPP when the device
    /// cannot hash on `fields`, EINVAL for a bad key length.
    pub fn create(pd: &Pd, table: Arc<IndTable>, key: &[u8], fields: HashFields) -> Result<RssQp> {
        let key_len = u8::try_from(key.len())
            .map_err(|_| Error::Config(format!("RSS key of {} bytes is too long", key.len())))?;
        let mut key = key.to_vec();
        // SAFETY: plain old data; all-zero is a valid start.
        let mut a: ibv_qp_init_attr_ex = unsafe { mem::zeroed() };
        a.qp_type = ibv_qp_type::IBV_QPT_RAW_PACKET;
        a.comp_mask = ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0
            | ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_IND_TABLE.0
            | ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_RX_HASH.0;
        a.pd = pd.as_raw();
        a.rwq_ind_tbl = table.as_raw();
        a.rx_hash_conf = ibv_rx_hash_conf {
            rx_hash_function: ibv_rx_hash_function_flags::IBV_RX_HASH_FUNC_TOEPLITZ.0 as u8,
            rx_hash_key_len: key_len,
            rx_hash_key: key.as_mut_ptr(),
            rx_hash_fields_mask: fields.0,
        };
        // SAFETY: PD and table are alive and kept so; `key` outlives the call.
        let qp = unsafe { ibv_create_qp_ex(pd.context().as_raw(), &mut a) };
        let qp = NonNull::new(qp).ok_or_else(|| Error::last_os("ibv_create_qp_ex(RSS)"))?;
        Ok(RssQp {
            qp,
            fields,
            _table: table,
            _pd: pd.clone(),
        })
    }

    /// The fields this QP hashes on.
    pub fn fields(&self) -> HashFields {
        self.fields
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_round_up_to_powers_of_two() {
        assert_eq!(table_size(0), None);
        assert_eq!(table_size(1), Some(1));
        assert_eq!(table_size(3), Some(4));
        assert_eq!(table_size(4), Some(4));
        assert_eq!(table_size(5), Some(8));
    }

    #[test]
    fn hash_fields_follow_the_pattern() {
        assert_eq!(HashFields::for_ip(false, None).0, 0x3);
        assert_eq!(HashFields::for_ip(true, None).0, 0xc);
        assert_eq!(HashFields::for_ip(false, Some(L4Proto::Udp)).0, 0x3 | 0xc0);
        assert_eq!(HashFields::for_ip(true, Some(L4Proto::Tcp)).0, 0xc | 0x30);
    }
}
