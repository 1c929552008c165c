//! Every identity value, limit and capability of the emulated device, in one place (the role
//! of `rxe_param.h` in the kernel's soft-RoCE). The sysfs tree, GET_CONTEXT, QUERY_DEVICE,
//! QUERY_PORT and the command checks all read these.
//!
//! The device is a ConnectX-5 (PCI 15b3:1017, `providers/mlx5/mlx5.c: mlx5_hca_table`; a
//! ConnectX-4 Lx, 15b3:1015, in the L2 inline mode: [`part`]), with
//! the capabilities rawq's device model implements: RSS (Toeplitz), striding RQ, CQE
//! compression (hash and checksum mini-CQE formats), enhanced multi-packet send (eMPW).

/// `major:minor` of the first uverbs node (`IB_UVERBS_MAJOR` 231, `IB_UVERBS_BASE_MINOR` 192).
pub const UVERBS_MAJOR: u32 = 231;
/// See [`UVERBS_MAJOR`].
pub const UVERBS_MINOR: u32 = 192;
/// `class/infiniband_verbs/abi_version` (`IB_USER_VERBS_ABI_VERSION`).
pub const UVERBS_ABI: u32 = 6;
/// `uverbs0/abi_version`: `MLX5_IB_UVERBS_ABI_VERSION`.
pub const MLX5_ABI: u32 = 1;
/// PCI vendor (Mellanox).
pub const PCI_VENDOR: u16 = 0x15b3;
/// IEEE OUI reported as `vendor_id` (0x02c9, Mellanox).
pub const VENDOR_ID: u32 = 0x02c9;
/// The part the device claims to be (PCI device id, `vendor_part_id`): a ConnectX-5 (0x1017,
/// 4119) or a ConnectX-4 Lx (0x1015, 4117), both in `mlx5.c: mlx5_hca_table`. By default the
/// part follows the inline mode (ConnectX-5 needs no inline header, ConnectX-4 Lx the L2 one);
/// `RAWQ_EMU_PART` sets it on its own, since the mode is the device's configuration, not its
/// part's (a ConnectX-5 VF can demand the L2 header: the kernel reports the mode in
/// `eth_min_inline`, mlx5_ib main.c `mlx5_ib_alloc_ucontext`). Drivers without DevX guess the
/// mode from this id (DPDK's mlx5 PMD, rawq's DV backend); libmlx5 reads `eth_min_inline`.
pub fn part(part: Option<Part>, min_inline: MinInline) -> (u16, u32) {
    let p = part.unwrap_or(match min_inline {
        MinInline::None => Part::Cx5,
        MinInline::L2 => Part::Cx4Lx,
    });
    match p {
        Part::Cx5 => (0x1017, 4119),
        Part::Cx4Lx => (0x1015, 4117),
    }
}

/// Minimum inline header the device demands on send (`enum mlx5_user_inline_mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MinInline {
    /// `MLX5_USER_INLINE_MODE_NONE`.
    None,
    /// `MLX5_USER_INLINE_MODE_L2`.
    L2,
}

impl MinInline {
    /// Parses `none` / `l2`.
    pub fn parse(s: &str) -> Option<MinInline> {
        match s {
            "none" | "" => Some(MinInline::None),
            "l2" => Some(MinInline::L2),
            _ => None,
        }
    }

    /// Bytes of inline header demanded.
    pub fn bytes(self) -> u16 {
        match self {
            MinInline::None => 0,
            MinInline::L2 => 18,
        }
    }
}

/// The part the device claims ([`part`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// ConnectX-5 (PCI 0x1017).
    Cx5,
    /// ConnectX-4 Lx (PCI 0x1015).
    Cx4Lx,
}

impl Part {
    /// Parses `cx5` / `cx4lx`.
    pub fn parse(s: &str) -> Option<Part> {
        match s {
            "cx5" => Some(Part::Cx5),
            "cx4lx" => Some(Part::Cx4Lx),
            _ => None,
        }
    }
}

/// Firmware version: mlx5 prints `fw_ver` bits 32/16/0 as major.minor.sub
/// (`providers/mlx5/verbs.c: mlx5_query_device_ex`).
pub const FW: (u64, u64, u64) = (16, 35, 1012);
/// `board_id` in sysfs.
pub const BOARD_ID: &str = "MT_0000000008";
/// Node GUID (host order; sent big-endian).
pub const NODE_GUID: u64 = 0x0c42_a103_00fc_0001;
/// The port's MAC when it has neither a netdev nor a wire (looped back; the GIDs are built
/// from it). See [`Ident::port_mac`].
pub const MAC: [u8; 6] = [0x02, 0xfc, 0x00, 0x00, 0x00, 0x01];

