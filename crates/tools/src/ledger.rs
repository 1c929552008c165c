//! One ledger per run (issue 32): every frame a run offered, in exactly one named bucket.
//!
//! pktgen and fwd build one [`Ledger`] at the end of a run and render it three ways (the text
//! summary, the `--json` `ledger` object, the `--plot` panel), so that the three cannot
//! disagree. What the named buckets do not explain is **unattributed**: shown as such, never
//! folded into another bucket. If the named buckets add up to more than was offered, a frame
//! was counted twice somewhere: that is shown as `double_counted`, never hidden.
//!
//! The ledger lives in the tools' crate, not in the rawq library: its buckets come from what
//! only a tool knows (what it was asked to send, the peer's sequence stamps, the link going
//! down), and an embedder has the per-queue half of it in the library
//! (`rawq::QueueStats::tx_ledger`).

use serde_json::{json, Map, Value};

/// One named bucket: a key for JSON (`snake_case`), the words for the text, and the frames.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// The JSON key (`received`, `rx_no_buffer`, ...).
    pub key: String,
    /// What the bucket holds, in words (the text summary and the plot).
    pub text: String,
    /// Frames in it.
    pub frames: u64,
    /// Whether its frames are lost (`received`, `sent` and `in_flight` are not).
    pub loss: bool,
}

/// Well-known bucket keys, so that pktgen, fwd and their tests spell them alike.
pub mod key {
    /// Frames the receiver counted.
    pub const RECEIVED: &str = "received";
    /// Frames that left the port where nothing receives them in this run (a send-only run).
    pub const SENT: &str = "sent";
    /// Frames still on their way when the run stopped: not a loss.
    pub const IN_FLIGHT: &str = "in_flight";
    /// Dropped for want of a receive buffer (mlx5 `out_of_buffer`, the model's
    /// `rx_no_buffer`).
    pub const RX_NO_BUFFER: &str = "rx_no_buffer";
    /// Dropped by the receive queue itself (AF_XDP: its fill ring empty or its ring full).
    pub const RX_QUEUE_DROPS: &str = "rx_queue_drops";
    /// Discarded by the port on receive (mlx5e `rx_discards_phy`).
    pub const PORT_DISCARDS: &str = "port_discards";
    /// Discarded by the port on transmit (mlx5e `tx_discards_phy`).
    pub const TX_PORT_DISCARDS: &str = "tx_port_discards";
    /// Dropped on the wire (the model's full wire, the sending interface's `tx_dropped`).
    pub const WIRE_DROPS: &str = "wire_drops";
    /// Dropped by the receiving interface beyond what its sockets dropped.
    pub const INTERFACE_RX_DROPS: &str = "interface_rx_drops";
    /// Refused by the send ring (dropped or failed on transmit, with its completions).
    pub const TX_REFUSED: &str = "tx_refused";
    /// Not sent: the queue closed before the device sent them, as the device said (the
    /// software device's send queue stop reports how far it got; the library's
    /// `QueueStats::tx_unsent_at_close`). A stop of the run, not a loss of the path.
    pub const TX_UNSENT_AT_CLOSE: &str = "not_sent_queue_closed";
    /// Posted to the device, fate unknown at the close: outstanding without a completion when
    /// the queue closed, on a device that cannot say whether they reached the wire (dv and
    /// verbs on a ConnectX or the emulated NIC; the library's `QueueStats::tx_fate_unknown`).
    /// A `--txrx` run moves those the receive side saw out of it ([`Ledger::reconcile`](super::Ledger::reconcile)).
    pub const TX_FATE_UNKNOWN: &str = "fate_unknown_at_close";
    /// Not sent while the link was down (`--on-link-down wait`).
    pub const LINK_DOWN: &str = "not_sent_link_down";
    /// Delivered into a receive ring and not read before its queue closed: in flight at the
    /// stop (the software device's `rx_frames` less what the queues read), not a loss.
    pub const RX_UNREAD: &str = "rx_unread";
    /// Consumed by the device with a receive error completion (a frame longer than the
    /// receive buffer: a local length error; a bad buffer: a local protection error).
    pub const RX_ERROR_COMPLETIONS: &str = "rx_error_completions";
    /// An RFC 2544 trial's: frames an earlier trial sent that arrived in this one (late past
    /// that trial's drain; their stamps carry its mark): neither received nor lost here.
    pub const LATE_EARLIER_TRIAL: &str = "late_from_earlier_trial";
    /// What the named buckets do not explain.
    pub const UNATTRIBUTED: &str = "unattributed";
}

