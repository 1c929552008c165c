//! Which XDP receive metadata kfuncs a driver implements, from the kernel's `netdev`
//! generic-netlink family (Linux 6.3+; the mask since 6.8), and the names of the kfuncs the
//! steering program calls. The query itself lives with rawq's other OS plumbing; this is its
//! face inside the backend (internal: rawq's tests use it).

pub use crate::sys::genl::{
    rx_metadata_features, RX_METADATA_HASH, RX_METADATA_TIMESTAMP, RX_METADATA_VLAN_TAG,
};

/// The kfunc that reads a driver's hardware receive timestamp (net/core/xdp.c).
pub const RX_TIMESTAMP_KFUNC: &str = "bpf_xdp_metadata_rx_timestamp";
/// The kfunc that reads the VLAN tag a driver took off a frame (net/core/xdp.c, Linux 6.8).
pub const RX_VLAN_TAG_KFUNC: &str = "bpf_xdp_metadata_rx_vlan_tag";
