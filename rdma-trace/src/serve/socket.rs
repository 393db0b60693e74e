//! The daemon's Unix socket: who may subscribe (SO_PEERCRED: root, the daemon's own user,
//! and the uids given with `--allow-uid`), the hello line, and handing the connection to
//! the broadcaster. Anyone else gets one line saying so, and the connection is closed.

use super::{Hello, Joining};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where the daemon listens unless told otherwise.
pub(crate) const DEFAULT_SOCKET: &str = "/run/rdma-trace.sock";

/// A subscriber has this long to say hello, all of it.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// A write to a subscriber that takes longer than this ends its stream: one that stopped
/// reading frees its thread and queue (a slow one loses records and is told, long before).
pub(crate) const WRITE_DEADLINE: Duration = Duration::from_secs(60);
/// How long a refused peer's bytes are drained on its greeting thread.
const REFUSE_WAIT: Duration = Duration::from_millis(200);
/// The longest hello read (a real one is under 100 bytes).
pub const MAX_HELLO: u64 = 4096;
/// Connections of uids other than root being greeted at once; past this a new one is told
/// the daemon is busy.
pub const MAX_GREETING: usize = 32;
/// Connections of one uid being greeted at once (root's too): one user's silent or slow
/// connections cannot take every slot, and root always has slots of its own.
pub const MAX_GREETING_PER_UID: usize = 8;

/// The greeting slots held now, by uid.
#[derive(Default)]
struct Slots {
    /// Held by uids other than root.
    others: usize,
    by_uid: std::collections::HashMap<u32, usize>,
}

impl Slots {
    /// A slot for a connection of `uid`, or the line it is refused with.
    fn take(&mut self, uid: u32) -> Result<(), &'static str> {
        let mine = self.by_uid.get(&uid).copied().unwrap_or(0);
        if mine >= MAX_GREETING_PER_UID {
            return Err("refused: busy greeting this user's other connections; try again");
        }
        if uid != 0 && self.others >= MAX_GREETING {
            return Err("refused: busy greeting other subscribers; try again");
        }
        *self.by_uid.entry(uid).or_default() += 1;
        self.others += usize::from(uid != 0);
        Ok(())
    }

    fn give_back(&mut self, uid: u32) {
        if let Some(n) = self.by_uid.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                self.by_uid.remove(&uid);
            }
            self.others -= usize::from(uid != 0);
        }
    }
}

/// The peer's pid, uid and gid, from the kernel.
pub(crate) fn peer_cred(s: &UnixStream) -> std::io::Result<libc::ucred> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt(2) SO_PEERCRED into a ucred of the size given.
    let r = unsafe {
        libc::getsockopt(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, (&raw mut cred).cast(), &mut len)
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cred)
}

/// The daemon's Unix socket, where subscribers connect.
pub struct Listener {
    listener: UnixListener,
    path: PathBuf,
    allowed: Vec<u32>,
}

