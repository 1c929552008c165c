//! The one error type of rawq.
//!
//! Every variant says what failed and, where there is one, what to do about it. Operating-system
//! errors are classified at the point where they happen ([`Error::os`], [`Error::registration`])
//! so that the common deployment problems (no RDMA device, missing capabilities, a locked-memory
//! limit) get a message with the fix instead of a bare errno.

use std::io;

/// Every capability a process needs for all of rawq (AF_XDP receive with its steering program
/// included), in `setcap` / `setpriv` spelling. The [`Error::Permission`] message names these.
pub const CAPS: &str = "cap_net_raw,cap_net_admin,cap_bpf,cap_perfmon,cap_ipc_lock";

/// A rule that is contradictory, refers to something that does not exist, or does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuleError {
    /// A field is contradictory or out of range.
    #[error("`{field}`: {reason}")]
    Invalid {
        /// The field at fault.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// Two rules of a set would be one flow table entry on an mlx5 port
    /// ([`crate::flow::order`]).
    #[error("rules {first} and {second}: {reason}")]
    Collision {
        /// Index of the earlier rule.
        first: usize,
        /// Index of the later rule.
        second: usize,
        /// Both rules and why.
        reason: String,
    },
    /// The text form does not parse.
    #[error("at token {index} (`{token}`): {reason}")]
    Parse {
        /// 0-based index of the bad token.
        index: usize,
        /// The token (empty at end of input).
        token: String,
        /// What was expected.
        reason: String,
    },
}

