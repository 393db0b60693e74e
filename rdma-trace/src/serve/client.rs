//! Subscribing to a daemon (`trace --connect SOCKET`): no root and no RDMA needed on this
//! side. The stream is read with the capture reader; a refusal is the daemon's one line.
//! A daemon on another host is reached over the user's own ssh: `ssh://[USER@]HOST[:PORT]
//! [/SOCKET]` runs `rdma-trace trace --connect SOCKET -o -` there and reads its stream.

use super::{Hello, Want};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// Why a source could not be opened; its text is what the person is told. The kind is
/// what a caller decides on: a socket nobody listens on yet may be a daemon still starting.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Nothing answers at the socket (not there, or nobody listening).
    #[error("cannot connect to the daemon at {}: {source}", path.display())]
    Unreachable { path: std::path::PathBuf, source: std::io::Error },
    /// The daemon answered and refused: its one line.
    #[error("{0}")]
    Refused(String),
    /// The conversation broke off (`what` says where and how).
    #[error("{0}")]
    Broken(String),
    /// The far side of an `ssh://` source ended before any record: what ssh or it said.
    #[error("{0}")]
    Remote(String),
    /// Not a source this build reads (a malformed `ssh://`, an unreadable file).
    #[error("{0}")]
    Unusable(String),
}

/// Connects, says hello, and returns the stream (positioned at the daemon's first record),
/// or the daemon's refusal as the error.
pub fn connect(path: &Path, want: Want) -> Result<Box<dyn BufRead + Send>, ConnectError> {
    connect_as(path, Hello::new(want))
}

/// Connects with `hello` (it may ask for stand-ins of kernel addresses).
pub(crate) fn connect_as(path: &Path, hello: Hello) -> Result<Box<dyn BufRead + Send>, ConnectError> {
    let mut s = UnixStream::connect(path)
        .map_err(|source| ConnectError::Unreachable { path: path.to_path_buf(), source })?;
    let hello = serde_json::to_string(&hello).expect("a hello serializes");
    // A daemon that refuses may close before the hello is written: its line is read below.
    if let Err(e) = writeln!(s, "{hello}")
        && !matches!(e.kind(), std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset)
    {
        return Err(ConnectError::Broken(format!("{}: {e}", path.display())));
    }
    let mut r = BufReader::new(s);
    let first = r.fill_buf().map_err(|e| ConnectError::Broken(format!("{}: {e}", path.display())))?;
    if first.starts_with(b"rdma-trace daemon:") {
        let mut line = String::new();
        r.read_line(&mut line).ok();
        return Err(ConnectError::Refused(line.trim().to_string()));
    }
    if first.is_empty() {
        return Err(ConnectError::Broken(format!("{}: the daemon closed the connection", path.display())));
    }
    Ok(Box::new(r))
}

/// The stream as it is read, copied byte for byte to `out` and written through on every
/// read: `trace --connect -o FILE` keeps the daemon's records as the daemon numbered them,
/// and Ctrl-C loses nothing received.
pub(crate) struct Tee<R, W> {
    pub input: R,
    pub out: W,
    /// The start of a line not yet whole: written once its newline comes, so a stream
    /// left in the middle (`--duration`, Ctrl-C) keeps whole records only.
    pub partial: Vec<u8>,
}

impl<R, W> Tee<R, W> {
    pub(crate) fn new(input: R, out: W) -> Self {
        Tee { input, out, partial: Vec::new() }
    }
}

impl<R: std::io::Read, W: Write> std::io::Read for Tee<R, W> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.input.read(buf)?;
        let got = &buf[..n];
        match got.iter().rposition(|&b| b == b'\n') {
            Some(end) => {
                self.out.write_all(&self.partial)?;
                self.partial.clear();
                self.out.write_all(&got[..=end])?;
                self.partial.extend_from_slice(&got[end + 1..]);
                self.out.flush()?;
            }
            None => self.partial.extend_from_slice(got),
        }
        Ok(n)
    }
}

/// Where a stream of records comes from: a daemon's Unix socket here, a daemon on another
/// host reached over ssh, a capture file, or `-` (standard input).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    Socket(std::path::PathBuf),
    Ssh {
        destination: String,
        port: Option<u16>,
        socket: String,
    },
    /// A capture (plain or zstd), or `-`: read as it is, without the replay's clock.
    File(std::path::PathBuf),
}

/// The daemon's socket when `ssh://HOST` names none.
pub(crate) const REMOTE_SOCKET: &str = super::socket::DEFAULT_SOCKET;

