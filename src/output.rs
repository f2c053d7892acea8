//! Every file adeadvm writes (`asm -o`, `disasm -o` and its `.npy` constants, `run --output`,
//! `--record`, `--profile-json`, [`crate::npy::write`], [`crate::trace::Trace::save`]) goes
//! through an [`OutputBatch`] ([`write_atomically`] is a batch of one): a failure (an
//! unwritable folder, a full disk, a run that fails later) never leaves a half-written file, a
//! file already at the path is either replaced whole or left as it was, and a run with several
//! results replaces all of them or none.
//!
//! Each file is first written whole to a temporary in its target's folder (so the final rename
//! stays on one file system and is atomic) and flushed to disk; only when every file of the
//! batch is written are they renamed over their targets. On Linux the temporary is an
//! anonymous file (`O_TMPFILE`) that gets a name only at the commit, so a process killed while
//! writing (even with `kill -9`) leaves nothing behind; where the file system has no
//! `O_TMPFILE`, a named temporary (`.NAME.PID.N.tmp`) is used and removed on every error.
//!
//! A path that is not a regular file is written through, never replaced: `-o /dev/null` or a
//! FIFO gets the bytes directly at the commit (there is nothing to leave half-written, and
//! renaming over `/dev/null` as root would turn the system's null device into a file), and a
//! symbolic link keeps being a link while the file it names is replaced atomically.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes `bytes` to `path` through a temporary file in the same folder, flushed to disk before
/// the rename. On any error nothing is left behind and `path` is untouched.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut batch = OutputBatch::new();
    batch.stage(path, bytes)?;
    batch.commit()
}

/// Files written together: [`OutputBatch::stage`] writes each to a temporary,
/// [`OutputBatch::commit`] puts them all in place. Dropping a batch without committing it
/// removes its temporaries and changes nothing.
#[derive(Default)]
pub struct OutputBatch {
    staged: Vec<Staged>,
}

enum Staged {
    /// A device or FIFO: written at the commit.
    Direct { target: PathBuf, bytes: Vec<u8> },
    /// An anonymous file in the target's folder, named at the commit.
    #[cfg(target_os = "linux")]
    Anonymous { file: File, dir: PathBuf, target: PathBuf },
    /// A named temporary, renamed at the commit (removed on drop if still there).
    Named { tmp: PathBuf, target: PathBuf },
}

impl OutputBatch {
    /// An empty batch.
    pub fn new() -> OutputBatch {
        OutputBatch::default()
    }

    /// Writes `bytes` for `path` to a temporary file (flushed to disk); `path` itself is not
    /// touched until [`OutputBatch::commit`].
    pub fn stage(&mut self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        self.stage_parts(path, &[bytes])
    }

