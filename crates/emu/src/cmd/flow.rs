//! EX_CREATE_FLOW, EX_DESTROY_FLOW: `ibv_create_flow` rules, decoded from the
//! `ib_uverbs_flow_spec_*` bytes (`rdma/ib_user_verbs.h`) into the model's [`FlowSpec`]s.
//!
//! Kernel: `uverbs_cmd.c: ib_uverbs_ex_create_flow`, `kern_spec_to_ib_spec`,
//! `kern_spec_to_ib_spec_filter` (a filter shorter than the kernel's is zero-extended, a
//! longer one must be zero past it); `mlx5/fs.c: mlx5_ib_create_flow`. libibverbs writes the
//! specs in `cmd_flow.c: ibv_cmd_create_flow` / `ib_spec_to_kern_spec`.

use libc::{EINVAL, ENOMEM, EOPNOTSUPP, EPERM};

use rawq_model::hw::{FlowDesc, FlowSpec, Masked};

use super::{Attrs, CmdResult, Ctx};
use crate::objects::{Flow, Obj};
use crate::rings::hw_errno;
use crate::uapi::*;
use crate::Errno;

/// Spec types (`enum ib_flow_spec_type`, `IBV_FLOW_SPEC_*` in verbs.h).
mod ty {
    pub const ETH: u32 = 0x20;
    pub const IPV4: u32 = 0x30;
    pub const IPV6: u32 = 0x31;
    pub const TCP: u32 = 0x40;
    pub const UDP: u32 = 0x41;
    pub const INNER: u32 = 0x100;
    pub const ACTION_TAG: u32 = 0x1000;
    pub const ACTION_DROP: u32 = 0x1001;
    pub const ACTION_COUNT: u32 = 0x1003;
}
/// `IB_FLOW_ATTR_NORMAL`.
const ATTR_NORMAL: u32 = 0;
/// `IB_FLOW_ATTR_FLAGS_DONT_TRAP`; `IB_FLOW_ATTR_FLAGS_RESERVED` (first unknown bit).
const FLAGS_DONT_TRAP: u32 = 1 << 1;
const FLAGS_RESERVED: u32 = 1 << 3;
/// `MLX5_IB_FLOW_LAST_PRIO` (Linux drivers/infiniband/hw/mlx5/mlx5_ib.h:
/// `MLX5_BY_PASS_NUM_REGULAR_PRIOS - 1`, 16 regular bypass priorities in
/// include/linux/mlx5/device.h).
const LAST_PRIO: u16 = 15;
/// `IB_FLOW_SPEC_SUPPORT_LAYERS`.
const MAX_SPECS: u8 = 10;
/// Kernel filter sizes (`offsetof(struct ib_flow_*_filter, real_sz)`).
const ETH_SZ: usize = 16;
const IPV4_SZ: usize = 12;
const IPV6_SZ: usize = 40;
const L4_SZ: usize = 4;

/// The value and mask halves of a filter spec, zero-extended to `want` bytes.
fn filter(body: &[u8], want: usize) -> Result<(Vec<u8>, Vec<u8>), Errno> {
    if body.is_empty() || !body.len().is_multiple_of(2) {
        return Err(EINVAL);
    }
    let half = body.len() / 2;
    let (v, m) = body.split_at(half);
    if half > want && (v[want..].iter().any(|&b| b != 0) || m[want..].iter().any(|&b| b != 0)) {
        return Err(EINVAL);
    }
    let ext = |s: &[u8]| {
        let mut x = s[..half.min(want)].to_vec();
        x.resize(want, 0);
        x
    };
    Ok((ext(v), ext(m)))
}

fn be16(b: &[u8], o: usize) -> u16 {
    u16::from_be_bytes([b[o], b[o + 1]])
}

fn arr<const N: usize>(b: &[u8], o: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[o..o + N]);
    a
}

/// Linux drivers/infiniband/hw/mlx5/fs.c `mlx5_ib_create_flow`: a priority above
/// [`LAST_PRIO`] is ENOMEM (the driver has no flow table for it), before its other checks.
fn check_priority(priority: u16) -> Result<(), Errno> {
    if priority > LAST_PRIO {
        return Err(ENOMEM);
    }
    Ok(())
}

