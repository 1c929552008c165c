//! The engine: load the program and its counters, check the kernel and the interface, run the
//! pinned sending threads (sized calls, coarse pacing), and say what to do when it fails.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::counters::{tx_failures, tx_taken};
use super::plan::LivePlan;
use super::program::live_program;
use super::{LiveConfig, LiveReport, CALIBRATION_RUNS, CALL_TARGET};
use crate::error::{Error, Result};
use crate::sys::ethtool;
use crate::xdp::bpf::insn::{Insn, Reg};
use crate::xdp::bpf::sys::{action, PerCpuCounters, Program, LIVE_MAX_BATCH};

/// Turns an error of the live-frames call into one that says what to do.
fn live_error(e: io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::EINVAL) => Error::Unsupported(format!(
            "BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES was refused ({e}): the live \
             engine needs Linux ≥ 5.18 (this kernel: {}); use the AF_XDP engine instead",
            kernel_release()
        )),
        Some(libc::EPERM) | Some(libc::EACCES) => Error::Permission {
            op: "bpf(BPF_PROG_TEST_RUN, live frames) needs CAP_BPF + CAP_NET_ADMIN + \
                 CAP_PERFMON (or root)",
            source: e,
        },
        _ => Error::os("bpf(BPF_PROG_TEST_RUN, BPF_F_TEST_XDP_LIVE_FRAMES)", e),
    }
}

fn load_error(e: Error) -> Error {
    match e {
        Error::Permission { source, .. } => Error::Permission {
            op: "bpf() for the live-frames program and its counters needs CAP_BPF + \
                 CAP_NET_ADMIN + CAP_PERFMON (or root)",
            source,
        },
        e => e,
    }
}

fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// The live-frames engine: the program and its counters, loaded for one interface.
pub struct LiveEngine {
    cfg: LiveConfig,
    ifindex: u32,
    frame: Vec<u8>,
    plan: LivePlan,
    prog: Program,
    counters: PerCpuCounters,
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for LiveEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveEngine")
            .field("ifname", &self.cfg.ifname)
            .field("ifindex", &self.ifindex)
            .field("plan", &self.plan)
            .finish()
    }
}

