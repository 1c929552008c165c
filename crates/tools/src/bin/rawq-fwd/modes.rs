//! The forwarding modes (testpmd's names and meanings) and the frames of `--tx-first`.

use clap::ValueEnum;
use rawq::flow::Mac;
use rawq::Packet;

/// What fwd does to each frame before sending it on: testpmd's forwarding engines of the same
/// names (app/test-pmd: iofwd.c, macswap.c, macfwd.c, 5tswap.c, rxonly.c).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Forward frames unchanged.
    Io,
    /// Swap source and destination MAC addresses.
    Macswap,
    /// Destination MAC = the output port's peer (--eth-peer), source MAC = the output port's
    /// own MAC.
    Mac,
    /// Swap MACs, then IPv4/IPv6 addresses, then TCP/UDP ports, stopping at the first layer
    /// that is neither (the frame is forwarded anyway).
    #[value(name = "5tswap")]
    FiveTupleSwap,
    /// Count and drop every frame.
    Rxonly,
}

/// The MAC rewrite of `--mode mac` for one output port.
#[derive(Clone, Copy, Debug)]
pub struct MacRewrite {
    /// The peer's MAC (destination).
    pub dst: Mac,
    /// The port's own MAC (source).
    pub src: Mac,
}

/// Applies `mode` to every frame of `burst` going out of a port whose rewrite is `mac`.
#[inline]
pub fn apply(mode: Mode, mac: &MacRewrite, burst: &mut [Packet]) {
    match mode {
        Mode::Io | Mode::Rxonly => {}
        Mode::Macswap => burst.iter_mut().for_each(|p| macswap(p.data_mut())),
        Mode::Mac => burst.iter_mut().for_each(|p| set_macs(p.data_mut(), mac)),
        Mode::FiveTupleSwap => burst.iter_mut().for_each(|p| five_tuple_swap(p.data_mut())),
    }
}

fn macswap(d: &mut [u8]) {
    if d.len() >= 12 {
        let (dst, src) = d.split_at_mut(6);
        dst.swap_with_slice(&mut src[..6]);
    }
}

fn set_macs(d: &mut [u8], m: &MacRewrite) {
    if d.len() >= 12 {
        d[..6].copy_from_slice(&m.dst);
        d[6..12].copy_from_slice(&m.src);
    }
}

/// Swaps `d[a..a + n]` with `d[b..b + n]` (`a + n <= b`); nothing when the frame is shorter.
fn swap_fields(d: &mut [u8], a: usize, b: usize, n: usize) {
    if b + n <= d.len() {
        let (x, y) = d.split_at_mut(b);
        x[a..a + n].swap_with_slice(&mut y[..n]);
    }
}

/// testpmd's 5tswap (app/test-pmd/5tswap.c, `pkt_burst_5tuple_swap`): swap the source and
/// destination of each layer it parses, MAC, then IPv4 or IPv6, then UDP or TCP, and stop at
/// the first layer it does not know. 802.1Q / 802.1ad tags are stepped over. No checksum
/// changes: the IPv4 header checksum and the TCP/UDP pseudo-header checksum are sums, which a
/// swap of two equal-sized fields leaves as they were.
fn five_tuple_swap(d: &mut [u8]) {
    if d.len() < 14 {
        return;
    }
    macswap(d);
    let mut off = 12;
    let mut ethertype = u16::from_be_bytes([d[off], d[off + 1]]);
    while (ethertype == 0x8100 || ethertype == 0x88a8) && d.len() >= off + 6 {
        off += 4;
        ethertype = u16::from_be_bytes([d[off], d[off + 1]]);
    }
    let l3 = off + 2;
    let (proto, l4) = match ethertype {
        0x0800 if d.len() >= l3 + 20 => {
            let ihl = (d[l3] & 0x0f) as usize * 4;
            swap_fields(d, l3 + 12, l3 + 16, 4);
            // A fragment after the first carries no L4 header.
            let frag_off = u16::from_be_bytes([d[l3 + 6], d[l3 + 7]]) & 0x1fff;
            if ihl < 20 || frag_off != 0 {
                return;
            }
            (d[l3 + 9], l3 + ihl)
        }
        0x86dd if d.len() >= l3 + 40 => {
            swap_fields(d, l3 + 8, l3 + 24, 16);
            (d[l3 + 6], l3 + 40)
        }
        _ => return,
    };
    if proto == 6 || proto == 17 {
        swap_fields(d, l4, l4 + 2, 2);
    }
}

