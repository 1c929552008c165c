//! The emulated device and its open files (the kernel's `ib_uverbs_device` / `ib_uverbs_file`).
//!
//! One [`Device`] per emulated NIC, made at the first open of its node. Its hardware, rawq's
//! device model ([`Hw`]), starts at the first GET_CONTEXT, with its own thread. If the model
//! cannot be started the device still answers every control command (discovery, queries,
//! objects), numbering objects itself, and says once on stderr that there is no data path.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use rawq_model::hw::{Hw, HwOptions, NetdevPath};
use rawq_model::{ModelThread, ModelWire};

use crate::config::Config;
use crate::events::Events;
use crate::objects::Objects;
use crate::{caps, sys, Errno};

pub use crate::mmap::Ucontext;

/// One open of the device node.
pub struct UFile {
    /// The command fd (a memfd; the application maps UAR pages from it).
    pub fd: i32,
    /// The context, once GET_CONTEXT ran.
    pub ctx: Option<Ucontext>,
    /// Its objects.
    pub objs: Objects,
}

/// The device.
pub struct Device {
    /// Which of the process's emulated devices.
    pub ident: caps::Ident,
    /// Configuration.
    pub cfg: Config,
    hw: OnceLock<Option<Hw>>,
    thread: Mutex<Option<ModelThread>>,
    /// Completion-channel and async event delivery.
    pub events: Arc<Events>,
    /// The port's link state (follows the wire) and the contexts its events go to.
    pub link: Arc<crate::link::PortLink>,
    next_num: AtomicU32,
    files: Mutex<HashMap<i32, Arc<Mutex<UFile>>>>,
}

impl Device {
    /// Device 0 with this configuration (nothing started yet).
    pub fn new(cfg: Config) -> Device {
        Device::nth(caps::Ident(0), cfg)
    }

    /// Device `ident` with this configuration (nothing started yet).
    pub fn nth(ident: caps::Ident, cfg: Config) -> Device {
        Device {
            ident,
            cfg,
            hw: OnceLock::new(),
            thread: Mutex::new(None),
            events: Arc::new(Events::default()),
            link: Arc::default(),
            next_num: AtomicU32::new(0x100),
            files: Mutex::new(HashMap::new()),
        }
    }

    /// Frames the port dropped because the receive queue had no WQE, now (0 while the model
    /// has not started: it has received nothing). Read without starting the model.
    pub fn no_buffer_drops(&self) -> u64 {
        match self.hw.get() {
            Some(Some(hw)) => hw.counters().rx_no_buffer,
            _ => 0,
        }
    }

    /// The model's counters now (all 0 while it has not started). Read without starting it.
    pub fn model_counters(&self) -> rawq_model::ModelCounters {
        match self.hw.get() {
            Some(Some(hw)) => hw.counters(),
            _ => rawq_model::ModelCounters::default(),
        }
    }

    /// The ethtool statistics of the port's netdev now, by name
    /// ([`crate::discovery::ethtool`]). Read without starting the model.
    pub fn ethtool_stats(&self) -> Vec<(&'static str, u64)> {
        use crate::discovery::ethtool::{values, Wiring};
        let own = self.model_counters();
        // A --wire or a --cable takes the frames out of the process; looped back or a pair,
        // the wire in front of this port is the model's own inbox.
        if self.cfg.wire.is_some() || (self.cfg.cable.is_some() && !self.cfg.pair) {
            return values(&own, None, Wiring::Outside);
        }
        let feeder = if self.cfg.pair {
            devices()
                .iter()
                .find(|d| d.ident != self.ident)
                .map(Device::model_counters)
        } else {
            Some(own)
        };
        values(&own, feeder.as_ref(), Wiring::InProcess)
    }

    /// The interface this device's port names as its netdev (`gid_attrs/ndevs/0`).
    pub fn netdev(&self) -> &str {
        self.cfg.gid_ndev(self.ident)
    }

    /// Logs a line when `RAWQ_EMU_DEBUG` is set.
    pub fn log(&self, args: std::fmt::Arguments<'_>) {
        if self.cfg.debug {
            log::debug!("{args}");
        }
    }

    /// A fresh object number (PDN, lkey index, or a number for an object the model does not
    /// hold).
    pub fn next_num(&self) -> u32 {
        self.next_num.fetch_add(1, Ordering::Relaxed)
    }

    /// The hardware, started on first use; `None` if the model could not start.
    pub fn hw(&self) -> Option<&Hw> {
        if self.cfg.pair {
            start_pair();
        }
        self.hw.get_or_init(|| self.start_hw()).as_ref()
    }

