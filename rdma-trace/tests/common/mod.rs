//! Helpers for lab tests (run in the soft-RoCE guest by `cargo xtask vm-test`).
#![allow(dead_code)]

pub mod daemon;
pub mod fixture_plan;
pub mod prom;
pub mod raw_records;
pub mod sshd;
pub mod trace_events;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A capture recorded in the lab and committed (`tests/fixtures/lab/NAME`).
pub fn lab_capture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab").join(name)
}

/// The events of a committed lab capture, read strictly.
pub fn lab_events(name: &str) -> Vec<rdma_trace::event::Event> {
    let text = std::fs::read_to_string(lab_capture(name)).unwrap();
    rdma_trace::source::capture::parse_jsonl(&text).unwrap()
}

/// A header as a test's capture starts with: a lab host, one probe attached.
pub fn test_header() -> rdma_trace::capture::Header {
    use rdma_trace::capture::{Header, ProbeStatus};
    Header {
        tool: "rdma-trace test".into(),
        hostname: "lab".into(),
        kernel_release: "7.3.4+deb13-amd64".into(),
        boot_id: "b".into(),
        realtime_offset_ns: 1_700_000_000_000_000_000,
        command_line: vec!["rdma-trace".into(), "trace".into()],
        ring_bytes: 4 << 20,
        return_instances: 1024,
        probes: vec![ProbeStatus {
            id: "umem_get".into(),
            symbol: Some("__ib_umem_get_va".into()),
            module: Some("ib_uverbs".into()),
            attached: true,
            reason: None,
        }],
        libibverbs: None,
        redacted: false,
        ..Default::default()
    }
}

/// The names of every symbol in this kernel's /proc/kallsyms (`.cold`, `.isra…` suffixes
/// dropped): what a function named by an explanation must be among.
pub fn kallsyms_names() -> std::collections::HashSet<String> {
    let k = std::fs::read_to_string("/proc/kallsyms").expect("read /proc/kallsyms");
    k.lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .map(|n| n.split('.').next().unwrap_or(n).to_string())
        .collect()
}

/// The functions (text symbols, `t`/`T`/`w`/`W`) in this kernel's /proc/kallsyms, whole.
pub fn kallsyms_functions() -> std::collections::HashSet<String> {
    let text = std::fs::read_to_string("/proc/kallsyms").expect("read /proc/kallsyms");
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_addr, kind, name) = (f.next()?, f.next()?, f.next()?);
            matches!(kind, "t" | "T" | "W" | "w").then(|| name.to_string())
        })
        .collect()
}

