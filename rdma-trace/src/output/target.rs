//! Where a capture stream's bytes go: stdout, memory, or a capture file — plain, or zstd
//! when its name ends in `.zst` — optionally rotated by size (`--max-size`, `--rotate`, as
//! tcpdump's `-C`/`-W`).
//!
//! Files are created with mode 0600: a capture holds kernel addresses.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// The byte stream under a `Jsonl` writer.
pub trait Target: Write {
    /// What errors name: the file being written, or "stdout".
    fn name(&self) -> String;
    /// Whether the current file is full: the writer closes it with a trailer and calls
    /// `rotate` at the next record boundary.
    fn rotate_due(&self) -> bool {
        false
    }
    /// The file `rotate` will open next.
    fn next_name(&self) -> String {
        String::new()
    }
    /// Closes the current file and opens the next one; returns its name.
    fn rotate(&mut self) -> io::Result<String> {
        Err(io::Error::other("this output does not rotate"))
    }
    /// The end of the stream: a compressed file writes its last frame.
    fn finish(&mut self) -> io::Result<()> {
        self.flush()
    }
}

impl Target for Vec<u8> {
    fn name(&self) -> String {
        "memory".into()
    }
}

impl Target for BufWriter<io::Stdout> {
    fn name(&self) -> String {
        "stdout".into()
    }
}

/// Size-based rotation: a new file once the current one holds `max_bytes` (of records,
/// before compression); with `keep`, only the newest `keep` files are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rotation {
    pub max_bytes: u64,
    pub keep: Option<u32>,
}

enum Out {
    Plain(BufWriter<File>),
    Zstd(zstd::stream::write::Encoder<'static, BufWriter<File>>),
}

/// A capture file on disk: created 0600, compressed by its name, rotated when asked.
pub struct CaptureFile {
    base: PathBuf,
    compress: bool,
    rotation: Option<Rotation>,
    /// The current file's number (0: `base` itself) and the bytes written into it.
    index: u32,
    written: u64,
    out: Out,
    current: PathBuf,
}

/// A compression level that keeps up with a flood on one core.
const ZSTD_LEVEL: i32 = 3;

impl CaptureFile {
    /// Creates the file at `base` (the first of a rotation).
    pub fn create(base: &Path, rotation: Option<Rotation>) -> io::Result<Self> {
        let compress = base.extension().is_some_and(|e| e == "zst");
        let out = open(base, compress, false)?;
        Ok(Self {
            base: base.to_path_buf(),
            compress,
            rotation,
            index: 0,
            written: 0,
            out,
            current: base.into(),
        })
    }

    fn out(&mut self) -> &mut dyn Write {
        match &mut self.out {
            Out::Plain(w) => w,
            Out::Zstd(z) => z,
        }
    }
}

/// The name of rotated file `index`: `dir/run.jsonl.zst` → `dir/run.3.jsonl.zst`.
pub fn rotated_name(base: &Path, index: u32) -> PathBuf {
    if index == 0 {
        return base.to_path_buf();
    }
    let file = base.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default();
    let name = match file.split_once('.') {
        Some((stem, exts)) if !stem.is_empty() => format!("{stem}.{index}.{exts}"),
        _ => format!("{file}.{index}"),
    };
    base.with_file_name(name)
}

/// Opens a capture file for writing, safely for a root tracer in a directory others can
/// write to: a symlink at the name is not followed (O_NOFOLLOW); an existing file is
/// emptied only when it is this user's; a rotated file (its name can be guessed) is made
/// new (O_EXCL), after removing an old one of this user's.
fn open(path: &Path, compress: bool, rotated: bool) -> io::Result<Out> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
    let mine = |m: &std::fs::Metadata| {
        // SAFETY: geteuid(2) cannot fail.
        let me = unsafe { libc::geteuid() };
        if m.uid() == me {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{} belongs to uid {}, not to this user: not overwritten", path.display(), m.uid()),
            ))
        }
    };
    let mut o = std::fs::OpenOptions::new();
    o.write(true).mode(0o600).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    if rotated {
        if let Ok(m) = std::fs::symlink_metadata(path)
            && m.is_file()
        {
            mine(&m)?;
            std::fs::remove_file(path)?;
        }
        o.create_new(true);
    } else {
        o.create(true);
    }
    let f = o.open(path).map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) => {
            io::Error::new(e.kind(), format!("{} is a symlink: not followed", path.display()))
        }
        _ => e,
    })?;
    let meta = f.metadata()?;
    // Regular files only: never truncate or chmod a device such as /dev/full or a FIFO.
    if meta.is_file() {
        mine(&meta)?;
        f.set_len(0)?;
        // An existing file keeps its mode through open(2).
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    let w = BufWriter::new(f);
    Ok(if compress { Out::Zstd(zstd::stream::write::Encoder::new(w, ZSTD_LEVEL)?) } else { Out::Plain(w) })
}