/// Result alias used throughout rawq.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in rawq.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No RDMA device could be found (ENOSYS from `ibv_get_device_list`, or an empty list).
    #[error(
        "no RDMA device: {reason}. Load the NIC's RDMA driver (e.g. `modprobe mlx5_ib`) or use the \
         AF_XDP backend (`-b xdp` in pktgen and fwd, `Backend::Xdp` in code), which works on any \
         Linux netdev"
    )]
    NoDevice {
        /// Why there is none (the errno text, or "the device list is empty").
        reason: String,
    },

    /// A device or interface was named that does not exist.
    #[error("{kind} {name:?} not found; available: {available}")]
    NotFound {
        /// "RDMA device" or "interface".
        kind: &'static str,
        /// The name asked for.
        name: String,
        /// What exists instead (comma separated, or "none").
        available: String,
    },

    /// The process lacks a capability (EPERM / EACCES).
    #[error(
        "{op}: permission denied ({source}). Raw packet queues need CAP_NET_RAW; AF_XDP and its \
         steering program also CAP_NET_ADMIN, CAP_BPF and CAP_PERFMON (the verifier allows the \
         program's packet-pointer arithmetic only with CAP_PERFMON), and CAP_IPC_LOCK to pin \
         packet memory beyond `ulimit -l`: run as root or grant them with \
         `sudo setcap {CAPS}+ep <your-binary>`"
    )]
    Permission {
        /// The operation that was refused.
        op: &'static str,
        /// The underlying OS error.
        #[source]
        source: io::Error,
    },

    /// Memory registration (MR, UMEM) failed because the locked-memory limit is too low (ENOMEM
    /// from ibv_reg_mr, ENOBUFS from XDP_UMEM_REG).
    #[error(
        "{op}: cannot pin {bytes} bytes of packet memory: the locked-memory limit is too low. \
         Raise it: `ulimit -l unlimited` in the shell that starts the program (or `memlock` in \
         /etc/security/limits.conf, `LimitMEMLOCK=infinity` for a systemd unit), or grant \
         CAP_IPC_LOCK"
    )]
    MemLock {
        /// The operation that failed.
        op: &'static str,
        /// How much memory was to be pinned.
        bytes: usize,
    },

    /// A resource is held by someone else (EBUSY that did not go away after a short wait).
    #[error("{what} is busy: {hint}")]
    Busy {
        /// What is busy.
        what: String,
        /// Who may hold it and what to do.
        hint: String,
    },

    /// A link (interface) failed under a running queue: it went down, or it is gone.
    #[error("{ifname}: {detail}")]
    Link {
        /// The interface.
        ifname: String,
        /// What happened and what to do.
        detail: String,
    },

    /// Every buffer of a pool is in use.
    #[error(
        "packet buffer pool exhausted: all {capacity} buffers are in use; free packets sooner or \
         create a larger pool (MempoolConfig::buffers)"
    )]
    PoolExhausted {
        /// The pool's size in buffers.
        capacity: u32,
    },

    /// An interface already has an XDP program; rawq never replaces one silently.
    #[error("{}", already_attached(ifname, *prog_id, held_by.as_deref()))]
    XdpAlreadyAttached {
        /// The interface.
        ifname: String,
        /// The id of the program that is there.
        prog_id: u32,
        /// The process holding the BPF link the program is attached through ("pid 123
        /// (pktgen)"), when one does: such a program goes away with that process, and
        /// `ip link set dev X xdp off` cannot remove it.
        held_by: Option<String>,
    },

    /// The kernel's BPF verifier rejected the generated steering program.
    #[error(
        "the XDP steering program was rejected by the kernel ({source}); verifier log:\n{log}"
    )]
    Verifier {
        /// The errno of `BPF_PROG_LOAD`.
        #[source]
        source: io::Error,
        /// The verifier's log.
        log: String,
    },

    /// A flow rule is invalid.
    #[error("bad flow rule: {0}")]
    Rule(#[from] RuleError),

    /// A rule handle that names no rule of the port it was given to: one of another port, or
    /// of a rule already removed.
    #[error("rule handle: {0}")]
    RuleHandle(String),

    /// A configuration value is out of range or inconsistent.
    #[error("bad configuration: {0}")]
    Config(String),

    /// The requested backend was not compiled into this build of rawq.
    #[error("the {backend} backend is not compiled in; rebuild rawq with `--features {feature}`")]
    BackendUnavailable {
        /// Backend name.
        backend: &'static str,
        /// Cargo feature that enables it.
        feature: &'static str,
    },

    /// rdma-core's libibverbs or libmlx5, which the dv and verbs backends open at run time, could
    /// not be loaded (not installed, or too old to have a function rawq calls).
    #[error(
        "cannot load {library} ({detail}), which the dv and verbs backends open at run time: \
         install rdma-core's libraries (Debian/Ubuntu: `apt install libibverbs1 ibverbs-providers`; \
         RHEL/Fedora: `dnf install rdma-core`), or run these backends on an emulated NIC with \
         scripts/emu.sh"
    )]
    RdmaLibrary {
        /// The library's file name (`libibverbs.so.1`, `libmlx5.so.1`).
        library: &'static str,
        /// Why it could not be loaded (the dynamic loader's message).
        detail: String,
    },

    /// The device does not support something rawq needs.
    #[error("unsupported: {0}")]
    Unsupported(String),

    /// A queue went into the error state (an error completion); it has been or must be recovered.
    #[error("queue {queue}: {detail}")]
    Queue {
        /// Queue index on its port.
        queue: u16,
        /// What the device reported (syndrome etc.).
        detail: String,
    },

    /// The transmit path dropped a packet it can never send: an offload request it cannot
    /// carry out, a frame above the port's largest, a packet it cannot address. The packet was
    /// taken from the burst (so the caller is not stuck retrying it), freed and counted
    /// (`tx_errors` or `tx_drops`); [`Queue::take_error`](crate::Queue::take_error) says why.
    /// The queue itself is fine.
    #[error("{queue}: tx_burst dropped a packet: {reason}")]
    TxRefused {
        /// The queue or interface that refused it ("queue 3", "veth0", "loopback", ...).
        queue: String,
        /// Why.
        reason: TxRefusal,
    },

    /// Any other operating-system error, with the operation that failed.
    #[error("{op} failed: {source}")]
    Os {
        /// The operation that failed.
        op: &'static str,
        /// The underlying OS error.
        #[source]
        source: io::Error,
    },
}