/// log2 of the largest queue (WQEs / CQEs): `log_max_qp_sz` / `log_max_cq_sz`.
pub const LOG_MAX_QUEUE: u32 = 15;
/// Largest CQ (entries).
pub const MAX_CQE: u32 = (1 << 22) - 1;
/// Largest QP (work requests).
pub const MAX_QP_WR: u32 = 1 << LOG_MAX_QUEUE;
/// Scatter/gather entries per WQE.
pub const MAX_SGE: u32 = 30;
/// Objects per context.
pub const MAX_OBJECTS: u32 = 1 << 24;
/// Largest RSS indirection table (log2): `log_max_rqt_size`.
pub const LOG_MAX_RWQ_IND_TBL: u32 = 11;
/// Largest inline data on send.
pub const MAX_INLINE: u32 = 512;
/// Toeplitz key length mlx5 accepts (`mlx5_ib_create_qp_rss.rx_key_len`).
pub const RSS_KEY_LEN: usize = 40;

/// GET_CONTEXT values (`mlx5_ib_alloc_ucontext_resp`).
pub mod ucontext {
    /// `bf_reg_size`.
    pub const BF_REG_SIZE: u32 = 512;
    /// `cache_line_size`.
    pub const CACHE_LINE: u32 = 64;
    /// `max_sq_desc_sz`.
    pub const MAX_SQ_DESC: u16 = 1024;
    /// `max_rq_desc_sz`.
    pub const MAX_RQ_DESC: u16 = 512;
    /// `log_uar_size`: 4 KiB UAR pages.
    pub const LOG_UAR_SIZE: u32 = 12;
    /// `num_uars_per_page`.
    pub const UARS_PER_PAGE: u32 = 1;
    /// bfregs per UAR page (`MLX5_NON_FP_BFREGS_PER_UAR`).
    pub const BFREGS_PER_UAR: u32 = 2;
    /// `qp_tab_size` (`1 << log_max_qp`).
    pub const QP_TAB_SIZE: u32 = 1 << 18;
}

/// Port attributes (`ib_uverbs_query_port_resp`).
pub mod port {
    /// `IBV_PORT_ACTIVE`.
    pub const STATE_ACTIVE: u8 = 4;
    /// `IBV_MTU_4096`.
    pub const MAX_MTU: u8 = 5;
    /// `IBV_MTU_1024` (an Ethernet MTU of 1500).
    pub const ACTIVE_MTU: u8 = 3;
    /// Physical state LinkUp.
    pub const PHYS_LINK_UP: u8 = 5;
    /// `IBV_LINK_LAYER_ETHERNET`.
    pub const LINK_LAYER_ETHERNET: u8 = 2;
    /// GID table entries.
    pub const GID_TBL_LEN: u32 = 8;
    /// 4X width.
    pub const WIDTH_4X: u8 = 2;
    /// 25 Gb/s per lane (EDR): 100 Gb/s on a 4X port.
    pub const SPEED_EDR: u8 = 32;
}

/// Striding RQ limits (`mlx5_ib_striding_rq_caps`), as the kernel sets them (Linux
/// drivers/infiniband/hw/mlx5/main.c, `mlx5_ib_query_device`; mlx5_ib.h
/// `MLX5_{MIN,MAX}_SINGLE_STRIDE_LOG_NUM_BYTES`, `MLX5_{EXT_MIN,MIN,MAX}_SINGLE_WQE_LOG_NUM_STRIDES`).
pub mod striding {
    /// Smallest stride, log2 bytes.
    pub const MIN_STRIDE_LOG: u32 = 6;
    /// Largest stride, log2 bytes.
    pub const MAX_STRIDE_LOG: u32 = 13;
    /// Fewest strides per WQE, log2, on a device with the `ext_stride_num_range` capability.
    pub const EXT_MIN_STRIDES_LOG: u32 = 3;
    /// Fewest strides per WQE, log2, on a device without it.
    pub const BASE_MIN_STRIDES_LOG: u32 = 9;
    /// Most strides per WQE, log2.
    pub const MAX_STRIDES_LOG: u32 = 16;

    /// Fewest strides per WQE (log2) the kernel advertises and accepts: 2^3 only with
    /// `ext_stride_num_range` (main.c `mlx5_ib_query_device`; qp.c `prepare_user_rq` refuses
    /// fewer with EINVAL).
    pub fn min_strides_log(ext_stride_num_range: bool) -> u32 {
        if ext_stride_num_range {
            EXT_MIN_STRIDES_LOG
        } else {
            BASE_MIN_STRIDES_LOG
        }
    }
}

/// The device clock (`device_frequency_khz`; a ConnectX-5 core clock runs at 156.25 MHz).
pub const CLOCK_KHZ: u64 = 156_250;

/// CQEs carry timestamps (and QUERY_DEVICE offers `timestamp_mask`), unless
/// `RAWQ_EMU_CQE_TIMESTAMPS=0`. The device model writes them into good CQEs only: an error
/// CQE's bytes 54, 55 are `vendor_err_synd` / `syndrome` (`struct mlx5_err_cqe`, mlx5dv.h),
/// which libmlx5's `mlx5_handle_error_cqe` reads.
pub const CQE_TIMESTAMPS: bool = true;

/// CQE compression: most CQEs in one compressed session (`cqe_comp_caps.max_num`).
pub const CQE_COMP_MAX_NUM: u32 = 64;

/// Most emulated devices in one process (`RAWQ_EMU_PAIR=1`: two, cabled to each other).
pub const MAX_DEVICES: u32 = 2;

