//! The inner side of the DV tests on the emulated ConnectX (`tests/emu_dv*.rs`): a test binary
//! runs one of its own `inner_*` tests under `scripts/emu.sh` ([`run_inner`]), and that inner
//! test drives a DV port through the library with a [`Rig`].

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use rawq::{Backend, CqeComp, DvRxOptions, Mempool, MempoolConfig, Packet, Port, Queue, RqType};

use super::emu::{emu_sh, tempdir, text};

/// Set for the inner tests by their outer test.
pub const INNER: &str = "RAWQ_EMU_DV_INNER";
/// The receive configuration an inner test runs with: `RQ/COMP` (`cyclic/hash`, ...).
pub const RX_ENV: &str = "RAWQ_EMU_DV_RX";
/// Frames per loopback run.
pub const N: u32 = 100_000;

/// `bash scripts/emu.sh OPTS -- CMD...`, with the model's counters kept in `stats`.
fn emu(opts: &[&str], cmd: &[&str], stats: &Path) -> Command {
    emu_sh(None, Some(120), opts, cmd, stats)
}

/// Runs the inner test `name` of this binary on the emulated NIC (loopback, flow control on).
pub fn run_inner(name: &str, emu_opts: &[&str], env: &[(&str, &str)]) -> (Output, PathBuf) {
    let exe = std::env::current_exe().expect("test exe");
    let dir = tempdir(&format!("emudv-{name}"));
    let stats = dir.join("model.stats");
    let _ = std::fs::remove_file(&stats);
    let mut c = emu(
        emu_opts,
        &[
            exe.to_str().unwrap(),
            "--exact",
            name,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ],
        &stats,
    );
    c.env(INNER, "1").env("RAWQ_EMU_PAUSE", "1");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run scripts/emu.sh");
    assert!(
        out.status.success(),
        "{name} on the emulated NIC failed:\n{}\nmodel: {}",
        text(&out),
        std::fs::read_to_string(&stats).unwrap_or_default()
    );
    let all = text(&out);
    assert!(
        all.contains("1 passed"),
        "{name} did not run (filtered out?):\n{all}"
    );
    (out, stats)
}

pub fn inner_only() {
    assert!(
        std::env::var_os(INNER).is_some(),
        "run by its outer test under scripts/emu.sh, not alone"
    );
}

pub fn rx_from_env() -> DvRxOptions {
    let v = std::env::var(RX_ENV).unwrap_or_else(|_| "cyclic/hash".into());
    let (rq, comp) = v.split_once('/').expect("RQ/COMP");
    DvRxOptions {
        rq: rq.parse::<RqType>().expect("RQ type"),
        cqe_comp: Some(comp.parse::<CqeComp>().expect("CQE compression")),
    }
}

/// A UDP/IPv4 frame of `size` bytes to port 9000 carrying `seq`.
pub fn udp_frame(seq: u32, size: usize) -> Vec<u8> {
    let mut f = vec![0u8; size];
    f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    f[12] = 0x08;
    f[14] = 0x45;
    f[16..18].copy_from_slice(&((size - 14) as u16).to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[198, 18, 0, 1]);
    f[30..34].copy_from_slice(&[198, 18, 0, 2]);
    f[34..36].copy_from_slice(&1024u16.to_be_bytes());
    f[36..38].copy_from_slice(&9000u16.to_be_bytes());
    f[38..40].copy_from_slice(&((size - 34) as u16).to_be_bytes());
    f[42..46].copy_from_slice(&seq.to_be_bytes());
    f
}

pub fn seq_of(p: &Packet) -> Option<u32> {
    let d = p.to_vec();
    (d.len() >= 46 && d[36..38] == 9000u16.to_be_bytes())
        .then(|| u32::from_be_bytes([d[42], d[43], d[44], d[45]]))
}

pub struct Rig {
    pub port: Port,
    pub q: Queue,
    pub pool: Mempool,
    /// Sequence numbers received, in order.
    pub got: Vec<u32>,
    pub burst: Vec<Packet>,
}