/// Why the transmit path refused a packet ([`Error::TxRefused`]); each says what to change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TxRefusal {
    /// A TSO request with an MSS of 0.
    #[error("TSO with an MSS of 0 (give the largest TCP payload per segment)")]
    TsoMssZero,
    /// A TSO request on a queue or backend that does not segment.
    #[error("TSO requested, but {by} does not segment: send MSS-sized frames instead")]
    TsoNotSegmented {
        /// What does not segment ("this device (max_tso 0)", "AF_XDP", ...).
        by: &'static str,
    },
    /// The headers of a TSO packet do not all lie in its first buffer.
    #[error(
        "TSO: the Ethernet, IP and TCP headers must lie in the packet's first buffer ({first} \
         bytes): put the whole header in the first buffer"
    )]
    TsoHeaderSplit {
        /// The length of the first buffer.
        first: usize,
    },
    /// A TSO packet whose IPv4 header is malformed.
    #[error("TSO: malformed IPv4 header (version 4 and a header length of at least 20 bytes)")]
    TsoBadIpv4,
    /// A TSO packet that is an IPv4 fragment.
    #[error("TSO of an IPv4 fragment: segment the datagram before fragmenting, or not at all")]
    TsoFragment,
    /// A TSO packet that is neither IPv4 nor IPv6 (after at most one 802.1Q tag).
    #[error("TSO of a frame with ethertype 0x{ethertype:04x}: only IPv4 and IPv6 are segmented")]
    TsoNotIp {
        /// The frame's ethertype.
        ethertype: u16,
    },
    /// A TSO packet that is not TCP (or an IPv6 one with extension headers).
    #[error(
        "TSO of IP protocol {protocol}: only TCP is segmented (no IPv6 extension headers); \
         send it without the TSO request"
    )]
    TsoNotTcp {
        /// The IP protocol (IPv4) or next header (IPv6).
        protocol: u8,
    },
    /// A TSO packet whose TCP header is malformed.
    #[error("TSO: malformed TCP header (data offset below 5)")]
    TsoBadTcp,
    /// A TSO packet whose headers are longer than the device takes.
    #[error("TSO header of {len} bytes: at most {max} (fewer IP or TCP options)")]
    TsoHeaderTooLong {
        /// The header length (Ethernet through TCP).
        len: usize,
        /// The most there may be.
        max: usize,
    },
    /// A TSO packet with more payload than the port segments.
    #[error(
        "TSO payload of {payload} bytes: this port segments at most {max}; send less per packet"
    )]
    TsoPayloadTooLong {
        /// The payload length.
        payload: usize,
        /// The most the port segments.
        max: u32,
    },
    /// TSO segments that would be larger than the port's largest frame.
    #[error(
        "TSO segments of {segment} bytes (a {header}-byte header + MSS {mss}) are above the \
         port's largest frame of {max_frame} bytes (MTU {} + 18 bytes of Ethernet header and \
         VLAN tag): send with an MSS of at most {} or open the port with a larger \
         PortBuilder::mtu",
        max_frame.saturating_sub(crate::eth::MTU_L2_OVERHEAD),
        (*max_frame as usize).saturating_sub(*header)
    )]
    TsoSegmentTooLong {
        /// The segment length (header + MSS).
        segment: usize,
        /// The header length.
        header: usize,
        /// The MSS asked for.
        mss: u16,
        /// The port's largest frame.
        max_frame: u32,
    },
    /// A TSO packet of more buffers than one work request can point at.
    #[error(
        "TSO packet of {buffers} buffers: a WQE with a {header}-byte header points at most \
         {max} (use larger pool buffers)"
    )]
    TsoTooManyBuffers {
        /// The packet's buffers.
        buffers: usize,
        /// The header length.
        header: usize,
        /// The most buffers there may be.
        max: u32,
    },
    /// A VLAN tag to insert into a frame shorter than an Ethernet header.
    #[error("VLAN insertion into a {len}-byte first buffer: needs the 14-byte Ethernet header")]
    VlanShortFrame {
        /// The first buffer's length.
        len: usize,
    },
    /// A VLAN tag to insert into a frame that already has one.
    #[error(
        "VLAN insertion into a frame that already has a tag (ethertype 0x{ethertype:04x}): \
         send it without the insertion request, or without its tag"
    )]
    VlanAlreadyTagged {
        /// The frame's outer ethertype.
        ethertype: u16,
    },
    /// A VLAN tag to insert in software into a packet without headroom for it.
    #[error(
        "VLAN insertion in software needs 4 bytes of headroom; the packet has none (keep the \
         pool's default headroom)"
    )]
    VlanNoHeadroom,
    /// A frame longer than the port's largest.
    #[error(
        "a frame of {len} bytes is above the port's largest frame of {max_frame} bytes (MTU {} \
         + 18 bytes of Ethernet header and VLAN tag): send smaller frames or open the port with \
         a larger PortBuilder::mtu",
        max_frame.saturating_sub(crate::eth::MTU_L2_OVERHEAD as usize)
    )]
    FrameTooLong {
        /// The frame's length.
        len: usize,
        /// The port's largest frame.
        max_frame: usize,
    },
    /// An empty packet.
    #[error("empty packet: give it at least an Ethernet header")]
    Empty,
    /// A packet of more buffers than the queue sends at once.
    #[error(
        "packet of {segments} segments; this queue sends at most {max} (use larger pool buffers)"
    )]
    TooManySegments {
        /// The packet's buffers.
        segments: usize,
        /// The most the queue sends.
        max: usize,
    },
    /// A packet from a pool the queue's device does not know.
    #[error(
        "packet from another pool (not registered with this device): allocate it from the \
         port's pool"
    )]
    ForeignPool,
}

