//! [`RxMeta`]: what a NIC reports with a received packet, kept in the device's own encoding
//! (the mlx5 CQE words) and decoded on access.

/// Receive metadata a NIC reports with a packet: RSS hash, flow tag, stripped VLAN TCI,
/// checksum verdicts. All default to "nothing known".
///
/// The metadata is kept as the device reported it and decoded when read, so that a receive
/// loop only copies three words per packet and an application pays for the fields it reads.
/// The raw form is the one of the mlx5 completion entry (rawq's DV backend copies the CQE's
/// words unchanged; other backends build it with [`RxMeta::new`]):
///
/// * `flags`: CQE bytes 28..32 in memory order: `hds_ip_ext` (bit 1: IPv4 header checksum ok,
///   bit 2: L4 checksum ok), `l4_hdr_type_etc` (bit 0: VLAN stripped, bits 3:2: L3 type 1 =
///   IPv6, 2 = IPv4, bits 6:4: L4 type, 0 = none), then the stripped VLAN TCI, big-endian
///   (the layout of `struct mlx5_cqe64` in rdma-core's mlx5dv.h);
/// * `hash`: the RSS hash result, big-endian (CQE bytes 12..16);
/// * `tail`: CQE bytes 48..64 as they are (one 16-byte copy): the device clock when the packet
///   was received, big-endian ticks (48..56, `timestamp`; 0 when the device does not stamp
///   completions), then the flow tag in the low 24 bits of a big-endian word (56..60,
///   `sop_drop_qpn`); the last 4 bytes (`wqe_counter`, `signature`, `op_own`) are not read.
///
/// Apart from the device's words, `kernel_ns` holds the kernel's receive time (CLOCK_MONOTONIC
/// ns, 0: none) that an AF_XDP steering program wrote into the frame's XDP metadata
/// ([`RxMeta::kernel_rx_ns`]); no mlx5 CQE carries one.
#[derive(Clone, Copy, Default)]
#[repr(C)]
pub struct RxMeta {
    flags: u32,
    hash: u32,
    tail: [u8; 16],
    kernel_ns: u64,
}

/// Offsets in `RxMeta::tail`.
const TAIL_TS: usize = 0;
const TAIL_TAG: usize = 8;

/// `flags` byte 0 (`hds_ip_ext`) bits: L3 (IPv4 header) checksum ok, L4 checksum ok.
const META_L3_OK: u8 = 1 << 1;
const META_L4_OK: u8 = 1 << 2;
/// `flags` byte 1 (`l4_hdr_type_etc`): VLAN stripped; L3 type (bits 3:2) IPv6 / IPv4; L4 type
/// (bits 6:4), UDP the one [`RxMeta::new`] writes.
const META_CV: u8 = 1 << 0;
const META_L3_IPV6: u8 = 1 << 2;
const META_L3_IPV4: u8 = 2 << 2;
const META_L3_MASK: u8 = 3 << 2;
const META_L4_UDP: u8 = 2 << 4;
const META_L4_MASK: u8 = 7 << 4;

impl RxMeta {
    /// Byte offset of the raw RSS hash word (see `crate::packet::layout`).
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    pub(crate) const HASH_AT: usize = std::mem::offset_of!(RxMeta, hash);

    /// Metadata with these decoded values (for backends whose device reports them otherwise).
    pub fn new(
        rss_hash: u32,
        flow_tag: u32,
        vlan_tci: Option<u16>,
        l3_csum_ok: bool,
        l4_csum_ok: bool,
    ) -> RxMeta {
        let mut f = [0u8; 4];
        if l3_csum_ok {
            f[0] |= META_L3_OK;
            f[1] |= META_L3_IPV4;
        }
        if l4_csum_ok {
            f[0] |= META_L4_OK;
            f[1] |= META_L4_UDP;
        }
        if let Some(v) = vlan_tci {
            f[1] |= META_CV;
            f[2..4].copy_from_slice(&v.to_be_bytes());
        }
        let mut tail = [0u8; 16];
        tail[TAIL_TAG..TAIL_TAG + 4].copy_from_slice(&(flow_tag & 0x00ff_ffff).to_be_bytes());
        RxMeta {
            flags: u32::from_ne_bytes(f),
            hash: rss_hash.to_be(),
            tail,
            kernel_ns: 0,
        }
    }

    /// This metadata with a hardware receive timestamp of `ticks` device clock ticks (0: none).
    pub fn with_hw_timestamp(mut self, ticks: u64) -> RxMeta {
        self.tail[TAIL_TS..TAIL_TS + 8].copy_from_slice(&ticks.to_be_bytes());
        self
    }

    /// This metadata with a kernel receive time of `ns` (CLOCK_MONOTONIC; 0: none).
    pub fn with_kernel_rx_ns(mut self, ns: u64) -> RxMeta {
        self.kernel_ns = ns;
        self
    }

    /// Metadata from the raw words of an mlx5 CQE (see the type's docs), each as loaded from
    /// memory (`u32::from_ne_bytes` of the CQE bytes), and its bytes 48..64.
    #[cfg_attr(not(feature = "mlx5"), allow(dead_code))]
    #[inline(always)]
    pub(crate) fn from_raw(flags: u32, hash: u32, tail: [u8; 16]) -> RxMeta {
        RxMeta {
            flags,
            hash,
            tail,
            kernel_ns: 0,
        }
    }

