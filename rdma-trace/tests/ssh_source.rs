//! `--connect ssh://…`: a daemon on another host reached over a real ssh. An sshd of its
//! own (needs root: it runs as root on a loopback port, with keys made for the test) lets
//! `rdma-trace trace --connect ssh://root@127.0.0.1:PORT/SOCKET -o FILE` run
//! `rdma-trace trace --connect SOCKET -o -` on the far side against a stand-in daemon that
//! streams a two-host lab capture: the file holds that capture byte for byte. A socket with
//! no daemon behind it gives the far side's one line and exit 2.

mod common;

use common::sshd;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_rdma-trace"))
}

/// An sshd on 127.0.0.1 (a free port) letting a key made here in as root: (it, the port,
/// the key).
fn sshd(dir: &Path) -> (sshd::Sshd, u16, PathBuf) {
    let user_key = dir.join("user_key");
    sshd::keygen(&user_key);
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    (
        sshd::start(dir, "127.0.0.1", port, &user_key.with_extension("pub"), Duration::from_secs(10)),
        port,
        user_key,
    )
}

/// A stand-in daemon: takes the subscriber's hello, streams `text`, closes.
fn stand_in(socket: &Path, text: Vec<u8>) -> std::thread::JoinHandle<()> {
    let listener = std::os::unix::net::UnixListener::bind(socket).unwrap();
    std::thread::spawn(move || {
        let (conn, _) = listener.accept().unwrap();
        let mut hello = String::new();
        std::io::BufReader::new(&conn).read_line(&mut hello).unwrap();
        assert!(hello.contains("\"want\""), "a subscriber's hello: {hello:?}");
        (&conn).write_all(&text).unwrap();
    })
}

fn over_ssh(dir: &Path, port: u16, key: &Path, socket: &Path, out: &Path) -> std::process::Output {
    let ssh = format!(
        "ssh -i {} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR",
        key.display()
    );
    Command::new(bin())
        .args(["trace", "--connect"])
        .arg(format!("ssh://root@127.0.0.1:{port}{}", socket.display()))
        .arg("-o")
        .arg(out)
        .env("RDMA_TRACE_SSH", ssh)
        .env("RDMA_TRACE_REMOTE_BIN", bin())
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("rdma-trace")
}

#[test]
#[ignore = "needs root (runs an sshd of its own): cargo xtask test runs it as root"]
fn a_daemon_on_another_host_over_ssh_is_kept_byte_for_byte() {
    // SAFETY: geteuid has no preconditions.
    assert!(unsafe { libc::geteuid() } == 0, "this test runs an sshd of its own: it needs root");
    let dir = std::env::temp_dir().join(format!("rt-ssh-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (_sshd, port, key) = sshd(&dir);
    let capture =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab/pair-7.3.host2.jsonl.zst");
    let text = zstd::decode_all(&std::fs::read(&capture).unwrap()[..]).unwrap();
    let socket = dir.join("daemon.sock");
    let daemon = stand_in(&socket, text.clone());
    let out = dir.join("kept.jsonl");
    let r = over_ssh(&dir, port, &key, &socket, &out);
    let said = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{said}");
    daemon.join().unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), text, "the far daemon's stream, kept as it sent it: {said}");
    assert!(said.contains("stopped on SIGTERM"), "the trailer read through ssh: {said}");

    // No daemon at the far socket: the far side's one line, and 2.
    let r = over_ssh(&dir, port, &key, &dir.join("nobody.sock"), &dir.join("none.jsonl"));
    let said = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{said}");
    assert!(said.contains("cannot connect to the daemon") && said.contains("nobody.sock"), "{said}");
    std::fs::remove_dir_all(&dir).ok();
}