/// Decodes `num` specs from `bytes` (exactly `flow_attr.size` bytes).
///
/// # Errors
/// EINVAL for malformed specs or leftover bytes, EOPNOTSUPP for spec types the device does not
/// match on (inner headers, tunnels, ESP, MPLS, counters, flow-action handles).
pub fn decode_specs(bytes: &[u8], num: u8) -> Result<Vec<FlowSpec>, Errno> {
    match decode_specs_counted(bytes, num)? {
        (specs, None) => Ok(specs),
        (_, Some(_)) => Err(EOPNOTSUPP),
    }
}

/// As [`decode_specs`], also taking one `IBV_FLOW_SPEC_ACTION_COUNT` spec: the handle of the
/// counters object it names (`ib_uverbs_flow_spec_action_count`: hdr, handle, reserved1;
/// uverbs_cmd.c `kern_spec_to_ib_spec_action` looks the object up; mlx5 fs.c
/// `parse_flow_attr` refuses a set `reserved` with EOPNOTSUPP). A second count spec is EINVAL
/// (libmlx5 verbs.c `get_flow_mcounters`: one counters object per flow).
///
/// # Errors
/// As [`decode_specs`].
pub fn decode_specs_counted(
    mut bytes: &[u8],
    num: u8,
) -> Result<(Vec<FlowSpec>, Option<u32>), Errno> {
    let mut out = Vec::with_capacity(num as usize);
    let mut counters = None;
    for _ in 0..num {
        if bytes.len() < 8 {
            return Err(EINVAL);
        }
        let kind = u32::from_ne_bytes(arr(bytes, 0));
        let size = u16::from_ne_bytes(arr(bytes, 4)) as usize;
        let reserved = u16::from_ne_bytes(arr(bytes, 6));
        if size < 8 || size > bytes.len() || reserved != 0 {
            return Err(EINVAL);
        }
        let body = &bytes[8..size];
        bytes = &bytes[size..];
        if kind & ty::INNER != 0 {
            return Err(EOPNOTSUPP);
        }
        let spec = match kind {
            ty::ETH => {
                let (v, m) = filter(body, ETH_SZ)?;
                FlowSpec::Eth {
                    dst: Masked {
                        value: arr(&v, 0),
                        mask: arr(&m, 0),
                    },
                    src: Masked {
                        value: arr(&v, 6),
                        mask: arr(&m, 6),
                    },
                    ether_type: Masked {
                        value: be16(&v, 12),
                        mask: be16(&m, 12),
                    },
                    vlan_tag: Masked {
                        value: be16(&v, 14),
                        mask: be16(&m, 14),
                    },
                }
            }
            ty::IPV4 => {
                let (v, m) = filter(body, IPV4_SZ)?;
                // fs.c `parse_flow_attr`: FIELDS_NOT_SUPPORTED(mask, LAST_IPV4_FIELD = tos):
                // ttl (byte 10) and flags (byte 11) cannot be matched.
                if m[10..].iter().any(|&b| b != 0) {
                    return Err(EOPNOTSUPP);
                }
                FlowSpec::Ipv4 {
                    src: Masked {
                        value: arr(&v, 0),
                        mask: arr(&m, 0),
                    },
                    dst: Masked {
                        value: arr(&v, 4),
                        mask: arr(&m, 4),
                    },
                    proto: Masked {
                        value: v[8],
                        mask: m[8],
                    },
                    tos: Masked {
                        value: v[9],
                        mask: m[9],
                    },
                }
            }
            ty::IPV6 => {
                let (v, m) = filter(body, IPV6_SZ)?;
                // FIELDS_NOT_SUPPORTED(mask, LAST_IPV6_FIELD = traffic_class): the hop limit
                // (byte 38) and the padding after it cannot be matched (kernels whose filter
                // still ends in `real_sz` answer EINVAL for the padding byte instead).
                if m[38..].iter().any(|&b| b != 0) {
                    return Err(EOPNOTSUPP);
                }
                FlowSpec::Ipv6 {
                    src: Masked {
                        value: arr(&v, 0),
                        mask: arr(&m, 0),
                    },
                    dst: Masked {
                        value: arr(&v, 16),
                        mask: arr(&m, 16),
                    },
                    next_hdr: Masked {
                        value: v[36],
                        mask: m[36],
                    },
                    // ib_uverbs_flow_ipv6_filter: flow_label (be32) at 32, traffic_class at 37.
                    flow_label: Masked {
                        value: u32::from_be_bytes(arr(&v, 32)),
                        mask: u32::from_be_bytes(arr(&m, 32)),
                    },
                    traffic_class: Masked {
                        value: v[37],
                        mask: m[37],
                    },
                }
            }
            ty::TCP | ty::UDP => {
                let (v, m) = filter(body, L4_SZ)?;
                // ib_uverbs_flow_tcp_udp_filter: dst_port first.
                let dst = Masked {
                    value: be16(&v, 0),
                    mask: be16(&m, 0),
                };
                let src = Masked {
                    value: be16(&v, 2),
                    mask: be16(&m, 2),
                };
                if kind == ty::TCP {
                    FlowSpec::Tcp { src, dst }
                } else {
                    FlowSpec::Udp { src, dst }
                }
            }
            ty::ACTION_TAG => {
                // ib_uverbs_flow_spec_action_tag: hdr, tag_id, reserved1.
                if body.len() < 8 || u32::from_ne_bytes(arr(body, 4)) != 0 {
                    return Err(EINVAL);
                }
                FlowSpec::Tag(u32::from_ne_bytes(arr(body, 0)))
            }
            ty::ACTION_DROP => {
                if !body.is_empty() {
                    return Err(EINVAL);
                }
                FlowSpec::Drop
            }
            ty::ACTION_COUNT => {
                if body.len() != 8 || counters.is_some() {
                    return Err(EINVAL);
                }
                if u32::from_ne_bytes(arr(body, 4)) != 0 {
                    return Err(EOPNOTSUPP);
                }
                counters = Some(u32::from_ne_bytes(arr(body, 0)));
                continue;
            }
            0x32 | 0x34 | 0x50 | 0x51 | 0x60 | 0x1002 => return Err(EOPNOTSUPP),
            _ => return Err(EINVAL),
        };
        out.push(spec);
    }
    if !bytes.is_empty() {
        return Err(EINVAL);
    }
    Ok((out, counters))
}

