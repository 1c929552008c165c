//! A frame source inside the emulator's process (`RAWQ_EMU_RXGEN=COUNT[,SIZE[,FLOWS]]`): UDP
//! frames put on the wire in front of `mlx5_0`'s port as fast as the port takes them, so that a
//! receiver measured under valgrind (where an external sender reaches a few hundred frames a
//! second) sees a ring that is full whenever it gets the CPU.
//!
//! The generator offers each frame to the port's wire ([`Hw::offer_frame`]) and, when the wire
//! is full, waits and offers it again: nothing is lost before the port. What the port does with
//! the frame is the device model's usual receive path: delivered into the RQ a flow steers it
//! to, or dropped and counted (`rx_no_buffer`, the mlx5 `rx_out_of_buffer` counter) when that
//! RQ has no posted WQE; with `RAWQ_EMU_PAUSE=1` the port holds it instead (802.3x pause), so
//! the generator then goes exactly as fast as the receiver refills. Its count is written beside
//! the device's counters (`RAWQ_EMU_STATS`), so that `generated == rx_frames + rx_no_buffer +
//! rx_to_kernel + rx_rule_drop` can be checked once it is done and the port has drained.
//!
//! It offers frames only while the device holds a flow rule (the receiver's steering, or the
//! PMD's promiscuous flow: DPDK's mlx5 PMD removes and re-creates its flows when the port's
//! filtering changes), looked at every [`BATCH`] frames, so that few frames go to the kernel
//! for want of a receiver (those that do are counted, `rx_to_kernel`).
//!
//! The frames: IPv4/UDP from 198.18.0.1 to 198.18.0.2 (RFC 2544's benchmarking range, as
//! pktgen's defaults), destination port 9000, source port 1024 + flow number (FLOWS flows,
//! round robin, so that RSS spreads them), to the port's own MAC, with valid IPv4 and UDP
//! checksums; SIZE bytes without FCS (default 60: 64 on the wire).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rawq_model::hw::Hw;

/// What `RAWQ_EMU_RXGEN` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxGen {
    /// Frames to make (0: no end).
    pub count: u64,
    /// Frame size without FCS.
    pub size: u16,
    /// Distinct flows (UDP source ports).
    pub flows: u16,
}

/// Smallest frame: an Ethernet minimum frame less its FCS.
pub const MIN_SIZE: u16 = 60;
/// Frames offered between two looks at the device's flows.
pub const BATCH: u64 = 64;
/// Source port of flow 0.
pub const SRC_PORT: u16 = 1024;
/// Destination port.
pub const DST_PORT: u16 = 9000;

impl RxGen {
    /// Parses `COUNT[,SIZE[,FLOWS]]`; SIZE from 60 to `max_frame`, FLOWS from 1 to 4096.
    pub fn parse(v: &str, max_frame: u32) -> Option<RxGen> {
        let mut it = v.split(',').map(str::trim);
        let count = it.next()?.parse().ok()?;
        let size = match it.next() {
            Some(s) => s.parse().ok()?,
            None => MIN_SIZE,
        };
        let flows = match it.next() {
            Some(s) => s.parse().ok()?,
            None => 1,
        };
        if it.next().is_some()
            || size < MIN_SIZE
            || u32::from(size) > max_frame
            || !(1..=4096).contains(&flows)
        {
            return None;
        }
        Some(RxGen { count, size, flows })
    }
}

/// How far a device's generator is.
#[derive(Debug, Default)]
pub struct Progress {
    started: AtomicBool,
    count: AtomicU64,
    generated: AtomicU64,
    done: AtomicBool,
}

impl Progress {
    /// Frames the port has taken from the generator so far.
    pub fn generated(&self) -> u64 {
        self.generated.load(Ordering::Acquire)
    }

    /// The generator has made all it was asked to.
    pub fn done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// The line written beside the device's counters; `None` without a generator.
    pub fn stats_line(&self) -> Option<String> {
        self.started.load(Ordering::Acquire).then(|| {
            format!(
                "rawq-emu rxgen: {{ generated: {}, count: {}, done: {} }}\n",
                self.generated(),
                self.count.load(Ordering::Relaxed),
                self.done()
            )
        })
    }
}

/// The generator's progress on device `ident` (devices 0 and 1; any other: a progress that
/// never starts).
pub fn progress(ident: crate::caps::Ident) -> &'static Progress {
    static P: [Progress; 3] = [const { new_progress() }; 3];
    &P[(ident.0 as usize).min(2)]
}

const fn new_progress() -> Progress {
    Progress {
        started: AtomicBool::new(false),
        count: AtomicU64::new(0),
        generated: AtomicU64::new(0),
        done: AtomicBool::new(false),
    }
}

/// The frames of `g`, one per flow (at least one), to `dst_mac`; a size under [`MIN_SIZE`] is
/// taken as [`MIN_SIZE`].
pub fn frames(g: RxGen, dst_mac: [u8; 6]) -> Vec<Vec<u8>> {
    (0..g.flows.max(1))
        .map(|i| udp_frame(g.size.max(MIN_SIZE), dst_mac, SRC_PORT.wrapping_add(i)))
        .collect()
}

/// One's complement sum of `b` (16-bit big-endian words) added to `sum`.
fn csum_add(mut sum: u32, b: &[u8]) -> u32 {
    for c in b.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    sum
}

