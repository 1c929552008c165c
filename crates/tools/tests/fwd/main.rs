//! rawq-fwd: a macswap reflector over AF_XDP, on the software device, and its receive modes.
//! The tests that run busy senders, forwarders and receivers hold [`serial`], one lock for the
//! three modules: on a two-core machine those runs must not overlap.

mod model;
mod reflector;
mod rx_mode;

/// The binary's lock: one test at a time, for every test that takes it.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}
