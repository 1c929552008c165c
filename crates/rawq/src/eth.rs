//! Ethernet framing sizes that every layer shares (the configuration sizes ports with them,
//! the errors explain refusals with them). Imports nothing.

/// Bytes a frame carries beyond its MTU: the Ethernet header and one 802.1Q tag (no FCS), as
/// the Linux kernel forwards it (net/core/dev.c `is_skb_forwardable`: `dev->mtu +
/// dev->hard_header_len + VLAN_HLEN`) and as mlx5e sizes the port's hardware MTU
/// (drivers/net/ethernet/mellanox/mlx5/core/en.h `MLX5E_SW2HW_MTU`, which adds the FCS too).
pub const MTU_L2_OVERHEAD: u32 = 18;
