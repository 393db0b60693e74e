//! Subscribing to a daemon (`trace --connect SOCKET`): no root and no RDMA needed on this
//! side. The stream is read with the capture reader; a refusal is the daemon's one line.

use super::{Hello, Want};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// Connects, says hello, and returns the stream (positioned at the daemon's first record),
/// or the daemon's refusal as the error.
pub fn connect(path: &Path, want: Want) -> Result<Box<dyn BufRead + Send>, String> {
    let mut s = UnixStream::connect(path)
        .map_err(|e| format!("cannot connect to the daemon at {}: {e}", path.display()))?;
    let hello = serde_json::to_string(&Hello::new(want)).expect("a hello serializes");
    // A daemon that refuses may close before the hello is written: its line is read below.
    if let Err(e) = writeln!(s, "{hello}")
        && !matches!(e.kind(), std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset)
    {
        return Err(format!("{}: {e}", path.display()));
    }
    let mut r = BufReader::new(s);
    let first = r.fill_buf().map_err(|e| format!("{}: {e}", path.display()))?;
    if first.starts_with(b"rdma-trace daemon:") {
        let mut line = String::new();
        r.read_line(&mut line).ok();
        return Err(line.trim().to_string());
    }
    if first.is_empty() {
        return Err(format!("{}: the daemon closed the connection", path.display()));
    }
    Ok(Box::new(r))
}

/// The stream as it is read, copied byte for byte to `out` and written through on every
/// read: `trace --connect -o FILE` keeps the daemon's records as the daemon numbered them,
/// and Ctrl-C loses nothing received.
pub struct Tee<R, W> {
    pub input: R,
    pub out: W,
}

impl<R: std::io::Read, W: Write> std::io::Read for Tee<R, W> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.input.read(buf)?;
        self.out.write_all(&buf[..n])?;
        self.out.flush()?;
        Ok(n)
    }
}
