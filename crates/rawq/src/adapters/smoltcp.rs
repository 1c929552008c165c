//! A [smoltcp](https://docs.rs/smoltcp) `phy::Device` over a rawq [`Queue`]: smoltcp's
//! Ethernet interface and its TCP, UDP and ICMP sockets run over any rawq backend (AF_XDP on a
//! netdev, dv and verbs on an mlx5 port, the software device, loopback).
//!
//! [`RawqDevice`] owns one queue. Its receive token holds a received [`Packet`] (no copy: smoltcp
//! reads the frame in the pool buffer it arrived in, which goes back to the pool when the token
//! is consumed); its transmit token takes a buffer from the queue's pool
//! ([`Queue::alloc_burst`]), lets smoltcp write the frame into it and hands it to the device
//! with [`Queue::tx_burst`]. Nothing is allocated per packet: the device keeps two `Vec`s of
//! packet handles, allocated once.
//!
//! **Capabilities** ([`RawqDevice::new`]): the largest frame is the link's MTU plus the
//! Ethernet header (1500 when the port has no MTU to report), never more than a pool buffer
//! holds; the bursts are the device's burst size. The transmit checksums the port computes in
//! hardware ([`PortInfo::offloads`](crate::PortInfo::offloads) says
//! [`Offload::Hardware`]: dv and verbs with the device's checksum offload) are left to the
//! device: smoltcp does not compute them and each frame asks the device for them
//! ([`TxOffload::l3_csum`](crate::TxOffload::l3_csum) /
//! [`l4_csum`](crate::TxOffload::l4_csum), set only on IPv4 frames and TCP/UDP segments).
//! Where the port would compute them in software (AF_XDP, loopback, an mlx5 device without
//! checksum offload) smoltcp computes them itself, as cheaply. smoltcp verifies every received
//! checksum: a device's per-packet verdict ([`RxMeta::l4_csum_ok`](crate::RxMeta::l4_csum_ok))
//! cannot be told to it per packet.
//!
//! **Back-pressure**: a frame the transmit ring did not take stays with the device, in order,
//! and goes out ahead of the next one; while one waits,
//! [`Device::transmit`](phy::Device::transmit) returns `None`, so smoltcp holds its sockets'
//! data back rather than losing it. A frame is dropped (and counted
//! in [`RawqDevice::tx_dropped`]) only when the pool has no buffer for it or more than a burst
//! of frames wait.
//!
//! Steer the traffic the interface is to see to the queue with flow rules (its TCP/UDP ports,
//! ARP: `ethertype 0x0806 -> queue 0`, or its own MAC address): everything else stays with the
//! kernel. `examples/smoltcp_echo.rs` runs a TCP echo server on a port this way.

use smoltcp::phy::{self, Checksum, ChecksumCapabilities, DeviceCapabilities, Medium};
use smoltcp::time::Instant;

use crate::config::{Offload, Offloads};
use crate::packet::Packet;
use crate::port::Port;
use crate::queue::Queue;

/// Packets taken from or handed to the queue at once, unless [`RawqDevice::with_burst`] says
/// otherwise.
pub const DEFAULT_BURST: usize = 32;

/// The Ethernet header, which smoltcp counts in a device's MTU.
const ETH_HLEN: usize = 14;

/// A smoltcp `phy::Device` over one rawq queue (see the [module docs](self)).
#[derive(Debug)]
pub struct RawqDevice {
    q: Queue,
    /// Received packets not handed to smoltcp yet, the next one last.
    rx: Vec<Packet>,
    /// Frames written by smoltcp that the transmit ring has not taken yet, in order.
    tx: Vec<Packet>,
    /// Where a frame that gets no pool buffer is written (and dropped).
    scratch: Vec<u8>,
    burst: usize,
    mtu: usize,
    hw_l3: bool,
    hw_l4: bool,
    tx_dropped: u64,
}

impl RawqDevice {
    /// A device over `queue` (one of `port`'s queues, taken with
    /// [`Port::take_queues`](crate::Port::take_queues)), with the port's MTU and checksum
    /// offloads (see the [module docs](self)).
    ///
    /// # Errors
    /// What [`Port::link`] reports when the port's link cannot be read (the interface is gone).
    pub fn new(port: &Port, queue: Queue) -> crate::Result<RawqDevice> {
        let mtu = port.link()?.mtu;
        Ok(RawqDevice::from_parts(queue, port.info().offloads, mtu))
    }

    /// A device over `queue` with these offloads and this link MTU (IP bytes; `None`: 1500),
    /// for a queue whose port is not at hand.
    pub fn from_parts(queue: Queue, offloads: Offloads, mtu: Option<u32>) -> RawqDevice {
        let pool = queue.pool();
        let room = pool.buf_size().saturating_sub(u32::from(pool.headroom())) as usize;
        let link = mtu.map_or(1500, |m| m as usize) + ETH_HLEN;
        RawqDevice {
            q: queue,
            rx: Vec::with_capacity(DEFAULT_BURST),
            tx: Vec::with_capacity(DEFAULT_BURST + 1),
            scratch: Vec::new(),
            burst: DEFAULT_BURST,
            mtu: link.min(room),
            hw_l3: offloads.ipv4_csum == Offload::Hardware,
            hw_l4: offloads.l4_csum == Offload::Hardware,
            tx_dropped: 0,
        }
    }

