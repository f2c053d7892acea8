//! Every file adeadvm reads whole (`.s` sources, `--input` and `npy(...)` arrays, the files of
//! the other constant sources, traces for `replay`, GGUF files) goes through [`read_file`]:
//!
//! - only a regular file is read. What the path names is checked with `metadata` before it is
//!   opened, so a FIFO with no writer is refused instead of blocking the open forever, and a
//!   device such as `/dev/zero` is refused instead of being read until memory runs out. The
//!   file is then opened non-blocking and checked again through the open handle, so a path
//!   swapped for a FIFO between the two checks cannot block either.
//! - at most `limit` bytes are read: a file whose length is over the limit is refused before any
//!   of it is read, and one that grows while it is read is refused once it passes the limit.
//! - the memory for the file is reserved fallibly, so a file larger than the memory left is an
//!   error, not an abort.
//!
//! (`.bib` programs have their own reader, [`crate::format::Program::load`], which reads a
//! stream no further than the length its header claims.)

use std::io::Read;
use std::path::Path;

/// The limit for files with no natural bound of their own (assembly sources, traces): 16 GiB.
/// A larger one is refused with [`std::io::ErrorKind::FileTooLarge`].
pub const DEFAULT_READ_LIMIT: u64 = 16 << 30;

/// Reads the regular file at `path` whole, refusing anything else and anything over `limit`
/// bytes. The error's text is the reason alone (`it is a FIFO, not a regular file ...`); callers
/// add the path.
pub fn read_file(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let meta = std::fs::metadata(path)?;
    check_regular(&meta)?;
    check_len(meta.len(), limit)?;
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // Non-blocking open: if the path became a FIFO after the check above, opening it must
        // not wait for a writer (for a regular file the flag changes nothing).
        options.custom_flags(libc::O_NONBLOCK);
    }
    let mut file = options.open(path)?;
    let meta = file.metadata()?;
    check_regular(&meta)?;
    check_len(meta.len(), limit)?;
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(meta.len() as usize).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::OutOfMemory,
            format!("its {} bytes do not fit in the memory left", meta.len()),
        )
    })?;
    // One byte past the limit tells a file that grew past it from one that ends at it.
    (&mut file).take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    check_len(bytes.len() as u64, limit)?;
    Ok(bytes)
}

/// Refuses a path that names a FIFO or a socket (metadata only, nothing is opened), for readers
/// that accept devices and streams but must not block on an open.
pub fn refuse_fifo(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if let Ok(meta) = std::fs::metadata(path) {
            if meta.file_type().is_fifo() || meta.file_type().is_socket() {
                return check_regular(&meta);
            }
        }
    }
    let _ = path;
    Ok(())
}

fn check_regular(meta: &std::fs::Metadata) -> std::io::Result<()> {
    if meta.is_file() {
        return Ok(());
    }
    let what = kind_of(meta);
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("it is {what}, not a regular file (adeadvm reads only regular files)"),
    ))
}

fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    if meta.is_dir() {
        return "a folder";
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        if t.is_fifo() {
            return "a FIFO";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
        if t.is_socket() {
            return "a socket";
        }
    }
    "something other than a file"
}

fn check_len(len: u64, limit: u64) -> std::io::Result<()> {
    if len <= limit {
        return Ok(());
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::FileTooLarge,
        format!("it is larger than the limit of {limit} bytes for this file"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_is_read_whole_within_its_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.bin");
        std::fs::write(&path, b"12345").unwrap();
        assert_eq!(read_file(&path, 5).unwrap(), b"12345");
        let err = read_file(&path, 4).unwrap_err();
        assert_eq!(err.to_string(), "it is larger than the limit of 4 bytes for this file");
    }

    #[test]
    fn devices_folders_and_fifos_are_refused_without_reading() {
        let err = read_file(Path::new("/dev/zero"), u64::MAX).unwrap_err();
        assert_eq!(
            err.to_string(),
            "it is a character device, not a regular file (adeadvm reads only regular files)"
        );
        let dir = tempfile::tempdir().unwrap();
        let err = read_file(dir.path(), u64::MAX).unwrap_err();
        assert_eq!(err.to_string(), "it is a folder, not a regular file (adeadvm reads only regular files)");
        let fifo = dir.path().join("pipe");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path that lives across the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // No writer ever opens the FIFO: a blocking open would wait here forever.
        let err = read_file(&fifo, u64::MAX).unwrap_err();
        assert_eq!(err.to_string(), "it is a FIFO, not a regular file (adeadvm reads only regular files)");
    }
}
