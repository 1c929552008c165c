//! A pcap writer for received frames: the classic libpcap format with nanosecond timestamps
//! (magic 0xa1b23c4d), link type Ethernet, bounded by a frame count and a byte budget.
//!
//! Format facts: the 24-byte global header (magic, version 2.4, thiszone, sigfigs, snaplen,
//! network) and the 16-byte record header (seconds, nanoseconds, captured length, original
//! length) as pcap-savefile(5) describes them; tshark reads it without conversion.

use std::io::{BufWriter, Write};
use std::path::Path;

use rawq::error::{Error, Result};

/// pcap magic for nanosecond timestamps, written in native byte order.
const MAGIC_NS: u32 = 0xa1b2_3c4d;
/// LINKTYPE_ETHERNET.
const LINKTYPE_ETHERNET: u32 = 1;

/// Limits of a capture; the writer stops taking frames at whichever comes first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CaptureLimits {
    /// Frames at most.
    pub frames: u64,
    /// File bytes at most (headers included).
    pub bytes: u64,
    /// Bytes kept of each frame (the rest is counted in the original length).
    pub snaplen: u32,
}

impl Default for CaptureLimits {
    fn default() -> Self {
        CaptureLimits {
            frames: u64::MAX,
            bytes: u64::MAX,
            snaplen: 65535,
        }
    }
}

/// Writes frames into a pcap file until a limit is reached.
pub struct PcapWriter<W: Write> {
    out: BufWriter<W>,
    limits: CaptureLimits,
    frames: u64,
    bytes: u64,
    full: bool,
}

impl PcapWriter<std::fs::File> {
    /// Creates (truncates) `path`.
    ///
    /// # Errors
    /// [`Error::Config`] naming the file when it cannot be created or written.
    pub fn create(path: &Path, limits: CaptureLimits) -> Result<Self> {
        let f = std::fs::File::create(path)
            .map_err(|e| Error::Config(format!("cannot create {}: {e}", path.display())))?;
        PcapWriter::new(f, limits).map_err(|e| Error::Config(format!("{}: {e}", path.display())))
    }
}

impl<W: Write> PcapWriter<W> {
    /// Writes the global header to `w`.
    ///
    /// # Errors
    /// [`Error::Config`] when the header cannot be written.
    pub fn new(w: W, limits: CaptureLimits) -> Result<Self> {
        let mut out = BufWriter::with_capacity(1 << 16, w);
        let mut h = [0u8; 24];
        h[0..4].copy_from_slice(&MAGIC_NS.to_ne_bytes());
        h[4..6].copy_from_slice(&2u16.to_ne_bytes());
        h[6..8].copy_from_slice(&4u16.to_ne_bytes());
        h[16..20].copy_from_slice(&limits.snaplen.to_ne_bytes());
        h[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_ne_bytes());
        out.write_all(&h)
            .map_err(|e| Error::Config(format!("writing the pcap header: {e}")))?;
        Ok(PcapWriter {
            out,
            limits,
            frames: 0,
            bytes: 24,
            full: false,
        })
    }

    /// Appends a frame received at `ts_ns` (nanoseconds since the Unix epoch). Returns false,
    /// writing nothing, once a limit is reached.
    ///
    /// # Errors
    /// [`Error::Config`] when the write fails (disk full, …).
    pub fn write(&mut self, ts_ns: u64, frame: &[u8]) -> Result<bool> {
        let caplen = frame.len().min(self.limits.snaplen as usize);
        let rec = 16 + caplen as u64;
        if self.full || self.frames >= self.limits.frames || self.bytes + rec > self.limits.bytes {
            self.full = true;
            return Ok(false);
        }
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&((ts_ns / 1_000_000_000) as u32).to_ne_bytes());
        h[4..8].copy_from_slice(&((ts_ns % 1_000_000_000) as u32).to_ne_bytes());
        h[8..12].copy_from_slice(&(caplen as u32).to_ne_bytes());
        h[12..16].copy_from_slice(&(frame.len() as u32).to_ne_bytes());
        self.out
            .write_all(&h)
            .and_then(|_| self.out.write_all(&frame[..caplen]))
            .map_err(|e| Error::Config(format!("writing the capture: {e}")))?;
        self.frames += 1;
        self.bytes += rec;
        Ok(true)
    }

    /// As [`PcapWriter::write`] for a packet: every segment of a chained one (a jumbo frame
    /// received over several buffers), up to the snap length.
    ///
    /// # Errors
    /// As [`PcapWriter::write`].
    pub fn write_packet(&mut self, ts_ns: u64, p: &rawq::Packet) -> Result<bool> {
        if p.segment_count() == 1 {
            return self.write(ts_ns, p.data());
        }
        let len = p.len();
        let caplen = len.min(self.limits.snaplen as usize);
        let rec = 16 + caplen as u64;
        if self.full || self.frames >= self.limits.frames || self.bytes + rec > self.limits.bytes {
            self.full = true;
            return Ok(false);
        }
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&((ts_ns / 1_000_000_000) as u32).to_ne_bytes());
        h[4..8].copy_from_slice(&((ts_ns % 1_000_000_000) as u32).to_ne_bytes());
        h[8..12].copy_from_slice(&(caplen as u32).to_ne_bytes());
        h[12..16].copy_from_slice(&(len as u32).to_ne_bytes());
        let fail = |e: std::io::Error| Error::Config(format!("writing the capture: {e}"));
        self.out.write_all(&h).map_err(fail)?;
        let mut left = caplen;
        for seg in p.segments() {
            let k = seg.data.len().min(left);
            self.out.write_all(&seg.data[..k]).map_err(fail)?;
            left -= k;
            if left == 0 {
                break;
            }
        }
        self.frames += 1;
        self.bytes += rec;
        Ok(true)
    }

    /// Frames written.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// File bytes written (headers included).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// True once a limit stopped the capture.
    pub fn is_full(&self) -> bool {
        self.full
    }

    /// Flushes and returns the writer.
    ///
    /// # Errors
    /// [`Error::Config`] when the flush fails.
    pub fn finish(self) -> Result<W> {
        self.out
            .into_inner()
            .map_err(|e| Error::Config(format!("flushing the capture: {}", e.error())))
    }
}

