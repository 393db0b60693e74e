//! Helpers for the daemon's lab tests and soaks: its subscribers, their streams, and what
//! the daemon's process holds.

use super::*;
use rdma_trace::capture::Record;
use rdma_trace::source::capture::Reader;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub fn records(path: &Path) -> Vec<Record> {
    let f = std::io::BufReader::new(std::fs::File::open(path).expect("subscriber capture"));
    let mut r = Reader::new(f, true);
    let out: Vec<Record> = r.by_ref().map(|x| x.expect("readable")).collect();
    assert!(!r.report.cut_short, "{}: {:?}", path.display(), r.report);
    out
}

pub fn subscriber(dir: &Path, name: &str, socket: &Path) -> Child {
    subscriber_to(dir, name, socket, &dir.join(format!("{name}.jsonl")))
}

/// As `subscriber`, its stream kept in `out`.
pub fn subscriber_to(dir: &Path, name: &str, socket: &Path, out: &Path) -> Child {
    subscriber_at(dir, name, socket, out, 0)
}

/// As `subscriber_to`, at scheduling priority `nice` (negative: ahead of the others; the
/// guest runs as root). The lab guest has one vCPU under TCG: a reader that is always
/// ready can still be left off the CPU long enough to fall behind, which is not what a
/// test of the daemon's fairness measures.
pub fn subscriber_at(dir: &Path, name: &str, socket: &Path, out: &Path, nice: i32) -> Child {
    use std::os::unix::process::CommandExt;
    let err = dir.join(format!("{name}.stderr"));
    let mut cmd = Command::new(tracer_bin());
    cmd.args(["trace", "-q", "--connect"])
        .arg(socket)
        .arg("-o")
        .arg(out)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap());
    if nice != 0 {
        // SAFETY: setpriority(2) only, between fork and exec; its threads inherit it.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setpriority(libc::PRIO_PROCESS, 0, nice) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut c = cmd.spawn().expect("start a subscriber");
    wait_for(&err, "connected to", &mut c, 60).expect("the subscriber connects");
    c
}

/// A field of /proc/PID/status, in its own unit (kB for VmRSS).
pub fn status_field(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = s.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("{field}"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// A loss record of what the daemon could not send this subscriber (site `subscriber`).
pub fn lost_to_the_subscriber(r: &Record) -> bool {
    matches!(r, Record::Loss(l) if l.site == rdma_trace::capture::LossSite::Subscriber)
}

/// The number of descriptors `pid` holds open.
pub fn fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64)
}

/// One join as a viewer makes it: the hello, then the header and the state record read,
/// then the connection dropped. The time until the state arrived, and the processes in it.
pub fn join_once(socket: &Path) -> Result<(Duration, usize), String> {
    use rdma_trace::serve::{Hello, Want};
    use std::io::Write;
    let t0 = std::time::Instant::now();
    let mut s = std::os::unix::net::UnixStream::connect(socket).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let hello = serde_json::to_string(&Hello::new(Want::Both)).unwrap();
    s.write_all(format!("{hello}\n").as_bytes()).map_err(|e| format!("hello: {e}"))?;
    for r in Reader::new(std::io::BufReader::new(s), true) {
        match r {
            Ok(Record::State(st)) => return Ok((t0.elapsed(), st.processes.len())),
            Ok(_) => {}
            Err(e) => return Err(format!("reading: {e}")),
        }
    }
    Err("the stream ended before the state".into())
}

/// The guest's `kernel.pid_max` set for a test, and put back when it ends.
pub struct PidMax(String);

impl PidMax {
    const PATH: &str = "/proc/sys/kernel/pid_max";
    pub fn set(n: u32) -> Self {
        let was = std::fs::read_to_string(Self::PATH).expect("pid_max").trim().to_string();
        std::fs::write(Self::PATH, n.to_string()).expect("setting pid_max");
        PidMax(was)
    }
}

impl Drop for PidMax {
    fn drop(&mut self) {
        std::fs::write(Self::PATH, &self.0).ok();
    }
}
