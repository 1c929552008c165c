//! Completion-channel and async events, in the kernel's formats
//! (`uverbs_main.c: ib_uverbs_comp_handler`, `ib_uverbs_async_handler`): a completion event
//! is an `ib_uverbs_comp_event_desc{cq_handle = the CQ's user_handle}` (8 bytes) on the
//! channel's fd; an async event an `ib_uverbs_async_event_desc{element, event_type}` (16
//! bytes) on the context's async fd. libibverbs reads exactly one descriptor per read()
//! (`ibv_get_cq_event`, `ibv_get_async_event`), so each event is one SEQPACKET message.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use rawq_model::hw::HwEvent;

use crate::sys;
use crate::uapi::{self, ib_uverbs_async_event_desc, ib_uverbs_comp_event_desc};

/// `IB_EVENT_CQ_ERR` (`enum ib_event_type`, = `IBV_EVENT_CQ_ERR` in verbs.h).
const IB_EVENT_CQ_ERR: u32 = 0;

/// Where one CQ's completion events go.
#[derive(Clone, Copy, Debug)]
struct CqRoute {
    /// The channel: (application end, our end), -1 when none or closed.
    channel: (i32, i32),
    user_handle: u64,
    /// The context's async event fd: (application end, our end).
    async_fds: (i32, i32),
    /// Completion events queued for the application and not taken back.
    sent: u32,
    /// Async events likewise.
    async_sent: u32,
}

/// Event routing for the device, keyed by CQ number.
///
/// What DESTROY_CQ reports is what the application *read*: the kernel counts an event when
/// `ib_uverbs_event_read` (uverbs_main.c) hands it out, and `ib_uverbs_release_ucq` drops the
/// CQ's unread events from both queues; `ibv_destroy_cq` then waits until the application
/// acknowledged exactly that many (libibverbs `ibv_cmd_destroy_cq`). The queues here are
/// socket pairs the application reads directly, so at destroy time (and when the application
/// closes a queue's fd) the unread events are taken back out of the queue: the counts are the
/// events sent minus those, and the other CQs' events are put back in order.
#[derive(Default)]
pub struct Events {
    cqs: Mutex<HashMap<u32, CqRoute>>,
    /// Completion channels: application fd → our end.
    channels: Mutex<HashMap<i32, i32>>,
    /// Our ends of channels the application closed while CQs still used them (the kernel keeps
    /// such a channel file alive until its last CQ is gone); closed with that CQ.
    closing: Mutex<HashSet<i32>>,
}

/// `ib_uverbs_comp_event_desc` / `ib_uverbs_async_event_desc` sizes.
const COMP_DESC: usize = 8;
const ASYNC_DESC: usize = 16;

/// Takes every queued event out of the application's end `app`; those `keep` accepts are sent
/// again, in order, on our end `tx`. Returns the ones taken away.
fn take_back(app: i32, tx: i32, keep: impl Fn(&[u8]) -> bool) -> Vec<Vec<u8>> {
    let mut all = Vec::new();
    let mut buf = [0u8; 64];
    while let Some(n) = sys::recv_nowait(app, &mut buf) {
        all.push(buf[..n].to_vec());
    }
    let mut gone = Vec::new();
    for e in all {
        if keep(&e) {
            sys::send_event(tx, &e);
        } else {
            gone.push(e);
        }
    }
    gone
}

fn handle_of(e: &[u8]) -> u64 {
    crate::uapi::u64_at(e, 0)
}

impl Events {
    /// Records a new completion channel.
    pub fn add_channel(&self, app_fd: i32, our_fd: i32) {
        if let Ok(mut c) = self.channels.lock() {
            c.insert(app_fd, our_fd);
        }
    }

