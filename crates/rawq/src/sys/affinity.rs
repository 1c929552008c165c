//! CPU affinity: pinning the calling thread to a core (`sched_setaffinity(2)`).

use crate::error::{Error, Result};

/// Pins the calling thread to one CPU core.
///
/// # Errors
/// [`Error::Config`] if the core does not exist; [`Error::Os`] if the kernel refuses.
pub fn pin_to_core(core: usize) -> Result<()> {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    if core >= libc::CPU_SETSIZE as usize {
        return Err(Error::Config(format!(
            "core {core} does not exist ({n} online)"
        )));
    }
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `core` < CPU_SETSIZE, checked above.
    unsafe { libc::CPU_SET(core, &mut set) };
    // SAFETY: pid 0 = the calling thread; `set` is a valid cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(Error::last_os("sched_setaffinity"));
    }
    Ok(())
}
