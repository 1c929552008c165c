//! The steering program of an AF_XDP port, and its rules at run time.
//!
//! The port's rules compile to one XDP program ([`bpf::compile_counted`]) attached through a
//! BPF link. A rule added or removed while the port runs makes a new program from the new set
//! of rules; the link then swaps it in with `BPF_LINK_UPDATE` (with `BPF_F_REPLACE` naming the
//! program it replaces), one pointer exchange in the kernel (net/core/dev.c
//! `bpf_xdp_link_update`): every frame is steered entirely by the old program or entirely by
//! the new one. The first rule of a port without rules attaches the program
//! (`BPF_LINK_CREATE`); removing the last one detaches it (the link is closed), so a port
//! without rules leaves the interface without a program, as at open.
//!
//! Why a link and not netlink's `XDP_FLAGS_REPLACE`: the link was already how rawq attaches (it
//! detaches when the process dies), and `BPF_LINK_UPDATE` on an XDP link (Linux 5.9,
//! `include/uapi/linux/bpf.h` `link_update`) is the atomic replacement for it; a link-attached
//! program cannot be replaced through netlink at all.
//!
//! **Hit counters**: every rule has a slot in one `BPF_MAP_TYPE_PERCPU_ARRAY` that all the
//! port's programs share; the program adds 1 to the rule's slot (this CPU's copy) when the rule
//! takes a frame. A slot keeps its value when a rule goes, so a rule's hits are the slot's sum
//! minus what it held when the rule came.

use super::bpf::{self, Counting, PerCpuCounters, Program, Stamp, Variant, XdpLink, XskMap};
use super::{link_holder, link_info};
use crate::error::{Error, Result};
use crate::flow::Rule;

/// Counter slots of a port: rules at once, at most (the per-CPU map holds this many u64 per
/// possible CPU).
pub(super) const COUNTER_SLOTS: u32 = 1024;

/// One installed rule: its number, the rule, its counter slot and the slot's value when the
/// rule came.
struct Installed {
    id: u64,
    rule: Rule,
    slot: u32,
    base: u64,
}

/// Control-path objects of an XDP port, dropped with the port: the link first (detaching the
/// program), then the program and the maps.
pub(super) struct Steering {
    link: Option<XdpLink>,
    prog: Option<Program>,
    map: XskMap,
    counters: PerCpuCounters,
    rules: Vec<Installed>,
    free: Vec<u32>,
    ifname: String,
    ifindex: u32,
    stamp: Stamp,
    /// The network namespace the port was opened in, where `ifindex` names the interface: a
    /// program attached later (the first rule of a port without rules) is attached from there,
    /// whichever thread adds the rule.
    netns: std::fs::File,
    /// The program handles multi-buffer frames (`BPF_F_XDP_HAS_FRAGS`): the sockets are bound
    /// with `XDP_USE_SG`.
    frags: bool,
    /// The BTF id of `bpf_xdp_metadata_rx_vlan_tag`, when the program asks the driver for the
    /// VLAN tag of each frame it redirects (`PortBuilder::vlan_strip` on a driver with the op).
    vlan_kfunc: Option<u32>,
}

impl Steering {
    /// Compiles `rules` (numbered 0, 1, ...) and attaches them to `ifindex`; no program when
    /// there are none. With `vlan_kfunc` (the BTF id of `bpf_xdp_metadata_rx_vlan_tag`) the
    /// program records the driver's VLAN tag of every frame it redirects
    /// ([`bpf::compile_meta`]).
    ///
    /// # Errors
    /// [`Error::Config`] for more than [`COUNTER_SLOTS`] rules; what compiling, loading and
    /// attaching report (see [`attach_error`]).
    pub(super) fn new(
        rules: &[Rule],
        map: XskMap,
        ifname: &str,
        ifindex: u32,
        stamp: Stamp,
        frags: bool,
        vlan_kfunc: Option<u32>,
    ) -> Result<Steering> {
        if rules.len() > COUNTER_SLOTS as usize {
            return Err(too_many(ifname));
        }
        let counters = PerCpuCounters::create(COUNTER_SLOTS, "rawq_hits")?;
        let netns = std::fs::File::open("/proc/thread-self/ns/net")
            .map_err(|e| Error::os("open /proc/thread-self/ns/net", e))?;
        let mut s = Steering {
            link: None,
            prog: None,
            map,
            counters,
            rules: Vec::new(),
            free: (0..COUNTER_SLOTS).rev().collect(),
            ifname: ifname.to_string(),
            ifindex,
            stamp,
            netns,
            frags,
            vlan_kfunc,
        };
        for (i, r) in rules.iter().enumerate() {
            let slot = s.free.pop().ok_or_else(|| too_many(ifname))?;
            s.rules.push(Installed {
                id: i as u64,
                rule: r.clone(),
                slot,
                base: 0,
            });
        }
        if !rules.is_empty() {
            s.prog = Some(s.load()?);
        }
        Ok(s)
    }

