//! The text form of a flow rule: `"udp dst-port 9000 ipv4 dst 10.0.0.0/24 -> queue 1".parse()`.
//!
//! [`Rule`] implements [`FromStr`] and [`Display`](fmt::Display); what `Display` prints parses
//! back to an equal rule.
//!
//! # Grammar
//!
//! A rule is a list of whitespace-separated tokens: match clauses, then `->`, then one action.
//! Keywords are lower case.
//!
//! ```text
//! rule        = clause* "->" action
//! clause      = "prio" NUM                           priority, 0-15, lower first (default 0)
//!             | "promiscuous"                        take every frame (explicit opt-in)
//!             | "eth" mac-field+                     MAC addresses
//!             | "vlan" NUM                           802.1Q VLAN id, 0-4095
//!             | "ethertype" NUM                      type after the VLAN tag, e.g. 0x88f7
//!             | "ipv4" ip-field*                     IPv4, optionally with prefixes
//!             | "ipv6" ip-field*                     IPv6, optionally with prefixes
//!             | "proto" NUM                          IPv4 protocol / IPv6 next header, 0-255
//!             | "udp" | "tcp"                        transport protocol
//!             | ("src-port" | "dst-port") NUM        port, 0-65535; needs udp/tcp before it
//! mac-field   = ("src" | "dst") MAC ["/" MAC]        02:00:00:00:00:01/ff:ff:ff:00:00:00
//! ip-field    = ("src" | "dst") ADDR ["/" LEN]       10.0.0.0/24, 2001:db8::/32
//! action      = "queue" NUM                          one queue
//!             | "rss" NUM ("," NUM)*                 spread over queues by RSS: rss 0,1,2,3
//!             | "drop"
//! ```
//!
//! * `NUM` is decimal, or hexadecimal with a `0x` prefix.
//! * `src` / `dst` belong to the nearest `eth`, `ipv4` or `ipv6` before them, so
//!   `ipv4 src 10.0.0.1 dst 10.0.0.2` sets both addresses. An address without `/LEN` is exact
//!   (/32, /128); a MAC without a mask is exact (`/ff:ff:ff:ff:ff:ff`).
//! * Clauses may come in any order, as long as `src-port` / `dst-port` come after `udp` or
//!   `tcp` (`udp dst-port 9000 ipv4 dst 10.0.0.0/24` is fine). A keyword may repeat
//!   (`ipv4 src A ipv4 dst B`), a field may not be set twice.
//! * Contradictions the [`Rule`] type cannot hold are parse errors that name the field: `ipv4`
//!   with `ipv6`, `udp` with `tcp`, a port before `udp`/`tcp`. Contradictions it can hold
//!   (`ethertype 0x0806 ipv4`, a queue the port lacks, a rule without any clause) parse, and are
//!   reported by [`Rule::validate`].
//!
//! Examples:
//!
//! ```
//! use rawq::flow::{Action, Rule};
//! let r: Rule = "prio 10 eth dst 02:00:00:00:00:01 vlan 5 ipv4 src 10.0.0.0/24 dst 10.0.0.2 \
//!                udp src-port 5 dst-port 9000 -> queue 1".parse()?;
//! assert_eq!(r.priority, 10);
//! let r: Rule = "tcp dst-port 80 -> rss 0,1,2,3".parse()?;
//! assert_eq!(r.action, Action::Rss(vec![0, 1, 2, 3]));
//! let r: Rule = "ethertype 0x88f7 -> drop".parse()?;
//! assert_eq!(r.to_string().parse::<Rule>()?, r);
//! let r: Rule = "eth dst 01:00:5e:00:00:00/ff:ff:ff:80:00:00 -> queue 0".parse()?;
//! let r: Rule = "promiscuous -> queue 0".parse()?;
//! assert!(r.validate(1).is_ok());
//! # Ok::<(), rawq::flow::RuleError>(())
//! ```
//!
//! A parse error says which token is wrong and what was expected:
//!
//! ```
//! use rawq::flow::{Rule, RuleError};
//! let e = "udp dst-port 70000 -> queue 1".parse::<Rule>().unwrap_err();
//! assert_eq!(
//!     e,
//!     RuleError::Parse {
//!         index: 2,
//!         token: "70000".into(),
//!         reason: "expected a port number 0-65535".into(),
//!     }
//! );
//! ```

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use super::{
    Action, IpMatch, Ipv4Net, Ipv6Net, L4Match, L4Proto, Mac, MacMatch, Pattern, Rule, RuleError,
    MAX_PRIORITY,
};