impl Listener {
    /// Binds `path` (a stale socket file of a killed daemon is replaced). The file is mode
    /// 0600 unless other users are allowed, then 0666 and SO_PEERCRED decides.
    pub fn bind(path: &Path, allow_uids: &[u32]) -> std::io::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            use std::os::unix::fs::FileTypeExt;
            if !meta.file_type().is_socket() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    format!("{} exists and is not a socket", path.display()),
                ));
            }
            if UnixStream::connect(path).is_ok() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    format!("a daemon already listens on {}", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        let listener = UnixListener::bind(path)?;
        // SAFETY: geteuid(2) cannot fail.
        let me = unsafe { libc::geteuid() };
        let mut allowed = vec![0, me];
        allowed.extend_from_slice(allow_uids);
        allowed.sort_unstable();
        allowed.dedup();
        let others = allowed.iter().any(|&u| u != 0 && u != me);
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(if others { 0o666 } else { 0o600 }))?;
        Ok(Listener { listener, path: path.to_path_buf(), allowed })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Accepts subscribers until the process ends, each checked and greeted on a thread of
    /// its own; accepted ones go to `joins`. Refusals and broken hellos are reported on
    /// `notes`.
    pub fn serve(self, joins: Sender<Joining>, notes: Sender<String>) {
        let slots = Arc::new(Mutex::new(Slots::default()));
        std::thread::spawn(move || {
            let mut out_of_fds = false;
            for conn in self.listener.incoming() {
                let mut conn = match conn {
                    Ok(c) => c,
                    // Out of descriptors: accepting again at once would spin. Back off, and
                    // say so once (until a connection is accepted again).
                    Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                        if !out_of_fds {
                            notes.send(format!("accepting subscribers: {e}; retrying every 100 ms")).ok();
                            out_of_fds = true;
                        }
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    }
                    Err(_) => continue,
                };
                out_of_fds = false;
                // A uid that may not subscribe is told on this thread, at once: refusals
                // take no greeting slot.
                if let Some((peer, why)) = not_allowed(&conn, &self.allowed) {
                    refuse(&mut conn, &why, Duration::ZERO);
                    notes.send(format!("refused {peer}: not an allowed uid")).ok();
                    continue;
                }
                // Bounded: a flood of connections that never say hello costs at most
                // MAX_GREETING + MAX_GREETING_PER_UID threads and buffers of MAX_HELLO bytes,
                // and one user's flood leaves root's slots and others' alone.
                let uid = peer_cred(&conn).map_or(u32::MAX, |c| c.uid);
                let taken = slots
                    .lock()
                    .map_err(|_| "refused: the daemon's greeting failed")
                    .and_then(|mut s| s.take(uid));
                if let Err(why) = taken {
                    // On the accepting thread: only what is already queued is drained.
                    refuse(&mut conn, why, Duration::ZERO);
                    notes.send(format!("refused a subscriber of uid {uid}: {why}")).ok();
                    continue;
                }
                let (joins, allowed) = (joins.clone(), self.allowed.clone());
                let (notes_, slots_) = (notes.clone(), slots.clone());
                let spawned = std::thread::Builder::new().name("rdma-trace-greet".into()).spawn(move || {
                    if let Err(why) = greet(conn, &allowed, &joins) {
                        notes_.send(why.to_string()).ok();
                    }
                    if let Ok(mut s) = slots_.lock() {
                        s.give_back(uid);
                    }
                });
                // No thread for it (the connection, moved in, is closed): said, not a panic.
                if let Err(e) = spawned {
                    if let Ok(mut s) = slots.lock() {
                        s.give_back(uid);
                    }
                    notes.send(format!("refused a subscriber: no thread to greet it ({e})")).ok();
                }
            }
        });
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        std::fs::remove_file(&self.path).ok();
    }
}

/// One line to a peer that will not be served, then the connection closed. What it sent
/// is read and thrown away first (at most 64 KiB, for at most `wait`; nothing more than is
/// already queued when `wait` is zero): closing a Unix socket with unread data would reset
/// the peer before it reads the refusal.
fn refuse(conn: &mut UnixStream, why: &str, wait: Duration) {
    writeln!(conn, "rdma-trace daemon: {why}").ok();
    conn.shutdown(std::net::Shutdown::Write).ok();
    let deadline = std::time::Instant::now() + wait;
    let mut sink = [0u8; 4096];
    let mut left = 16 * MAX_HELLO;
    while left > 0 {
        let rest = deadline.saturating_duration_since(std::time::Instant::now());
        let set = if rest.is_zero() { conn.set_nonblocking(true) } else { conn.set_read_timeout(Some(rest)) };
        match set.and_then(|()| conn.read(&mut sink)) {
            Ok(n) if n > 0 => left = left.saturating_sub(n as u64),
            _ => break,
        }
    }
}

/// The peer (as the daemon's notices name it) and the line it is refused with, if its uid
/// may not subscribe (or its credentials cannot be read).
fn not_allowed(conn: &UnixStream, allowed: &[u32]) -> Option<(String, String)> {
    let cred = match peer_cred(conn) {
        Ok(c) => c,
        Err(e) => return Some(("a peer".into(), format!("refused: its credentials cannot be read ({e})"))),
    };
    if allowed.contains(&cred.uid) {
        return None;
    }
    let list: Vec<String> = allowed.iter().map(u32::to_string).collect();
    let why = format!(
        "refused: uid {} may not subscribe (allowed uids: {}; the daemon's --allow-uid adds one)",
        cred.uid,
        list.join(", ")
    );
    Some((format!("pid {} uid {}", cred.pid, cred.uid), why))
}