/// `tmux -L server ARGS…` (a tmux server of the test's own), its stdout.
pub fn tmux(server: &str, args: &[&str]) -> String {
    let out = Command::new("tmux").args(["-L", server]).args(args).output().expect("tmux (a guest package)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub const IGNORE: &str = "lab: needs the soft-RoCE guest (cargo xtask vm-test)";

pub fn tracer_bin() -> PathBuf {
    PathBuf::from(std::env::var("RDMA_TRACE_BIN").expect("RDMA_TRACE_BIN (set by the lab runner)"))
}

/// The companion workload, shipped beside the tracer.
pub fn workload_bin() -> PathBuf {
    tracer_bin().with_file_name("rdma-trace-workload")
}

/// Where artifacts go (kept on the host after the run).
pub fn out_dir(sub: &str) -> PathBuf {
    let base = std::env::var("RDMA_TRACE_LAB_OUT").unwrap_or_else(|_| "/tmp/lab-out".into());
    let d = Path::new(&base).join(sub);
    std::fs::create_dir_all(&d).expect("artifact dir");
    d
}

/// CLOCK_MONOTONIC in ns: the clock bpf_ktime_get_ns reads.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime with a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Waits until `file` contains `needle` (or the process exits, or `secs` pass).
pub fn wait_for(file: &Path, needle: &str, child: &mut Child, secs: u64) -> Result<(), String> {
    let t0 = Instant::now();
    loop {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if text.contains(needle) {
            return Ok(());
        }
        if let Ok(Some(st)) = child.try_wait() {
            return Err(format!("exited ({st}) before printing {needle:?}:\n{text}"));
        }
        if t0.elapsed() > Duration::from_secs(secs) {
            return Err(format!("no {needle:?} after {secs} s:\n{text}"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub fn interrupt(child: &Child) {
    // SAFETY: sending a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
}

/// Waits for a child up to `secs`, killing it after that.
pub fn wait_timeout(child: &mut Child, secs: u64) -> std::process::ExitStatus {
    wait_watching(child, secs, |_| {})
}

/// `wait_timeout`, calling `each` with the time waited at every poll (to note when the
/// child said something on the way out).
pub fn wait_watching(
    child: &mut Child,
    secs: u64,
    mut each: impl FnMut(Duration),
) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            return st;
        }
        if t0.elapsed() > Duration::from_secs(secs) {
            child.kill().ok();
            return child.wait().expect("wait");
        }
        each(t0.elapsed());
        // Fine enough to time a stop by (the flood test's goal is a second).
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A child killed when it is dropped, so a test that fails halfway leaves nothing running
/// for the next test to trip over (a daemon on the metrics port, a perftest server on its
/// port). Started with `Reaped::group`, it leads a process group and the whole group is
/// killed: what `sh -c` started dies with it.
pub struct Reaped {
    child: Child,
    group: bool,
}

impl Reaped {
    pub fn of(child: Child) -> Reaped {
        Reaped { child, group: false }
    }

    /// Spawns `cmd` at the head of a process group of its own.
    pub fn group(cmd: &mut Command) -> Reaped {
        use std::os::unix::process::CommandExt;
        Reaped { child: cmd.process_group(0).spawn().expect("spawn"), group: true }
    }

    /// Signals the process, or its whole group.
    pub fn signal(&self, sig: i32) {
        let pid = self.child.id() as i32;
        // SAFETY: kill(2) of our own child or the group it leads.
        unsafe { libc::kill(if self.group { -pid } else { pid }, sig) };
    }
}

impl std::ops::Deref for Reaped {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.child
    }
}

impl std::ops::DerefMut for Reaped {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        let running = matches!(self.child.try_wait(), Ok(None));
        if self.group || running {
            self.signal(libc::SIGKILL);
        }
        if running {
            self.child.wait().ok();
        }
    }
}

/// Spawns a command with stdout+stderr into `log`.
pub fn spawn_logged(cmd: &str, args: &[&str], log: &Path) -> Child {
    let f = std::fs::File::create(log).expect("log file");
    let f2 = f.try_clone().expect("dup");
    Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(f))
        .stderr(Stdio::from(f2))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd}: {e}"))
}

/// perftest (ib_send_bw, ib_write_bw) is always given `-F`: without it, it calibrates the
/// CPU clock at the end against gettimeofday and exits 1 ("Correlation coefficient r^2:
/// 0.898 < 0.9 / Can't produce a report") when the fit is poor, which under TCG it can be:
/// a client that did all its work then fails, and the server's last handshake with it.
///
/// Runs a server, then its client once the server listens (spawned directly: their pids are
/// the workloads' own; `finish` bounds them).
pub fn pair(dir: &Path, name: &str, server: &[&str], client: &[&str]) -> (Child, Child) {
    let log = dir.join(format!("{name}-server.log"));
    let mut s = spawn_logged(server[0], &server[1..], &log);
    wait_listening(&mut s, name, &log);
    let c = spawn_logged(client[0], &client[1..], &dir.join(format!("{name}-client.log")));
    (s, c)
}

/// Waits until `server` listens: on a TCP socket of its own (perftest and the pingpongs
/// exchange their QP numbers over TCP) or on an RDMA CM id of its own (rping). A fixed second
/// was not always enough: during a syscall flood in the 7.3 guest, ibv_rc_pingpong's server
/// was not yet listening a second after it started, and its client failed with "Couldn't
/// connect".
fn wait_listening(server: &mut Child, name: &str, log: &Path) {
    let t0 = Instant::now();
    loop {
        if tcp_listening(server.id()) || cm_listening(server.id()) {
            return;
        }
        let text = || std::fs::read_to_string(log).unwrap_or_default();
        if let Ok(Some(st)) = server.try_wait() {
            panic!("{name} server exited ({st}) before it listened:\n{}", text());
        }
        if t0.elapsed() > Duration::from_secs(60) {
            server.kill().ok();
            panic!("{name} server not listening after 60 s:\n{}", text());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `pid` has a TCP socket in LISTEN (state 0A in /proc/net/tcp{,6}, matched by inode).
fn tcp_listening(pid: u32) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    let inodes: Vec<String> = fds
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| Some(l.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned()))
        .collect();
    !inodes.is_empty()
        && ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
            std::fs::read_to_string(f).unwrap_or_default().lines().skip(1).any(|l| {
                let c: Vec<&str> = l.split_whitespace().collect();
                c.len() > 9 && c[3] == "0A" && inodes.iter().any(|i| i == c[9])
            })
        })
}

/// `pid` has an RDMA CM id in LISTEN (`rdma res show cm_id`).
fn cm_listening(pid: u32) -> bool {
    let Ok(out) = Command::new("rdma").args(["res", "show", "cm_id"]).output() else { return false };
    let pid = pid.to_string();
    String::from_utf8_lossy(&out.stdout).lines().any(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        let has = |k: &str, v: &str| w.windows(2).any(|p| p[0] == k && p[1] == v);
        has("state", "LISTEN") && has("pid", &pid)
    })
}

