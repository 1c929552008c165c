//! The live-frames engine's input (`rawq::xdp::live`, the AF_XDP backend's transmit mode):
//! the frame the kernel copies and the plan for varying it, where the varying fields sit and
//! the sums of everything constant, from a [`FrameSpec`].

use crate::{checksum, csum_fold, FlowVary, FrameSpec, SizeSpec, Stamper};
use rawq::error::{Error, Result};
use rawq::xdp::live::{LiveConfig, LivePlan, MAX_FRAME};

const ETH: usize = 14;
const IP4: usize = 20;
const IP6: usize = 40;
const UDP: usize = 8;

/// The engine's configuration for sending `spec`'s frames on `ifname`: one thread on core 0,
/// unlimited, the default batch and runs per call ([`LiveConfig::new`]).
///
/// # Errors
/// As [`live_plan`].
pub fn live_config(ifname: &str, spec: &FrameSpec) -> Result<LiveConfig> {
    let (frame, plan) = live_plan(spec)?;
    Ok(LiveConfig::new(ifname, frame, plan))
}

/// The frame the kernel copies (flow 0, stamp 0/0) and the plan for varying it.
///
/// # Errors
/// [`Error::Config`] for a size range, a frame the spec rejects, or one larger than a page
/// less the kernel's headroom.
pub fn live_plan(spec: &FrameSpec) -> Result<(Vec<u8>, LivePlan)> {
    let SizeSpec::Fixed(len) = spec.sizes else {
        return Err(Error::Config(
            "the live engine sends one frame size (the kernel copies one frame); use a \
                 fixed --size, or the AF_XDP engine for ranges and IMIX"
                .into(),
        ));
    };
    let len = len as usize;
    // PAGE_SIZE - XDP_PACKET_HEADROOM (256) - skb_shared_info (320 on x86-64) - the live
    // mode's page head: stay well inside.
    if len > MAX_FRAME {
        return Err(Error::Config(format!(
                "frame size {len}: the live engine sends frames of at most {MAX_FRAME} bytes (one page \
                 with the kernel's headroom)"
            )));
    }
    let st = Stamper::new(spec.clone())?;
    let mut frame = vec![0u8; len];
    st.write(&mut frame, len, 0, 0, 0);
    let v4 = spec.src_ip.is_ipv4();
    let l4 = ETH + if v4 { IP4 } else { IP6 };
    let pay = l4 + UDP;
    let (flow_off, flow_base, flow_skip) = match spec.vary {
        FlowVary::SrcPort => (l4, spec.src_port, None),
        FlowVary::SrcIp => {
            let o = if v4 { ETH + 14 } else { ETH + 22 };
            // Flow k sends from the source's last 16 bits + k, stepping over the
            // destination's when both share all other bits (src/template/stamper.rs).
            let s16 = match spec.src_ip {
                std::net::IpAddr::V4(a) => u32::from(a) as u16,
                std::net::IpAddr::V6(a) => u128::from(a) as u16,
            };
            let skip = ip_pair(spec.src_ip, spec.dst_ip)
                .filter(|(s, d)| s >> 16 == d >> 16)
                .map(|(s, d)| (d as u16).wrapping_sub(s as u16));
            (o, s16, skip)
        }
    };
    // The constant part: the frame with every field the program writes set to zero.
    let mut z = frame.clone();
    z[l4 + 6..l4 + 8].fill(0);
    if spec.flows > 1 {
        z[flow_off..flow_off + 2].fill(0);
    }
    if spec.stamp {
        // The stamp (src/template/stamp.rs): magic 4, stream 2, flow index 2, flows - 1 2,
        // 48-bit sequence number 6. Magic and flows - 1 stay as the template has them.
        z[pay + 4..pay + 6].fill(0); // stream
        if spec.flows > 1 {
            z[pay + 6..pay + 8].fill(0); // flow index
        }
        z[pay + 10..pay + 16].fill(0); // sequence number
    }
    let udp_len = (len - l4) as u32;
    let addrs = if v4 {
        &z[ETH + 12..ETH + 20]
    } else {
        &z[ETH + 8..ETH + 40]
    };
    let sum = checksum(&z[l4..len], checksum(addrs, 17 + udp_len));
    let udp_sum = !csum_fold(sum);
    let ip_sum = if v4 {
        let mut h = z[ETH..ETH + IP4].to_vec();
        h[10..12].fill(0);
        !csum_fold(checksum(&h, 0))
    } else {
        0
    };
    Ok((
        frame,
        LivePlan {
            len,
            l4,
            v4,
            flows: spec.flows,
            src_ip: spec.vary == FlowVary::SrcIp,
            flow_base,
            flow_off,
            flow_skip,
            stamp: spec.stamp,
            udp_sum,
            ip_sum,
        },
    ))
}