fn finish_out(out: &mut Out) -> io::Result<()> {
    match out {
        Out::Plain(w) => w.flush(),
        Out::Zstd(z) => {
            z.do_finish()?;
            z.get_mut().flush()
        }
    }
}

impl Write for CaptureFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out().write(buf)?;
        self.written += n as u64;
        Ok(n)
    }
    /// Written through to the file: a zstd frame is flushed so far (readable up to here).
    fn flush(&mut self) -> io::Result<()> {
        match &mut self.out {
            Out::Plain(w) => w.flush(),
            Out::Zstd(z) => {
                z.flush()?;
                z.get_mut().flush()
            }
        }
    }
}

impl Target for CaptureFile {
    fn name(&self) -> String {
        self.current.display().to_string()
    }
    fn rotate_due(&self) -> bool {
        self.rotation.is_some_and(|r| self.written >= r.max_bytes)
    }
    fn next_name(&self) -> String {
        rotated_name(&self.base, self.index + 1).display().to_string()
    }
    fn rotate(&mut self) -> io::Result<String> {
        let Some(r) = self.rotation else { return Err(io::Error::other("no rotation asked for")) };
        finish_out(&mut self.out)?;
        self.index += 1;
        self.current = rotated_name(&self.base, self.index);
        self.out = open(&self.current, self.compress, true)?;
        self.written = 0;
        if let Some(keep) = r.keep
            && self.index >= keep
        {
            let old = rotated_name(&self.base, self.index - keep);
            match std::fs::remove_file(&old) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    return Err(io::Error::new(e.kind(), format!("removing {}: {e}", old.display())));
                }
                _ => {}
            }
        }
        Ok(self.name())
    }
    fn finish(&mut self) -> io::Result<()> {
        finish_out(&mut self.out)
    }
}

/// Why a `--max-size` value is refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum MaxSizeError {
    #[error("{0:?}: the size suffix is K, M or G")]
    Suffix(String),
    #[error("{0:?} is not a size (such as 100M)")]
    NotASize(String),
    #[error("{0:?}: the size must be above 0")]
    Zero(String),
}

/// `--max-size` values: bytes, or with a K/M/G suffix (powers of 1024).
pub(crate) fn parse_size(s: &str) -> Result<u64, MaxSizeError> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                _ => return Err(MaxSizeError::Suffix(s.to_string())),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    let n: u64 = num.trim().parse().map_err(|_| MaxSizeError::NotASize(s.to_string()))?;
    n.checked_mul(mult).filter(|&b| b > 0).ok_or_else(|| MaxSizeError::Zero(s.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 41: a root tracer's `-o` in a directory others write to: a symlink planted at
    /// the name is refused, not followed; a file of another user's is not emptied; one's
    /// own old file is; a rotated name is made new even where an old one of ours was.
    #[test]
    fn capture_files_are_not_aimed_elsewhere() {
        let dir = std::env::temp_dir().join(format!("rt-target-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, "keep me\n").unwrap();
        let link = dir.join("cap.jsonl");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let err = CaptureFile::create(&link, None).err().expect("a symlink is refused");
        assert!(err.to_string().contains("is a symlink: not followed"), "{err}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
        std::fs::remove_file(&link).unwrap();

        std::fs::write(&link, "an old capture of mine\n").unwrap();
        let mut f = CaptureFile::create(&link, Some(Rotation { max_bytes: 1, keep: None })).unwrap();
        assert_eq!(std::fs::read(&link).unwrap().len(), 0, "one's own file is emptied");
        // An old rotated file of ours where the next one goes: replaced.
        std::fs::write(rotated_name(&link, 1), "old rotation\n").unwrap();
        f.write_all(b"x").unwrap();
        f.rotate().unwrap();
        f.finish().unwrap();
        assert_eq!(std::fs::read(rotated_name(&link, 1)).unwrap().len(), 0);

        // SAFETY: geteuid(2) cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(&victim, Some(65534), Some(65534)).unwrap();
            let err = CaptureFile::create(&victim, None).err().expect("another user's file is refused");
            assert!(err.to_string().contains("belongs to uid 65534"), "{err}");
            assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me\n");
        }
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn rotated_names_keep_the_extensions() {
        let b = Path::new("/tmp/run.jsonl.zst");
        assert_eq!(rotated_name(b, 0), b);
        assert_eq!(rotated_name(b, 3), Path::new("/tmp/run.3.jsonl.zst"));
        assert_eq!(rotated_name(Path::new("cap"), 2), Path::new("cap.2"));
        assert_eq!(rotated_name(Path::new(".hidden"), 1), Path::new(".hidden.1"));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("100M"), Ok(100 << 20));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("512"), Ok(512));
        assert!(parse_size("0").is_err());
        assert!(parse_size("10X").is_err());
        assert!(parse_size("lots").is_err());
    }
}