/// Why a subscriber was not greeted (the daemon's note names the peer: pid and uid).
#[derive(Debug, thiserror::Error)]
enum GreetError {
    #[error("a subscriber's credentials: {0}")]
    Credentials(std::io::Error),
    #[error("refused {0}: not an allowed uid")]
    NotAllowed(String),
    #[error("{peer}: no hello ({source})")]
    NoHello { peer: String, source: std::io::Error },
    #[error("{0}: no hello line within {MAX_HELLO} bytes")]
    TooLong(String),
    #[error("{peer}: bad hello ({source})")]
    BadHello { peer: String, source: serde_json::Error },
    #[error("{peer}: hello for format {version}")]
    OldFormat { peer: String, version: u32 },
    #[error("the daemon is stopping")]
    Stopping,
}

/// Checks who the peer is, reads its hello (at most `MAX_HELLO` bytes, within
/// `HELLO_TIMEOUT`), and passes the connection on.
fn greet(mut conn: UnixStream, allowed: &[u32], joins: &Sender<Joining>) -> Result<(), GreetError> {
    let cred = peer_cred(&conn).map_err(GreetError::Credentials)?;
    let peer = format!("pid {} uid {}", cred.pid, cred.uid);
    if let Some((peer, why)) = not_allowed(&conn, allowed) {
        refuse(&mut conn, &why, REFUSE_WAIT);
        return Err(GreetError::NotAllowed(peer));
    }
    let line = match read_hello(&conn) {
        Ok(l) => l,
        Err(source) => {
            refuse(&mut conn, &format!("refused: no hello ({source})"), Duration::ZERO);
            return Err(GreetError::NoHello { peer, source });
        }
    };
    if !line.ends_with('\n') {
        refuse(&mut conn, &format!("refused: no hello line within {MAX_HELLO} bytes"), REFUSE_WAIT);
        return Err(GreetError::TooLong(peer));
    }
    let hello: Hello = match serde_json::from_str(line.trim()) {
        Ok(h) => h,
        Err(source) => {
            writeln!(conn, "rdma-trace daemon: refused: the first line must be a hello ({source})").ok();
            return Err(GreetError::BadHello { peer, source });
        }
    };
    if hello.hello != "rdma-trace" || hello.version < crate::capture::VERSION {
        writeln!(conn, "rdma-trace daemon: refused: this daemon speaks format {}", crate::capture::VERSION)
            .ok();
        return Err(GreetError::OldFormat { peer, version: hello.version });
    }
    conn.set_read_timeout(None).ok();
    conn.set_write_timeout(Some(WRITE_DEADLINE)).ok();
    joins.send(Joining { out: Box::new(conn), hello, peer, uid: cred.uid }).map_err(|_| GreetError::Stopping)
}

/// The hello line (at most `MAX_HELLO` bytes, newline included when there was one), within
/// `HELLO_TIMEOUT` for all of it: a byte now and then does not hold the greeting open.
fn read_hello(conn: &UnixStream) -> std::io::Result<String> {
    let deadline = std::time::Instant::now() + HELLO_TIMEOUT;
    let mut buf = Vec::new();
    let mut byte = [0u8; 256];
    while buf.len() < MAX_HELLO as usize && !buf.contains(&b'\n') {
        let rest = deadline.saturating_duration_since(std::time::Instant::now());
        if rest.is_zero() {
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the hello took longer than 5 s"));
        }
        conn.set_read_timeout(Some(rest))?;
        let want = byte.len().min(MAX_HELLO as usize - buf.len());
        let n = (&*conn).read(&mut byte[..want])?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&byte[..n]);
    }
    // A hello is one line: anything after its newline was not asked for.
    if let Some(end) = buf.iter().position(|b| *b == b'\n') {
        buf.truncate(end + 1);
    }
    String::from_utf8(buf).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_user_cannot_take_every_greeting_slot_nor_root_s() {
        let mut s = Slots::default();
        for _ in 0..MAX_GREETING_PER_UID {
            s.take(1000).unwrap();
        }
        assert!(s.take(1000).unwrap_err().contains("this user's"));
        // Other users fill the rest; past MAX_GREETING they are told busy.
        let mut uid = 1001;
        while s.others < MAX_GREETING {
            if s.take(uid).is_err() {
                uid += 1;
            }
        }
        assert!(s.take(4242).unwrap_err().contains("other subscribers"));
        // Root has its own.
        for _ in 0..MAX_GREETING_PER_UID {
            s.take(0).unwrap();
        }
        assert!(s.take(0).is_err());
        s.give_back(1000);
        s.take(1000).unwrap();
        s.give_back(0);
        s.take(0).unwrap();
        assert_eq!(s.others, MAX_GREETING);
    }
}