/// The accounting of one run (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    /// Frames the run offered, as the tool knows them.
    pub offered: u64,
    /// How the tool knows `offered` ("sent", "stamped by the peer (--seq)", ...).
    pub offered_as: String,
    buckets: Vec<Bucket>,
    /// Where what was done fell short of what was asked (a rate, a count), in words.
    shortfalls: Vec<String>,
}

impl Ledger {
    /// An empty ledger of `offered` frames, known as `offered_as`.
    pub fn new(offered: u64, offered_as: impl Into<String>) -> Ledger {
        Ledger {
            offered,
            offered_as: offered_as.into(),
            ..Ledger::default()
        }
    }

    /// Adds `frames` to the bucket `key` (made, with `text`, on first use). A bucket of 0 frames
    /// is kept: it says the tool looked and found none.
    pub fn add(&mut self, key: &str, text: &str, frames: u64, loss: bool) -> &mut Ledger {
        match self.buckets.iter_mut().find(|b| b.key == key) {
            Some(b) => b.frames += frames,
            None => self.buckets.push(Bucket {
                key: key.into(),
                text: text.into(),
                frames,
                loss,
            }),
        }
        self
    }

    /// Adds the two buckets of a send queue's close, in pktgen's and fwd's words: sends the
    /// device said it never made ([`key::TX_UNSENT_AT_CLOSE`]) and sends of unknown fate
    /// ([`key::TX_FATE_UNKNOWN`]); neither is a loss.
    pub fn add_close(&mut self, unsent_at_close: u64, fate_unknown: u64) -> &mut Ledger {
        self.add(
            key::TX_UNSENT_AT_CLOSE,
            "not sent: the queue closed before the device sent them (not a loss)",
            unsent_at_close,
            false,
        )
        .add(
            key::TX_FATE_UNKNOWN,
            "posted, fate unknown at the close (the device cannot say whether they were sent)",
            fate_unknown,
            false,
        )
    }

    /// Takes out of bucket `key` the frames the buckets hold beyond what was offered, as many as
    /// it has; returns how many. For a bucket of frames whose fate is unknown
    /// ([`key::TX_FATE_UNKNOWN`]) once the other buckets, the receive side's among them, are
    /// in: a frame the receiver counted was sent, and is not also counted unknown. What the
    /// bucket cannot take back stays a double count, shown.
    pub fn reconcile(&mut self, key: &str) -> u64 {
        let over = self.double_counted();
        match self.buckets.iter_mut().find(|b| b.key == key) {
            Some(b) => {
                let n = over.min(b.frames);
                b.frames -= n;
                n
            }
            None => 0,
        }
    }

    /// Says beside every figure that the run fell short of what was asked.
    pub fn shortfall(&mut self, what: impl Into<String>) -> &mut Ledger {
        self.shortfalls.push(what.into());
        self
    }

    /// The named buckets, in the order they were added.
    pub fn buckets(&self) -> &[Bucket] {
        &self.buckets
    }

    /// The shortfalls (see [`Ledger::shortfall`]).
    pub fn shortfalls(&self) -> &[String] {
        &self.shortfalls
    }

    /// The frames of bucket `key` (`unattributed` included), if it is there.
    pub fn get(&self, key: &str) -> Option<u64> {
        if key == key::UNATTRIBUTED {
            return Some(self.unattributed());
        }
        self.buckets.iter().find(|b| b.key == key).map(|b| b.frames)
    }