/// Waits for a client and its server; both must succeed.
pub fn finish(mut s: Child, mut c: Child, what: &str) {
    let cs = wait_timeout(&mut c, 120);
    let ss = wait_timeout(&mut s, 30);
    assert!(cs.success() && ss.success(), "{what}: client {cs}, server {ss}");
}

/// The lab guest's rxe0 address (the perftest and rping servers listen on it).
pub const SERVER_IP: &str = "10.0.0.1";

/// `ib_send_bw -F -e` (event mode) for `iterations` over rxe0, server and client, both
/// waited for and required to succeed.
pub fn send_bw_events(dir: &Path, iterations: &str) {
    let args = ["ib_send_bw", "-F", "-e", "-d", "rxe0", "-x", "1", "-n", iterations];
    let client: Vec<&str> = args.iter().copied().chain([SERVER_IP]).collect();
    let (s, c) = pair(dir, "ib_send_bw", &args, &client);
    finish(s, c, "ib_send_bw -e");
}

/// `rdma-trace daemon ARGS --socket SOCKET [-o CAPTURE]`, its stderr in `err`, once it
/// printed `ready` (within 180 s: it plans and attaches first).
pub fn start_daemon(args: &[&str], socket: &Path, capture: Option<&Path>, err: &Path, ready: &str) -> Child {
    let mut cmd = std::process::Command::new(tracer_bin());
    cmd.arg("daemon").args(args).arg("--socket").arg(socket);
    if let Some(c) = capture {
        cmd.arg("-o").arg(c);
    }
    let mut daemon = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(err).unwrap())
        .spawn()
        .expect("start the daemon");
    wait_for(err, ready, &mut daemon, 180).expect("the daemon attaches and listens");
    daemon
}

/// The program runs the kernel skipped (another BPF program was running on the CPU), as
/// the summary names them per program ("program NAME: N runs skipped by the kernel"): of
/// `program`, or of all programs. They belong to a program, not to one of its probes.
pub fn program_skips(stderr: &str, program: Option<&str>) -> u64 {
    stderr
        .lines()
        .filter_map(|l| l.trim().strip_prefix("program "))
        .filter_map(|l| l.split_once(": "))
        .filter(|(name, _)| program.is_none_or(|p| p == *name))
        .filter_map(|(_, rest)| rest.strip_suffix(" runs skipped by the kernel")?.parse::<u64>().ok())
        .sum()
}

/// One row of the summary table: (probe, hits, delivered, lost).
pub fn rows(stderr: &str) -> Vec<(String, u64, u64, u64)> {
    let mut out = Vec::new();
    let mut in_table = false;
    for l in stderr.lines() {
        if l.trim_start().starts_with("probe ") && l.contains("delivered") {
            in_table = true;
            continue;
        }
        if let Some(r) = in_table.then(|| row_line(l)).flatten() {
            out.push(r);
        }
    }
    out
}

/// One row of the summary's table: name, hits, delivered, lost.
fn row_line(l: &str) -> Option<(String, u64, u64, u64)> {
    if !l.starts_with("  ") {
        return None;
    }
    let w: Vec<&str> = l.split_whitespace().collect();
    if w.len() < 7 || !w[w.len() - 1].ends_with("µs") {
        return None;
    }
    let n = |i: usize| w[w.len() - 6 + i].parse::<u64>().ok();
    Some((w[..w.len() - 6].join(" "), n(0)?, n(1)?, n(2)?))
}