    /// [`OutputBatch::stage`] for a file made of several pieces, written in order.
    pub fn stage_parts(&mut self, path: &Path, parts: &[&[u8]]) -> std::io::Result<()> {
        // Follows links to what the path finally names; a dangling or missing path is created.
        let resolved;
        let path = match std::fs::metadata(path) {
            // Found now, not by the rename at the commit: a batch whose later file cannot be put
            // in place must fail before the first one replaces anything.
            Ok(meta) if meta.is_dir() => {
                return Err(std::io::Error::new(std::io::ErrorKind::IsADirectory, "it is a folder"));
            }
            Ok(meta) if !meta.is_file() => {
                self.staged.push(Staged::Direct { target: path.to_path_buf(), bytes: parts.concat() });
                return Ok(());
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
        if path.file_name().is_none() {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a file path"));
        }
        let target = path.to_path_buf();
        #[cfg(target_os = "linux")]
        if let Some(mut file) = anonymous_file(&dir) {
            for part in parts {
                file.write_all(part)?;
            }
            file.sync_all()?;
            self.staged.push(Staged::Anonymous { file, dir, target });
            return Ok(());
        }
        let tmp = temp_name(&target, &dir);
        // Pushed before writing, so the temporary is removed (on drop) whatever fails next.
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        self.staged.push(Staged::Named { tmp, target });
        for part in parts {
            file.write_all(part)?;
        }
        file.sync_all()
    }

    /// Puts every staged file in place: anonymous files get their temporary names, then all are
    /// renamed over their targets. An error before the renames changes nothing.
    pub fn commit(mut self) -> std::io::Result<()> {
        #[cfg(target_os = "linux")]
        for staged in &mut self.staged {
            if let Staged::Anonymous { file, dir, target } = staged {
                let tmp = temp_name(target, dir);
                link_anonymous(file, &tmp)?;
                *staged = Staged::Named { tmp, target: std::mem::take(target) };
            }
        }
        for staged in &self.staged {
            if let Staged::Named { tmp, target } = staged {
                std::fs::rename(tmp, target)?;
            }
        }
        for staged in std::mem::take(&mut self.staged) {
            if let Staged::Direct { target, bytes } = staged {
                // A device or a FIFO: write straight to it (truncate is a no-op there).
                std::fs::OpenOptions::new().write(true).open(&target)?.write_all(&bytes)?;
            }
        }
        Ok(())
    }
}

impl Drop for OutputBatch {
    fn drop(&mut self) {
        for staged in &self.staged {
            if let Staged::Named { tmp, .. } = staged {
                // Already renamed after a successful commit's rename: then there is nothing here.
                let _ = std::fs::remove_file(tmp);
            }
        }
    }
}

/// Unique per process and per call, so concurrent writers (threads or processes) never share a
/// temporary file; `create_new` (or `linkat`) refuses to follow or reuse anything already there.
fn temp_name(target: &Path, dir: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    dir.join(format!(".{name}.{}.{}.tmp", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)))
}

/// An unnamed file in `dir` (`O_TMPFILE`), or None where the file system or kernel has none.
#[cfg(target_os = "linux")]
fn anonymous_file(dir: &Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .mode(0o666)
        .custom_flags(libc::O_TMPFILE)
        .open(dir)
        .ok()
        // Needs /proc to be linked later (see `link_anonymous`); without it, use a named file.
        .filter(|_| Path::new("/proc/self/fd").is_dir())
}

/// Gives an `O_TMPFILE` file the name `tmp` (which must not exist).
#[cfg(target_os = "linux")]
fn link_anonymous(file: &File, tmp: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let from = std::ffi::CString::new(format!("/proc/self/fd/{}", file.as_raw_fd()))
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    let to = std::ffi::CString::new(tmp.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    // SAFETY: both are valid NUL-terminated strings that outlive the call; linkat only reads them.
    // Linking through /proc/self/fd with AT_SYMLINK_FOLLOW is the unprivileged way to name an
    // O_TMPFILE file (AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH).
    let rc = unsafe {
        libc::linkat(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::AT_SYMLINK_FOLLOW)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn staged_files_are_invisible_until_the_commit_and_a_dropped_batch_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.npy"), dir.path().join("b.npy"));
        std::fs::write(&a, b"old a").unwrap();
        let mut batch = OutputBatch::new();
        batch.stage(&a, b"new a").unwrap();
        batch.stage(&b, b"new b").unwrap();
        // On Linux the staged files are anonymous: a kill -9 here would leave nothing.
        #[cfg(target_os = "linux")]
        assert_eq!(names(dir.path()), ["a.npy"]);
        assert_eq!(std::fs::read(&a).unwrap(), b"old a");
        drop(batch);
        assert_eq!(names(dir.path()), ["a.npy"]);
        assert_eq!(std::fs::read(&a).unwrap(), b"old a");

        let mut batch = OutputBatch::new();
        batch.stage(&a, b"new a").unwrap();
        batch.stage(&b, b"new b").unwrap();
        batch.commit().unwrap();
        assert_eq!(names(dir.path()), ["a.npy", "b.npy"]);
        assert_eq!(std::fs::read(&a).unwrap(), b"new a");
        assert_eq!(std::fs::read(&b).unwrap(), b"new b");
    }

    #[test]
    fn a_batch_whose_later_file_cannot_be_staged_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.npy");
        std::fs::write(&a, b"old a").unwrap();
        let mut batch = OutputBatch::new();
        batch.stage(&a, b"new a").unwrap();
        assert!(batch.stage(&dir.path().join("missing/b.npy"), b"new b").is_err());
        drop(batch);
        assert_eq!(names(dir.path()), ["a.npy"]);
        assert_eq!(std::fs::read(&a).unwrap(), b"old a");
    }
}