fn already_attached(ifname: &str, prog_id: u32, held_by: Option<&str>) -> String {
    match held_by {
        Some(who) => format!(
            "interface {ifname} already has an XDP program attached (program id {prog_id}) through \
             a BPF link held by process {who} (another rawq port or another AF_XDP program); it \
             is detached when that process exits, so stop it (or use another interface). \
             `ip link set dev {ifname} xdp off` cannot remove a link-attached program"
        ),
        None => format!(
            "interface {ifname} already has an XDP program attached (program id {prog_id}); \
             inspect it with `bpftool prog show id {prog_id}` and remove it with `ip link set dev \
             {ifname} xdp off` if nothing needs it"
        ),
    }
}

impl Error {
    /// Classifies an OS error from `op`: EPERM/EACCES become [`Error::Permission`], ENOSYS
    /// becomes [`Error::NoDevice`], anything else [`Error::Os`].
    pub fn os(op: &'static str, source: io::Error) -> Error {
        match source.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => Error::Permission { op, source },
            Some(libc::ENOSYS) => Error::NoDevice {
                reason: format!("{op}: {source} (this kernel has no RDMA/InfiniBand support)"),
            },
            _ => Error::Os { op, source },
        }
    }

    /// Like [`Error::os`] for the errno of the last failed libc call.
    pub fn last_os(op: &'static str) -> Error {
        Error::os(op, io::Error::last_os_error())
    }

    /// Classifies an error from registering `bytes` of memory with a device or socket:
    /// ENOMEM (ibv_reg_mr) or ENOBUFS (XDP_UMEM_REG, whose page accounting against
    /// RLIMIT_MEMLOCK fails with it) there mean the locked-memory limit ([`Error::MemLock`]).
    pub fn registration(op: &'static str, bytes: usize, source: io::Error) -> Error {
        match source.raw_os_error() {
            Some(libc::ENOMEM) | Some(libc::ENOBUFS) => Error::MemLock { op, bytes },
            _ => Error::os(op, source),
        }
    }

    /// The errno behind this error, if it came from the operating system.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Permission { source, .. } | Error::Os { source, .. } => source.raw_os_error(),
            Error::Verifier { source, .. } => source.raw_os_error(),
            Error::MemLock { .. } => Some(libc::ENOMEM),
            Error::NoDevice { .. } => Some(libc::ENOSYS),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_classification_gives_the_fix() {
        let e = Error::os("socket(AF_XDP)", io::Error::from_raw_os_error(libc::EPERM));
        assert!(matches!(e, Error::Permission { .. }));
        assert!(e.to_string().contains("setcap"), "{e}");
        assert!(e.to_string().contains(CAPS), "{e}");

        let e = Error::registration(
            "ibv_reg_mr",
            1 << 21,
            io::Error::from_raw_os_error(libc::ENOMEM),
        );
        assert!(matches!(e, Error::MemLock { bytes: 2097152, .. }));
        assert!(e.to_string().contains("ulimit -l"), "{e}");
        let e = Error::registration(
            "setsockopt(XDP_UMEM_REG)",
            1 << 21,
            io::Error::from_raw_os_error(libc::ENOBUFS),
        );
        assert!(matches!(e, Error::MemLock { .. }), "{e}");
        assert!(e.to_string().contains("ulimit -l"), "{e}");

        let e = Error::os(
            "ibv_get_device_list",
            io::Error::from_raw_os_error(libc::ENOSYS),
        );
        assert!(matches!(e, Error::NoDevice { .. }));
        assert_eq!(e.raw_os_error(), Some(libc::ENOSYS));

        let e = Error::os("bind", io::Error::from_raw_os_error(libc::EBUSY));
        assert!(matches!(e, Error::Os { .. }));
        assert_eq!(e.raw_os_error(), Some(libc::EBUSY));
    }
}