/// The counters descriptions of the create_flow udata (`struct mlx5_ib_create_flow`:
/// `ncounters_data`, reserved, then that many `mlx5_ib_flow_counters_data` {pointer to
/// `mlx5_ib_flow_counters_desc` {description, index} pairs, ncounters, reserved}), checked as
/// Linux drivers/infiniband/hw/mlx5/fs.c `mlx5_ib_create_flow` does: udata shorter than the
/// 8-byte header is EOPNOTSUPP, more than one counters data EINVAL, non-zero bytes past them
/// EOPNOTSUPP; counters.c `mlx5_ib_flow_counters_set_data`: more than `MAX_COUNTERS_NUM`
/// descriptions EINVAL, an unreadable array EFAULT. `None`: no descriptions passed.
fn counters_udata(drv_in: &[u8]) -> Result<Option<Vec<(u32, u32)>>, Errno> {
    if drv_in.is_empty() {
        return Ok(None);
    }
    if drv_in.len() < 8 {
        return Err(EOPNOTSUPP);
    }
    let n = u32::from_ne_bytes(arr(drv_in, 0));
    if n > 1 {
        return Err(EINVAL);
    }
    let need = 8 + 16 * n as usize;
    if drv_in.len() > need && drv_in[need..].iter().any(|&b| b != 0) {
        return Err(EOPNOTSUPP);
    }
    if n == 0 {
        return Ok(None);
    }
    let ptr = super::u64_at(drv_in, 8);
    let count = u32::from_ne_bytes(arr_or_zero(drv_in, 16));
    if count > super::counters::MAX_DESCRIPTIONS {
        return Err(EINVAL);
    }
    let raw = crate::umem::copy_from_user(ptr, 8 * count as usize).map_err(|_| libc::EFAULT)?;
    Ok(Some(
        raw.chunks_exact(8)
            .map(|d| (u32::from_ne_bytes(arr(d, 0)), u32::from_ne_bytes(arr(d, 4))))
            .collect(),
    ))
}

