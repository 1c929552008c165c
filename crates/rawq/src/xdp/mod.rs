//! AF_XDP backend: one AF_XDP socket per queue, and the port's flow rules compiled into an XDP
//! program that steers matching frames to those sockets while everything else goes on to the
//! kernel.
//!
//! # How a port is put together
//! 1. The pool region becomes the UMEM (`umem`); queue 0's socket registers it, the other
//!    queues share it (`XDP_SHARED_UMEM`), each with its own fill and completion rings
//!    (`socket.rs`).
//! 2. rawq queue *i* is bound to netdev rx queue *i*, and sits at key *i* of an XSKMAP.
//! 3. The rules are compiled to eBPF (`bpf::compile()`), loaded, and attached to the interface
//!    with a BPF link. The link is a file descriptor: the program goes away when the port is
//!    dropped **and** when the process dies, however it dies. With no rules, no program is
//!    attached (the queues can still transmit).
//! 4. Rules added or removed while the port runs ([`Port::add_rule`](crate::Port::add_rule))
//!    recompile the program and swap it in on the link in one step (`BPF_LINK_UPDATE`); each
//!    rule counts the frames it takes in a per-CPU map ([`Port::rule_hits`](crate::Port::rule_hits)).
//!    The first rule of a port opened without rules attaches the program, removing the last
//!    detaches it (`steer.rs`).
//! 5. If the interface already has an XDP program, opening fails with
//!    [`Error::XdpAlreadyAttached`] naming it; rawq never replaces a program.
//!
//! Zero-copy is tried first and copy mode is the fallback; [`PortInfo::mode`] says which one
//! the port got ("zero-copy" / "copy").
//!
//! # Steering limits (plainly)
//! An AF_XDP socket bound to netdev queue *q* only sees frames the NIC put on queue *q*. So a
//! `Queue(q)` rule takes a matching frame only when it arrives on netdev queue *q*; elsewhere it
//! goes to the kernel. On a single-queue interface such as a veth, use queue 0. `Rss(qs)` keeps
//! a frame on the netdev queue the NIC's RSS chose, if that queue is in `qs`. See
//! `bpf::compile()` for the exact semantics.
//! The NIC's RSS is its own (key, fields, indirection table: `ethtool -X`, `ethtool -N
//! rx-flow-hash`); a port opened with an [`RssConfig`](crate::RssConfig) other than the default
//! is refused rather than have it ignored.
//!
//! # Data path
//! `rx.rs`: descriptors from the rx ring become [`Packet`](crate::Packet)s in place (no copy); the fill ring is
//! refilled from the queue's private [`PoolCache`] once per burst. `tx.rs`: packets are moved into
//! the tx ring (their buffers go to the kernel), one producer update per burst, a `sendto` kick
//! only when the ring's need-wakeup flag asks; completed buffers come back from the completion
//! ring into the `PoolCache`, and only then are their frames counted in `tx_packets` (a frame
//! stuck in the ring because the link is down is never counted as sent). A packet of another
//! pool is copied into one of this queue's buffers and counted in `tx_copies`; to forward between
//! ports without copies, open them on one pool ([`PortBuilder::pool`](crate::PortBuilder::pool)):
//! each port registers the same region as its UMEM, so a buffer received on one is a valid
//! address on the other. Without a port MTU, multi-buffer packets are not supported on transmit
//! (they are dropped, counted in `tx_drops` and not reported as taken) and receive frames are at
//! most `buf_size - 256` bytes; a port opened with
//! [`PortBuilder::mtu`](crate::PortBuilder::mtu) whose frames do not fit one buffer uses
//! multi-buffer sockets instead (Linux 6.6 or later), sending and receiving chained packets
//! (see `sg.rs`). A failed tx kick (ENETDOWN, ENXIO) is kept for
//! [`Queue::take_error`](crate::Queue::take_error) as [`Error::Link`].
//!
//! Received frames start 256 bytes (`XDP_PACKET_HEADROOM`) into their buffer: see `umem`.
//!
//! # Receive timestamps
//! With [`PortBuilder::rx_timestamps`](crate::PortBuilder::rx_timestamps)
//! ([`RxTimestamps::Kernel`]) the steering program stamps every frame it redirects with
//! `bpf_ktime_get_ns()` (CLOCK_MONOTONIC) in the frame's XDP metadata, a 32-byte record just
//! in front of the frame's data (`bpf::meta`; copy mode copies it into the UMEM chunk with the
//! frame). The receive path reads it into [`RxMeta::kernel_rx_ns`](crate::RxMeta::kernel_rx_ns)
//! and clears the record's magic. Every driver runs the hook (veth: in its NAPI poll; generic
//! XDP: in the stack's receive path), so the stamp is when the frame left the driver's ring
//! for the XDP program, before the socket's rx ring: the application's polling and batching
//! do not add to it. A driver without metadata support (`bpf_xdp_adjust_meta` fails) gives
//! frames without a stamp.
//!
//! [`RxTimestamps::Hardware`] adds the driver's hardware receive timestamp: the program calls
//! the kfunc `bpf_xdp_metadata_rx_timestamp` (Linux 6.3+; its BTF id is looked up by name in
//! `/sys/kernel/btf/vmlinux`, `bpf::btf`) and is therefore loaded device-bound to the
//! interface (`BPF_F_XDP_DEV_BOUND_ONLY`), which needs the driver's native XDP. A valid stamp
//! reaches [`RxMeta::hw_timestamp`](crate::RxMeta::hw_timestamp) in ns of the interface's PTP
//! hardware clock ([`phc`]; ticks of a 1 GHz clock, so `hw_timestamp_ns(1_000_000)`); a frame
//! the driver did not stamp (veth: none ever is) has none. The kernel time is recorded too.
//! `BPF_PROG_TEST_RUN` refuses device-bound programs (EINVAL), so only the verifier and live
//! traffic can check this one.
//!
//! # VLAN stripping
//! With [`PortBuilder::vlan_strip`](crate::PortBuilder::vlan_strip), and where the interface's
//! driver implements the `xmo_rx_vlan_tag` metadata op (the kernel's `netdev` generic-netlink
//! family reports it: `genl`; veth, mlx5e and ice implement it), the steering program is loaded
//! device-bound and calls the kfunc `bpf_xdp_metadata_rx_vlan_tag` (Linux 6.8, net/core/xdp.c)
//! for every frame it redirects; the metadata record (`bpf::meta`, now 32 bytes) carries its
//! answer, and the receive path puts a tag the driver took off the frame into
//! [`RxMeta::vlan_tci`](crate::RxMeta::vlan_tci). On a veth that is a tag that came in the
//! skb (drivers/net/veth.c `veth_xdp_rx_vlan_tag` reads `skb->vlan_tci`): the XDP program sees
//! the frame without it. A tag in the frame data stays there (the kfunc answers ENODATA). A
//! driver without the op, or a kernel without the kfunc: no call, the port's
//! `offloads.vlan_strip` is `Absent`.
//!
//! # Namespaces
//! Interface names and indices are those of the calling thread's network namespace: open the
//! port on a thread that has entered the namespace of the interface. The queues can then be
//! used from any thread, and rules added from any thread (the port remembers its namespace).

