//! Every file adeadvm writes (`asm -o`, `disasm -o` and its `.npy` constants, `run --output`,
//! `--record`, `--profile-json`, [`crate::npy::write`], [`crate::trace::Trace::save`]) goes
//! through [`write_atomically`]: a failure (an unwritable folder, a full disk, a run that fails
//! later) never leaves a half-written file, and a file already at the path is either replaced
//! whole or left as it was.
//!
//! A path that is not a regular file is written through, never replaced: `-o /dev/null` or a
//! FIFO gets the bytes directly (there is nothing to leave half-written, and renaming over
//! `/dev/null` as root would turn the system's null device into a file), and a symbolic link
//! keeps being a link while the file it names is replaced atomically.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes `bytes` to `path` through a temporary file in the same folder (so the final rename
/// stays on one file system and is atomic), flushed to disk before the rename. On any error the
/// temporary file is removed and `path` is untouched.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    // Follows links to what the path finally names; a dangling or missing path is created.
    let resolved;
    let path = match std::fs::metadata(path) {
        Ok(meta) if !meta.is_file() && !meta.is_dir() => {
            // A device or a FIFO: write straight to it (truncate is a no-op there).
            return std::fs::OpenOptions::new().write(true).open(path)?.write_all(bytes);
        }
        Ok(meta) if meta.is_file() && std::fs::symlink_metadata(path)?.file_type().is_symlink() => {
            resolved = std::fs::canonicalize(path)?;
            resolved.as_path()
        }
        _ => path,
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file path"))?;
    // Unique per process and per call, so concurrent writers (threads or processes) never
    // share a temporary file; `create_new` refuses to follow or reuse anything already there.
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
