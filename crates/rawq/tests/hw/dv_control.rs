//! The mlx5 DV control path on real hardware: rings come back sane from `mlx5dv_init_obj`.
//! Runs only when `RAWQ_TEST_DEVICE` names an mlx5 device (port from `RAWQ_TEST_PORT`, default 1).
#![cfg(feature = "mlx5")]

use rawq_testkit as support;

use rawq::dv::control::{ControlPort, QueueSpec};
use rawq::dv::rings::QueueRings;
use rawq::{Mempool, MempoolConfig};

fn check(r: &QueueRings, spec: &QueueSpec) {
    assert!(
        r.sq.wqe_cnt.is_power_of_two() && r.sq.wqe_cnt >= spec.tx_ring,
        "{r:?}"
    );
    assert!(
        r.rq.wqe_cnt.is_power_of_two() && r.rq.wqe_cnt >= spec.rx_ring,
        "{r:?}"
    );
    assert!(r.rq.stride.is_power_of_two() && r.rq.stride >= 16, "{r:?}");
    for cq in [&r.tx_cq, &r.rx_cq] {
        assert!(cq.cqe_cnt.is_power_of_two(), "{cq:?}");
        assert!(cq.cqe_size == 64 || cq.cqe_size == 128, "{cq:?}");
    }
    assert_ne!(r.tx_cq.cqn, r.rx_cq.cqn);
    assert_ne!(r.sq.sqn, 0);
    assert_ne!(r.lkey, 0);
    assert!(
        r.caps.min_inline == 0 || r.caps.min_inline == 18,
        "{:?}",
        r.caps
    );
}

#[test]
fn dv_queues_expose_sane_rings() {
    let Some((dev, port)) = support::test_device() else {
        return;
    };
    let pool = Mempool::new(&MempoolConfig::with_buffers(4096)).expect("pool");
    let spec = QueueSpec {
        port,
        rx_ring: 512,
        tx_ring: 512,
        cqe_compression: true,
        striding: None,
        scatter: 1,
        vlan_strip: false,
    };
    let cp = ControlPort::open(&dev, &pool, &spec, 2).expect("open DV control port");
    let rings = cp.rings();
    assert_eq!(rings.len(), 2);
    for r in &rings {
        check(r, &spec);
    }
    assert_ne!(rings[0].sq.sqn, rings[1].sq.sqn);
    // Compression was asked for: it is on exactly when the device has the hash mini-CQE format.
    let can = cp
        .device()
        .supports_compression(rawq::dv::rings::MiniCqeFormat::Hash);
    for r in &rings {
        assert_eq!(r.caps.cqe_compression.is_some(), can, "{:?}", r.caps);
    }
    // The recovery hooks the data path calls after an error completion.
    for i in 0..2 {
        let k = cp.keep_alive(i).expect("queue");
        k.quiesce().expect("quiesce");
        k.recover_sq().expect("SQ back to RTS");
        k.recover_rq().expect("RQ back to RDY");
    }
    let mut cp = cp;
    let taken = cp.take_queues();
    assert_eq!(taken.len(), 2);
    assert!(cp.rings().is_empty());
}

/// Striding RQs through libmlx5's own sizing (`mlx5_calc_rwq_size`), for every stride count
/// the device offers that rawq can use (one pool buffer per stride, at most 16): the WQE holds
/// the next-segment header and one data segment per stride, the receive CQ one completion per
/// stride, and the data path accepts the rings. Counts the device offers beyond 16 are refused
/// up front with the reason.
#[test]
fn striding_rq_is_created_or_refused_by_the_caps() {
    use rawq::dv::control::MAX_STRIDES;
    let Some((dev, port)) = support::test_device() else {
        return;
    };
    let pool = Mempool::new(&MempoolConfig::with_buffers(4096)).expect("pool");
    let probe = QueueSpec {
        port,
        rx_ring: 256,
        tx_ring: 64,
        cqe_compression: false,
        striding: None,
        scatter: 1,
        vlan_strip: false,
    };
    let caps = *ControlPort::open(&dev, &pool, &probe, 1)
        .expect("open")
        .device();
    let (lo, hi) = caps.stride_log_num;
    let mut created = 0;
    for log in lo.max(1)..=hi.max(1) {
        let striding = rawq::dv::rings::Striding {
            log_num_strides: log as u8,
            log_stride_size: caps.stride_log_bytes.0.max(6) as u8,
            two_byte_shift: false,
        };
        let spec = QueueSpec {
            striding: Some(striding),
            scatter: 1,
            ..probe
        };
        match ControlPort::open(&dev, &pool, &spec, 1) {
            Ok(cp) => {
                assert!(caps.striding() && (1u32 << log) <= MAX_STRIDES, "{log}");
                let r = cp.rings()[0];
                let n = 1u32 << log;
                assert_eq!(r.rq.striding, Some(striding));
                assert!(r.rq.stride >= 16 * (n + 1), "{:?}", r.rq);
                assert!(r.rq.wqe_cnt * n >= spec.rx_ring, "{:?}", r.rq);
                assert!(r.rx_cq.cqe_cnt >= r.rq.wqe_cnt * n, "{:?}", r.rx_cq);
                created += 1;
            }
            Err(e) => {
                let s = e.to_string();
                assert!(
                    !caps.striding() || (1u32 << log) > MAX_STRIDES,
                    "striding 2^{log} supported but refused: {s}"
                );
                if caps.striding() {
                    assert!(s.contains("512 bytes"), "{s}");
                }
            }
        }
    }
    if caps.striding() && lo <= 4 {
        assert!(created > 0);
    }
}
