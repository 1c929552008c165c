//! Which XDP receive metadata kfuncs a driver implements, from the kernel's `netdev`
//! generic-netlink family (Linux 6.3+; the mask since 6.8). The query itself lives with rawq's
//! other OS plumbing; this is its public face.

pub use crate::sys::genl::{
    rx_metadata_features, RX_METADATA_HASH, RX_METADATA_TIMESTAMP, RX_METADATA_VLAN_TAG,
};
