//! What the launcher (`scripts/emu.sh`) tells the emulator, through the environment.
//!
//! * `RAWQ_EMU_WIRE=IFNAME`: the port's wire is that Linux interface (AF_PACKET); unset or
//!   empty: the port is looped back to itself.
//! * `RAWQ_EMU_NETDEV=TAPNAME[,TAPNAME1]`: the port's kernel netdev (a TAP device made
//!   beforehand); with a pair, the second name is `mlx5_1`'s (a TAP takes one device only:
//!   a second `TUNSETIFF` on it fails with EBUSY).
//! * `RAWQ_EMU_MIN_INLINE=none|l2`: `eth_min_inline` (none: ConnectX-5; l2: ConnectX-4 Lx,
//!   every send carries the 18-byte L2 header inline).
//! * `RAWQ_EMU_PART=cx5|cx4lx`: the part the device claims (PCI id, `vendor_part_id`);
//!   default: the one its inline mode implies ([`crate::caps::part`]).
//! * `RAWQ_EMU_EXT_STRIDE_RANGE=0|1`: the device has the `ext_stride_num_range` capability
//!   (default 1): striding RQ WQEs of 2^3 strides and up; without it, 2^9 and up.
//! * `RAWQ_EMU_PAIR=1`: two devices, `mlx5_0` and `mlx5_1`, cabled to each other (no wire).
//! * `RAWQ_EMU_CABLE=PATH`: the port's wire is a cable to the emulated device of another
//!   process with the same PATH (a unix socket, [`crate::cable`]): `--pair` across two
//!   processes; the port is down while the other end is not there.
//! * `RAWQ_EMU_CQE_TIMESTAMPS=0|1`: CQEs carry the device clock (default
//!   [`crate::caps::CQE_TIMESTAMPS`]).
//! * `RAWQ_EMU_MTU=N`: the port MTU (68..=9198): the device takes frames of up to N + 18 bytes
//!   (Ethernet header and one VLAN tag, as mlx5e sizes the port's hardware MTU from the netdev's,
//!   drivers/net/ethernet/mellanox/mlx5/core/en.h `MLX5E_SW2HW_MTU`, less the FCS the model
//!   does not carry) and drops larger ones, counted (`rx_oversize`, the mlx5e physical counter
//!   `rx_oversize_pkts_phy`); unset: 9216-byte frames, the largest mlx5e jumbo.
//! * `RAWQ_EMU_DEBUG=1`: one line per command on stderr (a debug record of the `log` facade,
//!   which the emulator's own logger writes there: [`crate::logger`]; warnings, such as a bad
//!   value of one of these variables, always reach stderr the same way).
//! * `RAWQ_EMU_TX_ERROR=NTH[:SYNDROME]`: fault injection: the NTH send WQE (0-based) of every
//!   send queue fails with that CQE syndrome (default 0x04, `MLX5_CQE_SYNDROME_LOCAL_PROT_ERR`),
//!   as a bad lkey would on hardware; later WQEs are flushed until the QP is reset.
//! * `RAWQ_EMU_PANIC_IN=COMMAND` (debug builds only, for tests): the first command of that
//!   name (`CREATE_CQ`, `EX_CREATE_WQ`, ... as the debug log names them) panics after its
//!   handler ran, so that tests see a panic answered EIO without poisoning the file or leaking
//!   the objects it made.
//! * `RAWQ_EMU_FATAL_FILE=PATH`: fault injection: once PATH exists, the device has hit a
//!   fatal internal error (what a ConnectX reports as a system error, the health syndrome mlx5
//!   core turns into `MLX5_DEV_EVENT_SYS_ERROR`): every context gets `IB_EVENT_DEVICE_FATAL`,
//!   the port is down, every later command fails with EIO ([`crate::link::PortLink::fatal`]).
//! * `RAWQ_EMU_STATS=FILE`: the device model's counters, one `rawq-emu counters: {..}` line,
//!   rewritten in FILE twice a second and when a command fd closes (`-`: printed on stderr
//!   when a command fd closes); a pair's `mlx5_1` writes `FILE.mlx5_1`.
//! * `RAWQ_EMU_RXGEN=COUNT[,SIZE[,FLOWS]]`: a frame source inside the process feeds
//!   `mlx5_0`'s port COUNT UDP frames (0: no end) of SIZE bytes (default 60) over FLOWS source
//!   ports (default 1) as fast as the port takes them ([`crate::rxgen`]); its count is written
//!   beside the counters (`RAWQ_EMU_STATS`).
//! * `RAWQ_EMU_RXGEN_START=PATH`: the frame source starts once PATH exists (a bench creates it
//!   when the receiver is polling, e.g. after testpmd's `start`).