/// Per row of the summary's table: what `output` left out of the events the row delivered
/// (the line under the row: "delivered, then left out by the capture output …: N").
pub fn left_out(stderr: &str, output: &str) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    let mut row: Option<String> = None;
    let marker = format!("delivered, then left out by the {output} output (it fell behind): ");
    for l in stderr.lines() {
        if let Some(r) = row_line(l) {
            row = Some(r.0);
        } else if let Some(count) = l.trim().strip_prefix(&marker) {
            let row = row.as_ref().unwrap_or_else(|| panic!("a left-out line before any row:\n{stderr}"));
            *out.entry(row.clone()).or_default() += count.parse::<u64>().expect("a count");
        }
    }
    out
}

/// What rdma-trace itself lost or could not account for, from its summary: rows with a
/// loss, records held or never committed, counter errors. Runs the kernel skipped because
/// another BPF program was running on the CPU (bpftrace runs beside it in these tests; an
/// interrupt can nest) are its own line and not the tool's loss: they are left out here
/// and compared against bpftrace's counts where a test does that.
pub fn tool_losses(stderr: &str) -> Vec<String> {
    let mut out: Vec<String> = rows(stderr)
        .into_iter()
        .filter(|r| r.3 > 0 || r.1 != r.2)
        .map(|r| format!("{}: hits {} delivered {} lost {}", r.0, r.1, r.2, r.3))
        .collect();
    for bad in ["held past shutdown", "never committed", "counter error", "without a header"] {
        if stderr.contains(bad) {
            out.push(bad.to_string());
        }
    }
    if !stderr.lines().any(|l| l.contains(" events delivered")) {
        out.push("no summary".to_string());
    }
    out
}

/// The umem pinning function of this kernel.
pub fn umem_symbol() -> &'static str {
    let k = std::fs::read_to_string("/proc/kallsyms").expect("kallsyms");
    if k.lines().any(|l| l.split_whitespace().nth(2) == Some("ib_umem_get")) {
        "ib_umem_get"
    } else {
        "__ib_umem_get_va"
    }
}

pub fn run_output(cmd: &str, args: &[&str]) -> String {
    let o = Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e}"));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// An independent tracer for side-by-side counts: one bpftrace counter per rdma-trace
/// probe id, plus a uretprobe printing every ibv_create_cq result.
pub struct Bpftrace {
    /// (probe id, bpftrace attach point, counter name)
    pub counters: Vec<(&'static str, String, &'static str)>,
}

impl Bpftrace {
    pub fn for_this_kernel() -> Self {
        let mut counters = vec![
            ("umem_get", format!("kprobe:{}", umem_symbol()), "umem"),
            ("rxe_reg_mr", "kprobe:rxe_reg_user_mr".into(), "reg"),
            ("uverbs_mmap", "kprobe:ib_uverbs_mmap".into(), "mmap"),
            ("rxe_mmap", "kprobe:rxe_mmap".into(), "rxe_mmap"),
            ("rxe_create_cq", "kprobe:rxe_create_cq".into(), "create_cq"),
            ("comp_handler", "kprobe:ib_uverbs_comp_handler".into(), "comp"),
            ("comp_event_read", "kprobe:ib_uverbs_comp_event_read".into(), "comp_read"),
            ("umem_release", "kprobe:ib_umem_release".into(), "release"),
        ];
        if Path::new("/sys/kernel/tracing/events/rdma_core/mr_dereg").exists() {
            counters.push(("mr_dereg", "tracepoint:rdma_core:mr_dereg".into(), "dereg"));
        }
        Self { counters }
    }