    /// The frames the named buckets hold.
    pub fn named(&self) -> u64 {
        self.buckets.iter().map(|b| b.frames).sum()
    }

    /// Offered frames no named bucket explains.
    pub fn unattributed(&self) -> u64 {
        self.offered.saturating_sub(self.named())
    }

    /// Frames the named buckets hold beyond what was offered: counted twice somewhere.
    pub fn double_counted(&self) -> u64 {
        self.named().saturating_sub(self.offered)
    }

    /// Frames lost: the loss buckets and what is unattributed.
    pub fn lost(&self) -> u64 {
        self.buckets
            .iter()
            .filter(|b| b.loss)
            .map(|b| b.frames)
            .sum::<u64>()
            + self.unattributed()
    }

    /// Whether every offered frame is in exactly one named bucket.
    pub fn closes(&self) -> bool {
        self.named() == self.offered
    }

    /// The `--json` object: `offered`, `offered_as`, `buckets` (name → frames, `unattributed`
    /// among them, adding up to `offered` unless `double_counted` is above 0), `order` (the
    /// named buckets' keys in the text's order), `losses` (the keys of the loss buckets), `lost`,
    /// `double_counted`, `shortfalls` and `labels` (each bucket's words).
    pub fn to_json(&self) -> Value {
        let mut b = Map::new();
        let mut labels = Map::new();
        for x in &self.buckets {
            b.insert(x.key.clone(), json!(x.frames));
            labels.insert(x.key.clone(), json!(x.text));
        }
        b.insert(key::UNATTRIBUTED.into(), json!(self.unattributed()));
        labels.insert(
            key::UNATTRIBUTED.into(),
            json!("unattributed (no counter explains them)"),
        );
        let losses: Vec<Value> = self
            .buckets
            .iter()
            .filter(|x| x.loss)
            .map(|x| json!(x.key))
            .collect();
        let order: Vec<&str> = self.buckets.iter().map(|x| x.key.as_str()).collect();
        json!({
            "offered": self.offered,
            "offered_as": self.offered_as,
            "buckets": b,
            "order": order,
            "labels": labels,
            "losses": losses,
            "lost": self.lost(),
            "double_counted": self.double_counted(),
            "shortfalls": self.shortfalls,
        })
    }