    /// Takes and sends up to `burst` packets at once (at least 1; default
    /// [`DEFAULT_BURST`]).
    pub fn with_burst(mut self, burst: usize) -> RawqDevice {
        self.burst = burst.max(1);
        self.rx = Vec::with_capacity(self.burst);
        self.tx = Vec::with_capacity(self.burst + 1);
        self
    }

    /// The queue (for its stats, its fd, [`Queue::rx_wait`] between polls).
    pub fn queue(&self) -> &Queue {
        &self.q
    }

    /// The queue, mutably (e.g. for [`Queue::rx_wait`] while smoltcp has nothing to do).
    pub fn queue_mut(&mut self) -> &mut Queue {
        &mut self.q
    }

    /// The queue back; received frames not handed to smoltcp yet and frames waiting for the
    /// transmit ring are dropped (their buffers go back to the pool).
    pub fn into_queue(self) -> Queue {
        self.q
    }

    /// The largest frame smoltcp may send, Ethernet header included.
    pub fn max_frame(&self) -> usize {
        self.mtu
    }

    /// Whether the device computes the IPv4 header and TCP/UDP checksums of what smoltcp sends
    /// (smoltcp then leaves them out): `(ipv4, tcp_udp)`.
    pub fn tx_checksums_by_device(&self) -> (bool, bool) {
        (self.hw_l3, self.hw_l4)
    }

    /// Frames smoltcp wrote that were dropped: no pool buffer for them, larger than a buffer,
    /// or more than a burst of frames already waiting for the transmit ring.
    pub fn tx_dropped(&self) -> u64 {
        self.tx_dropped
    }

    /// Frames waiting for the transmit ring (see the [module docs](self), "Back-pressure").
    pub fn tx_pending(&self) -> usize {
        self.tx.len()
    }

    /// Offers the waiting frames to the transmit ring again; returns how many are still
    /// waiting. [`Device::transmit`](phy::Device::transmit) and
    /// [`Device::receive`](phy::Device::receive) do this themselves.
    pub fn flush(&mut self) -> usize {
        if !self.tx.is_empty() {
            self.q.tx_burst(&mut self.tx);
        }
        self.tx.len()
    }

    fn checksums(&self) -> ChecksumCapabilities {
        let by = |hw: bool| if hw { Checksum::Rx } else { Checksum::Both };
        let mut c = ChecksumCapabilities::default();
        c.ipv4 = by(self.hw_l3);
        c.tcp = by(self.hw_l4);
        c.udp = by(self.hw_l4);
        c
    }
}

impl phy::Device for RawqDevice {
    type RxToken<'a> = RxToken;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, _now: Instant) -> Option<(RxToken, TxToken<'_>)> {
        self.flush();
        if self.rx.is_empty() {
            if self.q.rx_burst(&mut self.rx, self.burst) == 0 {
                return None;
            }
            // Handed out from the end: the first received first.
            self.rx.reverse();
        }
        let pkt = self.rx.pop()?;
        let tx = TxToken {
            q: &mut self.q,
            tx: &mut self.tx,
            scratch: &mut self.scratch,
            dropped: &mut self.tx_dropped,
            burst: self.burst,
            hw_l3: self.hw_l3,
            hw_l4: self.hw_l4,
        };
        Some((RxToken { pkt }, tx))
    }

    fn transmit(&mut self, _now: Instant) -> Option<TxToken<'_>> {
        // Frames the ring did not take go first; until they have, smoltcp waits.
        if self.flush() > 0 {
            return None;
        }
        Some(TxToken {
            q: &mut self.q,
            tx: &mut self.tx,
            scratch: &mut self.scratch,
            dropped: &mut self.tx_dropped,
            burst: self.burst,
            hw_l3: self.hw_l3,
            hw_l4: self.hw_l4,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = self.mtu;
        caps.max_burst_size = Some(self.burst);
        caps.checksum = self.checksums();
        caps
    }
}

/// A received frame, in the pool buffer it arrived in.
#[derive(Debug)]
pub struct RxToken {
    pkt: Packet,
}

impl phy::RxToken for RxToken {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        if self.pkt.segment_count() <= 1 {
            f(self.pkt.data())
        } else {
            // A frame received into several buffers (a jumbo frame on a port with receive
            // scatter): smoltcp reads one slice.
            f(&self.pkt.to_vec())
        }
    }
}

/// Room for one frame: a pool buffer, handed to the device once smoltcp wrote it.
#[derive(Debug)]
pub struct TxToken<'a> {
    q: &'a mut Queue,
    tx: &'a mut Vec<Packet>,
    scratch: &'a mut Vec<u8>,
    dropped: &'a mut u64,
    burst: usize,
    hw_l3: bool,
    hw_l4: bool,
}