pub use crate::caps::{MinInline, Part};

/// The emulator's configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Interface the port's wire is (None: loopback).
    pub wire: Option<String>,
    /// TAP interface of the port's kernel netdev (device 0's; see [`Config::netdev_of`]).
    pub netdev: Option<String>,
    /// TAP interface of device 1's port (a pair's `mlx5_1`).
    pub netdev1: Option<String>,
    /// The interfaces that only name the ports' netdevs (`RAWQ_EMU_PORT_NETDEV=A[,B]`, made by
    /// `scripts/emu.sh` when the port has neither a TAP nor a `--wire`): down TAPs with the
    /// port's MTU, which carry no frames, so that the port reports a netdev of its own (its
    /// MTU, its ethtool statistics) rather than `lo`.
    pub port_netdevs: (Option<String>, Option<String>),
    /// `eth_min_inline`.
    pub min_inline: MinInline,
    /// The part claimed; `None`: the one `min_inline` implies.
    pub part: Option<Part>,
    /// The `ext_stride_num_range` capability (striding RQs of fewer than 2^9 strides).
    pub ext_stride_range: bool,
    /// Log commands.
    pub debug: bool,
    /// Where to append the model's counters when a command fd closes.
    pub stats: Option<String>,
    /// Injected send error: (WQE index, CQE syndrome).
    pub tx_error: Option<(u64, u8)>,
    /// `RAWQ_EMU_FATAL_FILE`: the device fails fatally once this file exists.
    pub fatal_file: Option<String>,
    /// Two devices cabled to each other.
    pub pair: bool,
    /// `RAWQ_EMU_CABLE`: the unix socket path of a cable to another process's device.
    pub cable: Option<String>,
    /// CQEs carry timestamps.
    pub cqe_timestamps: bool,
    /// Link-level flow control (IEEE 802.3x PAUSE, what `ethtool -A IF rx on tx on` turns on
    /// in the kernel's mlx5e, `mlx5e_set_pauseparam`): a port whose RQ has no free entry
    /// pauses its peer instead of dropping, so loopback tests are lossless on a loaded host.
    pub pause: bool,
    /// Debug builds: the command that panics once (`RAWQ_EMU_PANIC_IN`).
    pub panic_in: Option<String>,
    /// The port MTU (`RAWQ_EMU_MTU`); `None`: frames of up to 9216 bytes.
    pub mtu: Option<u32>,
    /// Frames the wire in front of the port holds (`RAWQ_EMU_WIRE_FRAMES`, 1..=1048576;
    /// default [`DEFAULT_WIRE_FRAMES`]): the port's receive buffer. A frame arriving when it is
    /// full is the port's `rx_discards_phy` ([`crate::discovery::ethtool`]).
    pub wire_frames: u32,
    /// The in-process frame source (`RAWQ_EMU_RXGEN`).
    pub rxgen: Option<crate::rxgen::RxGen>,
    /// The frame source waits for this file (`RAWQ_EMU_RXGEN_START`).
    pub rxgen_start: Option<String>,
}

/// Frames the wire in front of the port holds by default.
pub const DEFAULT_WIRE_FRAMES: u32 = 4096;

/// Largest frame without an MTU: 9216 bytes.
pub const DEFAULT_MAX_FRAME: u32 = 9216;

/// An MTU from `RAWQ_EMU_MTU`: 68 (the IPv4 minimum) up to 9198 (a 9216-byte frame).
fn parse_mtu(v: &str) -> Option<u32> {
    v.trim()
        .parse()
        .ok()
        .filter(|m| (68..=DEFAULT_MAX_FRAME - 18).contains(m))
}

impl Config {
    /// The largest frame the port sends and receives (bytes, no FCS): MTU + 18.
    pub fn max_frame(&self) -> u32 {
        self.mtu.map_or(DEFAULT_MAX_FRAME, |m| m + 18)
    }
}

/// `MLX5_CQE_SYNDROME_LOCAL_PROT_ERR`.
const LOCAL_PROT_ERR: u8 = 0x04;