    fn start_hw(&self) -> Option<Hw> {
        if let Some(ifname) = &self.cfg.wire {
            crate::link::watch(ifname.clone(), Arc::clone(&self.link));
        }
        if let Some(path) = &self.cfg.fatal_file {
            crate::link::watch_fatal(path.clone(), Arc::clone(&self.link));
        }
        let wire = match &self.cfg.wire {
            Some(ifname) => ModelWire::Bridge {
                ifname: ifname.clone(),
            },
            // A cable is plugged in once the model runs (crate::cable::start).
            None if self.cfg.cable.is_some() && !self.cfg.pair => ModelWire::Sink,
            None => ModelWire::Loopback,
        };
        let opts = HwOptions {
            min_inline: self.cfg.min_inline.bytes(),
            max_frame: self.cfg.max_frame(),
            flow_control: self.cfg.pause,
            wire_capacity: self.cfg.wire_frames,
            wire,
            netdev: self
                .cfg
                .netdev_of(self.ident)
                .map(|ifname| NetdevPath::Tap {
                    ifname: ifname.to_owned(),
                }),
            clock_khz: if self.cfg.cqe_timestamps {
                caps::CLOCK_KHZ
            } else {
                0
            },
        };
        match Hw::new(opts) {
            Ok(hw) => {
                let events = Arc::clone(&self.events);
                hw.set_event_sink(Box::new(move |ev| events.on_hw_event(ev)));
                if let Some(path) = self
                    .cfg
                    .cable
                    .clone()
                    .filter(|_| self.cfg.wire.is_none() && !self.cfg.pair)
                {
                    crate::cable::start(path, hw.clone(), Arc::clone(&self.link));
                }
                if let Ok(mut t) = self.thread.lock() {
                    *t = hw.spawn(None);
                }
                if let Some(dest) = self.stats_dest() {
                    spawn_stats_writer(dest, hw.clone(), self.ident);
                }
                // The in-process frame source feeds device 0's port.
                if let (Some(g), 0) = (self.cfg.rxgen, self.ident.0) {
                    let mac = self
                        .ident
                        .port_mac(self.cfg.netdev_of(self.ident), self.cfg.wire.as_deref());
                    let start = self.cfg.rxgen_start.clone();
                    crate::rxgen::spawn(g, hw.clone(), self.ident, mac, start);
                }
                Some(hw)
            }
            Err(e) => {
                log::error!(
                    "the device model did not start ({e}); {} answers control \
                     commands only (no data path)",
                    self.ident.ibdev()
                );
                None
            }
        }
    }

    /// open() of the node: a new file over a sparse memfd.
    ///
    /// # Errors
    /// The memfd's errno.
    pub fn open(&self, cloexec: bool) -> Result<i32, Errno> {
        let fd = sys::memfd(&self.ident.uverbs(), cloexec)?;
        let f = UFile {
            fd,
            ctx: None,
            objs: Objects::default(),
        };
        self.files().insert(fd, Arc::new(Mutex::new(f)));
        self.log(format_args!("open -> fd {fd}"));
        Ok(fd)
    }

    /// `new` is a duplicate of the command fd `old` (dup, dup2, dup3, `F_DUPFD`): the same open
    /// file, as in the kernel. Returns false if `old` is not ours.
    pub fn dup(&self, old: i32, new: i32) -> bool {
        let mut files = self.files();
        let Some(f) = files.get(&old).cloned() else {
            return false;
        };
        files.insert(new, f);
        self.log(format_args!("dup fd {old} -> {new}"));
        true
    }

    /// This device has the command fd `fd`.
    pub fn owns(&self, fd: i32) -> bool {
        self.files().contains_key(&fd)
    }

    /// The fd table. Nothing panics while holding it, but should something, the map itself
    /// is still whole (a poisoned lock is taken as it is).
    pub(crate) fn files(&self) -> MutexGuard<'_, HashMap<i32, Arc<Mutex<UFile>>>> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn file(&self, fd: i32) -> Result<Arc<Mutex<UFile>>, Errno> {
        self.files().get(&fd).cloned().ok_or(libc::EBADF)
    }

    /// Validates an mmap of the command fd (`mlx5_ib_mmap`).
    ///
    /// # Errors
    /// EINVAL / EPERM as the kernel.
    pub fn mmap_check(&self, fd: i32, len: usize, prot: i32, off: i64) -> Result<(), Errno> {
        let f = self.file(fd)?;
        let mut f = lock_file(&f);
        let fd = f.fd;
        let ctx = f.ctx.as_mut().ok_or(libc::EINVAL)?;
        let what = crate::mmap::check(Some(ctx), len, prot, off)?;
        // The clock page starts ticking when it is first mapped.
        if what == crate::mmap::Page::Clock && ctx.clock.is_none() {
            if let Some(hw) = self.hw() {
                ctx.clock = Some(crate::mmap::ClockPage::start(
                    fd,
                    hw.clone(),
                    self.cfg.cqe_timestamps,
                )?);
            }
        }
        Ok(())
    }

    /// Writes the model's counters to `RAWQ_EMU_STATS` (a file is rewritten with the latest
    /// line; `-` appends to stderr).
    pub(crate) fn write_stats(&self) {
        let (Some(dest), Some(Some(hw))) = (self.stats_dest(), self.hw.get()) else {
            return;
        };
        write_counters(&dest, hw, self.ident);
    }

    /// Where this device's counters go: `RAWQ_EMU_STATS` for `mlx5_0`, `RAWQ_EMU_STATS.mlx5_1`
    /// for a pair's second device (each its own file; `-` is stderr for both).
    fn stats_dest(&self) -> Option<String> {
        let dest = self.cfg.stats.as_ref()?;
        Some(match self.ident.0 {
            0 => dest.clone(),
            _ if dest == "-" => dest.clone(),
            _ => format!("{dest}.{}", self.ident.ibdev()),
        })
    }
}