pub fn rig(rx: DvRxOptions, ring: u32) -> Rig {
    let mut port = Port::builder(Backend::Dv {
        device: "mlx5_0".into(),
        port: 1,
    })
    .dv_rx(rx)
    .rx_ring(ring)
    .tx_ring(ring)
    .rule("udp dst-port 9000 -> queue 0".parse().expect("rule"))
    .pool_config(MempoolConfig {
        buffers: 8192,
        ..Default::default()
    })
    .open()
    .expect("open the DV port on the emulated mlx5_0");
    eprintln!("port: {:?}", port.info());
    let q = port.take_queues().pop().expect("one queue");
    let pool = port.pool().clone();
    Rig {
        port,
        q,
        pool,
        got: Vec::with_capacity(N as usize + 1024),
        burst: Vec::with_capacity(64),
    }
}

impl Rig {
    /// Offers frames `seqs` of `size` bytes; returns how many the queue took.
    pub fn send(&mut self, seqs: std::ops::Range<u32>, size: usize) -> usize {
        let mut v = Vec::with_capacity(seqs.len());
        for s in seqs {
            let Ok(mut p) = self.pool.alloc() else { break };
            p.copy_from_slice(&udp_frame(s, size)).expect("fits");
            v.push(p);
        }
        self.q.tx_burst(&mut v)
    }

    /// Offers one frame of `size` bytes spread over as many pool buffers as it takes.
    pub fn send_chained(&mut self, seq: u32, size: usize) -> usize {
        let f = udp_frame(seq, size);
        let room = (self.pool.buf_size() - self.pool.headroom() as u32) as usize;
        let mut chunks = f.chunks(room);
        let mut head = self.pool.alloc().expect("buffer");
        head.copy_from_slice(chunks.next().unwrap()).expect("fits");
        for c in chunks {
            let mut p = self.pool.alloc().expect("buffer");
            p.copy_from_slice(c).expect("fits");
            head.chain(p).expect("chain");
        }
        let mut v = vec![head];
        self.q.tx_burst(&mut v)
    }

    pub fn poll(&mut self) -> usize {
        self.burst.clear();
        let n = self.q.rx_burst(&mut self.burst, 64);
        for p in self.burst.drain(..) {
            if let Some(s) = seq_of(&p) {
                self.got.push(s);
            }
        }
        self.q.reclaim();
        n
    }

    /// Polls until `want` frames arrived in all or `limit` passed.
    pub fn until(&mut self, want: usize, limit: Duration) {
        let end = Instant::now() + limit;
        while self.got.len() < want && Instant::now() < end {
            if self.poll() == 0 {
                std::thread::yield_now();
            }
        }
    }

    /// Sends `seqs` (60-byte frames), receiving as it goes; returns what the queue took.
    pub fn stream(&mut self, seqs: std::ops::Range<u32>) -> u64 {
        let mut next = seqs.start;
        let mut taken = 0u64;
        let end = Instant::now() + Duration::from_secs(30);
        while next < seqs.end && Instant::now() < end {
            let hi = (next + 32).min(seqs.end);
            let n = self.send(next..hi, 60);
            next += n as u32;
            taken += n as u64;
            self.poll();
        }
        taken
    }

    /// Stops the queue and checks that every buffer is home.
    pub fn finish(self) -> rawq::QueueStats {
        let Rig { port, q, pool, .. } = self;
        let s = q.stats();
        drop(q);
        drop(port);
        pool.flush_local_cache();
        assert_eq!(pool.available(), pool.capacity(), "buffers leaked: {s:?}");
        eprintln!(
            "pool: {} of {} buffers home",
            pool.available(),
            pool.capacity()
        );
        s
    }
}

pub fn assert_in_order(got: &[u32], want: impl Iterator<Item = u32>) {
    let want: Vec<u32> = want.collect();
    if got != want {
        let first = got
            .iter()
            .zip(&want)
            .position(|(a, b)| a != b)
            .unwrap_or(got.len().min(want.len()));
        panic!(
            "received {} frames, expected {}; first difference at {first}: got {:?}, want {:?}",
            got.len(),
            want.len(),
            got.get(first),
            want.get(first)
        );
    }
}
