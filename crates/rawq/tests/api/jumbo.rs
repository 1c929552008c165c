//! Jumbo frames and the port MTU (issue 22 item 3): `PortBuilder::mtu` makes a cyclic RQ
//! scatter a frame over several pool buffers (a chained `Packet`), and refuses a frame above the
//! MTU on transmit (dropped, counted in `tx_errors`, said by `take_error`, not counted as sent,
//! every buffer home).

use std::time::{Duration, Instant};

use rawq::{Backend, Packet, Port, Queue};

/// A UDP/IPv4 frame of `len` bytes whose payload is a pattern keyed by `seed`.
fn frame(len: usize, seed: u8) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (len - 14) as u16;
    f[14] = 0x45;
    f[16..18].copy_from_slice(&ip_len.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    f[34..36].copy_from_slice(&9000u16.to_be_bytes());
    f[36..38].copy_from_slice(&9000u16.to_be_bytes());
    f[38..40].copy_from_slice(&(ip_len - 20).to_be_bytes());
    for (i, b) in f[42..].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(7).wrapping_add(seed);
    }
    f
}

/// `bytes` in a packet of `q`'s pool, chained over as many buffers as it needs.
fn packet(q: &mut Queue, bytes: &[u8]) -> Packet {
    let room = (q.pool().buf_size() - q.pool().headroom() as u32) as usize;
    let mut chunks = bytes.chunks(room);
    let mut head = q.pool().alloc().expect("buffer");
    head.copy_from_slice(chunks.next().unwrap()).unwrap();
    for c in chunks {
        let mut s = q.pool().alloc().expect("buffer");
        s.copy_from_slice(c).unwrap();
        head.chain(s).unwrap();
    }
    head
}

fn receive(q: &mut Queue, want: usize) -> Vec<Packet> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < want && Instant::now() < deadline {
        if q.rx_burst(&mut got, 64) == 0 {
            std::thread::yield_now();
        }
    }
    got
}

/// Sends `[ok, too big, ok]` on a port of MTU 1500 and checks that only the two fitting frames
/// are sent and arrive, the other refused with the reason, and every buffer back in the pool.
fn above_mtu_refused(backend: Backend) {
    let mut port = Port::builder(backend).mtu(1500).open().expect("open");
    let pool = port.pool().clone();
    let mut q = port.take_queues().remove(0);
    let (a, big, b) = (frame(1518, 1), frame(1519, 2), frame(200, 3));
    let mut pkts = vec![packet(&mut q, &a), packet(&mut q, &big), packet(&mut q, &b)];
    let mut sent = 0;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !pkts.is_empty() && Instant::now() < deadline {
        sent += q.tx_burst(&mut pkts);
    }
    assert!(pkts.is_empty(), "the queue never took the frames");
    assert_eq!(sent, 2, "only the frames within the MTU are sent");
    let e = q.take_error().expect("the refusal is said").to_string();
    assert!(e.contains("1519 bytes") && e.contains("mtu"), "{e}");
    let st = q.stats();
    assert_eq!((st.tx_packets, st.tx_errors), (2, 1), "{st:?}");
    let got = receive(&mut q, 2);
    let lens: Vec<usize> = got.iter().map(|p| p.len()).collect();
    assert_eq!(lens, [1518, 200]);
    drop(got);
    // Every buffer home once the queue and the port are gone.
    drop(q);
    drop(port);
    pool.flush_local_cache();
    assert_eq!(pool.available(), pool.capacity());
}

#[test]
fn loopback_refuses_a_frame_above_the_mtu() {
    above_mtu_refused(Backend::Loopback);
}

#[test]
fn a_bad_mtu_is_refused_at_open() {
    for m in [0, 67, 9199] {
        let e = Port::builder(Backend::Loopback).mtu(m).open().unwrap_err();
        assert!(e.to_string().contains("mtu"), "{e}");
    }
}

#[cfg(feature = "mlx5")]
mod model {
    use super::*;
    use rawq::dv::model::{ModelOptions, RxKind};

    fn model(rx: RxKind) -> Backend {
        Backend::Model(ModelOptions {
            rx,
            ..Default::default()
        })
    }

    #[test]
    fn model_refuses_a_frame_above_the_mtu() {
        above_mtu_refused(model(RxKind::Cyclic { sges: 1 }));
    }

    /// A 9000-byte frame through a port of MTU 9000 with 2 KiB buffers: the RQ scatters it over
    /// five buffers and it arrives once, as one chained packet, byte-exact.
    #[test]
    fn model_mtu_9000_receives_each_jumbo_frame_once_as_a_chain() {
        let mut port = Port::builder(model(RxKind::Cyclic { sges: 1 }))
            .mtu(9000)
            .open()
            .expect("open");
        assert_eq!(port.pool().buf_size(), 2048);
        let mut q = port.take_queues().remove(0);
        let frames: Vec<Vec<u8>> = (0..8).map(|i| frame(9000 + 18 - i, i as u8)).collect();
        let mut pkts: Vec<Packet> = frames.iter().map(|f| packet(&mut q, f)).collect();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !pkts.is_empty() && Instant::now() < deadline {
            q.tx_burst(&mut pkts);
        }
        assert!(pkts.is_empty());
        let got = receive(&mut q, frames.len());
        assert_eq!(got.len(), frames.len(), "{:?}", q.stats());
        for (p, f) in got.iter().zip(&frames) {
            assert!(p.segment_count() >= 5, "{} segments", p.segment_count());
            assert!(p.to_vec() == *f, "a {}-byte frame arrived altered", f.len());
        }
        let st = q.stats();
        assert_eq!((st.rx_packets, st.rx_errors), (frames.len() as u64, 0));
    }

    /// Without an MTU the RQ keeps one buffer per frame: a jumbo frame fails its WQE
    /// (LOCAL_LENGTH_ERR), counted in `rx_errors`, and receiving goes on.
    #[test]
    fn without_scatter_a_jumbo_frame_is_a_counted_length_error() {
        let mut port = Port::builder(Backend::Model(ModelOptions {
            max_frame: 9216,
            ..Default::default()
        }))
        .open()
        .expect("open");
        let mut q = port.take_queues().remove(0);
        let (big, small) = (frame(9000, 1), frame(300, 2));
        let mut pkts = vec![packet(&mut q, &big), packet(&mut q, &small)];
        let deadline = Instant::now() + Duration::from_secs(20);
        while !pkts.is_empty() && Instant::now() < deadline {
            q.tx_burst(&mut pkts);
        }
        let got = receive(&mut q, 1);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].to_vec(), small);
        assert_eq!(q.stats().rx_errors, 1, "{:?}", q.stats());
    }
}
