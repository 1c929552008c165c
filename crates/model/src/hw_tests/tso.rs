//! TSO and VLAN-insert WQEs written byte by byte as libmlx5 writes them for `IBV_WR_TSO`
//! (rdma-core providers/mlx5/qp.c `set_tso_eth_seg`: opcode `MLX5_OPCODE_TSO`, the MSS and
//! the whole header inline in the Ethernet segment, the payload in the SG list) and as DPDK
//! writes a VLAN insertion (mlx5_tx.h `mlx5_tx_eseg_none`: `MLX5_ETH_WQE_VLAN_INSERT | tci` in
//! the segment's last word).

use super::*;

/// Ethernet + IPv4 + TCP header (no options, ACK PSH FIN) for `payload` bytes, seq 1000.
fn tcp_header(payload: usize) -> Vec<u8> {
    let mut h = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00, 0x45, 0];
    h.extend_from_slice(&((40 + payload) as u16).to_be_bytes());
    h.extend_from_slice(&[0, 9, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
    h.extend_from_slice(&[
        0x30, 0x39, 0x00, 0x50, 0, 0, 0x03, 0xe8, 0, 0, 0, 0, 0x50, 0x19,
    ]);
    h.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]);
    h
}

/// A TSO WQE at WQEBB 0: ctrl (opcode 0x0e), Ethernet segment with `mss` and the 54-byte
/// header inline (16 + align(52, 16) = 80 bytes, 5 DS), one data segment: DS 7, two WQEBBs.
fn tso_wqe(r: &Rig, sqn: u32, mss: u16, hdr: &[u8], payload_len: u32) {
    r.be32(SQ, 0x0e);
    r.be32(SQ + 4, sqn << 8 | 7);
    r.bytes(SQ + 8, 8)
        .copy_from_slice(&[0, 0, 0, 8, 0, 0, 0, 0]);
    let eth = SQ + 16;
    r.bytes(eth, 80).fill(0);
    r.bytes(eth + 4, 1)[0] = 0xc0;
    r.bytes(eth + 6, 2).copy_from_slice(&mss.to_be_bytes());
    r.bytes(eth + 12, 2)
        .copy_from_slice(&(hdr.len() as u16).to_be_bytes());
    r.bytes(eth + 14, hdr.len()).copy_from_slice(hdr);
    r.data_seg(SQ + 96, payload_len, r.lkey, r.at(DATA) as u64);
    r.ring(2, 0);
}

#[test]
fn a_libmlx5_tso_wqe_goes_out_as_mss_sized_segments() {
    let r = Rig::new(opts(0));
    let txcq = r.cq(0, 8, 64, None);
    let rxcq = r.cq(1, 8, 64, None);
    let sqn = r.sq(txcq, 1);
    let rqn = r.rq(0, rxcq, 16, 2);
    catch_all(&r.hw, rqn);
    for i in 0..3u16 {
        r.post_recv(0, 16, i, &[(2048, DATA + 0x8000 + 0x1000 * i as usize)]);
    }
    let payload: Vec<u8> = (0..2500u32).map(|i| (i * 7) as u8).collect();
    r.bytes(DATA, payload.len()).copy_from_slice(&payload);
    let hdr = tcp_header(payload.len());
    tso_wqe(&r, sqn, 1000, &hdr, payload.len() as u32);
    for _ in 0..4 {
        r.hw.process();
    }
    let c = r.cqe(0, 64, 0);
    assert_eq!((op(&c), c[55]), (0, 0), "send CQE (opcode, syndrome)");
    let mut joined = Vec::new();
    for (i, want) in [1000usize, 1000, 500].into_iter().enumerate() {
        assert_eq!(
            byte_cnt(&r.cqe(1, 64, i)) as usize,
            54 + want,
            "segment {i}"
        );
        let f = r.bytes(DATA + 0x8000 + 0x1000 * i, 54 + want).to_vec();
        // IP id +i, seq +1000 i, FIN/PSH on the last only, total length.
        assert_eq!(u16::from_be_bytes([f[18], f[19]]), 9 + i as u16);
        assert_eq!(u16::from_be_bytes([f[16], f[17]]) as usize, 40 + want);
        let seq = u32::from_be_bytes([f[38], f[39], f[40], f[41]]);
        assert_eq!(seq, 1000 + 1000 * i as u32);
        assert_eq!(f[47], if i == 2 { 0x19 } else { 0x10 });
        joined.extend_from_slice(&f[54..]);
    }
    assert_eq!(joined, payload);
    let k = r.hw.counters();
    assert_eq!((k.tx_wqes, k.tx_frames), (1, 3));
    assert_eq!(k.tx_bytes, 3 * 54 + 2500);
}

#[test]
fn a_tso_wqe_without_an_mss_or_with_a_udp_header_is_a_local_qp_op_error() {
    for (mss, proto) in [(0u16, 6u8), (1000, 17)] {
        let r = Rig::new(opts(0));
        let cq = r.cq(0, 8, 64, None);
        let sqn = r.sq(cq, 1);
        let mut hdr = tcp_header(100);
        hdr[23] = proto;
        tso_wqe(&r, sqn, mss, &hdr, 100);
        r.hw.process();
        let c = r.cqe(0, 64, 0);
        assert_eq!(
            (op(&c), c[55]),
            (0xd, 0x02),
            "REQ_ERR, LOCAL_QP_OP_ERR ({mss}, {proto})"
        );
        assert_eq!(r.hw.counters().tx_frames, 0);
    }
}

#[test]
fn a_vlan_insert_in_the_ethernet_segment_tags_the_frame() {
    let r = Rig::new(opts(0));
    let txcq = r.cq(0, 8, 64, None);
    let rxcq = r.cq(1, 8, 64, None);
    let sqn = r.sq(txcq, 1);
    let rqn = r.rq(0, rxcq, 16, 2);
    catch_all(&r.hw, rqn);
    r.post_recv(0, 16, 0, &[(256, DATA + 0x8000)]);
    let f = udp([10, 0, 0, 2], 1, 2, 100);
    r.bytes(DATA, 100).copy_from_slice(&f);
    r.ctrl(SQ, 0, sqn, 3);
    r.bytes(SQ + 16, 16).fill(0);
    r.be32(SQ + 28, 0x8000_0000 | 0x2064);
    r.data_seg(SQ + 32, 100, r.lkey, r.at(DATA) as u64);
    r.ring(1, 0);
    r.hw.process();
    r.hw.process();
    assert_eq!(byte_cnt(&r.cqe(1, 64, 0)), 104);
    let got = r.bytes(DATA + 0x8000, 104).to_vec();
    assert_eq!(got[..12], f[..12]);
    assert_eq!(got[12..16], [0x81, 0x00, 0x20, 0x64]);
    assert_eq!(got[16..], f[12..]);
}