use crate::config::{Backend, PortConfig, PortInfo, RxTimestamps};
use crate::error::{Error, Result};
use crate::mempool::{Mempool, PoolCache, Shared};
use crate::queue::{Queue, QueueOps};
use crate::stats::StatsWriter;

internal_mod!(bpf);
internal_mod!(genl);
internal_mod!(iface);
pub mod live;
pub mod phc;
mod ring;
mod rx;
mod sg;
mod socket;
mod steer;
mod tx;
internal_mod!(umem);

use crate::sys::rtnetlink::link_info;
use socket::Mode;

use bpf::{Stamp, XskMap};
use genl::{RX_TIMESTAMP_KFUNC, RX_VLAN_TAG_KFUNC};
use iface::{ifindex, link_holder};
use socket::{RingSizes, XdpStatistics, Xsk};
use umem::Umem;

/// Buffers the kernel holds for one queue (in the fill, rx, tx or completion ring, or in between),
/// one bit per pool buffer, and the cache they return to. Dropped *after* the socket is closed, so
/// that the buffers the kernel still held come home.
struct Home {
    cache: PoolCache,
    held: Vec<u64>,
}

impl Home {
    #[inline]
    fn hold(&mut self, idx: u32) {
        let (w, b) = ((idx >> 6) as usize, idx & 63);
        debug_assert!(
            self.held[w] & (1 << b) == 0,
            "buffer {idx} given to the kernel twice"
        );
        self.held[w] |= 1 << b;
    }

