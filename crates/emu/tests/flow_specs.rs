//! The `ib_uverbs_flow_spec_*` decoder (EX_CREATE_FLOW) on arbitrary bytes: it never panics,
//! and specs laid out as `ib_user_verbs.h` defines them (value half, then mask half, network
//! byte order) decode to what was encoded.

use proptest::prelude::*;
use rawq_emu::cmd::flow::decode_specs;
use rawq_model::hw::{FlowSpec, Masked};

fn spec(kind: u32, body: &[u8]) -> Vec<u8> {
    let mut v = kind.to_ne_bytes().to_vec();
    v.extend(((8 + body.len()) as u16).to_ne_bytes());
    v.extend([0, 0]);
    v.extend(body);
    v
}

/// Encodes a spec as libibverbs' `ib_spec_to_kern_spec` writes it (kernel filter sizes).
fn encode(s: &FlowSpec) -> Vec<u8> {
    match s {
        FlowSpec::Eth {
            dst,
            src,
            ether_type,
            vlan_tag,
        } => {
            let half = |d: [u8; 6], s: [u8; 6], e: u16, v: u16| {
                let mut b = d.to_vec();
                b.extend(s);
                b.extend(e.to_be_bytes());
                b.extend(v.to_be_bytes());
                b
            };
            let mut body = half(dst.value, src.value, ether_type.value, vlan_tag.value);
            body.extend(half(dst.mask, src.mask, ether_type.mask, vlan_tag.mask));
            spec(0x20, &body)
        }
        FlowSpec::Ipv4 {
            src,
            dst,
            proto,
            tos,
        } => {
            let half = |s: [u8; 4], d: [u8; 4], p: u8, t: u8| {
                let mut b = s.to_vec();
                b.extend(d);
                b.extend([p, t, 0, 0]);
                b
            };
            let mut body = half(src.value, dst.value, proto.value, tos.value);
            body.extend(half(src.mask, dst.mask, proto.mask, tos.mask));
            spec(0x30, &body)
        }
        FlowSpec::Ipv6 {
            src,
            dst,
            next_hdr,
            flow_label,
            traffic_class,
        } => {
            let half = |s: [u8; 16], d: [u8; 16], n: u8, l: u32, c: u8| {
                let mut b = s.to_vec();
                b.extend(d);
                b.extend(l.to_be_bytes());
                b.extend([n, c, 0, 0]);
                b
            };
            let mut body = half(
                src.value,
                dst.value,
                next_hdr.value,
                flow_label.value,
                traffic_class.value,
            );
            body.extend(half(
                src.mask,
                dst.mask,
                next_hdr.mask,
                flow_label.mask,
                traffic_class.mask,
            ));
            spec(0x31, &body)
        }
        FlowSpec::Tcp { src, dst } | FlowSpec::Udp { src, dst } => {
            let kind = if matches!(s, FlowSpec::Tcp { .. }) {
                0x40
            } else {
                0x41
            };
            let mut body = dst.value.to_be_bytes().to_vec();
            body.extend(src.value.to_be_bytes());
            body.extend(dst.mask.to_be_bytes());
            body.extend(src.mask.to_be_bytes());
            spec(kind, &body)
        }
        FlowSpec::Tag(t) => {
            let mut body = t.to_ne_bytes().to_vec();
            body.extend([0; 4]);
            spec(0x1000, &body)
        }
        FlowSpec::Drop => spec(0x1001, &[]),
    }
}

fn masked<T: std::fmt::Debug + Clone + Default + 'static>(
    s: impl Strategy<Value = T> + Clone,
) -> impl Strategy<Value = Masked<T>> {
    (s.clone(), s).prop_map(|(value, mask)| Masked { value, mask })
}

fn any_spec() -> impl Strategy<Value = FlowSpec> {
    prop_oneof![
        (
            masked(any::<[u8; 6]>()),
            masked(any::<[u8; 6]>()),
            masked(any::<u16>()),
            masked(any::<u16>())
        )
            .prop_map(|(dst, src, ether_type, vlan_tag)| FlowSpec::Eth {
                dst,
                src,
                ether_type,
                vlan_tag
            }),
        (
            masked(any::<[u8; 4]>()),
            masked(any::<[u8; 4]>()),
            masked(any::<u8>()),
            masked(any::<u8>())
        )
            .prop_map(|(src, dst, proto, tos)| FlowSpec::Ipv4 {
                src,
                dst,
                proto,
                tos
            }),
        (
            masked(any::<[u8; 16]>()),
            masked(any::<[u8; 16]>()),
            masked(any::<u8>()),
            masked(any::<u32>()),
            masked(any::<u8>())
        )
            .prop_map(
                |(src, dst, next_hdr, flow_label, traffic_class)| FlowSpec::Ipv6 {
                    src,
                    dst,
                    next_hdr,
                    flow_label,
                    traffic_class
                }
            ),
        (masked(any::<u16>()), masked(any::<u16>()))
            .prop_map(|(src, dst)| FlowSpec::Tcp { src, dst }),
        (masked(any::<u16>()), masked(any::<u16>()))
            .prop_map(|(src, dst)| FlowSpec::Udp { src, dst }),
        any::<u32>().prop_map(FlowSpec::Tag),
        Just(FlowSpec::Drop),
    ]
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300), n in 0u8..12) {
        let _ = decode_specs(&bytes, n);
    }

    #[test]
    fn encoded_specs_decode_to_themselves(specs in proptest::collection::vec(any_spec(), 0..6)) {
        let bytes: Vec<u8> = specs.iter().flat_map(encode).collect();
        prop_assert_eq!(decode_specs(&bytes, specs.len() as u8), Ok(specs));
    }

    #[test]
    fn a_truncated_rule_is_einval(specs in proptest::collection::vec(any_spec(), 1..6), cut in 1usize..8) {
        let bytes: Vec<u8> = specs.iter().flat_map(encode).collect();
        let cut = cut.min(bytes.len());
        prop_assert_eq!(
            decode_specs(&bytes[..bytes.len() - cut], specs.len() as u8),
            Err(libc::EINVAL)
        );
    }
}
