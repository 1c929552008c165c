//! Rules at run time on the mlx5 device model and on AF_XDP. These two share a binary with
//! nothing else, and every test here holds [`serial`]: their leak checks count the whole
//! process's descriptors, which any other test's port, socket or pipe would disturb.

mod model;
mod xdp;

/// The binary's lock: one test at a time, for every test that takes it.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}