    /// Marks `idx` as back from the kernel; false if the kernel did not hold it (a bogus
    /// address), in which case the caller must not use it.
    #[inline]
    fn release(&mut self, idx: u32) -> bool {
        let (w, b) = ((idx >> 6) as usize, idx & 63);
        match self.held.get_mut(w) {
            Some(word) if *word & (1 << b) != 0 => {
                *word &= !(1 << b);
                true
            }
            _ => false,
        }
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        for (w, word) in self.held.iter().enumerate() {
            let mut bits = *word;
            while bits != 0 {
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                self.cache.put((w as u32) << 6 | b);
            }
        }
        self.cache.flush();
    }
}

/// One rawq queue on an AF_XDP socket.
pub(crate) struct XdpQueue {
    // Declared first: dropped (socket closed, rings unmapped) before `home` returns the buffers.
    xsk: Xsk,
    home: Home,
    umem: Umem,
    shared: &'static Shared,
    pool: Mempool,
    stats: StatsWriter,
    fill_size: u32,
    /// Empty rx polls since the kernel counters were last read.
    idle_polls: u32,
    /// `reclaim` calls since the kernel counters were last read.
    reclaims: u32,
    /// Kernel counters already added to `stats`.
    seen: XdpStatistics,
    /// Length of the frame each buffer carries while the kernel holds it for transmit (sent
    /// frames are counted when their completion comes back, not when they enter the ring).
    tx_len: Vec<u16>,
    /// The interface (for error messages).
    ifname: String,
    /// The last failure to kick the kernel (link down, interface gone), for `take_error`.
    error: Option<Error>,
    /// The steering program writes a metadata record (receive timestamps, the driver's VLAN
    /// tag) in front of the frames it redirects.
    stamps: bool,
    /// Multi-buffer frames (`XDP_USE_SG`, see [`sg`]).
    sg: bool,
}

impl XdpQueue {
    /// Folds the socket's kernel counters (drops, invalid descriptors) into the queue's stats.
    /// A syscall: called on the slow path only (idle rx polls, `reclaim`).
    fn sync_kernel_stats(&mut self) {
        use crate::stats::Counter;
        let Ok(s) = self.xsk.statistics() else {
            return;
        };
        let d = |now: u64, was: u64| now.saturating_sub(was);
        self.stats.add(
            Counter::RxDrops,
            d(s.rx_dropped, self.seen.rx_dropped) + d(s.rx_ring_full, self.seen.rx_ring_full),
        );
        self.stats.add(
            Counter::RxErrors,
            d(s.rx_invalid_descs, self.seen.rx_invalid_descs),
        );
        self.stats.add(
            Counter::TxErrors,
            d(s.tx_invalid_descs, self.seen.tx_invalid_descs),
        );
        self.stats.add(
            Counter::RxNoBuffer,
            d(
                s.rx_fill_ring_empty_descs,
                self.seen.rx_fill_ring_empty_descs,
            ),
        );
        self.seen = s;
    }
}

/// `reclaim` calls between two reads of the kernel's counters.
const RECLAIMS_PER_STATS: u32 = 256;

impl Drop for XdpQueue {
    fn drop(&mut self) {
        // Last word from the kernel, readable afterwards through the port's stats readers.
        self.sync_kernel_stats();
    }
}

impl QueueOps for XdpQueue {
    fn rx_burst(&mut self, out: &mut Vec<crate::Packet>, max: usize) -> usize {
        if self.sg {
            return self.rx_sg(out, max);
        }
        self.rx(out, max)
    }

    fn tx_burst(&mut self, pkts: &mut Vec<crate::Packet>) -> usize {
        if self.sg {
            return self.tx_sg(pkts);
        }
        self.tx(pkts)
    }

    fn reclaim(&mut self) -> usize {
        self.kick_tx();
        let n = self.reclaim_completions();
        self.reclaims += 1;
        if self.reclaims >= RECLAIMS_PER_STATS {
            self.reclaims = 0;
            self.sync_kernel_stats();
        }
        n
    }

    fn stats(&self) -> &StatsWriter {
        &self.stats
    }

    fn pool(&self) -> &Mempool {
        &self.pool
    }

    /// From the cache the completion ring returns buffers to (`reclaim_completions`).
    fn alloc_burst(&mut self, out: &mut Vec<crate::Packet>, n: usize) -> Result<()> {
        self.home.cache.alloc_bulk(out, n)
    }

    fn take_error(&mut self) -> Option<Error> {
        self.error.take()
    }

    fn rx_arm(&mut self) -> Result<()> {
        XdpQueue::rx_arm(self);
        Ok(())
    }

    fn rx_ready(&mut self) -> bool {
        XdpQueue::rx_ready(self)
    }

    fn rx_fd(&self) -> Option<std::os::fd::RawFd> {
        Some(XdpQueue::rx_fd(self))
    }
}