fn write_counters(dest: &str, hw: &Hw, ident: caps::Ident) {
    // One writer at a time, the counters read under the lock: the periodic writer must not
    // rename an older line over the one the device's close wrote last (both use `dest.tmp`;
    // a writer thread starved under load did, and the file kept counts seconds old).
    static WRITING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = WRITING.lock().unwrap_or_else(|e| e.into_inner());
    let mut line = format!(
        "rawq-emu counters: {:?} counters_objects: {} counters_left_at_close: {}
",
        hw.counters(),
        crate::objects::counters_live(),
        crate::objects::counters_left_at_close()
    );
    // The in-process frame source's count (crate::rxgen), read after the device's counters:
    // a frame it counts is never missing from them once the port has drained.
    line.extend(crate::rxgen::progress(ident).stats_line());
    if dest == "-" {
        // The destination the user named (`RAWQ_EMU_STATS=-`), like a file's: data, not a
        // diagnostic, so it is written there whatever the logger.
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
    } else {
        // Write a new file and rename it over the old one: a reader never sees half a line.
        let tmp = format!("{dest}.tmp");
        let r = std::fs::write(&tmp, line.as_bytes()).and_then(|()| std::fs::rename(&tmp, dest));
        if let Err(e) = r {
            log::warn!("cannot write the counters to {dest}: {e}");
        }
    }
}

/// While the device lives, rewrites the counters file twice a second (a server that is killed
/// never closes its device).
fn spawn_stats_writer(dest: String, hw: Hw, ident: caps::Ident) {
    if dest == "-" {
        return;
    }
    let _ = std::thread::Builder::new()
        .name("rawq-emu-stats".into())
        .spawn(move || loop {
            write_counters(&dest, &hw, ident);
            std::thread::sleep(std::time::Duration::from_millis(500));
        });
}

/// A file's lock. Commands run under it inside `catch_unwind`, so it is never poisoned by
/// them; should it be anyway, the file is taken as it is (its table stays consistent: objects
/// enter it whole, after their device side exists).
pub(crate) fn lock_file(f: &Mutex<UFile>) -> MutexGuard<'_, UFile> {
    f.lock().unwrap_or_else(|e| e.into_inner())
}

/// The process's emulated devices (configured from the environment at first use). With
/// `RAWQ_EMU_PAIR=1` there are two, and the first use of either's hardware starts both, cabled.
pub fn devices() -> &'static [Device] {
    static DEVS: OnceLock<Vec<Device>> = OnceLock::new();
    DEVS.get_or_init(|| {
        let cfg = Config::from_env();
        (0..cfg.devices())
            .map(|i| Device::nth(caps::Ident(i), cfg.clone()))
            .collect()
    })
}

/// Starts both devices of the process's pair and cables them to each other (`Hw::connect`),
/// once.
fn start_pair() {
    static PAIR: OnceLock<()> = OnceLock::new();
    PAIR.get_or_init(|| {
        if let [a, b] = devices() {
            let ha = a.hw.get_or_init(|| a.start_hw()).as_ref();
            let hb = b.hw.get_or_init(|| b.start_hw()).as_ref();
            if let (Some(ha), Some(hb)) = (ha, hb) {
                Hw::connect(ha, hb);
            }
        }
    });
}

/// The device behind a node path.
pub fn device_of_path(path: &[u8]) -> Option<&'static Device> {
    let devs = devices();
    let id = caps::Ident::of_path(path, devs.len() as u32)?;
    devs.get(id.0 as usize)
}

/// The device whose port names `ifname` as its netdev (the first, if two do).
pub fn device_of_netdev(ifname: &[u8]) -> Option<&'static Device> {
    devices().iter().find(|d| d.netdev().as_bytes() == ifname)
}

/// The device a command fd belongs to.
pub fn device_of_fd(fd: i32) -> Option<&'static Device> {
    devices().iter().find(|d| d.owns(fd))
}