    /// The application is closing `fd`. If it is a completion channel, it is one no more (a CQ
    /// cannot be created on it: EBADF), and our end is closed once no CQ uses it. Events still
    /// queued on a closing channel or async fd can never be read: they stop counting.
    pub fn app_closed(&self, fd: i32) {
        let ours = self.channels.lock().ok().and_then(|mut c| c.remove(&fd));
        let Ok(mut cqs) = self.cqs.lock() else { return };
        let used = cqs
            .values()
            .any(|r| r.channel.0 == fd || r.async_fds.0 == fd);
        if used {
            for e in take_back(fd, -1, |_| false) {
                let h = handle_of(&e);
                if let Some(r) = cqs.values_mut().find(|r| r.user_handle == h) {
                    if e.len() == COMP_DESC && r.channel.0 == fd {
                        r.sent = r.sent.saturating_sub(1);
                    } else if e.len() == ASYNC_DESC && r.async_fds.0 == fd {
                        r.async_sent = r.async_sent.saturating_sub(1);
                    }
                }
            }
            for r in cqs.values_mut() {
                if r.channel.0 == fd {
                    r.channel.0 = -1;
                }
                if r.async_fds.0 == fd {
                    r.async_fds.0 = -1;
                }
            }
        }
        let Some(ours) = ours else { return };
        if cqs.values().any(|r| r.channel.1 == ours) {
            if let Ok(mut closing) = self.closing.lock() {
                closing.insert(ours);
            }
        } else {
            sys::close(ours);
        }
    }

    /// Our end of the channel the application knows as `app_fd`.
    pub fn channel(&self, app_fd: i32) -> Option<i32> {
        self.channels.lock().ok()?.get(&app_fd).copied()
    }

    /// Routes `cqn`'s events: to `channel` (application end, our end) if any, async events
    /// to the context's `async_fds` (application end, our end).
    pub fn add_cq(
        &self,
        cqn: u32,
        channel: Option<(i32, i32)>,
        user_handle: u64,
        async_fds: (i32, i32),
    ) {
        if let Ok(mut c) = self.cqs.lock() {
            c.insert(
                cqn,
                CqRoute {
                    channel: channel.unwrap_or((-1, -1)),
                    user_handle,
                    async_fds,
                    sent: 0,
                    async_sent: 0,
                },
            );
        }
    }

    /// Stops routing `cqn`; returns the (completion, async) events the application read, which
    /// DESTROY_CQ returns (`ib_uverbs_destroy_cq` → `comp_events_reported`,
    /// `async_events_reported`); its unread events leave the queues
    /// (`ib_uverbs_release_ucq`).
    pub fn remove_cq(&self, cqn: u32) -> (u32, u32) {
        let Ok(mut cqs) = self.cqs.lock() else {
            return (0, 0);
        };
        let Some(r) = cqs.remove(&cqn) else {
            return (0, 0);
        };
        let mine = |e: &[u8]| handle_of(e) == r.user_handle;
        let mut comp = r.sent;
        if r.channel.0 >= 0 && r.sent > 0 {
            let gone = take_back(r.channel.0, r.channel.1, |e| !mine(e));
            comp = comp.saturating_sub(gone.len() as u32);
        }
        let mut asy = r.async_sent;
        if r.async_fds.0 >= 0 && r.async_sent > 0 {
            let gone = take_back(r.async_fds.0, r.async_fds.1, |e| {
                !(mine(e) && crate::uapi::u64_at(e, 8) as u32 == IB_EVENT_CQ_ERR)
            });
            asy = asy.saturating_sub(gone.len() as u32);
        }
        // The last CQ of a channel the application already closed: close our end.
        let tx = r.channel.1;
        if tx >= 0 && !cqs.values().any(|o| o.channel.1 == tx) {
            if let Ok(mut closing) = self.closing.lock() {
                if closing.remove(&tx) {
                    sys::close(tx);
                }
            }
        }
        (comp, asy)
    }

    /// A device event.
    pub fn on_hw_event(&self, ev: HwEvent) {
        let Ok(mut cqs) = self.cqs.lock() else { return };
        match ev {
            HwEvent::Completion { cqn } => {
                if let Some(r) = cqs.get_mut(&cqn) {
                    let d = ib_uverbs_comp_event_desc {
                        cq_handle: r.user_handle,
                    };
                    if r.channel.1 >= 0 && sys::send_event(r.channel.1, uapi::bytes_of(&d)) {
                        r.sent += 1;
                    }
                }
            }
            HwEvent::CqError { cqn } => {
                if let Some(r) = cqs.get_mut(&cqn) {
                    let d = ib_uverbs_async_event_desc {
                        element: r.user_handle,
                        event_type: IB_EVENT_CQ_ERR,
                        reserved: 0,
                    };
                    if r.async_fds.1 >= 0 && sys::send_event(r.async_fds.1, uapi::bytes_of(&d)) {
                        r.async_sent += 1;
                    }
                }
            }
        }
    }
}