fn csum_fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// An IPv4/UDP frame of `size` bytes (no FCS) with valid checksums.
fn udp_frame(size: u16, dst_mac: [u8; 6], src_port: u16) -> Vec<u8> {
    let mut f = vec![0u8; usize::from(size)];
    f[0..6].copy_from_slice(&dst_mac);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = size - 14;
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&ip_len.to_be_bytes());
    ip[8] = 64; // TTL
    ip[9] = 17; // UDP
    ip[12..16].copy_from_slice(&[198, 18, 0, 1]);
    ip[16..20].copy_from_slice(&[198, 18, 0, 2]);
    let c = csum_fold(csum_add(0, ip));
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let udp_len = ip_len - 20;
    f[34..36].copy_from_slice(&src_port.to_be_bytes());
    f[36..38].copy_from_slice(&DST_PORT.to_be_bytes());
    f[38..40].copy_from_slice(&udp_len.to_be_bytes());
    // The pseudo-header (RFC 768): addresses, protocol, UDP length.
    let mut sum = csum_add(0, &f[26..34]);
    sum += 17 + u32::from(udp_len);
    sum = csum_add(sum, &f[34..34 + usize::from(udp_len)]);
    let c = match csum_fold(sum) {
        0 => 0xffff, // 0 means "no checksum" in UDP over IPv4
        c => c,
    };
    f[40..42].copy_from_slice(&c.to_be_bytes());
    f
}

/// Starts `g` on `hw` (device `ident`, whose port MAC is `mac`) in a thread of its own, which
/// waits for the file `start` if given and ends when the count is made (never with count 0).
/// Says on stderr if it cannot start.
pub fn spawn(g: RxGen, hw: Hw, ident: crate::caps::Ident, mac: [u8; 6], start: Option<String>) {
    let p = progress(ident);
    p.count.store(g.count, Ordering::Relaxed);
    p.started.store(true, Ordering::Release);
    let r = std::thread::Builder::new()
        .name("rawq-emu-rxgen".into())
        .spawn(move || {
            while start
                .as_deref()
                .is_some_and(|f| !std::path::Path::new(f).exists())
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            run(g, &hw, p, mac)
        });
    if let Err(e) = r {
        log::error!("RAWQ_EMU_RXGEN: the generator thread did not start ({e}); no frame made");
    }
}

fn run(g: RxGen, hw: &Hw, p: &Progress, mac: [u8; 6]) {
    let frames = frames(g, mac);
    let mut made = 0u64;
    let mut waits = 0u32;
    while g.count == 0 || made < g.count {
        // A receiver: a flow rule on the device.
        while made.is_multiple_of(BATCH) && hw.flow_and_tir_count().0 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let f = &frames[(made % frames.len() as u64) as usize];
        if hw.offer_frame(f) {
            made += 1;
            p.generated.store(made, Ordering::Release);
            waits = 0;
            continue;
        }
        // The wire is full: the port is behind (or paused). Give the CPU to the device's
        // thread and the receiver, then nap once this has gone on for a while.
        waits += 1;
        if waits < 64 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    p.done.store(true, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_spec_makes_frames() {
        let fs = frames(
            RxGen {
                count: 1,
                size: 0,
                flows: 0,
            },
            [0; 6],
        );
        assert_eq!(fs.len(), 1);
        assert_eq!(fs[0].len(), usize::from(MIN_SIZE));
    }

    #[test]
    fn parse_forms() {
        let g = |count, size, flows| Some(RxGen { count, size, flows });
        assert_eq!(RxGen::parse("1000", 9216), g(1000, 60, 1));
        assert_eq!(RxGen::parse("0,128", 9216), g(0, 128, 1));
        assert_eq!(RxGen::parse("5,64,8", 9216), g(5, 64, 8));
        assert_eq!(RxGen::parse("5,59", 9216), None);
        assert_eq!(RxGen::parse("5,1600", 1518), None);
        assert_eq!(RxGen::parse("5,60,0", 9216), None);
        assert_eq!(RxGen::parse("5,60,1,2", 9216), None);
        assert_eq!(RxGen::parse("x", 9216), None);
    }

    /// The one's complement sum over a header with its checksum in place is 0xffff.
    fn verifies(b: &[u8], pseudo: u32) -> bool {
        csum_fold(csum_add(pseudo, b)) == 0
    }

    #[test]
    fn frames_are_valid_udp_with_one_source_port_per_flow() {
        let mac = [0x02, 0xfc, 0, 0, 0, 1];
        let fs = frames(
            RxGen {
                count: 0,
                size: 61,
                flows: 3,
            },
            mac,
        );
        assert_eq!(fs.len(), 3);
        for (i, f) in fs.iter().enumerate() {
            assert_eq!(f.len(), 61);
            assert_eq!(&f[0..6], &mac);
            assert_eq!(&f[12..14], &[0x08, 0x00]);
            assert_eq!(u16::from_be_bytes([f[16], f[17]]), 61 - 14);
            assert!(verifies(&f[14..34], 0), "IPv4 header checksum");
            assert_eq!(u16::from_be_bytes([f[34], f[35]]), SRC_PORT + i as u16);
            assert_eq!(u16::from_be_bytes([f[36], f[37]]), DST_PORT);
            let udp_len = u16::from_be_bytes([f[38], f[39]]);
            assert_eq!(udp_len, 61 - 34);
            let pseudo = csum_add(0, &f[26..34]) + 17 + u32::from(udp_len);
            assert!(verifies(&f[34..], pseudo), "UDP checksum");
        }
    }
}