    /// The ledger back from its JSON (what `--plot` draws: the same ledger as the text).
    pub fn from_json(v: &Value) -> Option<Ledger> {
        let offered = v.get("offered")?.as_u64()?;
        let offered_as = v.get("offered_as")?.as_str()?.to_string();
        let labels = v.get("labels").and_then(Value::as_object);
        let losses: Vec<&str> = v
            .get("losses")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut l = Ledger::new(offered, offered_as);
        let buckets = v.get("buckets")?.as_object()?;
        // The buckets in the order they were made (`order`), then any it does not name.
        let mut keys: Vec<&String> = v
            .get("order")
            .and_then(Value::as_array)
            .map(|o| {
                o.iter()
                    .filter_map(Value::as_str)
                    .filter_map(|k| buckets.get_key_value(k).map(|kv| kv.0))
                    .collect()
            })
            .unwrap_or_default();
        for k in buckets.keys() {
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        for k in keys {
            let n = &buckets[k];
            if k == key::UNATTRIBUTED {
                continue;
            }
            let text = labels
                .and_then(|m| m.get(k))
                .and_then(Value::as_str)
                .unwrap_or(k);
            l.add(k, text, n.as_u64()?, losses.contains(&k.as_str()));
        }
        if let Some(s) = v.get("shortfalls").and_then(Value::as_array) {
            for s in s.iter().filter_map(Value::as_str) {
                l.shortfall(s);
            }
        }
        Some(l)
    }

    /// The text: one line with every bucket (empty ones left out but for `received`),
    /// unattributed always, a double count when there is one, then the shortfalls.
    pub fn text(&self) -> String {
        let mut parts: Vec<String> = self
            .buckets
            .iter()
            .filter(|b| b.frames > 0 || b.key == key::RECEIVED || b.key == key::SENT)
            .map(|b| format!("{} {}", b.frames, b.text))
            .collect();
        parts.push(format!("{} unattributed", self.unattributed()));
        let mut s = format!(
            "ledger: {} frames offered ({}): {}; {} lost",
            self.offered,
            self.offered_as,
            parts.join(", "),
            self.lost()
        );
        if self.double_counted() > 0 {
            s += &format!(
                "; the buckets hold {} frames more than were offered: counted twice (a defect: \
                 please report it)",
                self.double_counted()
            );
        }
        for f in &self.shortfalls {
            s += &format!("\n  short of what was asked: {f}");
        }
        s
    }
}

/// The loss buckets of a port's device counters as the vendor exposes them (mlx5: the RDMA
/// queue counter `out_of_buffer`, the netdev's ethtool `rx_discards_phy` and
/// `tx_discards_phy`; `rawq::counters`), each a different frame: `out_of_buffer` counts frames
/// steered to a receive queue that had no buffer, `rx_discards_phy` frames the port could not
/// take in at all (they never reached steering), `tx_discards_phy` frames the port did not put
/// on the wire. A counter the port does not have makes no bucket. The netdev's own
/// `rx_out_of_buffer` (its kernel queues, not rawq's) and the interface counters of an AF_XDP
/// port ([`interface_rx_drops`]) are not among them.
pub fn port_buckets(c: &rawq::counters::DeviceCounters) -> Vec<(&'static str, &'static str, u64)> {
    [
        (
            key::RX_NO_BUFFER,
            "dropped for want of a receive buffer (out_of_buffer)",
            c.rx_no_buffer,
        ),
        (
            key::PORT_DISCARDS,
            "discarded by the port (rx_discards_phy)",
            c.rx_discards_phy,
        ),
        (
            key::TX_PORT_DISCARDS,
            "discarded by the port on transmit (tx_discards_phy)",
            c.tx_discards_phy,
        ),
    ]
    .into_iter()
    .filter_map(|(k, t, n)| n.map(|n| (k, t, n)))
    .collect()
}

/// The device-side buckets of a port on the software device (`-b model`): (key, words,
/// frames, whether they are lost), each frame once. `read` is what the port's queues received
/// (`QueueStats::rx_packets`): the frames the device delivered into a receive ring
/// (`rx_frames`) beyond it were still in a ring when its queue closed, unread (a queue that
/// stopped receiving before the last frames reached it: not a loss, in flight at the stop).
/// A frame the device consumed with a receive error completion (a local length error: longer
/// than the receive buffer) is in `rx_error_completions`, not among the frames delivered.
#[cfg(feature = "mlx5")]
pub fn model_buckets(
    c: &rawq::dv::model::ModelCounters,
    read: u64,
) -> Vec<(&'static str, &'static str, u64, bool)> {
    vec![
        (
            key::WIRE_DROPS,
            "dropped on the wire (the software device's, full)",
            c.wire_drops,
            true,
        ),
        (
            key::RX_NO_BUFFER,
            "dropped for want of a receive buffer",
            c.rx_no_buffer,
            true,
        ),
        (
            "wire_rx_drops",
            "dropped at the port's wire socket, full (read too late)",
            c.wire_rx_drops,
            true,
        ),
        ("rx_runt", "runts dropped by the device", c.rx_runt, true),
        (
            "rx_oversize",
            "dropped by the device as oversize",
            c.rx_oversize,
            true,
        ),
        (
            "no_rule_matched",
            "no rule matched (went to the kernel)",
            c.rx_to_kernel,
            true,
        ),
        ("drop_rule", "dropped by a drop rule", c.rx_rule_drop, true),
        (
            "rq_in_error",
            "dropped by a receive queue in error",
            c.rx_in_error,
            true,
        ),
        (
            key::RX_ERROR_COMPLETIONS,
            "consumed with a receive error completion (longer than the receive buffer: \
             local length error)",
            c.rx_error_cqes,
            true,
        ),
        (
            key::RX_UNREAD,
            "in a receive ring unread when its queue closed (in flight at the stop, not a loss)",
            c.rx_frames.saturating_sub(read),
            false,
        ),
    ]
}

/// The drops of interface `ifname` (its netdev `rx_dropped` over the run) that its AF_XDP
/// sockets did not count already (`socket_drops`: the queues' `rx_drops`, the sockets'
/// `XDP_STATISTICS` `rx_dropped` + `rx_ring_full`), so that no drop is counted twice.
///
/// veth: a frame its XDP program redirects to a socket that cannot take it (the socket's
/// ring full or its fill ring empty: net/xdp/xsk.c, `__xsk_rcv` and `__xsk_rcv_zc` count it
/// in `rx_dropped` / `rx_queue_full` and return an error) makes `xdp_do_redirect` fail, and
/// drivers/net/veth.c counts that failure in the receive queue's `rx_drops`
/// (`veth_xdp_rcv_one` and `veth_xdp_rcv_skb`, `case XDP_REDIRECT`), which
/// `veth_get_stats64` reports as `rx_dropped`: every socket drop is in `rx_dropped` too, and
/// only the rest (XDP_TX failures, skb allocation failures, the peer's `ndo_xdp_xmit` errors)
/// is the interface's own. Other drivers: as far as known they count a failed redirect in
/// their own XDP statistics, not `rx_dropped`, so it is taken whole; should one count them
/// there too, the ledger shows it as a double count rather than hiding it.
pub fn interface_rx_drops(ifname: &str, rx_dropped: u64, socket_drops: u64) -> u64 {
    if driver(ifname).as_deref() == Some("veth") {
        rx_dropped.saturating_sub(socket_drops)
    } else {
        rx_dropped
    }
}

fn driver(ifname: &str) -> Option<String> {
    rawq::link::driver(ifname).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Ledger {
        let mut l = Ledger::new(1000, "stamped by the peer (--seq)");
        l.add(key::RECEIVED, "received", 900, false)
            .add(key::RX_QUEUE_DROPS, "dropped by the rx queue", 60, true)
            .add(key::IN_FLIGHT, "in flight at the stop", 10, false);
        l
    }

    #[test]
    fn unattributed_is_what_the_named_buckets_leave() {
        let l = sample();
        assert_eq!(l.named(), 970);
        assert_eq!(l.unattributed(), 30);
        assert_eq!(l.double_counted(), 0);
        assert_eq!(
            l.lost(),
            90,
            "the drops and the unattributed, not in flight"
        );
        assert!(!l.closes());
        let j = l.to_json();
        let sum: u64 = j["buckets"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(sum, j["offered"].as_u64().unwrap(), "{j}");
        assert_eq!(j["buckets"]["unattributed"], 30);
        assert!(l.text().contains("30 unattributed"), "{}", l.text());
    }

    #[test]
    fn a_double_count_is_shown_not_hidden() {
        let mut l = sample();
        l.add(
            key::INTERFACE_RX_DROPS,
            "dropped by the interface",
            60,
            true,
        );
        assert_eq!(l.unattributed(), 0);
        assert_eq!(l.double_counted(), 30);
        assert_eq!(l.to_json()["double_counted"], 30);
        assert!(l.text().contains("counted twice"), "{}", l.text());
    }

    #[test]
    fn the_json_gives_back_the_same_ledger() {
        let mut l = sample();
        l.shortfall("asked for 2000 frames, sent 1000");
        let back = Ledger::from_json(&l.to_json()).unwrap();
        assert_eq!(back.text(), l.text());
        assert_eq!(back.lost(), l.lost());
        assert!(l.text().contains("asked for 2000 frames, sent 1000"));
    }

    #[test]
    fn port_counters_are_one_bucket_each() {
        let mut c = rawq::counters::DeviceCounters::default();
        c.rx_no_buffer = Some(3);
        c.rx_discards_phy = Some(5);
        c.rx_out_of_buffer = Some(100);
        let b = port_buckets(&c);
        assert_eq!(
            b.iter().map(|x| (x.0, x.2)).collect::<Vec<_>>(),
            [(key::RX_NO_BUFFER, 3), (key::PORT_DISCARDS, 5)],
            "the netdev's own queues' drops and absent counters make no bucket"
        );
        let mut l = Ledger::new(10, "sent");
        l.add(key::RECEIVED, "received", 2, false);
        for (k, t, n) in b {
            l.add(k, t, n, true);
        }
        assert!(l.closes());
        assert!(l
            .text()
            .contains("5 discarded by the port (rx_discards_phy)"));
    }

    /// The model port's ledger as pktgen builds it for `--txrx`: offered = sent, the frames
    /// the queues read, the device's buckets.
    #[cfg(feature = "mlx5")]
    fn model_ledger(port: &rawq::Port, sent: u64) -> Ledger {
        let s = port.stats();
        let c = port.model_counters().expect("a model port");
        let mut l = Ledger::new(sent, "sent");
        l.add(key::RECEIVED, "received back", s.rx_packets, false);
        for (k, t, n, loss) in model_buckets(&c, s.rx_packets) {
            l.add(k, t, n, loss);
        }
        l
    }

    /// Waits (bounded) until the model has dealt with `n` frames one way or another.
    #[cfg(feature = "mlx5")]
    fn wait_device(port: &rawq::Port, n: u64, what: fn(&rawq::dv::model::ModelCounters) -> u64) {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while port.model_counters().map_or(0, |c| what(&c)) < n {
            assert!(
                std::time::Instant::now() < end,
                "the model did not take {n} frames in 20 s: {:?}",
                port.model_counters()
            );
            std::thread::yield_now();
        }
    }

    /// Seed 5414's 512 unattributed: frames the device had delivered into a receive ring that
    /// was closed before they were read. Made certain here: 48 frames sent and delivered, 16
    /// read, the queue closed. They are in flight at the stop (`rx_unread`), not a loss, and
    /// not unattributed (before: 32 unattributed).
    #[cfg(feature = "mlx5")]
    #[test]
    fn frames_left_in_a_closed_receive_ring_are_in_flight_not_unattributed() {
        use rawq::{Backend, Port};
        let mut port = Port::builder(Backend::Model(Default::default()))
            .rule("udp dst-port 9000 -> queue 0".parse().unwrap())
            .rx_ring(64)
            .tx_ring(64)
            .open()
            .expect("a model port");
        let mut q = port.take_queues().pop().unwrap();
        let pool = port.pool().clone();
        let mut v: Vec<rawq::Packet> = (0..48)
            .map(|i| {
                let mut p = pool.alloc().unwrap();
                p.copy_from_slice(&rawq_testkit::emu_dv::udp_frame(i, 128))
                    .unwrap();
                p
            })
            .collect();
        assert_eq!(q.tx_burst(&mut v), 48);
        wait_device(&port, 48, |c| c.rx_frames);
        let mut got = Vec::new();
        while got.len() < 16 {
            q.reclaim();
            let want = 16 - got.len();
            q.rx_burst(&mut got, want);
        }
        while q.stats().tx_ledger().in_flight > 0 {
            q.reclaim();
            std::thread::yield_now();
        }
        drop(got);
        drop(q);
        let l = model_ledger(&port, 48);
        assert_eq!(l.get(key::RECEIVED), Some(16), "{}", l.text());
        assert_eq!(l.get(key::RX_UNREAD), Some(32), "{}", l.text());
        assert_eq!(l.unattributed(), 0, "{}", l.text());
        assert!(l.closes(), "{}", l.text());
        assert_eq!(
            l.lost(),
            0,
            "frames unread at the stop are no loss: {}",
            l.text()
        );
    }

    /// A frame longer than the receive buffer: the device consumes a receive buffer with a
    /// local length error completion; the ledger names it (`rx_error_completions`), the frames
    /// around it are received.
    #[cfg(feature = "mlx5")]
    #[test]
    fn a_receive_length_error_is_a_named_loss() {
        use rawq::{Backend, Port};
        // The device takes jumbo frames (its port's limit), the queue's buffers are 2 KiB:
        // a cyclic RQ of one buffer per WQE.
        let opts = rawq::dv::model::ModelOptions {
            max_frame: 9018,
            rx: rawq::dv::model::RxKind::Cyclic { sges: 1 },
            ..Default::default()
        };
        let mut port = Port::builder(Backend::Model(opts))
            .rule("udp dst-port 9000 -> queue 0".parse().unwrap())
            .rx_ring(64)
            .open()
            .expect("a model port");
        let mut q = port.take_queues().pop().unwrap();
        let m = port.model_port().expect("the model");
        let big = 4000;
        m.inject_frame(&rawq_testkit::emu_dv::udp_frame(0, 128));
        m.inject_frame(&rawq_testkit::emu_dv::udp_frame(1, big));
        m.inject_frame(&rawq_testkit::emu_dv::udp_frame(2, 128));
        wait_device(&port, 3, |c| c.rx_frames + c.rx_error_cqes + c.rx_oversize);
        let mut got = Vec::new();
        let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while got.len() < 2 && std::time::Instant::now() < end {
            q.rx_burst(&mut got, 8);
            let _ = q.take_error();
        }
        drop(got);
        drop(q);
        let c = port.model_counters().unwrap();
        assert_eq!(
            (c.rx_error_cqes, c.rx_oversize),
            (1, 0),
            "a {big}-byte frame on a jumbo port with 2 KiB buffers: {c:?}"
        );
        let l = model_ledger(&port, 3);
        assert_eq!(l.get(key::RECEIVED), Some(2), "{}", l.text());
        assert_eq!(l.get(key::RX_ERROR_COMPLETIONS), Some(1), "{}", l.text());
        assert!(l.closes(), "{}", l.text());
        assert_eq!(l.lost(), 1, "{}", l.text());
    }

    /// A send whose fate was unknown at the close and that the receiver counted is received,
    /// not also unknown (issue 32): the unknown bucket gives back what the buckets hold beyond
    /// the offered frames, no more; a double count beyond it stays shown.
    #[test]
    fn a_frame_of_unknown_fate_seen_received_is_counted_once() {
        let mut l = Ledger::new(100, "sent");
        l.add(key::RECEIVED, "received back", 95, false).add(
            key::TX_FATE_UNKNOWN,
            "fate unknown at the close",
            8,
            false,
        );
        assert_eq!(l.double_counted(), 3);
        assert_eq!(l.reconcile(key::TX_FATE_UNKNOWN), 3);
        assert_eq!(l.get(key::TX_FATE_UNKNOWN), Some(5));
        assert!(l.closes(), "{}", l.text());
        let mut l = Ledger::new(100, "sent");
        l.add(key::RECEIVED, "received back", 99, false)
            .add(key::TX_REFUSED, "refused", 5, true)
            .add(key::TX_FATE_UNKNOWN, "fate unknown at the close", 2, false);
        assert_eq!(l.reconcile(key::TX_FATE_UNKNOWN), 2);
        assert_eq!(l.double_counted(), 4, "what it cannot explain stays shown");
        assert_eq!(Ledger::new(1, "sent").reconcile(key::TX_FATE_UNKNOWN), 0);
    }

    #[test]
    fn adding_to_a_bucket_twice_sums_it() {
        let mut l = Ledger::new(10, "sent");
        l.add(key::TX_REFUSED, "refused", 2, true)
            .add(key::TX_REFUSED, "refused", 3, true);
        assert_eq!(l.get(key::TX_REFUSED), Some(5));
        assert_eq!(l.buckets().len(), 1);
        assert_eq!(l.get(key::UNATTRIBUTED), Some(5));
    }
}