/// The BTF id of [`RX_VLAN_TAG_KFUNC`] when a port asks for VLAN stripping and the driver of
/// `ifindex` answers it (its `xmo_rx_vlan_tag` op, reported by the `netdev` family: `genl`);
/// `None` otherwise (no stripping asked, a kernel before 6.8 or without BTF, a driver without
/// the op): the program then does not call it, and frames keep whatever tag their data has.
fn vlan_kfunc(cfg: &PortConfig, ifindex: u32) -> Option<u32> {
    if !cfg.vlan_strip {
        return None;
    }
    let features = genl::rx_metadata_features(ifindex).unwrap_or(0);
    if features & genl::RX_METADATA_VLAN_TAG == 0 {
        return None;
    }
    bpf::btf::vmlinux_func(RX_VLAN_TAG_KFUNC, "VLAN stripping", "").ok()
}

/// How long a bind that finds its netdev queue taken is retried: the kernel releases the queue
/// of a closed socket asynchronously (its buffer pool is freed from a work queue), so
/// back-to-back runs can briefly see EBUSY; on a loaded 2-CPU machine (the suite beside five
/// builds) an RFC 2544 trial's port still found its predecessor's queue taken after 1500 ms.
const BUSY_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs `f` until it does not fail with EBUSY, for at most [`BUSY_RETRY`].
fn retry_busy<T>(mut f: impl FnMut() -> Result<T>) -> Result<T> {
    let t = std::time::Instant::now();
    loop {
        match f() {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && t.elapsed() < BUSY_RETRY => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => return r,
        }
    }
}

/// EBUSY from binding queue `q` of `ifname`, said plainly; other errors unchanged.
fn busy_error(e: Error, ifname: &str, q: u16) -> Error {
    if e.raw_os_error() != Some(libc::EBUSY) {
        return e;
    }
    Error::Busy {
        what: format!("rx queue {q} of {ifname}"),
        hint: format!(
            "another AF_XDP socket is bound to it (another rawq port, or another AF_XDP \
             program) and it was still taken after {} ms. Stop that process: a port binds \
             queues 0 to N-1 of its interface, so two ports on one interface cannot share \
             them. To find it: `ip link show dev {ifname}` names the XDP program attached \
             (prog/xdp id N) and `bpftool prog show id N` the processes holding it; \
             `ss --xdp -p` lists AF_XDP sockets only where the kernel has XDP socket diag \
             (CONFIG_XDP_SOCKETS_DIAG, module xsk_diag)",
            BUSY_RETRY.as_millis()
        ),
    }
}