/// The keyword whose `src` / `dst` fields follow.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ctx {
    None,
    Eth,
    Ipv4,
    Ipv6,
}

struct Parser<'a> {
    toks: Vec<&'a str>,
    pos: usize,
}

/// Parses an unsigned number, decimal or `0x` hexadecimal, digits only (no sign, no spaces).
fn number(tok: &str) -> Option<u64> {
    let (digits, radix) = match tok.strip_prefix("0x").or_else(|| tok.strip_prefix("0X")) {
        Some(h) => (h, 16),
        None => (tok, 10),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix).ok()
}

fn mac(s: &str) -> Option<Mac> {
    let mut out = [0u8; 6];
    let mut parts = s.split(':');
    for b in out.iter_mut() {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 2 || !p.chars().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    match parts.next() {
        None => Some(out),
        Some(_) => None,
    }
}

fn mac_match(tok: &str) -> Option<MacMatch> {
    match tok.split_once('/') {
        Some((a, m)) => Some(MacMatch {
            addr: mac(a)?,
            mask: mac(m)?,
        }),
        None => Some(MacMatch::exact(mac(tok)?)),
    }
}

/// `ADDR[/LEN]` with `LEN <= max`.
fn prefix<A: FromStr>(tok: &str, max: u8) -> Option<(A, u8)> {
    let (a, len) = match tok.split_once('/') {
        Some((a, l)) => {
            if l.is_empty() || l.len() > 3 || !l.chars().all(|c| c.is_ascii_digit()) {
                return None;
            }
            (a, l.parse::<u8>().ok().filter(|&l| l <= max)?)
        }
        None => (tok, max),
    };
    Some((a.parse().ok()?, len))
}

fn keyword_name(k: L4Proto) -> &'static str {
    match k {
        L4Proto::Udp => "udp",
        L4Proto::Tcp => "tcp",
    }
}

impl<'a> Parser<'a> {
    fn err(&self, index: usize, reason: impl Into<String>) -> RuleError {
        RuleError::Parse {
            index,
            token: self.toks.get(index).copied().unwrap_or("").to_string(),
            reason: reason.into(),
        }
    }