/// The addresses as numbers (an IPv4 address in the low 32 bits), if of the same family.
fn ip_pair(a: std::net::IpAddr, b: std::net::IpAddr) -> Option<(u128, u128)> {
    use std::net::IpAddr::{V4, V6};
    match (a, b) {
        (V4(a), V4(b)) => Some((u32::from(a) as u128, u32::from(b) as u128)),
        (V6(a), V6(b)) => Some((u128::from(a), u128::from(b))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stamper;
    use std::net::IpAddr;

    fn spec(v4: bool, flows: u32, vary: FlowVary, stamp: bool, len: u16) -> FrameSpec {
        let (s, d): (IpAddr, IpAddr) = if v4 {
            ("10.1.2.3".parse().unwrap(), "10.1.2.4".parse().unwrap())
        } else {
            ("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap())
        };
        FrameSpec {
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_mac: [2, 0, 0, 0, 0, 1],
            src_ip: s,
            dst_ip: d,
            src_port: 65530,
            dst_port: 9000,
            flows,
            vary,
            sizes: SizeSpec::Fixed(len),
            stamp,
        }
    }

    /// What the program computes, done in Rust on the plan's sums: must equal the Stamper's
    /// frame (which computes its checksums another way) for every flow and sequence number.
    fn emulate(frame: &[u8], p: &LivePlan, counter: u64, cpu: u16) -> Vec<u8> {
        let mut f = frame.to_vec();
        let fold = |mut s: u64| {
            while s >> 16 != 0 {
                s = (s & 0xffff) + (s >> 16);
            }
            !(s as u16)
        };
        let mut udp = p.udp_sum as u64;
        let idx = counter % p.flows as u64;
        if p.flows > 1 {
            let step = p.flow_skip.is_some_and(|d| idx >= d as u64) as u64;
            let w = (p.flow_base as u64 + idx + step) & 0xffff;
            udp += w;
            if p.src_ip && p.v4 {
                let c = fold(p.ip_sum as u64 + w);
                f[ETH + 10..ETH + 12].copy_from_slice(&c.to_be_bytes());
            }
            f[p.flow_off..p.flow_off + 2].copy_from_slice(&(w as u16).to_be_bytes());
        }
        if p.stamp {
            let pay = p.l4 + UDP;
            udp += cpu as u64;
            f[pay + 4..pay + 6].copy_from_slice(&cpu.to_be_bytes());
            if p.flows > 1 {
                udp += idx;
                f[pay + 6..pay + 8].copy_from_slice(&(idx as u16).to_be_bytes());
            }
            // The low 48 bits of the counter; flows - 1 at pay + 8 is the template's.
            let seq = counter & 0xffff_ffff_ffff;
            f[pay + 10..pay + 16].copy_from_slice(&seq.to_be_bytes()[2..]);
            for sh in [32, 16, 0] {
                udp += (seq >> sh) & 0xffff;
            }
        }
        if p.writes() {
            let mut c = fold(udp);
            if c == 0 {
                c = 0xffff;
            }
            f[p.l4 + 6..p.l4 + 8].copy_from_slice(&c.to_be_bytes());
        }
        f
    }

    #[test]
    fn plan_sums_reproduce_the_stampers_frames() {
        for v4 in [true, false] {
            for vary in [FlowVary::SrcPort, FlowVary::SrcIp] {
                for stamp in [false, true] {
                    for flows in [1, 7, 64] {
                        let sp = spec(v4, flows, vary, stamp, 128);
                        let (frame, plan) = live_plan(&sp).unwrap();
                        let st = Stamper::new(sp).unwrap();
                        for counter in [0u64, 1, 6, 63, 1 << 20, 0x1234_5678_9abc_def0] {
                            let cpu = (counter % 3) as u16;
                            let mut want = vec![0u8; 128];
                            st.write(
                                &mut want,
                                128,
                                (counter % flows as u64) as u32,
                                cpu,
                                counter,
                            );
                            if !stamp {
                                // Without stamps the Stamper ignores the sequence number.
                                st.write(&mut want, 128, (counter % flows as u64) as u32, 0, 0);
                            }
                            let what =
                                format!("v4 {v4} {vary:?} stamp {stamp} flows {flows} n {counter}");
                            let got = emulate(&frame, &plan, counter, cpu);
                            assert_eq!(got, want, "{what}");
                            // The receive side reads what the engine sent: the stream, the
                            // flow index it tracks per flow, the flow count intact, the
                            // sequence number's low 48 bits (also past 2^48).
                            let s = Stamper::read_stamp_full(&got);
                            if stamp {
                                let s = s.unwrap_or_else(|| panic!("no stamp: {what}"));
                                assert_eq!(s.stream, cpu, "{what}");
                                assert_eq!(s.flow as u64, counter % flows as u64, "{what}");
                                assert_eq!(s.flows, flows, "{what}");
                                assert_eq!(s.seq, counter & 0xffff_ffff_ffff, "{what}");
                            } else {
                                assert!(s.is_none(), "{what}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn ranges_and_jumbo_frames_are_refused_with_the_reason() {
        let mut sp = spec(true, 1, FlowVary::SrcPort, false, 60);
        sp.sizes = SizeSpec::Range(60, 100);
        let e = live_plan(&sp).unwrap_err();
        assert!(e.to_string().contains("fixed --size"), "{e}");
        let sp = spec(true, 1, FlowVary::SrcPort, false, 4000);
        let e = live_plan(&sp).unwrap_err();
        assert!(e.to_string().contains("3072"), "{e}");
    }
}