/// Four bytes at `o` of `b`, zero where `b` is short.
fn arr_or_zero(b: &[u8], o: usize) -> [u8; 4] {
    let mut a = [0u8; 4];
    for (i, x) in a.iter_mut().enumerate() {
        *x = b.get(o + i).copied().unwrap_or(0);
    }
    a
}

pub(super) fn create_flow(c: &mut Ctx<'_>, a: &Attrs) -> CmdResult {
    let fixed = std::mem::size_of::<ib_uverbs_create_flow>();
    let req: ib_uverbs_create_flow = crate::uapi::from_prefix(&a.core_in);
    let at = &req.flow_attr;
    if req.comp_mask != 0 {
        return Err(EINVAL);
    }
    if !crate::sys::has_net_raw() {
        return Err(EPERM);
    }
    if at.flags >= FLAGS_RESERVED {
        return Err(EINVAL);
    }
    if at.num_of_specs > MAX_SPECS {
        return Err(EINVAL);
    }
    let specs_len = a.core_in.len().saturating_sub(fixed);
    if usize::from(at.size) > specs_len || at.reserved != [0, 0] {
        return Err(EINVAL);
    }
    let descriptions = counters_udata(&a.drv_in)?;
    let qp = c.file.objs.qp(req.qp_handle)?.clone();
    let (specs, counters) = decode_specs_counted(
        &a.core_in[fixed..fixed + usize::from(at.size)],
        at.num_of_specs,
    )?;
    check_priority(at.priority)?;
    // Only NORMAL rules (no default/sniffer rules) on the one port.
    if at.type_ != ATTR_NORMAL {
        return Err(EOPNOTSUPP);
    }
    if at.port != 1 {
        return Err(EINVAL);
    }
    // A rule steers to the QP's TIR: a send-only QP cannot take one, except a drop rule, which
    // has no destination (fs.c `mlx5_ib_create_flow` takes the RQ's TIR number, 0 without an
    // RQ; `_create_flow_rule` gives a DROP action no destination).
    let tirn = match qp.tirn {
        Some(t) => t,
        None if specs.contains(&FlowSpec::Drop) => 0,
        None => return Err(EINVAL),
    };
    // fs.c `_create_flow_rule`: a COUNT action binds the object before the rule is written.
    if let Some(h) = counters {
        super::counters::check_bind(c, h, descriptions.as_deref())?;
    }
    let desc = FlowDesc {
        tirn,
        priority: at.priority,
        dont_trap: at.flags & FLAGS_DONT_TRAP != 0,
        specs,
    };
    c.dev.log(format_args!("CREATE_FLOW {desc:?}"));
    let id = match c.dev.hw() {
        Some(hw) if qp.on_hw => Some(hw.create_flow(desc).map_err(|e| hw_errno(&e))?),
        _ => None,
    };
    let h = match c.file.objs.insert(Obj::Flow(Flow {
        qp: req.qp_handle,
        id,
        counters,
    })) {
        Ok(h) => h,
        Err(e) => {
            if let (Some(id), Some(hw)) = (id, c.dev.hw()) {
                let _ = hw.destroy_flow(id);
            }
            return Err(e);
        }
    };
    if let Some(ch) = counters {
        super::counters::bind(c, ch, descriptions, id);
    }
    let r = ib_uverbs_create_flow_resp {
        comp_mask: 0,
        flow_handle: h,
    };
    a.response(&r).inspect_err(|_| destroy(c, h))
}

pub(super) fn destroy_flow(c: &mut Ctx<'_>, a: &Attrs) -> CmdResult {
    let req: ib_uverbs_destroy_flow = a.request()?;
    if req.comp_mask != 0 {
        return Err(EINVAL);
    }
    c.file
        .objs
        .check_destroy(req.flow_handle, |o| matches!(o, Obj::Flow(_)))?;
    destroy(c, req.flow_handle);
    Ok(())
}