    fn next(&mut self) -> Option<&'a str> {
        let t = self.toks.get(self.pos).copied();
        if t.is_some() {
            self.pos += 1;
        }
        t
    }

    /// The next token as a number `<= max`; `what` completes "expected ...".
    fn num(&mut self, max: u64, what: &str) -> Result<u64, RuleError> {
        let i = self.pos;
        match self.next().and_then(number) {
            Some(n) if n <= max => Ok(n),
            _ => Err(self.err(i, format!("expected {what}"))),
        }
    }

    /// Fails at token `i` if `already` is set.
    fn once<T>(&self, already: &Option<T>, i: usize, field: &str) -> Result<(), RuleError> {
        match already {
            Some(_) => Err(self.err(i, format!("`{field}` is given twice"))),
            None => Ok(()),
        }
    }

    fn rule(&mut self) -> Result<Rule, RuleError> {
        let mut p = Pattern::default();
        let mut priority: Option<u16> = None;
        let mut ctx = Ctx::None;
        loop {
            let i = self.pos;
            let Some(tok) = self.next() else {
                return Err(self.err(i, "expected a match clause or `->` and an action"));
            };
            let mut next_ctx = Ctx::None;
            match tok {
                "->" => break,
                "prio" => {
                    self.once(&priority, i, "prio")?;
                    priority = Some(self.num(
                        MAX_PRIORITY.into(),
                        "a priority 0-15 (mlx5 refuses higher ones)",
                    )? as u16);
                }
                "promiscuous" => {
                    if p.promiscuous {
                        return Err(self.err(i, "`promiscuous` is given twice"));
                    }
                    p.promiscuous = true;
                }
                "eth" => {
                    if !matches!(self.toks.get(self.pos), Some(&"src") | Some(&"dst")) {
                        return Err(self.err(self.pos, "expected `src` or `dst` after `eth`"));
                    }
                    next_ctx = Ctx::Eth;
                }
                "vlan" => {
                    self.once(&p.vlan, i, "vlan")?;
                    p.vlan = Some(self.num(4095, "a VLAN id 0-4095")? as u16);
                }
                "ethertype" => {
                    self.once(&p.ethertype, i, "ethertype")?;
                    p.ethertype = Some(self.num(0xffff, "an ethertype 0-0xffff")? as u16);
                }
                "ipv4" => {
                    match p.ip {
                        Some(IpMatch::V6 { .. }) => {
                            return Err(self.err(
                                i,
                                "`ipv4` contradicts the `ipv6` before it: a rule matches one IP \
                                 version",
                            ))
                        }
                        Some(IpMatch::V4 { .. }) => {}
                        None => {
                            p.ip = Some(IpMatch::V4 {
                                src: None,
                                dst: None,
                            })
                        }
                    }
                    next_ctx = Ctx::Ipv4;
                }
                "ipv6" => {
                    match p.ip {
                        Some(IpMatch::V4 { .. }) => {
                            return Err(self.err(
                                i,
                                "`ipv6` contradicts the `ipv4` before it: a rule matches one IP \
                                 version",
                            ))
                        }
                        Some(IpMatch::V6 { .. }) => {}
                        None => {
                            p.ip = Some(IpMatch::V6 {
                                src: None,
                                dst: None,
                            })
                        }
                    }
                    next_ctx = Ctx::Ipv6;
                }
                "proto" => {
                    self.once(&p.ip_proto, i, "proto")?;
                    p.ip_proto = Some(self.num(255, "an IP protocol number 0-255")? as u8);
                }
                "udp" | "tcp" => {
                    let proto = if tok == "udp" {
                        L4Proto::Udp
                    } else {
                        L4Proto::Tcp
                    };
                    match p.l4 {
                        Some(l4) if l4.proto != proto => {
                            return Err(self.err(
                                i,
                                format!(
                                    "`{tok}` contradicts the `{}` before it: a rule matches one \
                                     transport protocol",
                                    keyword_name(l4.proto)
                                ),
                            ))
                        }
                        Some(_) => {}
                        None => {
                            p.l4 = Some(L4Match {
                                proto,
                                src_port: None,
                                dst_port: None,
                            })
                        }
                    }
                }
                "src-port" | "dst-port" => {
                    let Some(l4) = p.l4.as_mut() else {
                        return Err(self.err(i, format!("`{tok}` needs `udp` or `tcp` before it")));
                    };
                    let slot = if tok == "src-port" {
                        &mut l4.src_port
                    } else {
                        &mut l4.dst_port
                    };
                    if slot.is_some() {
                        return Err(self.err(i, format!("`{tok}` is given twice")));
                    }
                    let j = self.pos;
                    let port = match self.next().and_then(number) {
                        Some(n) if n <= 0xffff => n as u16,
                        _ => return Err(self.err(j, "expected a port number 0-65535")),
                    };
                    *slot = Some(port);
                }
                "src" | "dst" => {
                    self.field(&mut p, ctx, tok, i)?;
                    next_ctx = ctx;
                }
                _ => {
                    return Err(self.err(
                        i,
                        "expected a match clause (prio, promiscuous, eth, vlan, ethertype, ipv4, \
                         ipv6, proto, udp, tcp, src-port, dst-port) or `->`",
                    ))
                }
            }
            ctx = next_ctx;
        }
        let action = self.action()?;
        if self.pos < self.toks.len() {
            return Err(self.err(self.pos, "unexpected token after the action"));
        }
        Ok(Rule {
            pattern: p,
            priority: priority.unwrap_or(0),
            action,
        })
    }

    /// `src X` / `dst X` of the keyword `ctx`; `i` is the index of `src`/`dst`.
    fn field(&mut self, p: &mut Pattern, ctx: Ctx, tok: &str, i: usize) -> Result<(), RuleError> {
        let is_src = tok == "src";
        let j = self.pos;
        let arg = self.next();
        match ctx {
            Ctx::None => Err(self.err(
                i,
                format!(
                    "`{tok}` must follow `eth`, `ipv4` or `ipv6` (for ports write \
                     `udp {tok}-port N`)"
                ),
            )),
            Ctx::Eth => {
                let slot = if is_src {
                    &mut p.src_mac
                } else {
                    &mut p.dst_mac
                };
                if slot.is_some() {
                    return Err(self.err(i, format!("`eth {tok}` is given twice")));
                }
                match arg.and_then(mac_match) {
                    Some(m) => {
                        *slot = Some(m);
                        Ok(())
                    }
                    None => Err(self.err(
                        j,
                        "expected a MAC address with an optional mask, e.g. \
                         01:00:5e:00:00:00/ff:ff:ff:80:00:00",
                    )),
                }
            }
            Ctx::Ipv4 => {
                let Some(IpMatch::V4 { src, dst }) = p.ip.as_mut() else {
                    return Err(self.err(i, "`ipv4` is not set"));
                };
                let slot = if is_src { src } else { dst };
                if slot.is_some() {
                    return Err(self.err(i, format!("`ipv4 {tok}` is given twice")));
                }
                match arg.and_then(|a| prefix::<Ipv4Addr>(a, 32)) {
                    Some((addr, prefix)) => {
                        *slot = Some(Ipv4Net { addr, prefix });
                        Ok(())
                    }
                    None => Err(self.err(
                        j,
                        "expected an IPv4 address with an optional prefix length 0-32, e.g. \
                         10.0.0.0/24",
                    )),
                }
            }
            Ctx::Ipv6 => {
                let Some(IpMatch::V6 { src, dst }) = p.ip.as_mut() else {
                    return Err(self.err(i, "`ipv6` is not set"));
                };
                let slot = if is_src { src } else { dst };
                if slot.is_some() {
                    return Err(self.err(i, format!("`ipv6 {tok}` is given twice")));
                }
                match arg.and_then(|a| prefix::<Ipv6Addr>(a, 128)) {
                    Some((addr, prefix)) => {
                        *slot = Some(Ipv6Net { addr, prefix });
                        Ok(())
                    }
                    None => Err(self.err(
                        j,
                        "expected an IPv6 address with an optional prefix length 0-128, e.g. \
                         2001:db8::/32",
                    )),
                }
            }
        }
    }

    fn action(&mut self) -> Result<Action, RuleError> {
        let i = self.pos;
        let expected = "expected an action: `queue N`, `rss N,N,...` or `drop`";
        match self.next() {
            Some("queue") => Ok(Action::Queue(
                self.num(u16::MAX.into(), "a queue number 0-65535")? as u16,
            )),
            Some("drop") => Ok(Action::Drop),
            Some("rss") => {
                let mut qs = Vec::new();
                // `rss 0,1,2` or `rss 0, 1, 2`: the rest of the line is the queue list.
                while let Some(t) = self.toks.get(self.pos).copied() {
                    for q in t.split(',').filter(|q| !q.is_empty()) {
                        match number(q) {
                            Some(n) if n <= 0xffff => qs.push(n as u16),
                            _ => {
                                return Err(self.err(
                                    self.pos,
                                    "expected a comma-separated list of queue numbers 0-65535",
                                ))
                            }
                        }
                    }
                    self.pos += 1;
                }
                if qs.is_empty() {
                    return Err(self.err(
                        self.pos,
                        "expected a comma-separated list of queue numbers after `rss`",
                    ));
                }
                Ok(Action::Rss(qs))
            }
            _ => Err(self.err(i, expected)),
        }
    }
}