    /// The XSKMAP (queue sockets go in at open).
    pub(super) fn map(&self) -> &XskMap {
        &self.map
    }

    /// Attaches the program loaded at open (called once the sockets are bound).
    ///
    /// # Errors
    /// See [`attach_error`].
    pub(super) fn attach(&mut self, mtu: Option<u32>) -> Result<()> {
        if let Some(p) = &self.prog {
            let l = XdpLink::attach(p, self.ifindex)
                .map_err(|e| attach_error(e, &self.ifname, self.ifindex, mtu, self.stamp))?;
            self.link = Some(l);
        }
        Ok(())
    }

    /// Attaches `prog` to the interface from a thread in the port's network namespace (an
    /// ifindex means an interface only there; `BPF_LINK_CREATE` and rtnetlink read it in the
    /// caller's namespace).
    fn attach_in_netns(&self, prog: &Program) -> Result<XdpLink> {
        use std::os::fd::AsRawFd;
        let (ifname, ifindex, stamp, ns) = (
            &self.ifname,
            self.ifindex,
            self.stamp,
            self.netns.as_raw_fd(),
        );
        std::thread::scope(|s| {
            s.spawn(move || {
                // SAFETY: setns on a namespace fd the port keeps open; it moves only this
                // short-lived thread.
                if unsafe { libc::setns(ns, libc::CLONE_NEWNET) } != 0 {
                    return Err(Error::last_os("setns(the port's network namespace)"));
                }
                let link = link_info(ifindex)?;
                if let Some(prog_id) = link.xdp_prog_id {
                    return Err(Error::XdpAlreadyAttached {
                        ifname: ifname.clone(),
                        prog_id,
                        held_by: link_holder(prog_id),
                    });
                }
                XdpLink::attach(prog, ifindex)
                    .map_err(|e| attach_error(e, ifname, ifindex, link.mtu, stamp))
            })
            .join()
            .unwrap_or_else(|_| Err(Error::Config("the XDP attach thread panicked".into())))
        })
    }

    /// Compiles and loads the program of the current rules.
    fn load(&self) -> Result<Program> {
        let rules: Vec<Rule> = self.rules.iter().map(|r| r.rule.clone()).collect();
        let slots: Vec<u32> = self.rules.iter().map(|r| r.slot).collect();
        let insns = bpf::compile_meta(
            &rules,
            Variant::Steer {
                xskmap_fd: self.map.as_raw_fd(),
            },
            self.stamp,
            self.vlan_kfunc,
            Some(Counting {
                map_fd: self.counters.as_raw_fd(),
                slots: &slots,
            }),
        )?;
        match self.stamp {
            // The VLAN kfunc is only used where the driver reports the op (so it has native
            // XDP): bound to it like the timestamp kfunc's program, refusals said plainly.
            _ if self.vlan_kfunc.is_some() => {
                Program::load_flags(&insns, "rawq_steer", Some(self.ifindex), self.frags)
            }
            // The metadata kfuncs are the driver's: the verifier wants the program bound to it.
            Stamp::Hardware { .. } => {
                Program::load_flags(&insns, "rawq_steer", Some(self.ifindex), self.frags).map_err(
                    |e| {
                        match e.raw_os_error() {
                            // The kernel binds a program only to a netdev whose driver has native XDP.
                            Some(libc::EOPNOTSUPP) => Error::Unsupported(format!(
                                "{} cannot take the device-bound XDP program of \
                             RxTimestamps::Hardware (EOPNOTSUPP from BPF_PROG_LOAD with \
                             BPF_F_XDP_DEV_BOUND_ONLY): its driver has no native XDP. Use \
                             RxTimestamps::Kernel",
                                self.ifname
                            )),
                            _ => e,
                        }
                    },
                )
            }
            _ => Program::load_flags(&insns, "rawq_steer", None, self.frags),
        }
    }

