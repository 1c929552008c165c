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
    channel_tx: i32,
    user_handle: u64,
    async_tx: i32,
    reported: u32,
    async_reported: u32,
}

/// Event routing for the device, keyed by CQ number.
#[derive(Default)]
pub struct Events {
    cqs: Mutex<HashMap<u32, CqRoute>>,
    /// Completion channels: application fd → our end.
    channels: Mutex<HashMap<i32, i32>>,
    /// Our ends of channels the application closed while CQs still used them (the kernel keeps
    /// such a channel file alive until its last CQ is gone); closed with that CQ.
    closing: Mutex<HashSet<i32>>,
}

impl Events {
    /// Records a new completion channel.
    pub fn add_channel(&self, app_fd: i32, our_fd: i32) {
        if let Ok(mut c) = self.channels.lock() {
            c.insert(app_fd, our_fd);
        }
    }

    /// The application closed `fd`: if it was a completion channel, it is one no more (a CQ
    /// cannot be created on it: EBADF), and our end is closed once no CQ uses it.
    pub fn app_closed(&self, fd: i32) {
        let Some(ours) = self.channels.lock().ok().and_then(|mut c| c.remove(&fd)) else {
            return;
        };
        let used = self
            .cqs
            .lock()
            .is_ok_and(|c| c.values().any(|r| r.channel_tx == ours));
        if used {
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

    /// Routes `cqn`'s events.
    pub fn add_cq(&self, cqn: u32, channel_tx: Option<i32>, user_handle: u64, async_tx: i32) {
        if let Ok(mut c) = self.cqs.lock() {
            c.insert(
                cqn,
                CqRoute {
                    channel_tx: channel_tx.unwrap_or(-1),
                    user_handle,
                    async_tx,
                    reported: 0,
                    async_reported: 0,
                },
            );
        }
    }

    /// Stops routing `cqn`; returns (completion, async) events reported for it, which
    /// DESTROY_CQ returns (`ibv_destroy_cq` waits until the application acked as many).
    pub fn remove_cq(&self, cqn: u32) -> (u32, u32) {
        let Ok(mut cqs) = self.cqs.lock() else {
            return (0, 0);
        };
        let Some(r) = cqs.remove(&cqn) else {
            return (0, 0);
        };
        // The last CQ of a channel the application already closed: close our end.
        if r.channel_tx >= 0 && !cqs.values().any(|o| o.channel_tx == r.channel_tx) {
            if let Ok(mut closing) = self.closing.lock() {
                if closing.remove(&r.channel_tx) {
                    sys::close(r.channel_tx);
                }
            }
        }
        (r.reported, r.async_reported)
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
                    if r.channel_tx >= 0 && sys::send_event(r.channel_tx, uapi::bytes_of(&d)) {
                        r.reported += 1;
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
                    if r.async_tx >= 0 && sys::send_event(r.async_tx, uapi::bytes_of(&d)) {
                        r.async_reported += 1;
                    }
                }
            }
        }
    }
}