/// The `i`-th frame of `--tx-first` from a port with MAC `src` to `dst`: a 60-byte UDP/IPv4
/// frame 198.18.0.1 → 198.18.0.2 (RFC 2544's benchmarking range), destination port 9000,
/// source port 1024 + i % 256 (distinct flows, so that RSS spreads them over the queues), with
/// correct checksums (built by rawq_gen's template).
pub fn tx_first_frame(i: u32, src: Mac, dst: Mac) -> rawq::Result<Vec<u8>> {
    let spec = rawq_gen::FrameSpec {
        dst_mac: dst,
        src_mac: src,
        src_ip: "198.18.0.1".parse().expect("literal address"),
        dst_ip: "198.18.0.2".parse().expect("literal address"),
        src_port: 1024,
        dst_port: TX_FIRST_DST_PORT,
        flows: TX_FIRST_FLOWS,
        vary: rawq_gen::FlowVary::SrcPort,
        sizes: rawq_gen::SizeSpec::Fixed(60),
        stamp: false,
    };
    let st = rawq_gen::Stamper::new(spec)?;
    let mut f = vec![0u8; 60];
    st.write(&mut f, 60, i % TX_FIRST_FLOWS, 0, 0);
    Ok(f)
}

/// The destination port of the `--tx-first` frames (steer them with a rule on it).
pub const TX_FIRST_DST_PORT: u16 = 9000;
/// Distinct source ports among the `--tx-first` frames.
pub const TX_FIRST_FLOWS: u32 = 256;

#[cfg(test)]
mod tests {
    use super::*;

    fn udp4() -> Vec<u8> {
        tx_first_frame(5, [2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]).unwrap()
    }

    #[test]
    fn five_tuple_swap_swaps_every_layer_and_keeps_checksums() {
        let f = udp4();
        let mut g = f.clone();
        five_tuple_swap(&mut g);
        assert_eq!((&g[..6], &g[6..12]), (&f[6..12], &f[..6]));
        assert_eq!((&g[26..30], &g[30..34]), (&f[30..34], &f[26..30]));
        assert_eq!((&g[34..36], &g[36..38]), (&f[36..38], &f[34..36]));
        assert_eq!(&g[24..26], &f[24..26], "IPv4 checksum unchanged");
        assert_eq!(&g[40..42], &f[40..42], "UDP checksum unchanged");
        assert_eq!(
            rawq_gen::csum_fold(rawq_gen::checksum(&g[14..34], 0)),
            0,
            "IPv4 header still sums to 0xffff"
        );
        five_tuple_swap(&mut g);
        assert_eq!(g, f, "twice is identity");
    }

    #[test]
    fn mac_mode_sets_peer_and_own_mac_and_nothing_else() {
        let f = udp4();
        let mut g = f.clone();
        let m = MacRewrite {
            dst: [2, 0, 0, 0, 0, 9],
            src: [2, 0, 0, 0, 1, 0],
        };
        set_macs(&mut g, &m);
        assert_eq!((&g[..6], &g[6..12]), (&m.dst[..], &m.src[..]));
        assert_eq!(&g[12..], &f[12..]);
        let mut short = vec![0u8; 11];
        set_macs(&mut short, &m);
        assert_eq!(short, vec![0u8; 11], "a runt is left alone");
    }

    #[test]
    fn five_tuple_swap_swaps_ipv6_and_tcp_behind_a_vlan_tag() {
        // Ethernet + 802.1Q + IPv6 + TCP header.
        let mut f = vec![0u8; 14 + 4 + 40 + 20];
        f[12..14].copy_from_slice(&[0x81, 0x00]);
        f[16..18].copy_from_slice(&[0x86, 0xdd]);
        let l3 = 18;
        f[l3] = 0x60;
        f[l3 + 6] = 6;
        for i in 0..16 {
            f[l3 + 8 + i] = i as u8;
            f[l3 + 24 + i] = 0x80 + i as u8;
        }
        f[l3 + 40..l3 + 44].copy_from_slice(&[0x12, 0x34, 0x00, 0x50]);
        let mut g = f.clone();
        five_tuple_swap(&mut g);
        assert_eq!(&g[l3 + 8..l3 + 24], &f[l3 + 24..l3 + 40]);
        assert_eq!(&g[l3 + 24..l3 + 40], &f[l3 + 8..l3 + 24]);
        assert_eq!(&g[l3 + 40..l3 + 44], &[0x00, 0x50, 0x12, 0x34]);
    }

    #[test]
    fn five_tuple_swap_stops_at_an_unknown_layer_and_never_panics() {
        let mut arp = udp4();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let before = arp.clone();
        five_tuple_swap(&mut arp);
        assert_eq!(&arp[12..], &before[12..], "only the MACs move");
        for n in 0..60 {
            let mut f = udp4()[..n].to_vec();
            five_tuple_swap(&mut f);
        }
    }
}
