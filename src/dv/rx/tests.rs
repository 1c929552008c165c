use super::*;

/// An IPv4/UDP frame from source port `sport` with a valid IPv4 header checksum.
fn udp_frame(sport: u16) -> Vec<u8> {
    let mut f = vec![0u8; 64];
    f[..12].copy_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
    f[12] = 0x08;
    f[14] = 0x45;
    f[16..18].copy_from_slice(&50u16.to_be_bytes());
    f[22] = 64;
    f[23] = 17;
    f[26..30].copy_from_slice(&[10, 0, 0, 1]);
    f[30..34].copy_from_slice(&[10, 0, 0, 2]);
    let sum: u32 = (14..34)
        .step_by(2)
        .map(|i| u16::from_be_bytes([f[i], f[i + 1]]) as u32)
        .sum();
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = (sum & 0xffff) + (sum >> 16);
    f[24..26].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f[34..36].copy_from_slice(&sport.to_be_bytes());
    f[36..38].copy_from_slice(&2000u16.to_be_bytes());
    f[38..40].copy_from_slice(&30u16.to_be_bytes());
    f
}

/// Packets received with metadata on and off: same bytes; off leaves `RxMeta::default()`,
/// on carries what the device reported (here: a verified IPv4 header checksum). Several
/// bursts, so that the reposting loop and the ring wrap are both crossed.
#[test]
fn metadata_switch_leaves_meta_at_default_and_nothing_else_changes() {
    use crate::dv::model::{ModelOptions, ModelPort, ModelWire};
    use crate::{HugePages, Mempool, MempoolConfig};
    let mut seen = Vec::new();
    for meta in [true, false] {
        let pool = Mempool::new(&MempoolConfig {
            buffers: 512,
            huge_pages: HugePages::Never,
            ..Default::default()
        })
        .unwrap();
        let port = ModelPort::new(ModelOptions {
            rq_wqes: 64,
            wire: ModelWire::Sink,
            ..Default::default()
        })
        .unwrap();
        let mut dq = port.queue(0, &pool).unwrap();
        dq.set_rx_metadata(meta);
        let mut q = dq.into_queue();
        let mut got = Vec::new();
        let mut out = Vec::with_capacity(32);
        for round in 0..10u16 {
            for k in 0..40u16 {
                port.inject_frame(&udp_frame(1000 + round * 40 + k));
            }
            port.process();
            for _ in 0..4 {
                q.rx_burst(&mut out, 32);
                for p in out.drain(..) {
                    got.push((p.to_vec(), p.meta));
                }
            }
        }
        assert_eq!(got.len(), 400, "meta {meta}");
        if meta {
            assert!(got.iter().all(|(_, m)| m.l3_csum_ok), "{:?}", got[0].1);
        } else {
            assert!(got.iter().all(|(_, m)| *m == RxMeta::default()));
        }
        seen.push(got.into_iter().map(|(b, _)| b).collect::<Vec<_>>());
        drop(q);
        drop(port);
        pool.flush_local_cache();
        assert_eq!(pool.available(), pool.capacity(), "meta {meta}");
    }
    assert_eq!(seen[0], seen[1]);
}

#[test]
fn csum_table_matches_the_cqe_bits() {
    for b28 in 0..=255u8 {
        for b29 in 0..=255u8 {
            let mut c = [0u8; 64];
            c[cqe::field::HDS_IP_EXT] = b28;
            c[cqe::field::L4_HDR_TYPE_ETC] = b29;
            let q = Cqe::new_unchecked(&c);
            let l3 = q.l3_type();
            let want = (
                (l3 == cqe::L3_IPV4 && b28 & cqe::L3_OK != 0) || l3 == cqe::L3_IPV6,
                q.l4_type() != cqe::L4_NONE && b28 & cqe::L4_OK != 0,
            );
            let m = meta_of(&q, 0);
            assert_eq!((m.l3_csum_ok, m.l4_csum_ok), want, "{b28:#x} {b29:#x}");
            assert_eq!(m.vlan_tci.is_some(), b29 & cqe::CV != 0);
        }
    }
}