/// Removes a flow from the table and the model.
pub(super) fn destroy(c: &mut Ctx<'_>, h: u32) {
    // Its counters keep what it counted, read before the device flow goes.
    if let Ok(&Flow {
        counters: Some(ch),
        id,
        ..
    }) = c.file.objs.flow(h)
    {
        super::counters::unbind(c, ch, id);
    }
    if let Some(Obj::Flow(f)) = c.file.objs.remove(h) {
        if let (Some(id), Some(hw)) = (f.id, c.dev.hw()) {
            let _ = hw.destroy_flow(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: u32, body: &[u8]) -> Vec<u8> {
        let mut v = kind.to_ne_bytes().to_vec();
        v.extend(((8 + body.len()) as u16).to_ne_bytes());
        v.extend([0, 0]);
        v.extend(body);
        v
    }

    #[test]
    fn udp_dst_port_and_drop() {
        // val {dst 9000, src 0}, mask {dst ffff, src 0}
        let mut b = spec(ty::UDP, &[0x23, 0x28, 0, 0, 0xff, 0xff, 0, 0]);
        b.extend(spec(ty::ACTION_DROP, &[]));
        let s = decode_specs(&b, 2).unwrap();
        assert_eq!(
            s[0],
            FlowSpec::Udp {
                src: Masked { value: 0, mask: 0 },
                dst: Masked {
                    value: 9000,
                    mask: 0xffff
                }
            }
        );
        assert_eq!(s[1], FlowSpec::Drop);
    }

    #[test]
    fn short_ipv4_filter_is_zero_extended_long_must_be_zero() {
        // libibverbs' plain IPV4 spec carries only src and dst (8 bytes each half).
        let mut body = vec![10, 0, 0, 1, 10, 0, 0, 2];
        body.extend([255, 255, 255, 255, 0, 0, 0, 0]);
        let s = decode_specs(&spec(ty::IPV4, &body), 1).unwrap();
        let FlowSpec::Ipv4 {
            src, dst, proto, ..
        } = &s[0]
        else {
            panic!("{s:?}")
        };
        assert_eq!(src.value, [10, 0, 0, 1]);
        assert_eq!(dst.mask, [0; 4]);
        assert_eq!(proto.mask, 0);
        let mut long = vec![0u8; 2 * (L4_SZ + 4)];
        long[L4_SZ] = 1;
        assert_eq!(decode_specs(&spec(ty::TCP, &long), 1), Err(EINVAL));
    }

    /// fs.c `mlx5_ib_create_flow`: `flow_attr->priority > MLX5_IB_FLOW_LAST_PRIO` -> ENOMEM.
    #[test]
    fn priority_above_15_is_enomem() {
        assert_eq!(check_priority(0), Ok(()));
        assert_eq!(check_priority(15), Ok(()));
        assert_eq!(check_priority(16), Err(ENOMEM));
        assert_eq!(check_priority(u16::MAX), Err(ENOMEM));
    }

    /// mlx5 core fs_core.c `check_conflicting_ftes`: the model's refusal of a second flow with
    /// the same match, another tag, in one table reaches the application as EEXIST.
    #[test]
    fn a_conflicting_duplicate_flow_is_eexist() {
        let e = rawq_model::Error::Os {
            op: "model create_flow",
            source: std::io::Error::from_raw_os_error(libc::EEXIST),
        };
        assert_eq!(hw_errno(&e), libc::EEXIST);
    }

    /// fs.c `parse_flow_attr`: `FIELDS_NOT_SUPPORTED(ipv4.mask, LAST_IPV4_FIELD)` (tos) and
    /// `(ipv6.mask, LAST_IPV6_FIELD)` (traffic_class): a mask on the IPv4 ttl or flags, or on the
    /// IPv6 hop limit (or the padding byte after it), is EOPNOTSUPP.
    #[test]
    fn ttl_flags_and_hop_limit_masks_are_eopnotsupp() {
        let v4 = |mask_byte: usize| {
            let mut body = vec![0u8; 2 * IPV4_SZ];
            body[IPV4_SZ + mask_byte] = 0xff;
            decode_specs(&spec(ty::IPV4, &body), 1)
        };
        assert!(v4(9).is_ok(), "tos is matched");
        assert_eq!(v4(10), Err(EOPNOTSUPP), "ttl");
        assert_eq!(v4(11), Err(EOPNOTSUPP), "flags");
        let v6 = |mask_byte: usize| {
            let mut body = vec![0u8; 2 * 40];
            body[40 + mask_byte] = 0xff;
            decode_specs(&spec(ty::IPV6, &body), 1)
        };
        assert!(v6(37).is_ok(), "traffic class is matched");
        assert_eq!(v6(38), Err(EOPNOTSUPP), "hop limit");
        assert_eq!(v6(39), Err(EOPNOTSUPP), "padding");
    }

    /// uverbs_cmd.c `kern_spec_to_ib_spec_action` / mlx5 fs.c `parse_flow_attr`: a count spec
    /// names a counters object and reaches no match; `decode_specs` (no counters) refuses it.
    #[test]
    fn count_spec_names_the_counters_object() {
        let mut b = spec(ty::UDP, &[0x23, 0x29, 0, 0, 0xff, 0xff, 0, 0]);
        b.extend(spec(ty::ACTION_COUNT, &[7, 0, 0, 0, 0, 0, 0, 0]));
        let (s, c) = decode_specs_counted(&b, 2).unwrap();
        assert_eq!((s.len(), c), (1, Some(7)));
        assert_eq!(decode_specs(&b, 2), Err(EOPNOTSUPP));
        let mut two = b.clone();
        two.extend(spec(ty::ACTION_COUNT, &[8, 0, 0, 0, 0, 0, 0, 0]));
        assert_eq!(
            decode_specs_counted(&two, 3),
            Err(EINVAL),
            "two count specs"
        );
        let reserved = spec(ty::ACTION_COUNT, &[7, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(decode_specs_counted(&reserved, 1), Err(EOPNOTSUPP));
        assert_eq!(
            decode_specs_counted(&spec(ty::ACTION_COUNT, &[7, 0, 0, 0]), 1),
            Err(EINVAL),
            "short"
        );
    }

    /// fs.c `mlx5_ib_create_flow`: the udata header, one counters data at most, zeros after.
    #[test]
    fn counters_udata_checks() {
        assert_eq!(counters_udata(&[]), Ok(None));
        assert_eq!(counters_udata(&[0; 4]), Err(EOPNOTSUPP));
        assert_eq!(counters_udata(&[0; 8]), Ok(None));
        let mut two = vec![0u8; 8 + 32];
        two[0] = 2;
        assert_eq!(counters_udata(&two), Err(EINVAL));
        let mut extra = vec![0u8; 8 + 16 + 8];
        extra[0] = 1;
        extra[30] = 1;
        assert_eq!(counters_udata(&extra), Err(EOPNOTSUPP));
        let descs: [u32; 4] = [0, 1, 0, 0];
        let mut one = vec![0u8; 8 + 16];
        one[0] = 1;
        one[8..16].copy_from_slice(&(descs.as_ptr() as u64).to_ne_bytes());
        one[16] = 2;
        assert_eq!(counters_udata(&one), Ok(Some(vec![(0, 1), (0, 0)])));
        one[16..20].copy_from_slice(&(super::super::counters::MAX_DESCRIPTIONS + 1).to_ne_bytes());
        assert_eq!(counters_udata(&one), Err(EINVAL));
    }

    #[test]
    fn malformed() {
        assert_eq!(decode_specs(&[0; 4], 1), Err(EINVAL));
        assert_eq!(decode_specs(&spec(0x7a, &[0; 8]), 1), Err(EINVAL));
        assert_eq!(
            decode_specs(&spec(ty::UDP | ty::INNER, &[0; 8]), 1),
            Err(EOPNOTSUPP)
        );
        // leftover bytes after the declared specs
        let mut b = spec(ty::ACTION_DROP, &[]);
        b.extend([0; 8]);
        assert_eq!(decode_specs(&b, 1), Err(EINVAL));
    }
}