    #[inline]
    fn flag_bytes(&self) -> [u8; 4] {
        self.flags.to_ne_bytes()
    }

    /// RSS hash of the packet (0 when not computed).
    #[inline]
    pub fn rss_hash(&self) -> u32 {
        u32::from_be(self.hash)
    }

    /// Flow tag / mark set by a steering rule (0 when none; rawq's ports tag rule *i* with
    /// *i* + 1).
    #[inline]
    pub fn flow_tag(&self) -> u32 {
        let t = &self.tail[TAIL_TAG..TAIL_TAG + 4];
        u32::from_be_bytes([t[0], t[1], t[2], t[3]]) & 0x00ff_ffff
    }

    /// VLAN TCI the device stripped from the frame, if it stripped one.
    #[inline]
    pub fn vlan_tci(&self) -> Option<u16> {
        let b = self.flag_bytes();
        (b[1] & META_CV != 0).then(|| u16::from_be_bytes([b[2], b[3]]))
    }

    /// The device verified the IPv4 header checksum (or the packet is IPv6, which has none).
    #[inline]
    pub fn l3_csum_ok(&self) -> bool {
        let b = self.flag_bytes();
        match b[1] & META_L3_MASK {
            META_L3_IPV4 => b[0] & META_L3_OK != 0,
            META_L3_IPV6 => true,
            _ => false,
        }
    }

    /// The device verified the TCP/UDP checksum.
    #[inline]
    pub fn l4_csum_ok(&self) -> bool {
        let b = self.flag_bytes();
        b[1] & META_L4_MASK != 0 && b[0] & META_L4_OK != 0
    }

    /// The hardware receive timestamp, in ticks of the device's free-running clock, if the
    /// device stamped the packet (mlx5: the CQE `timestamp`, written when the completion was;
    /// rawq's DV backend asks for it when the device has a clock; an AF_XDP port with
    /// [`RxTimestamps::Hardware`](crate::config::RxTimestamps::Hardware): the driver's
    /// timestamp in ns of the interface's PTP hardware clock, i.e. ticks of a 1 GHz clock).
    /// Ticks become nanoseconds with the clock's frequency: [`RxMeta::hw_timestamp_ns`].
    #[inline]
    pub fn hw_timestamp(&self) -> Option<u64> {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.tail[TAIL_TS..TAIL_TS + 8]);
        let t = u64::from_be_bytes(b);
        (t != 0).then_some(t)
    }

    /// [`RxMeta::hw_timestamp`] in nanoseconds of a device clock running at `clock_khz` kHz
    /// (`None` without a timestamp or for a 0 kHz clock). The origin is the device clock's,
    /// not any system clock's.
    #[inline]
    pub fn hw_timestamp_ns(&self, clock_khz: u64) -> Option<u64> {
        let t = self.hw_timestamp()?;
        (clock_khz > 0).then(|| ticks_to_ns(t, clock_khz))
    }

    /// When the kernel's XDP hook ran the steering program for this frame: CLOCK_MONOTONIC
    /// in ns (`bpf_ktime_get_ns`, the clock of rawq-gen's `monotonic_ns`), written into the
    /// frame's XDP metadata by an AF_XDP port opened with
    /// [`RxTimestamps::Kernel`](crate::config::RxTimestamps::Kernel) or `Hardware`. `None` on
    /// other ports and for frames the kernel gave no metadata room. The time is taken in the
    /// receiving driver's XDP hook, after the driver took the frame off its ring (veth: when
    /// its NAPI poll ran), before the AF_XDP socket's rx ring, so the application's polling
    /// and batching do not add to it.
    #[inline]
    pub fn kernel_rx_ns(&self) -> Option<u64> {
        (self.kernel_ns != 0).then_some(self.kernel_ns)
    }

    /// The decoded values, for comparison and display.
    #[allow(clippy::type_complexity)]
    fn decoded(&self) -> (u32, u32, Option<u16>, bool, bool, Option<u64>, Option<u64>) {
        (
            self.rss_hash(),
            self.flow_tag(),
            self.vlan_tci(),
            self.l3_csum_ok(),
            self.l4_csum_ok(),
            self.hw_timestamp(),
            self.kernel_rx_ns(),
        )
    }
}

/// Equal when every decoded value is (raw bits the accessors do not read may differ).
impl PartialEq for RxMeta {
    fn eq(&self, other: &RxMeta) -> bool {
        self.decoded() == other.decoded()
    }
}

impl Eq for RxMeta {}

impl std::fmt::Debug for RxMeta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxMeta")
            .field("rss_hash", &self.rss_hash())
            .field("flow_tag", &self.flow_tag())
            .field("vlan_tci", &self.vlan_tci())
            .field("l3_csum_ok", &self.l3_csum_ok())
            .field("l4_csum_ok", &self.l4_csum_ok())
            .field("hw_timestamp", &self.hw_timestamp())
            .field("kernel_rx_ns", &self.kernel_rx_ns())
            .finish()
    }
}

/// `ticks` of a clock running at `khz` kHz, in nanoseconds (saturating).
#[inline]
pub(crate) fn ticks_to_ns(ticks: u64, khz: u64) -> u64 {
    let ns = ticks as u128 * 1_000_000 / khz.max(1) as u128;
    ns.min(u64::MAX as u128) as u64
}
