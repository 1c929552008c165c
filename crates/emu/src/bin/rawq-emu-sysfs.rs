//! Writes the emulated device's sysfs tree into a directory (`scripts/emu.sh` points
//! `$SYSFS_PATH` at it). Configuration from the same environment as the emulator.

fn main() {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: rawq-emu-sysfs DIR");
        std::process::exit(2);
    };
    // Warnings about the configuration (a bad RAWQ_EMU_* value) reach stderr as the
    // interposer's do.
    rawq_emu::logger::install();
    let cfg = rawq_emu::config::Config::from_env();
    if let Err(e) = rawq_emu::discovery::sysfs::write_tree(std::path::Path::new(&dir), &cfg) {
        eprintln!(
            "rawq-emu-sysfs: cannot write the tree in {}: {e}",
            dir.to_string_lossy()
        );
        std::process::exit(1);
    }
}
