//! The ground the tool stands on, checked in the soft-RoCE lab guest (`cargo xtask vm-test`):
//! the kernel functions it probes exist, rxe0 is up, and a real verbs workload runs over it.
//! These need the lab's kernel and rxe0: they are ignored on a normal host.

mod common;
use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_ground_symbols() {
    let syms = common::kallsyms_functions();
    // Each entry: the function, or the successors that replaced it in newer kernels.
    let wanted: &[&[&str]] = &[
        &["ib_uverbs_mmap"],
        &["mlx5_ib_mmap"],
        &["rdma_user_mmap_io"],
        &["ib_umem_get", "__ib_umem_get_va"],
        &["mlx5_ib_reg_user_mr"],
        &["ib_uverbs_comp_handler"],
        &["rxe_reg_user_mr"],
        &["rxe_mmap"],
    ];
    let missing: Vec<String> = wanted
        .iter()
        .filter(|alts| !alts.iter().any(|s| syms.contains(*s)))
        .map(|alts| alts.join(" or "))
        .collect();
    assert!(missing.is_empty(), "absent from /proc/kallsyms ({} text symbols): {missing:?}", syms.len());
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_ground_rxe_active() {
    let port = "/sys/class/infiniband/rxe0/ports/1";
    let state = std::fs::read_to_string(format!("{port}/state")).expect("rxe0 port 1 state (is rxe0 there?)");
    assert!(state.contains("ACTIVE"), "rxe0 port 1 state is {state:?}, not ACTIVE");
    let gid = std::fs::read_to_string(format!("{port}/gids/1")).expect("rxe0 GID index 1");
    assert_eq!(gid.trim(), "0000:0000:0000:0000:0000:ffff:0a00:0001", "GID 1 is not ::ffff:10.0.0.1");
}

/// True once something listens on TCP `port` (IPv4 or IPv6).
fn listening(port: u16) -> bool {
    let needle = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).unwrap_or_default().lines().skip(1).any(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.len() > 3 && cols[1].ends_with(&needle) && cols[3] == "0A"
        })
    })
}

fn spawn(args: &[&str]) -> Child {
    Command::new("ibv_rc_pingpong")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start ibv_rc_pingpong (ibverbs-utils)")
}

/// Waits for `child` up to `limit` (killing it after), returns (exit code, stdout + stderr).
fn finish(mut child: Child, limit: Duration) -> (Option<i32>, String) {
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break Some(st);
        }
        if start.elapsed() > limit {
            child.kill().ok();
            child.wait().ok();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut out = String::new();
    child.stdout.take().map(|mut s| s.read_to_string(&mut out));
    child.stderr.take().map(|mut s| s.read_to_string(&mut out));
    (status.and_then(|s| s.code()), out)
}

fn has_rate_line(out: &str) -> bool {
    out.lines().any(|l| l.contains(" bytes in ") && l.contains(" seconds = ") && l.contains("/sec"))
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_ground_rc_pingpong() {
    let port = 18515;
    let p = port.to_string();
    let server = spawn(&["-d", "rxe0", "-g", "1", "-n", "50", "-p", &p]);
    let start = Instant::now();
    while !listening(port) && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(listening(port), "the ibv_rc_pingpong server never listened on port {port}");
    let client = spawn(&["-d", "rxe0", "-g", "1", "-n", "50", "-p", &p, "10.0.0.1"]);
    let (crc, cout) = finish(client, Duration::from_secs(60));
    let (src, sout) = finish(server, Duration::from_secs(30));
    assert_eq!(crc, Some(0), "client failed:\n{cout}\nserver:\n{sout}");
    assert_eq!(src, Some(0), "server failed:\n{sout}\nclient:\n{cout}");
    assert!(has_rate_line(&cout), "no bytes/sec line from the client:\n{cout}");
    assert!(has_rate_line(&sout), "no bytes/sec line from the server:\n{sout}");
}