fn parse_tx_error(v: &str) -> Option<(u64, u8)> {
    let (nth, synd) = match v.split_once(':') {
        Some((n, s)) => {
            let s = s.trim_start_matches("0x");
            (n, u8::from_str_radix(s, 16).ok()?)
        }
        None => (v, LOCAL_PROT_ERR),
    };
    Some((nth.parse().ok()?, synd))
}

impl Default for Config {
    fn default() -> Config {
        Config {
            wire: None,
            netdev: None,
            netdev1: None,
            port_netdevs: (None, None),
            min_inline: MinInline::None,
            part: None,
            ext_stride_range: true,
            debug: false,
            stats: None,
            tx_error: None,
            fatal_file: None,
            pair: false,
            cable: None,
            cqe_timestamps: crate::caps::CQE_TIMESTAMPS,
            pause: false,
            panic_in: None,
            mtu: None,
            wire_frames: DEFAULT_WIRE_FRAMES,
            rxgen: None,
            rxgen_start: None,
        }
    }
}

impl Config {
    /// From the environment; a bad value is reported on stderr and the default used.
    pub fn from_env() -> Config {
        let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let min_inline = match get("RAWQ_EMU_MIN_INLINE") {
            None => MinInline::None,
            Some(v) => MinInline::parse(&v).unwrap_or_else(|| {
                log::warn!("RAWQ_EMU_MIN_INLINE={v:?} is not none|l2; using none");
                MinInline::None
            }),
        };
        let (netdev, netdev1) = split_netdevs(get("RAWQ_EMU_NETDEV"));
        let port_netdevs = split_netdevs(get("RAWQ_EMU_PORT_NETDEV"));
        Config {
            wire: get("RAWQ_EMU_WIRE"),
            port_netdevs,
            netdev,
            netdev1,
            min_inline,
            part: get("RAWQ_EMU_PART").and_then(|v| {
                let p = Part::parse(&v);
                if p.is_none() {
                    log::warn!("RAWQ_EMU_PART={v:?} is not cx5|cx4lx; ignored");
                }
                p
            }),
            ext_stride_range: get("RAWQ_EMU_EXT_STRIDE_RANGE").is_none_or(|v| v != "0"),
            debug: get("RAWQ_EMU_DEBUG").is_some_and(|v| v != "0"),
            stats: get("RAWQ_EMU_STATS"),
            pair: get("RAWQ_EMU_PAIR").is_some_and(|v| v != "0"),
            cable: get("RAWQ_EMU_CABLE"),
            cqe_timestamps: get("RAWQ_EMU_CQE_TIMESTAMPS")
                .map_or(crate::caps::CQE_TIMESTAMPS, |v| v != "0"),
            pause: get("RAWQ_EMU_PAUSE").is_some_and(|v| v != "0"),
            panic_in: get("RAWQ_EMU_PANIC_IN").filter(|_| cfg!(debug_assertions)),
            mtu: get("RAWQ_EMU_MTU").and_then(|v| {
                let m = parse_mtu(&v);
                if m.is_none() {
                    log::warn!("RAWQ_EMU_MTU={v:?} is not 68..=9198; using 9216-byte frames");
                }
                m
            }),
            wire_frames: get("RAWQ_EMU_WIRE_FRAMES").map_or(DEFAULT_WIRE_FRAMES, |v| {
                match v.trim().parse().ok().filter(|n| (1..=1 << 20).contains(n)) {
                    Some(n) => n,
                    None => {
                        log::warn!(
                            "RAWQ_EMU_WIRE_FRAMES={v:?} is not 1..=1048576; using \
                             {DEFAULT_WIRE_FRAMES}"
                        );
                        DEFAULT_WIRE_FRAMES
                    }
                }
            }),
            fatal_file: get("RAWQ_EMU_FATAL_FILE"),
            rxgen_start: get("RAWQ_EMU_RXGEN_START"),
            rxgen: get("RAWQ_EMU_RXGEN").and_then(|v| {
                let g = crate::rxgen::RxGen::parse(&v, DEFAULT_MAX_FRAME);
                if g.is_none() {
                    log::warn!(
                        "RAWQ_EMU_RXGEN={v:?} is not COUNT[,SIZE 60..=9216[,FLOWS \
                         1..=4096]]; no frames generated"
                    );
                }
                g
            }),
            tx_error: get("RAWQ_EMU_TX_ERROR").and_then(|v| {
                let r = parse_tx_error(&v);
                if r.is_none() {
                    log::warn!("RAWQ_EMU_TX_ERROR={v:?} is not NTH[:SYNDROME]; ignored");
                }
                r
            }),
        }
    }