/// Wall-clock time now in nanoseconds since the Unix epoch (pcap timestamps).
pub fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcap_file_reads_back_with_an_independent_reader() {
        let mut w = PcapWriter::new(
            Vec::new(),
            CaptureLimits {
                frames: 3,
                ..Default::default()
            },
        )
        .unwrap();
        for i in 0..5u8 {
            let ok = w
                .write(1_700_000_000_123_456_789 + i as u64, &[i; 60])
                .unwrap();
            assert_eq!(ok, i < 3);
        }
        assert!(w.is_full());
        assert_eq!((w.frames(), w.bytes()), (3, 24 + 3 * 76));
        let buf = w.finish().unwrap();
        assert_eq!(buf.len(), 24 + 3 * 76);
        let mut r = pcap_file::pcap::PcapReader::new(&buf[..]).unwrap();
        assert_eq!(
            r.header().ts_resolution,
            pcap_file::TsResolution::NanoSecond
        );
        assert_eq!(r.header().datalink, pcap_file::DataLink::ETHERNET);
        let mut n = 0u8;
        while let Some(p) = r.next_packet() {
            let p = p.unwrap();
            assert_eq!(p.data.as_ref(), &[n; 60]);
            assert_eq!(
                p.timestamp.as_nanos(),
                1_700_000_000_123_456_789 + n as u128
            );
            n += 1;
        }
        assert_eq!(n, 3);
    }

    #[test]
    fn a_chained_packet_is_captured_whole() {
        let pool = crate::test_pool(16);
        let frame: Vec<u8> = (0..5000u32).map(|k| (k * 3) as u8).collect();
        let room = (pool.buf_size() - pool.headroom() as u32) as usize;
        let mut chunks = frame.chunks(room);
        let mut p = pool.alloc().unwrap();
        p.copy_from_slice(chunks.next().unwrap()).unwrap();
        for c in chunks {
            let mut s = pool.alloc().unwrap();
            s.copy_from_slice(c).unwrap();
            p.chain(s).unwrap();
        }
        assert!(p.segment_count() >= 3);
        let mut w = PcapWriter::new(Vec::new(), CaptureLimits::default()).unwrap();
        assert!(w.write_packet(7, &p).unwrap());
        let buf = w.finish().unwrap();
        let mut r = pcap_file::pcap::PcapReader::new(&buf[..]).unwrap();
        let got = r.next_packet().unwrap().unwrap();
        assert_eq!(got.data.as_ref(), &frame[..]);
        assert_eq!(got.orig_len, 5000);
    }

    #[test]
    fn byte_budget_and_snaplen_bound_the_file() {
        let lim = CaptureLimits {
            bytes: 24 + 2 * (16 + 100),
            snaplen: 100,
            ..Default::default()
        };
        let mut w = PcapWriter::new(Vec::new(), lim).unwrap();
        assert!(w.write(0, &[1; 1500]).unwrap());
        assert!(w.write(0, &[2; 1500]).unwrap());
        assert!(
            !w.write(0, &[3; 10]).unwrap(),
            "would exceed the byte budget"
        );
        let buf = w.finish().unwrap();
        assert_eq!(buf.len() as u64, lim.bytes);
        // (pcap-file's reader rejects orig_len > snaplen, which libpcap allows: read by hand.)
        let word = |o: usize| u32::from_ne_bytes(buf[o..o + 4].try_into().unwrap());
        assert_eq!((word(16), word(24 + 8), word(24 + 12)), (100, 100, 1500));
    }
}