impl FromStr for Rule {
    type Err = RuleError;

    /// Parses the text form (see the [module docs](self) for the grammar).
    ///
    /// # Errors
    /// [`RuleError::Parse`] with the index of the offending token.
    fn from_str(s: &str) -> Result<Rule, RuleError> {
        Parser {
            toks: s.split_whitespace().collect(),
            pos: 0,
        }
        .rule()
    }
}

struct MacText<'a>(&'a MacMatch);

impl fmt::Display for MacText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let w = |f: &mut fmt::Formatter<'_>, m: &Mac| {
            write!(
                f,
                "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                m[0], m[1], m[2], m[3], m[4], m[5]
            )
        };
        w(f, &self.0.addr)?;
        if self.0.mask != [0xff; 6] {
            f.write_str("/")?;
            w(f, &self.0.mask)?;
        }
        Ok(())
    }
}

impl fmt::Display for Rule {
    /// Prints the text form in a fixed clause order; it parses back to an equal rule.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.pattern;
        if self.priority != 0 {
            write!(f, "prio {} ", self.priority)?;
        }
        if p.promiscuous {
            f.write_str("promiscuous ")?;
        }
        if p.dst_mac.is_some() || p.src_mac.is_some() {
            f.write_str("eth ")?;
            if let Some(m) = &p.dst_mac {
                write!(f, "dst {} ", MacText(m))?;
            }
            if let Some(m) = &p.src_mac {
                write!(f, "src {} ", MacText(m))?;
            }
        }
        if let Some(v) = p.vlan {
            write!(f, "vlan {v} ")?;
        }
        if let Some(et) = p.ethertype {
            write!(f, "ethertype 0x{et:04x} ")?;
        }
        match &p.ip {
            Some(IpMatch::V4 { src, dst }) => {
                f.write_str("ipv4 ")?;
                for (k, n) in [("src", src), ("dst", dst)] {
                    if let Some(n) = n {
                        write!(f, "{k} {}", n.addr)?;
                        if n.prefix != 32 {
                            write!(f, "/{}", n.prefix)?;
                        }
                        f.write_str(" ")?;
                    }
                }
            }
            Some(IpMatch::V6 { src, dst }) => {
                f.write_str("ipv6 ")?;
                for (k, n) in [("src", src), ("dst", dst)] {
                    if let Some(n) = n {
                        write!(f, "{k} {}", n.addr)?;
                        if n.prefix != 128 {
                            write!(f, "/{}", n.prefix)?;
                        }
                        f.write_str(" ")?;
                    }
                }
            }
            None => {}
        }
        if let Some(proto) = p.ip_proto {
            write!(f, "proto {proto} ")?;
        }
        if let Some(l4) = &p.l4 {
            write!(f, "{} ", keyword_name(l4.proto))?;
            if let Some(sp) = l4.src_port {
                write!(f, "src-port {sp} ")?;
            }
            if let Some(dp) = l4.dst_port {
                write!(f, "dst-port {dp} ")?;
            }
        }
        f.write_str("-> ")?;
        match &self.action {
            Action::Queue(q) => write!(f, "queue {q}"),
            Action::Drop => f.write_str("drop"),
            Action::Rss(qs) => {
                f.write_str("rss ")?;
                for (i, q) in qs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{q}")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Rule {
        match s.parse::<Rule>() {
            Ok(r) => r,
            Err(e) => panic!("{s:?} does not parse: {e}"),
        }
    }

    fn parse_err(s: &str) -> (usize, String, String) {
        match s.parse::<Rule>() {
            Err(RuleError::Parse {
                index,
                token,
                reason,
            }) => (index, token, reason),
            other => panic!("{s:?}: expected a parse error, got {other:?}"),
        }
    }

    fn round_trip(r: &Rule) {
        let text = r.to_string();
        assert_eq!(&parse(&text), r, "{text:?} does not round-trip");
    }

    #[test]
    fn full_example() {
        let r = parse(
            "prio 10 eth dst 02:00:00:00:00:01 vlan 5 ipv4 src 10.0.0.0/24 dst 10.0.0.2 udp \
             src-port 5 dst-port 9000 -> queue 1",
        );
        let want = Rule {
            pattern: Pattern {
                dst_mac: Some(MacMatch::exact([2, 0, 0, 0, 0, 1])),
                vlan: Some(5),
                ip: Some(IpMatch::V4 {
                    src: Some(Ipv4Net {
                        addr: Ipv4Addr::new(10, 0, 0, 0),
                        prefix: 24,
                    }),
                    dst: Some(Ipv4Net {
                        addr: Ipv4Addr::new(10, 0, 0, 2),
                        prefix: 32,
                    }),
                }),
                l4: Some(L4Match {
                    proto: L4Proto::Udp,
                    src_port: Some(5),
                    dst_port: Some(9000),
                }),
                ..Default::default()
            },
            priority: 10,
            action: Action::Queue(1),
        };
        assert_eq!(r, want);
        assert_eq!(
            r.to_string(),
            "prio 10 eth dst 02:00:00:00:00:01 vlan 5 ipv4 src 10.0.0.0/24 dst 10.0.0.2 udp \
             src-port 5 dst-port 9000 -> queue 1"
        );
        round_trip(&r);
    }

    #[test]
    fn clause_order_is_free() {
        let a = parse("udp dst-port 9000 ipv4 dst 10.0.0.0/24 -> queue 1");
        let b = parse("ipv4 dst 10.0.0.0/24 udp dst-port 9000 -> queue 1");
        assert_eq!(a, b);
        assert_eq!(
            a.pattern.ip,
            Some(IpMatch::V4 {
                src: None,
                dst: Some(Ipv4Net {
                    addr: Ipv4Addr::new(10, 0, 0, 0),
                    prefix: 24
                })
            })
        );
        // Repeated keywords merge; a port may come after other clauses.
        let c = parse("ipv4 src 1.2.3.4 udp ipv4 dst 5.6.7.8 dst-port 7 prio 3 -> drop");
        assert_eq!(c.priority, 3);
        assert_eq!(c.pattern.l4.and_then(|l| l.dst_port), Some(7));
        round_trip(&c);
    }

    #[test]
    fn actions_and_other_clauses() {
        let r = parse("tcp dst-port 80 -> rss 0,1,2,3");
        assert_eq!(r.action, Action::Rss(vec![0, 1, 2, 3]));
        assert_eq!(parse("tcp dst-port 80 -> rss 0, 1 ,2,3").action, r.action);
        let r = parse("ethertype 0x88f7 -> drop");
        assert_eq!(r.pattern.ethertype, Some(0x88f7));
        assert_eq!(r.action, Action::Drop);
        assert_eq!(r.to_string(), "ethertype 0x88f7 -> drop");
        let r = parse("promiscuous -> queue 0");
        assert!(r.pattern.promiscuous && r.pattern.is_catch_all());
        assert_eq!(r.to_string(), "promiscuous -> queue 0");
        let r = parse("eth dst 01:00:5e:00:00:00/ff:ff:ff:80:00:00 src 2:0:0:0:0:AA -> queue 2");
        assert_eq!(
            r.pattern.dst_mac,
            Some(MacMatch {
                addr: [1, 0, 0x5e, 0, 0, 0],
                mask: [0xff, 0xff, 0xff, 0x80, 0, 0]
            })
        );
        assert_eq!(
            r.pattern.src_mac,
            Some(MacMatch::exact([2, 0, 0, 0, 0, 0xaa]))
        );
        round_trip(&r);
        let r = parse("ipv6 src 2001:db8::/32 dst ::1 proto 58 -> queue 0");
        assert_eq!(
            r.pattern.ip,
            Some(IpMatch::V6 {
                src: Some(Ipv6Net {
                    addr: "2001:db8::".parse().unwrap(),
                    prefix: 32
                }),
                dst: Some(Ipv6Net {
                    addr: Ipv6Addr::LOCALHOST,
                    prefix: 128
                }),
            })
        );
        assert_eq!(r.pattern.ip_proto, Some(58));
        round_trip(&r);
        let r = parse("ipv4 -> queue 0");
        assert_eq!(
            r.pattern.ip,
            Some(IpMatch::V4 {
                src: None,
                dst: None
            })
        );
        round_trip(&r);
        // A rule without clauses parses (validate rejects it) and round-trips.
        let r = parse("-> queue 0");
        assert!(r.pattern.is_catch_all() && !r.pattern.promiscuous);
        assert!(r.validate(1).is_err());
        round_trip(&r);
    }

    #[test]
    fn errors_point_at_the_token() {
        let (i, t, why) = parse_err("udp dst-port 70000 -> queue 1");
        assert_eq!((i, t.as_str()), (2, "70000"));
        assert_eq!(why, "expected a port number 0-65535");
        let (i, t, why) = parse_err("ipv4 dst 10.0.0.1 ipv6 -> queue 1");
        assert_eq!((i, t.as_str()), (3, "ipv6"));
        assert!(why.contains("`ipv6`") && why.contains("`ipv4`"), "{why}");
        let (i, t, why) = parse_err("udp tcp -> queue 1");
        assert_eq!((i, t.as_str()), (1, "tcp"));
        assert!(why.contains("`udp`"), "{why}");
        let (i, t, why) = parse_err("src-port 5 udp -> queue 1");
        assert_eq!((i, t.as_str()), (0, "src-port"));
        assert!(why.contains("`src-port`"), "{why}");
        let (i, t, _) = parse_err("ipv4 dst 10.0.0.1/33 -> queue 1");
        assert_eq!((i, t.as_str()), (2, "10.0.0.1/33"));
        let (i, t, why) = parse_err("ipv4 dst 2001:db8::1 -> queue 1");
        assert_eq!((i, t.as_str()), (2, "2001:db8::1"));
        assert!(why.contains("IPv4"), "{why}");
        let (i, t, _) = parse_err("eth dst 02:00:00:00:00 -> queue 1");
        assert_eq!((i, t.as_str()), (2, "02:00:00:00:00"));
        let (i, t, _) = parse_err("eth dst 02:00:00:00:00:01/ff -> queue 1");
        assert_eq!((i, t.as_str()), (2, "02:00:00:00:00:01/ff"));
        let (i, t, _) = parse_err("eth vlan 5 -> queue 1");
        assert_eq!((i, t.as_str()), (1, "vlan"));
        let (i, t, why) = parse_err("vlan 4096 -> queue 1");
        assert_eq!((i, t.as_str()), (1, "4096"));
        assert!(why.contains("VLAN"), "{why}");
        let (i, t, _) = parse_err("vlan 5 vlan 6 -> queue 1");
        assert_eq!((i, t.as_str()), (2, "vlan"));
        let (i, t, why) = parse_err("udp src 5 -> queue 1");
        assert_eq!((i, t.as_str()), (1, "src"));
        assert!(why.contains("src-port"), "{why}");
        let (i, t, _) = parse_err("udp dst-port 5");
        assert_eq!((i, t.as_str()), (3, ""));
        let (i, t, _) = parse_err("udp dst-port 5 ->");
        assert_eq!((i, t.as_str()), (4, ""));
        let (i, t, _) = parse_err("udp -> queue 1 2");
        assert_eq!((i, t.as_str()), (4, "2"));
        let (i, t, _) = parse_err("udp -> rss 1,x");
        assert_eq!((i, t.as_str()), (3, "1,x"));
        let (i, t, _) = parse_err("udp -> rss");
        assert_eq!((i, t.as_str()), (3, ""));
        let (i, t, _) = parse_err("udp -> teleport");
        assert_eq!((i, t.as_str()), (2, "teleport"));
        let (i, t, _) = parse_err("udp dst-port +5 -> drop");
        assert_eq!((i, t.as_str()), (2, "+5"));
        let (i, t, _) = parse_err("frobnicate -> drop");
        assert_eq!((i, t.as_str()), (0, "frobnicate"));
        let (i, _, _) = parse_err("");
        assert_eq!(i, 0);
    }

    #[test]
    fn unusual_values_round_trip() {
        for s in [
            "prio 15 eth src 00:00:00:00:00:00/00:00:00:00:00:00 -> queue 65535",
            "ipv6 src ::ffff:1.2.3.4/0 dst ::/0 tcp src-port 0 -> rss 3,3,1",
            "ipv4 src 0.0.0.0/0 dst 255.255.255.255 proto 0 -> drop",
            "promiscuous vlan 0 ethertype 0x0000 -> queue 0",
        ] {
            round_trip(&parse(s));
        }
    }
}