/// The names and numbers of emulated device `index` (0: `mlx5_0` behind `uverbs0`, 231:192;
/// 1: `mlx5_1` behind `uverbs1`, 231:193, the next GUID and MAC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ident(pub u32);

impl Ident {
    /// The RDMA device name.
    pub fn ibdev(self) -> String {
        format!("mlx5_{}", self.0)
    }
    /// The uverbs node name.
    pub fn uverbs(self) -> String {
        format!("uverbs{}", self.0)
    }
    /// The node's path.
    pub fn path(self) -> String {
        format!("/dev/infiniband/uverbs{}", self.0)
    }
    /// The node's minor number.
    pub fn minor(self) -> u32 {
        UVERBS_MINOR + self.0
    }
    /// Node GUID.
    pub fn node_guid(self) -> u64 {
        NODE_GUID + u64::from(self.0)
    }
    /// Port MAC of a looped-back device ([`MAC`], the next one for device 1).
    pub fn mac(self) -> [u8; 6] {
        let mut m = MAC;
        m[5] = m[5].wrapping_add(self.0 as u8);
        m
    }

    /// The port's MAC in this instance, its own as the kernel gives each netdev its own (a real
    /// port's MAC is its netdev's, and its RoCE GIDs are built from it: Linux
    /// drivers/infiniband/core/roce_gid_mgmt.c, the default GID from the netdev's address).
    /// Device 0 with a kernel netdev (`--netdev`): the TAP's MAC, so that the port and its
    /// netdev agree. With a wire (`--wire`): locally administered, 02:fc and the last four bytes
    /// of the wire interface's MAC, so emulated NICs on different interfaces (a veth's two
    /// ends) differ. Otherwise (looped back, or a name that cannot be read) [`Ident::mac`].
    pub fn port_mac(self, netdev: Option<&str>, wire: Option<&str>) -> [u8; 6] {
        if let Some(m) = netdev.filter(|_| self.0 == 0).and_then(netdev_mac) {
            return m;
        }
        match wire.and_then(netdev_mac) {
            Some(w) => [
                0x02,
                0xfc,
                w[2],
                w[3],
                w[4],
                w[5].wrapping_add(self.0 as u8),
            ],
            None => self.mac(),
        }
    }
    /// The device a node path names, among `count`.
    pub fn of_path(path: &[u8], count: u32) -> Option<Ident> {
        let n = path.strip_prefix(b"/dev/infiniband/uverbs")?;
        let s = std::str::from_utf8(n).ok()?;
        if s.is_empty() || (s.len() > 1 && s.starts_with('0')) {
            return None;
        }
        let i: u32 = s.parse().ok()?;
        (i < count).then_some(Ident(i))
    }
}

/// A Linux interface's MAC (`/sys/class/net/NAME/address`), if it has a readable one that is
/// not all zeros.
fn netdev_mac(name: &str) -> Option<[u8; 6]> {
    let text = std::fs::read_to_string(format!("/sys/class/net/{name}/address")).ok()?;
    let mut m = [0u8; 6];
    let mut parts = text.trim().split(':');
    for b in &mut m {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    (parts.next().is_none() && m != [0; 6]).then_some(m)
}

/// `fw_ver` as QUERY_DEVICE reports it.
pub fn fw_ver() -> u64 {
    (FW.0 << 32) | (FW.1 << 16) | FW.2
}

/// GUID as sysfs writes it (`0c42:a103:00fc:0001`).
pub fn guid_text(g: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        (g >> 48) & 0xffff,
        (g >> 32) & 0xffff,
        (g >> 16) & 0xffff,
        g & 0xffff
    )
}

/// The link-local GID of [`MAC`] (modified EUI-64), as sysfs `ports/1/gids/N` writes it.
pub fn link_local_gid(mac: [u8; 6]) -> String {
    let eui = [
        mac[0] ^ 2,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ];
    format!(
        "fe80:0000:0000:0000:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        eui[0], eui[1], eui[2], eui[3], eui[4], eui[5], eui[6], eui[7]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_forms() {
        assert_eq!(guid_text(NODE_GUID), "0c42:a103:00fc:0001");
        assert_eq!(
            link_local_gid(MAC),
            "fe80:0000:0000:0000:00fc:00ff:fe00:0001"
        );
        assert_eq!(fw_ver() >> 32, 16);
        assert_eq!(
            Ident::of_path(b"/dev/infiniband/uverbs1", 2),
            Some(Ident(1))
        );
        assert_eq!(Ident::of_path(b"/dev/infiniband/uverbs1", 1), None);
        assert_eq!(Ident::of_path(b"/dev/infiniband/uverbs01", 2), None);
        assert_eq!(Ident(1).mac()[5], 2);
        // Looped back, or names that cannot be read: the fixed MAC.
        assert_eq!(Ident(0).port_mac(None, None), MAC);
        assert_eq!(
            Ident(1).port_mac(Some("rawq-no-such-if0"), Some("rawq-no-such-if1")),
            Ident(1).mac()
        );
        // lo has the all-zero address: not a MAC to derive from.
        assert_eq!(Ident(0).port_mac(Some("lo"), Some("lo")), MAC);
    }
}