    /// Each counter is created in BEGIN (and that one count subtracted when comparing):
    /// bpftrace's per-CPU count() maps otherwise lose the first hit when two CPUs insert
    /// the same new key at once (map_update_elem -EEXIST, seen with ib_write_bw's two
    /// simultaneous registrations).
    pub fn script(&self) -> String {
        let mut s = String::from("BEGIN {\n");
        for (_, _, c) in &self.counters {
            s.push_str(&format!("  @{c} = count();\n"));
        }
        s.push_str("  printf(\"ready\\n\");\n}\n");
        for (_, p, c) in &self.counters {
            s.push_str(&format!("{p} {{ @{c} = count(); }}\n"));
        }
        // The multiarch directory of this machine's libibverbs (x86_64-…, aarch64-…).
        let lib = format!("/usr/lib/{}-linux-gnu/libibverbs.so.1", std::env::consts::ARCH);
        s.push_str(&format!(
            "uretprobe:{lib}:ibv_create_cq {{ printf(\"create_cq pid=%d cq=0x%lx\\n\", pid, retval); }}\n"
        ));
        s
    }

    /// Starts bpftrace and waits until its probes are attached.
    pub fn start(&self, dir: &Path) -> Child {
        let script = dir.join("counts.bt");
        std::fs::write(&script, self.script()).unwrap();
        std::fs::copy(&script, "/tmp/counts.bt").unwrap(); // bpftrace refuses scripts on 9p
        let out = dir.join("bpftrace.out");
        let mut bt = spawn_logged("bpftrace", &["/tmp/counts.bt"], &out);
        wait_for(&out, "ready", &mut bt, 120).expect("bpftrace attaches");
        bt
    }

    /// bpftrace's counts per probe id, from its output at exit.
    pub fn counts(&self, output: &str) -> std::collections::BTreeMap<String, u64> {
        let printed: std::collections::HashMap<&str, u64> = output
            .lines()
            .filter_map(|l| {
                let (name, n) = l.strip_prefix('@')?.split_once(": ")?;
                Some((name, n.trim().parse().ok()?))
            })
            .collect();
        self.counters
            .iter()
            .filter_map(|(id, _, c)| Some((id.to_string(), printed.get(c)?.checked_sub(1)?)))
            .collect()
    }

    /// ibv_create_cq results bpftrace printed.
    pub fn created_cqs(output: &str) -> std::collections::HashSet<u64> {
        output
            .lines()
            .filter_map(|l| l.split("cq=0x").nth(1))
            .filter_map(|h| u64::from_str_radix(h.trim(), 16).ok())
            .collect()
    }
}

/// Compares rdma-trace's entry counts per probe id with bpftrace's; the report, and
/// whether all are equal.
pub fn compare_counts(events: &[rdma_trace::event::Event], bt: &Bpftrace, bt_out: &str) -> (String, bool) {
    let theirs = bt.counts(bt_out);
    let mut report = String::new();
    let mut equal = true;
    for (id, _, _) in &bt.counters {
        let ours =
            events.iter().filter(|e| e.name == *id && e.kind == rdma_trace::event::EventKind::Entry).count()
                as u64;
        let t = theirs.get(*id).copied();
        report.push_str(&format!("{id:<16} rdma-trace {ours:>6}  bpftrace {t:>6?}\n"));
        equal &= t == Some(ours);
    }
    (report, equal)
}

/// `rdma-trace trace -q -o DIR/NAME.jsonl -- cmd…` to its end (300 s at most): its exit
/// status and stderr; the tool itself must have lost nothing.
pub fn trace_to_capture(dir: &Path, name: &str, cmd: &[&str]) -> (std::process::ExitStatus, String) {
    let capture = dir.join(format!("{name}.jsonl"));
    let err = dir.join(format!("{name}.rdma-trace.stderr"));
    let mut c = Command::new(tracer_bin())
        .args(["trace", "-q", "-o"])
        .arg(&capture)
        .arg("--")
        .args(cmd)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("start rdma-trace");
    let st = wait_timeout(&mut c, 300);
    let stderr = std::fs::read_to_string(&err).unwrap();
    let lost = tool_losses(&stderr);
    assert!(lost.is_empty(), "{lost:?}\n{stderr}");
    (st, stderr)
}

/// Whether a stopped tracer's detach helper (`rdma-trace __detach-after-exit`, which lets
/// its probes go after it exited) still runs.
pub fn detach_helper_running() -> bool {
    std::fs::read_dir("/proc").into_iter().flatten().flatten().any(|p| {
        std::fs::read(p.path().join("cmdline"))
            .is_ok_and(|c| c.split(|&b| b == 0).any(|a| a == b"__detach-after-exit"))
    })
}