    /// Number of emulated devices.
    pub fn devices(&self) -> u32 {
        if self.pair {
            2
        } else {
            1
        }
    }

    /// The kernel netdev of device `id`'s port, if it has one.
    pub fn netdev_of(&self, id: crate::caps::Ident) -> Option<&str> {
        match id.0 {
            0 => self.netdev.as_deref(),
            1 => self.netdev1.as_deref(),
            _ => None,
        }
    }

    /// The interface name device `id`'s GIDs are attached to in sysfs (`gid_attrs/ndevs/N`
    /// must name a real interface: libibverbs resolves it with `if_nametoindex`), the port's
    /// netdev as rawq and DPDK find it: its TAP, else the `--wire` interface, else the
    /// interface that only names it ([`Config::port_netdevs`]), else `lo`.
    pub fn gid_ndev(&self, id: crate::caps::Ident) -> &str {
        let named = match id.0 {
            0 => self.port_netdevs.0.as_deref(),
            1 => self.port_netdevs.1.as_deref(),
            _ => None,
        };
        self.netdev_of(id)
            .or(self.wire.as_deref())
            .or(named)
            .unwrap_or("lo")
    }
}

/// `A` or `A,B`: device 0's and device 1's netdev.
fn split_netdevs(v: Option<String>) -> (Option<String>, Option<String>) {
    let Some(v) = v else { return (None, None) };
    let mut it = v.split(',').map(str::trim).filter(|s| !s.is_empty());
    let a = it.next().map(String::from);
    let b = it.next().map(String::from);
    if it.next().is_some() {
        log::warn!("RAWQ_EMU_NETDEV={v:?} names more than two netdevs; the rest ignored");
    }
    (a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netdev_per_device() {
        let one = |s: &str| split_netdevs(Some(s.into()));
        assert_eq!(one("tap0"), (Some("tap0".into()), None));
        assert_eq!(one("tap0,tap1"), (Some("tap0".into()), Some("tap1".into())));
        assert_eq!(split_netdevs(None), (None, None));
        let cfg = Config {
            netdev: Some("a".into()),
            netdev1: Some("b".into()),
            pair: true,
            ..Config::default()
        };
        use crate::caps::Ident;
        assert_eq!(cfg.netdev_of(Ident(0)), Some("a"));
        assert_eq!(cfg.netdev_of(Ident(1)), Some("b"));
        assert_eq!(cfg.gid_ndev(Ident(1)), "b");
        let lone = Config {
            netdev: Some("a".into()),
            pair: true,
            ..Config::default()
        };
        // mlx5_1 without a netdev of its own does not share mlx5_0's.
        assert_eq!(lone.netdev_of(Ident(1)), None);
        assert_eq!(lone.gid_ndev(Ident(1)), "lo");
        // A naming interface stands in for lo, never for a TAP or the wire.
        let named = Config {
            netdev: Some("a".into()),
            pair: true,
            port_netdevs: (Some("n0".into()), Some("n1".into())),
            ..Config::default()
        };
        assert_eq!(named.gid_ndev(Ident(0)), "a");
        assert_eq!(named.gid_ndev(Ident(1)), "n1");
    }

    #[test]
    fn mtu_sets_the_largest_frame() {
        assert_eq!(Config::default().max_frame(), 9216);
        let c = Config {
            mtu: parse_mtu("9000"),
            ..Config::default()
        };
        assert_eq!(c.max_frame(), 9018);
        assert_eq!(parse_mtu("1500"), Some(1500));
        assert_eq!(parse_mtu("67"), None);
        assert_eq!(parse_mtu("9199"), None);
        assert_eq!(parse_mtu("x"), None);
    }

    #[test]
    fn tx_error_forms() {
        assert_eq!(parse_tx_error("5"), Some((5, 0x04)));
        assert_eq!(parse_tx_error("0:0x01"), Some((0, 0x01)));
        assert_eq!(parse_tx_error("x"), None);
        assert_eq!(parse_tx_error("3:zz"), None);
    }
}