/// Opens an AF_XDP port (see the module docs).
pub(crate) fn open(cfg: &PortConfig, pool: &Mempool) -> Result<crate::backend::Opened> {
    let Backend::Xdp { ifname } = &cfg.backend else {
        return Err(Error::Config("xdp::open called for another backend".into()));
    };
    // The NIC's own RSS (its key, hashed fields and indirection table: `ethtool -X` / `-N
    // rx-flow-hash`) picks the netdev queue a frame arrives on, which an XDP socket cannot
    // change: refuse a configuration that would otherwise be ignored.
    if cfg.rss != crate::config::RssConfig::default() {
        return Err(Error::Unsupported(format!(
            "an RSS configuration (key, fields, IP versions) on an AF_XDP port: {ifname}'s own \
             RSS spreads frames over its queues; set it with `ethtool -X {ifname} hkey ...` and \
             `ethtool -N {ifname} rx-flow-hash ...`, and open the port without one"
        )));
    }
    let umem = Umem::of(pool)?;
    let ifindex = ifindex(ifname)?;
    let link = link_info(ifindex)?;
    let mtu = link.mtu;
    if let Some(rxq) = link.rx_queues {
        if cfg.queues as u32 > rxq {
            return Err(Error::Config(format!(
                "{ifname} has {rxq} rx queue(s) but {} queues were asked for: use at most {rxq} \
                 (AF_XDP queue i is bound to netdev queue i), or give the interface more queues \
                 (`ethtool -L {ifname} combined {}`; a veth gets them when created with \
                 `numrxqueues N numtxqueues N`)",
                cfg.queues, cfg.queues
            )));
        }
    }
    let will_attach = !cfg.rules.is_empty();
    if will_attach {
        if let Some(prog_id) = link.xdp_prog_id {
            return Err(Error::XdpAlreadyAttached {
                ifname: ifname.clone(),
                prog_id,
                held_by: link_holder(prog_id),
            });
        }
    }

    let map = XskMap::create(cfg.queues as u32)?;
    let stamp = match cfg.rx_timestamps {
        RxTimestamps::Off => Stamp::None,
        RxTimestamps::Kernel => Stamp::Kernel,
        RxTimestamps::Hardware => Stamp::Hardware {
            rx_timestamp_kfunc: bpf::btf::vmlinux_func(
                RX_TIMESTAMP_KFUNC,
                "RxTimestamps::Hardware (the driver's receive timestamps, read by the XDP \
                 program)",
                "It needs Linux 6.3 or later with BTF; RxTimestamps::Kernel needs neither",
            )?,
        },
    };
    let vlan = vlan_kfunc(cfg, ifindex);
    // A port MTU whose frames do not fit one chunk: multi-buffer sockets and program.
    let sg = sg::needed(cfg, &umem, pool)?;
    let mut steering = steer::Steering::new(&cfg.rules, map, ifname, ifindex, stamp, sg, vlan)?;
    let map = steering.map();

    let sizes = RingSizes {
        rx: cfg.rx_ring,
        tx: cfg.tx_ring,
        fill: cfg.rx_ring,
        comp: cfg.tx_ring,
    };
    let mut queues = Vec::with_capacity(cfg.queues as usize);
    let mut owner_fd = None;
    let mut mode = Mode::ZeroCopy;
    for q in 0..cfg.queues {
        let busy = |e: Error| busy_error(e, ifname, q);
        let xsk = match owner_fd {
            None => retry_busy(|| {
                match Xsk::create_sg(ifindex, q as u32, &umem, None, Mode::ZeroCopy, sizes, sg) {
                    Ok(x) => Ok((x, Mode::ZeroCopy)),
                    Err(e)
                        if e.raw_os_error()
                            .is_some_and(|c| c != libc::EPERM && c != libc::EBUSY) =>
                    {
                        Xsk::create_sg(ifindex, q as u32, &umem, None, Mode::Copy, sizes, sg)
                            .map(|x| (x, Mode::Copy))
                    }
                    Err(e) => Err(e),
                }
            })
            .map(|(x, m)| {
                mode = m;
                x
            })
            .map_err(busy)?,
            Some(fd) => {
                let mut x =
                    retry_busy(|| Xsk::create(ifindex, q as u32, &umem, Some(fd), mode, sizes))
                        .map_err(|e| match e.raw_os_error() {
                            // The first queue bound, so the socket and UMEM are fine: the queue
                            // index is what the device refuses.
                            Some(libc::EINVAL) => Error::Config(format!(
                            "{ifname} refuses an AF_XDP socket on rx queue {q} (EINVAL): it has \
                             {q} active rx queue(s), so use at most {q} queues, or activate more \
                             (`ethtool -l {ifname}` shows them, `ethtool -L {ifname} combined {}` \
                             sets them; a veth is created with `numrxqueues N numtxqueues N`)",
                            cfg.queues
                        )),
                            _ => busy(e),
                        })?;
                x.mode = mode;
                x
            }
        };
        if owner_fd.is_none() {
            owner_fd = Some(xsk.as_raw_fd());
        }
        map.insert(q as u32, xsk.as_raw_fd())?;
        let mut xq = XdpQueue {
            xsk,
            home: Home {
                cache: pool.cache(),
                held: vec![0u64; (umem.count as usize).div_ceil(64)],
            },
            umem,
            shared: pool.shared(),
            pool: pool.clone(),
            stats: StatsWriter::default(),
            fill_size: sizes.fill,
            idle_polls: 0,
            reclaims: 0,
            seen: XdpStatistics::default(),
            tx_len: vec![0; umem.count as usize],
            ifname: ifname.clone(),
            error: None,
            stamps: stamp != Stamp::None || vlan.is_some(),
            sg,
        };
        xq.refill();
        queues.push(Queue::new(q, Box::new(xq)));
    }

    steering.attach(mtu)?;

    let info = PortInfo {
        backend: "xdp",
        device: ifname.clone(),
        mode: if sg {
            format!("{}, multi-buffer", mode.name())
        } else {
            mode.name().into()
        },
        queues: cfg.queues,
        offloads: crate::config::Offloads {
            // The driver's tag where it has the op; otherwise the frame keeps its tag.
            vlan_strip: if vlan.is_some() {
                crate::config::Offload::Hardware
            } else {
                crate::config::Offload::Absent
            },
            ..crate::config::Offloads::xdp(cfg.rx_timestamps)
        },
    };
    Ok((queues, info, Box::new(steering)))
}