impl Source {
    /// `ssh://[USER@]HOST[:PORT][/SOCKET]` (the socket an absolute path); `-` or a regular
    /// file, a capture; else a socket path (which may not be there yet: a daemon starting).
    pub(crate) fn parse(spec: &Path) -> Result<Source, ConnectError> {
        let bad = |why: String| ConnectError::Unusable(why);
        let Some(rest) = spec.to_str().and_then(|s| s.strip_prefix("ssh://")) else {
            let file = spec == Path::new("-") || std::fs::metadata(spec).is_ok_and(|m| m.is_file());
            return Ok(if file {
                Source::File(spec.to_path_buf())
            } else {
                Source::Socket(spec.to_path_buf())
            });
        };
        let (authority, socket) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, REMOTE_SOCKET.to_string()),
        };
        let (destination, port) = match authority.rsplit_once(':') {
            Some((d, p)) => {
                (d, Some(p.parse::<u16>().map_err(|_| bad(format!("{}: not a port: {p}", spec.display())))?))
            }
            None => (authority, None),
        };
        if socket.contains(['\'', '\\']) || socket.chars().any(char::is_control) {
            return Err(bad(format!(
                "{}: the socket path cannot hold quotes or control characters",
                spec.display()
            )));
        }
        if destination.is_empty() || destination.starts_with('-') {
            return Err(bad(format!(
                "{}: no host to reach (ssh://[USER@]HOST[:PORT][/SOCKET])",
                spec.display()
            )));
        }
        Ok(Source::Ssh { destination: destination.to_string(), port, socket })
    }

    /// How it is named on screen.
    pub(crate) fn name(&self) -> String {
        match self {
            Source::Socket(p) | Source::File(p) => p.display().to_string(),
            Source::Ssh { destination, socket, .. } => format!("ssh://{destination}{socket}"),
        }
    }

    /// The daemon's stream (positioned at its first record), or why not.
    pub(crate) fn open(&self, want: Want) -> Result<Box<dyn BufRead + Send>, ConnectError> {
        self.open_redacted(want, false)
    }

    /// The same, kernel addresses as stand-ins when `redact` (a daemon's: a capture file
    /// is read as it was written, and says in its header whether it was redacted).
    pub(crate) fn open_redacted(
        &self,
        want: Want,
        redact: bool,
    ) -> Result<Box<dyn BufRead + Send>, ConnectError> {
        match self {
            Source::Socket(p) => connect_as(p, Hello { redact, ..Hello::new(want) }),
            Source::Ssh { destination, port, socket } => over_ssh(destination, *port, socket, redact),
            Source::File(_) if redact => Err(ConnectError::Unusable(format!(
                "{}: --redact asks a daemon for stand-ins; a capture file is read as it was written (make it with trace --redact)",
                self.name()
            ))),
            Source::File(p) => {
                let e =
                    |e: std::io::Error| ConnectError::Unusable(format!("cannot read {}: {e}", p.display()));
                crate::source::capture::open(p).map_err(e)
            }
        }
    }
}

/// The ssh command: `RDMA_TRACE_SSH` (words, like `GIT_SSH_COMMAND`: `ssh -i key -o …`),
/// else `ssh`; never asking for a password on the terminal the screens own.
fn ssh_command() -> std::process::Command {
    let words = std::env::var("RDMA_TRACE_SSH").unwrap_or_else(|_| "ssh".into());
    let mut words = words.split_whitespace();
    let mut c = std::process::Command::new(words.next().unwrap_or("ssh"));
    c.args(words).args(["-T", "-o", "BatchMode=yes"]);
    c
}

/// Runs `rdma-trace trace --connect SOCKET -o -` on `destination` (the far side's
/// `rdma-trace`, or `RDMA_TRACE_REMOTE_BIN`) and returns its stream; what ssh or the far
/// side said, if it ended before any record, is the error.
fn over_ssh(
    destination: &str,
    port: Option<u16>,
    socket: &str,
    redact: bool,
) -> Result<Box<dyn BufRead + Send>, ConnectError> {
    use std::process::Stdio;
    let remote = std::env::var("RDMA_TRACE_REMOTE_BIN").unwrap_or_else(|_| "rdma-trace".into());
    let mut c = ssh_command();
    if let Some(p) = port {
        c.args(["-p", &p.to_string()]);
    }
    let redact = if redact { " --redact" } else { "" };
    c.arg("--").arg(destination).arg(format!("{remote} trace --connect '{socket}'{redact} -o -"));
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| ConnectError::Unusable(format!("ssh://{destination}: cannot run ssh: {e}")))?;
    let said = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let mut stderr = child.stderr.take().expect("piped");
    let keep = said.clone();
    std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut text).ok();
        if let Ok(mut s) = keep.lock() {
            s.push_str(&text);
        }
    });
    let mut r = BufReader::new(ChildStream { out: child.stdout.take().expect("piped"), child });
    let empty = r.fill_buf().map(<[u8]>::is_empty).unwrap_or(true);
    if empty {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let said = said.lock().map(|s| s.trim().to_string()).unwrap_or_default();
        let said = said.lines().last().unwrap_or("no stream").to_string();
        return Err(ConnectError::Remote(format!("ssh://{destination}{socket}: {said}")));
    }
    Ok(Box::new(r))
}

/// A child's stdout that reaps the child when dropped.
struct ChildStream {
    out: std::process::ChildStdout,
    child: std::process::Child,
}

impl std::io::Read for ChildStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.out.read(buf)
    }
}

impl Drop for ChildStream {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_a_socket_or_an_ssh_destination() {
        let p = |s: &str| Source::parse(Path::new(s)).map_err(|e| e.to_string());
        assert_eq!(p("/run/x.sock"), Ok(Source::Socket("/run/x.sock".into())));
        assert_eq!(p("-"), Ok(Source::File("-".into())));
        let capture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/lab/pair-7.3.host2.jsonl.zst");
        assert_eq!(p(capture), Ok(Source::File(capture.into())));
        assert_eq!(
            p("ssh://root@host-b"),
            Ok(Source::Ssh { destination: "root@host-b".into(), port: None, socket: REMOTE_SOCKET.into() })
        );
        assert_eq!(
            p("ssh://host-b:2222/tmp/d.sock"),
            Ok(Source::Ssh { destination: "host-b".into(), port: Some(2222), socket: "/tmp/d.sock".into() })
        );
        assert!(p("ssh://host:port").unwrap_err().contains("not a port"));
        assert!(p("ssh://-oProxyCommand=x").unwrap_err().contains("no host"));
        assert!(p("ssh:///sock").unwrap_err().contains("no host"));
        assert!(p("ssh://h/tmp/a'; rm -rf x").unwrap_err().contains("quotes"));
    }
}