    /// Puts the program of the current rules in place: swapped in on the link, attached if
    /// there was none, detached if there are no rules left.
    fn swap(&mut self) -> Result<()> {
        if self.rules.is_empty() {
            // Closing the link detaches the program; frames go to the kernel again.
            self.link = None;
            self.prog = None;
            return Ok(());
        }
        let new = self.load()?;
        match (&self.link, &self.prog) {
            (Some(link), Some(old)) => {
                link.update(&new, old).map_err(|e| match e.raw_os_error() {
                    Some(libc::ENOLINK) => Error::Link {
                        ifname: self.ifname.clone(),
                        detail: "the interface is gone (ENOLINK from BPF_LINK_UPDATE); the rule \
                             set could not change"
                            .into(),
                    },
                    _ => Error::os("bpf(BPF_LINK_UPDATE, BPF_F_REPLACE)", e),
                })?
            }
            _ => self.link = Some(self.attach_in_netns(&new)?),
        }
        // The old program goes when its last reference does (the kernel's, once no frame runs
        // it any more).
        self.prog = Some(new);
        Ok(())
    }
}

fn too_many(ifname: &str) -> Error {
    Error::Config(format!(
        "{ifname}: more than {COUNTER_SLOTS} flow rules on one AF_XDP port; remove some first"
    ))
}

impl crate::backend::Control for Steering {
    fn link_source(&self) -> crate::link::Source {
        crate::link::Source::Netdev {
            ifname: self.ifname.clone(),
        }
    }

    fn device_counters(&self) -> crate::counters::DeviceCounters {
        crate::counters::Source::Netdev {
            ifname: self.ifname.clone(),
        }
        .read()
    }

    fn add_rule(&mut self, id: u64, rule: &Rule) -> Result<()> {
        let slot = self.free.pop().ok_or_else(|| too_many(&self.ifname))?;
        let base = match self.counters.sum(slot) {
            Ok(b) => b,
            Err(e) => {
                self.free.push(slot);
                return Err(e);
            }
        };
        self.rules.push(Installed {
            id,
            rule: rule.clone(),
            slot,
            base,
        });
        if let Err(e) = self.swap() {
            self.rules.pop();
            self.free.push(slot);
            return Err(e);
        }
        Ok(())
    }

    fn remove_rule(&mut self, id: u64) -> Result<()> {
        let at = self
            .rules
            .iter()
            .position(|r| r.id == id)
            .ok_or_else(|| Error::RuleHandle(format!("no rule {id} is installed")))?;
        let gone = self.rules.remove(at);
        if let Err(e) = self.swap() {
            self.rules.insert(at, gone);
            return Err(e);
        }
        self.free.push(gone.slot);
        Ok(())
    }

    fn rule_hits(&self, id: u64) -> Result<Option<u64>> {
        let r = self
            .rules
            .iter()
            .find(|r| r.id == id)
            .ok_or_else(|| Error::RuleHandle(format!("no rule {id} is installed")))?;
        Ok(Some(self.counters.sum(r.slot)?.saturating_sub(r.base)))
    }
}

/// The error of attaching the steering program to `ifname`, said plainly.
pub(super) fn attach_error(
    e: std::io::Error,
    ifname: &str,
    ifindex: u32,
    mtu: Option<u32>,
    stamp: Stamp,
) -> Error {
    match e.raw_os_error() {
        Some(libc::EBUSY) | Some(libc::EEXIST) => {
            // Someone attached a program since we looked.
            let prog_id = link_info(ifindex)
                .ok()
                .and_then(|l| l.xdp_prog_id)
                .unwrap_or(0);
            Error::XdpAlreadyAttached {
                ifname: ifname.to_string(),
                prog_id,
                held_by: link_holder(prog_id),
            }
        }
        // The driver refuses an XDP program for this MTU: without multi-buffer support a
        // frame must fit one page (veth_xdp_set and most drivers return ERANGE).
        Some(libc::ERANGE) => {
            let mtu = mtu.map_or("its".to_string(), |m| m.to_string());
            Error::Unsupported(format!(
                "{ifname} refuses the XDP steering program at MTU {mtu} (ERANGE from \
                 BPF_LINK_CREATE): AF_XDP frames must fit one 4 KiB page, which with the \
                 kernel's headroom allows an MTU of about 3500 (a veth checks its peer's \
                 MTU too). Lower it on both ends, e.g. `ip link set dev {ifname} mtu 3000`, \
                 or open the port with PortBuilder::mtu({mtu}) for multi-buffer frames \
                 (Linux 6.6 or later)"
            ))
        }
        // A device-bound program only runs in the driver's own (native) XDP hook.
        Some(libc::EINVAL) if matches!(stamp, Stamp::Hardware { .. }) => {
            Error::Unsupported(format!(
                "{ifname} refuses the device-bound XDP program of RxTimestamps::Hardware \
                 (EINVAL from BPF_LINK_CREATE): such a program needs the driver's native \
                 XDP, which {ifname}'s driver lacks (generic XDP cannot run it). Use \
                 RxTimestamps::Kernel"
            ))
        }
        _ => Error::os("bpf(BPF_LINK_CREATE, BPF_XDP)", e),
    }
}