impl TxToken<'_> {
    /// A frame that cannot be sent: smoltcp writes it (its contract) where nothing reads it.
    fn drop_frame<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        *self.dropped += 1;
        self.scratch.clear();
        self.scratch.resize(len, 0);
        f(&mut self.scratch[..])
    }
}

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        if self.tx.len() >= self.burst || self.q.alloc_burst(self.tx, 1).is_err() {
            return self.drop_frame(len, f);
        }
        let Some(pkt) = self.tx.last_mut() else {
            return self.drop_frame(len, f);
        };
        if pkt.set_len(len).is_err() {
            // Larger than a buffer: smoltcp was told the largest frame, so this is a bug of
            // the caller's capabilities; the buffer goes back.
            self.tx.pop();
            return self.drop_frame(len, f);
        }
        let r = f(pkt.data_mut());
        pkt.offload = offload_for(pkt.data(), self.hw_l3, self.hw_l4);
        self.q.tx_burst(self.tx);
        r
    }
}

/// The checksum requests of one frame: the IPv4 header's where the device does IPv4
/// checksums, the TCP or UDP checksum where it does those (the device refuses a request it
/// cannot carry out, e.g. an L4 checksum on ICMP, so only what applies is asked for).
fn offload_for(f: &[u8], hw_l3: bool, hw_l4: bool) -> crate::TxOffload {
    let mut o = crate::TxOffload::default();
    if f.len() < ETH_HLEN + 20 {
        return o;
    }
    let proto = match u16::from_be_bytes([f[12], f[13]]) {
        0x0800 => {
            o.l3_csum = hw_l3;
            f[ETH_HLEN + 9]
        }
        0x86dd if f.len() >= ETH_HLEN + 40 => f[ETH_HLEN + 6],
        _ => return o,
    };
    o.l4_csum = hw_l4 && (proto == 6 || proto == 17);
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Backend, Port};
    use smoltcp::phy::{Device, RxToken as _, TxToken as _};

    fn loopback() -> (Port, RawqDevice) {
        let mut port = Port::builder(Backend::Loopback).queues(1).open().unwrap();
        let q = port.take_queues().remove(0);
        let dev = RawqDevice::new(&port, q).unwrap();
        (port, dev)
    }

    #[test]
    fn a_frame_goes_out_and_comes_back_in_order() {
        let (_port, mut dev) = loopback();
        let t = Instant::from_millis(0);
        for i in 0..3u8 {
            let tok = dev.transmit(t).expect("room to send");
            tok.consume(60, |b| {
                b.fill(i);
            });
        }
        for i in 0..3u8 {
            let (rx, _tx) = dev.receive(t).expect("the frame came back");
            rx.consume(|b| {
                assert_eq!(b.len(), 60);
                assert!(b.iter().all(|&x| x == i), "frame {i} out of order");
            });
        }
        assert!(dev.receive(t).is_none());
        assert_eq!(dev.tx_dropped(), 0);
        assert_eq!(dev.queue().stats().tx_packets, 3);
    }

    #[test]
    fn capabilities_follow_the_port() {
        let (_port, dev) = loopback();
        let c = dev.capabilities();
        assert_eq!(c.medium, Medium::Ethernet);
        // Loopback has no MTU: 1500 + the Ethernet header, within a 2048-byte buffer.
        assert_eq!(c.max_transmission_unit, 1514);
        // Loopback computes checksums in software: smoltcp computes them.
        assert!(matches!(c.checksum.tcp, Checksum::Both));
        let q = dev.into_queue();
        let mut hw = Offloads::mlx5(true, 0);
        hw.rss = Offload::Absent;
        let dev = RawqDevice::from_parts(q, hw, Some(9000));
        let c = dev.capabilities();
        assert!(matches!(c.checksum.ipv4, Checksum::Rx));
        assert!(matches!(c.checksum.udp, Checksum::Rx));
        // A jumbo MTU is capped at what one buffer holds.
        assert_eq!(c.max_transmission_unit, 2048 - 128);
    }

    #[test]
    fn a_frame_larger_than_a_buffer_is_dropped_and_counted() {
        let (_port, mut dev) = loopback();
        let tok = dev.transmit(Instant::from_millis(0)).unwrap();
        tok.consume(5000, |b| b.fill(1));
        assert_eq!(dev.tx_dropped(), 1);
        assert!(dev.receive(Instant::from_millis(0)).is_none());
    }

    #[test]
    fn checksum_requests_only_where_they_apply() {
        let mut f = vec![0u8; 64];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[ETH_HLEN + 9] = 6;
        let o = offload_for(&f, true, true);
        assert!(o.l3_csum && o.l4_csum);
        f[ETH_HLEN + 9] = 1; // ICMP: no L4 request
        let o = offload_for(&f, true, true);
        assert!(o.l3_csum && !o.l4_csum);
        f[12..14].copy_from_slice(&[0x08, 0x06]); // ARP
        assert_eq!(offload_for(&f, true, true), crate::TxOffload::default());
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[ETH_HLEN + 9] = 17;
        assert_eq!(offload_for(&f, false, false), crate::TxOffload::default());
    }
}
