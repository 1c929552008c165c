//! Writing the tree: a file with its line of text, a symbolic link, each making the
//! directories it needs (used by [`super::sysfs`] and [`super::pci`] alike).

use std::fs;
use std::io;
use std::path::Path;

/// Writes `text` and a newline to `root/rel`, making its directories.
pub(super) fn put(root: &Path, rel: &str, text: &str) -> io::Result<()> {
    let p = root.join(rel);
    if let Some(dir) = p.parent() {
        fs::create_dir_all(dir)?;
    }
    fs::write(&p, format!("{text}\n"))
}

/// Makes `root/rel` a symbolic link to `target` (relative to the link's directory), replacing
/// a link already there.
pub(super) fn link(root: &Path, rel: &str, target: &str) -> io::Result<()> {
    let p = root.join(rel);
    if let Some(dir) = p.parent() {
        fs::create_dir_all(dir)?;
    }
    if fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
        fs::remove_file(&p)?;
    }
    std::os::unix::fs::symlink(target, &p)
}
