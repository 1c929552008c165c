//! `--on-link-down exit|wait` (pktgen and fwd): each port's link events
//! ([`rawq::Port::link_events`]) read by the main thread between its live lines.
//!
//! * `exit` (default): a link that goes down, a device that fails or an interface that goes
//!   away ends the run with that cause (a non-zero status).
//! * `wait`: a link that goes down pauses what would go out of that port (the queue threads
//!   look at one flag per port, [`paused`]); what is due meanwhile is not sent but counted
//!   ([`not_sent`]); when the link is back the run resumes. A device failure or an interface
//!   that goes away still ends the run: neither comes back.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use clap::ValueEnum;
use rawq::{LinkEvent, LinkEvents, Port};

/// What a run does when a link goes down.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum OnLinkDown {
    /// End the run with the cause and a non-zero status.
    #[default]
    Exit,
    /// Pause sending on that port until the link is back; count what could not be sent.
    Wait,
}

/// Ports whose link is down in a `wait` run: bit `p` for port `p`.
static PAUSED: AtomicU64 = AtomicU64::new(0);
/// Frames that were due while their port's link was down and were not sent.
static NOT_SENT: AtomicU64 = AtomicU64::new(0);
/// Link-down events seen, and the time links were down (ns, summed over the ports).
static DOWNS: AtomicU64 = AtomicU64::new(0);
static DOWN_NS: AtomicU64 = AtomicU64::new(0);

/// The run waits for links that go down (`--on-link-down wait`).
static WAIT: AtomicBool = AtomicBool::new(false);

/// The run waits for links that go down: a queue's link error (a send refused on a down
/// interface, ENETDOWN) does not end it; the link's events decide (an interface gone or a
/// device failure still ends it).
pub fn waits() -> bool {
    WAIT.load(Relaxed)
}

/// Port `p`'s link is down in a `wait` run: send nothing out of it.
#[inline]
pub fn paused(p: usize) -> bool {
    PAUSED.load(Relaxed) & (1 << (p & 63)) != 0
}

/// `n` frames could not be sent because their port's link was down.
#[inline]
pub fn not_sent(n: u64) {
    NOT_SENT.fetch_add(n, Relaxed);
}

/// Frames not sent so far because their port's link was down (see [`not_sent`]).
pub fn not_sent_total() -> u64 {
    NOT_SENT.load(Relaxed)
}

/// One port's watch.
struct Watched {
    /// The port's place (the bit in [`PAUSED`]).
    index: usize,
    name: String,
    events: LinkEvents,
    down_since: Option<Instant>,
}

/// Every port's link events.
pub struct LinkWatch {
    mode: OnLinkDown,
    ports: Vec<Watched>,
}

fn add_down_time(d: Duration) {
    DOWN_NS.fetch_add(d.as_nanos() as u64, Relaxed);
}

impl LinkWatch {
    /// Watches `ports` (named as the user named them). A port whose events cannot be read is
    /// said once on stderr and not watched.
    pub fn new(mode: OnLinkDown, ports: &[(&str, &Port)], who: &str) -> LinkWatch {
        for c in [&PAUSED, &NOT_SENT, &DOWNS, &DOWN_NS] {
            c.store(0, Relaxed);
        }
        WAIT.store(mode == OnLinkDown::Wait, Relaxed);
        let ports = ports
            .iter()
            .enumerate()
            .filter_map(|(index, (name, p))| match p.link_events() {
                Ok(events) => Some(Watched {
                    index,
                    name: (*name).to_owned(),
                    events,
                    down_since: None,
                }),
                Err(e) => {
                    say!("{who}: warning: {name}'s link is not watched: {e}");
                    None
                }
            })
            .collect();
        LinkWatch { mode, ports }
    }

    /// Reads the events that came; the error that ends the run, if one does. Among the events
    /// of one look a fatal one wins (an interface being deleted goes down first, then away:
    /// the cause is that it went away).
    pub fn poll(&mut self, who: &str) -> Option<rawq::Error> {
        for w in self.ports.iter_mut() {
            let p = w.index;
            let mut evs = Vec::new();
            loop {
                match w.events.next_event(Some(Duration::ZERO)) {
                    Ok(Some(ev)) => {
                        evs.push(ev);
                        if ev.is_fatal() {
                            return Some(rawq::link::fatal_error(&w.name, ev));
                        }
                    }
                    Ok(None) => break,
                    Err(e) => return Some(e),
                }
            }
            for ev in evs {
                match ev {
                    LinkEvent::LinkDown => {
                        DOWNS.fetch_add(1, Relaxed);
                        if self.mode == OnLinkDown::Exit {
                            // An interface being deleted goes down first and away a moment
                            // later, maybe after this look: give its next events a bounded
                            // moment, so that the cause said is the deletion.
                            let until = Instant::now() + Duration::from_millis(250);
                            while let Some(left) = until.checked_duration_since(Instant::now()) {
                                match w.events.next_event(Some(left)) {
                                    Ok(Some(ev)) if ev.is_fatal() => {
                                        return Some(rawq::link::fatal_error(&w.name, ev));
                                    }
                                    Ok(Some(_)) => {}
                                    Ok(None) | Err(_) => break,
                                }
                            }
                            return Some(rawq::Error::Link {
                                ifname: w.name.clone(),
                                detail: format!(
                                    "the link went down while {who} ran; bring it back (`ip \
                                     link`, the cable, the peer), or run with --on-link-down \
                                     wait to pause until it returns"
                                ),
                            });
                        }
                        say!(
                            "{who}: {}: link down: sending on it paused until it comes back",
                            w.name
                        );
                        w.down_since.get_or_insert_with(Instant::now);
                        PAUSED.fetch_or(1 << (p & 63), Relaxed);
                    }
                    LinkEvent::LinkUp => {
                        PAUSED.fetch_and(!(1 << (p & 63)), Relaxed);
                        if let Some(t) = w.down_since.take() {
                            add_down_time(t.elapsed());
                            say!(
                                "{who}: {}: link up after {:.1} s: sending resumes",
                                w.name,
                                t.elapsed().as_secs_f64()
                            );
                        }
                    }
                    LinkEvent::DeviceFatal | LinkEvent::InterfaceGone => {}
                }
            }
        }
        None
    }

    /// Ends the watch: a link still down counts its time until now.
    pub fn finish(&mut self) {
        for w in &mut self.ports {
            if let Some(t) = w.down_since.take() {
                add_down_time(t.elapsed());
            }
        }
    }
}

/// Adds the run's `"link_down": {"downs", "down_secs", "not_sent"}` to a summary object.
pub fn extend(v: &mut serde_json::Value) {
    if let Some(o) = v.as_object_mut() {
        o.insert(
            "link_down".into(),
            serde_json::json!({
                "downs": DOWNS.load(Relaxed),
                "down_secs": DOWN_NS.load(Relaxed) as f64 / 1e9,
                "not_sent": NOT_SENT.load(Relaxed),
            }),
        );
    }
}

/// The summary's text line, when a link went down.
pub fn text() -> Option<String> {
    let downs = DOWNS.load(Relaxed);
    (downs > 0).then(|| {
        format!(
            "link down {downs} time(s), {:.1} s in all: {} frames not sent meanwhile",
            DOWN_NS.load(Relaxed) as f64 / 1e9,
            NOT_SENT.load(Relaxed)
        )
    })
}