impl LiveEngine {
    /// Builds the program for the configuration's frame and plan and loads it, then checks that the kernel has live
    /// frames (a one-frame run of a program that drops it: nothing is sent).
    ///
    /// # Errors
    /// [`Error::Config`] for a bad configuration, [`Error::NotFound`] for an unknown interface,
    /// [`Error::Unsupported`] on a kernel before 5.18, [`Error::Permission`] without CAP_BPF,
    /// CAP_NET_ADMIN and CAP_PERFMON.
    pub fn new(cfg: LiveConfig) -> Result<LiveEngine> {
        if cfg.cores.is_empty() {
            return Err(Error::Config(
                "the live engine needs at least one core".into(),
            ));
        }
        if cfg.batch == 0 || cfg.batch > LIVE_MAX_BATCH {
            return Err(Error::Config(format!(
                "batch {}: the kernel takes 1..={LIVE_MAX_BATCH} frames per live batch",
                cfg.batch
            )));
        }
        if cfg.repeat < cfg.batch {
            return Err(Error::Config(format!(
                "repeat {} is below the batch ({})",
                cfg.repeat, cfg.batch
            )));
        }
        if let Some(p) = cfg.pps {
            if !(p.is_finite() && p > 0.0) {
                return Err(Error::Config(format!("rate {p} pps: must be positive")));
            }
        }
        let ifindex = crate::xdp::iface::ifindex(&cfg.ifname)?;
        cfg.plan.check(&cfg.frame)?;
        let (frame, plan) = (cfg.frame.clone(), cfg.plan.clone());
        let counters = PerCpuCounters::create(1, "rawq_live_cnt").map_err(load_error)?;
        // Does the kernel have live frames? A program that drops its frame, run once.
        let probe = Program::load(
            &[Insn::mov64_imm(Reg::R0, action::DROP as i32), Insn::exit()],
            "rawq_live_probe",
        )
        .map_err(load_error)?;
        probe.run_live(&frame, ifindex, 1, 1).map_err(live_error)?;
        let insns = live_program(&plan, counters.as_raw_fd(), ifindex)?;
        let prog = Program::load(&insns, "rawq_live").map_err(load_error)?;
        Ok(LiveEngine {
            cfg,
            ifindex,
            frame,
            plan,
            prog,
            counters,
            stop: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The flag that stops [`LiveEngine::run`] (checked between calls). It stays set: a later
    /// `run` returns after its probe batch.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// The frame the kernel copies (flow 0, stamp 0).
    pub fn frame(&self) -> &[u8] {
        &self.frame
    }

    /// The plan the program follows.
    pub fn plan(&self) -> &LivePlan {
        &self.plan
    }

    /// Frames the program has redirected so far (all CPUs), for live statistics.
    ///
    /// # Errors
    /// [`Error::Os`] if the map cannot be read.
    pub fn redirected(&self) -> Result<u64> {
        self.counters.sum(0)
    }

    /// Sends until the count, the duration or the stop flag, on one pinned thread per core.
    /// Call it on a thread in the interface's network namespace (the sending threads inherit it).
    ///
    /// # Errors
    /// [`Error::Unsupported`] if the interface dropped the whole probe batch (for a veth: the
    /// peer has neither an XDP program nor GRO), and the errors of the live-frames call.
    pub fn run(&self) -> Result<LiveReport> {
        let t0 = Instant::now();
        let deadline = self.cfg.duration.map(|d| t0 + d);
        let before = self.redirected()?;
        let fail0 = tx_failures(&self.cfg.ifname);
        let taken0 = tx_taken(&self.cfg.ifname);
        // The probe batch: does the interface take the frames?
        let probe_n = match self.cfg.count {
            0 => self.cfg.batch as u64,
            c => c.min(self.cfg.batch as u64),
        };
        // On the first sender's core, so that its CPU's frame counter (flows, sequence numbers)
        // runs on from the probe.
        std::thread::scope(|s| {
            s.spawn(|| {
                let _ = crate::sys::affinity::pin_to_core(self.cfg.cores[0]);
                self.prog
                    .run_live(&self.frame, self.ifindex, probe_n as u32, self.cfg.batch)
                    .map_err(live_error)
            })
            .join()
            .unwrap_or_else(|_| Err(Error::Config("the live probe thread panicked".into())))
        })?;
        let refused = match (taken0, tx_taken(&self.cfg.ifname)) {
            (Some(t0), Some(t1)) => t1 == t0,
            _ => tx_failures(&self.cfg.ifname).saturating_sub(fail0) >= probe_n,
        };
        if refused {
            return Err(self.all_dropped(probe_n));
        }
        let remaining = match self.cfg.count {
            0 => 0,
            c => c - probe_n,
        };
        let threads = self.cfg.cores.len() as u64;
        let result: Result<()> = std::thread::scope(|s| {
            let workers: Vec<_> = self
                .cfg
                .cores
                .iter()
                .enumerate()
                .map(|(i, &core)| {
                    let quota = if self.cfg.count == 0 {
                        None
                    } else {
                        // Spread the remainder over the first threads.
                        let q = remaining / threads + u64::from((i as u64) < remaining % threads);
                        Some(q)
                    };
                    s.spawn(move || self.worker(core, quota, deadline))
                })
                .collect();
            let mut first_err = Ok(());
            for w in workers {
                let r = w
                    .join()
                    .unwrap_or_else(|_| Err(Error::Config("a live sender thread panicked".into())));
                if let (Err(e), true) = (r, first_err.is_ok()) {
                    first_err = Err(e);
                }
            }
            first_err
        });
        let elapsed = t0.elapsed();
        // Let the last frames leave the devmap queues before reading the drop counters.
        std::thread::sleep(Duration::from_millis(20));
        let redirected = self.redirected()?.saturating_sub(before);
        // Not the driver's count of frames taken (`tx_taken`): a veth updates it without
        // atomics from every sending CPU, so with several threads it loses updates (seen: 16 in
        // 3001). The program's count is exact; drops are rare and counted the same way.
        let sent = redirected.saturating_sub(tx_failures(&self.cfg.ifname).saturating_sub(fail0));
        result?;
        Ok(LiveReport {
            sent,
            dropped: redirected - sent,
            redirected,
            frame_len: self.frame.len(),
            elapsed,
        })
    }

    /// One sending thread: calls until its quota, the deadline or the stop flag.
    fn worker(&self, core: usize, quota: Option<u64>, deadline: Option<Instant>) -> Result<()> {
        // Pinned: one stream of sequence numbers and flows per thread (the CPU's counter).
        if let Err(e) = crate::sys::affinity::pin_to_core(core) {
            self.stop.store(true, Relaxed);
            return Err(e);
        }
        let batch = self.cfg.batch as u64;
        let pps = self.cfg.pps.map(|p| p / self.cfg.cores.len() as f64);
        // Paced: slices of 10 ms worth of frames, at least one batch.
        let repeat = self.cfg.repeat as u64;
        // Paced: slices of 10 ms worth. Unpaced: a short first call measures the rate, then each
        // call takes about CALL_TARGET, at most `repeat` runs (2^20 ≈ 0.2 s at 5 Mpps).
        let mut slice = match pps {
            Some(p) => ((p / 100.0) as u64).clamp(batch, repeat),
            None => CALIBRATION_RUNS.clamp(batch, repeat),
        };
        let start = Instant::now();
        let (mut done, mut busy) = (0u64, Duration::ZERO);
        while !self.stop.load(Relaxed) {
            let mut n = slice;
            if let Some(q) = quota {
                if done >= q {
                    break;
                }
                n = n.min(q - done);
            }
            let now = Instant::now();
            if let Some(d) = deadline {
                if now >= d {
                    break;
                }
                // Near the end, only what the measured rate fits in the time left.
                if done > 0 && !busy.is_zero() {
                    let rate = done as f64 / busy.as_secs_f64();
                    let fit = (rate * (d - now).as_secs_f64()) as u64;
                    n = n.min(fit.max(batch.min(n)));
                }
            }
            match self
                .prog
                .run_live(&self.frame, self.ifindex, n as u32, self.cfg.batch)
            {
                Ok(()) => {}
                // A signal (Ctrl-C): the runs before it are done and counted by the program.
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => break,
                Err(e) => {
                    self.stop.store(true, Relaxed);
                    return Err(live_error(e));
                }
            }
            busy += now.elapsed();
            done += n;
            if pps.is_none() && !busy.is_zero() {
                let rate = done as f64 / busy.as_secs_f64();
                slice = ((rate * CALL_TARGET.as_secs_f64()) as u64).clamp(batch, repeat);
            }
            if let Some(p) = pps {
                // Coarse pacing: sleep until the schedule has caught up with what went out.
                let due = start + Duration::from_secs_f64(done as f64 / p);
                loop {
                    let now = Instant::now();
                    if now >= due || self.stop.load(Relaxed) || deadline.is_some_and(|d| now >= d) {
                        break;
                    }
                    std::thread::sleep((due - now).min(Duration::from_millis(20)));
                }
            }
        }
        Ok(())
    }

    fn all_dropped(&self, n: u64) -> Error {
        let ifname = &self.cfg.ifname;
        let stats = ethtool::stats(ifname).unwrap_or_default();
        let driver = ethtool::driver(ifname).unwrap_or_default();
        if driver == "veth" {
            let peer = stats
                .iter()
                .find(|(k, _)| k == "peer_ifindex")
                .map_or("its peer".to_string(), |(_, v)| {
                    format!("its peer (ifindex {v}, maybe in another namespace)")
                });
            Error::Unsupported(format!(
                "{ifname} dropped all {n} probe frames: a veth delivers frames redirected by XDP \
                 only when {peer} runs NAPI, i.e. has an XDP program attached or GRO enabled. \
                 Fix: `ethtool -K PEER gro on` (in the peer's namespace), or attach an XDP \
                 program on the peer (e.g. `pktgen -b xdp -d PEER --rx`)"
            ))
        } else {
            Error::Unsupported(format!(
                "{ifname} (driver {driver:?}) dropped all {n} probe frames redirected to it by \
                 XDP: the driver may lack ndo_xdp_xmit or need an XDP program attached on \
                 {ifname} itself before it transmits redirected frames (e.g. mlx5, ice, i40e, \
                 ixgbe: attach any XDP program, such as a pass-through one)"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_of_the_live_call_names_the_fix() {
        let e = live_error(io::Error::from_raw_os_error(libc::EINVAL));
        assert!(
            matches!(e, Error::Unsupported(_)) && e.to_string().contains("5.18"),
            "{e}"
        );
        let e = live_error(io::Error::from_raw_os_error(libc::EPERM));
        assert!(matches!(e, Error::Permission { .. }), "{e}");
        for cap in ["CAP_BPF", "CAP_NET_ADMIN", "CAP_PERFMON", "root"] {
            assert!(e.to_string().contains(cap), "{e}");
        }
    }
}
