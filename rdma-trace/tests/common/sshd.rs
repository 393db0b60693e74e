//! A real sshd of a test's own, for `--connect ssh://`: keys made for the test, root let
//! in by key only, on one address, until dropped. Needs root (it runs as root) and
//! openssh-server (`cargo xtask setup` on the host, a guest package in the lab).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A new ed25519 key pair at `path` (an earlier run's, left in an output directory,
/// removed: ssh-keygen would ask before overwriting it).
pub fn keygen(path: &Path) {
    std::fs::remove_file(path).ok();
    std::fs::remove_file(path.with_extension("pub")).ok();
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .output()
        .expect("ssh-keygen (openssh-client)");
    assert!(out.status.success(), "ssh-keygen: {}", String::from_utf8_lossy(&out.stderr));
}

/// The sshd, killed when dropped.
pub struct Sshd(Child);

impl Drop for Sshd {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

/// Starts an sshd on `address:port` letting the public key in `authorized` in as root
/// (its host key, config and log in `dir`), and waits until it listens (up to `within`).
pub fn start(dir: &Path, address: &str, port: u16, authorized: &Path, within: Duration) -> Sshd {
    let sshd = Path::new("/usr/sbin/sshd");
    assert!(sshd.exists(), "no {} (openssh-server)", sshd.display());
    let host_key = dir.join("host_key");
    keygen(&host_key);
    let keys = dir.join("authorized_keys");
    if authorized != keys {
        std::fs::copy(authorized, &keys).unwrap();
    }
    let config = dir.join("sshd_config");
    std::fs::write(
        &config,
        format!(
            "Port {port}\nListenAddress {address}\nHostKey {}\nAuthorizedKeysFile {}\nPidFile {}\n\
             PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             UsePAM no\nStrictModes no\n",
            host_key.display(),
            keys.display(),
            dir.join("sshd.pid").display()
        ),
    )
    .unwrap();
    std::fs::create_dir_all("/run/sshd").unwrap();
    let log: PathBuf = dir.join("sshd.log");
    let child = Command::new(sshd)
        .args(["-D", "-e", "-f"])
        .arg(&config)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start sshd");
    let running = Sshd(child);
    let t0 = Instant::now();
    while std::net::TcpStream::connect((address, port)).is_err() {
        let said = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(t0.elapsed() < within, "sshd never listened:\n{said}");
        std::thread::sleep(Duration::from_millis(100));
    }
    running
}
