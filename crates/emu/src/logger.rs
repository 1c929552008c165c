//! How the emulator's messages reach the user. The emulator runs inside another process
//! (libibverbs' user, DPDK, a shell), so it logs through the `log` facade and, when it is
//! preloaded, installs a tiny logger of its own that writes its records to stderr, in the
//! spelling users and tests already read:
//!
//! * warnings and errors (a bad `RAWQ_EMU_*` value, a cable that cannot be made, a command
//!   that panicked): `rawq-emu: MESSAGE`, always;
//! * debug records (`RAWQ_EMU_DEBUG=1`: one line per command): `[rawq-emu] MESSAGE`.
//!
//! The interposer installs it at its first entry ([`install`]). Preloaded, `librawq_emu.so`
//! carries its own copy of the `log` crate, so this never takes the host program's logger
//! slot; linked as a Rust library (the rlib) without calling [`install`], the records go to
//! whatever logger the program set.

use std::io::Write;
use std::sync::Once;

/// Writes records to stderr, one line each.
struct Stderr;

static LOGGER: Stderr = Stderr;

impl log::Log for Stderr {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }

    fn log(&self, r: &log::Record<'_>) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let line = match r.level() {
            log::Level::Debug | log::Level::Trace => format!("[rawq-emu] {}\n", r.args()),
            _ => format!("rawq-emu: {}\n", r.args()),
        };
        // One write per line, so that lines of several threads do not interleave. A closed
        // stderr is nothing the emulator can report to anyone.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {}
}

/// The level the environment asks for: debug with `RAWQ_EMU_DEBUG` set (not `0`), else
/// warnings and errors.
pub fn level_from_env() -> log::LevelFilter {
    match std::env::var_os("RAWQ_EMU_DEBUG") {
        Some(v) if v != "0" => log::LevelFilter::Debug,
        _ => log::LevelFilter::Warn,
    }
}

/// Installs the stderr logger once, at [`level_from_env`], unless a logger is already set (then
/// that one receives the records).
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if log::set_logger(&LOGGER).is_ok() {
            log::set_max_level(level_from_env());
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_only_when_asked() {
        // The variable is read as the process has it; both answers are levels the logger
        // writes warnings at.
        assert!(level_from_env() >= log::LevelFilter::Warn);
    }
}
