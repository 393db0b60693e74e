//! Announcing steps: the clock, the ids, the buffered JSON Lines writer and the hook call.
//!
//! Records are serialized after the step's end time is taken, handed to the
//! `rdma_trace_step` hook, and appended to an in-memory buffer. The buffer reaches the
//! announce fd only between steps: before a hold, at the end of a run, on an error, and
//! whenever it passes [`FLUSH_AT`] bytes. Those write(2) calls are on `announce_fd` (named
//! in the `start` record), so a tracer can tell them from the verbs' own syscalls.

use super::marker;
use crate::steps::{StepName, StepRecord};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::Path;

/// Buffered bytes that trigger a flush at the next step boundary.
pub(crate) const FLUSH_AT: usize = 256 * 1024;

/// CLOCK_MONOTONIC in nanoseconds: the clock `bpf_ktime_get_ns` reads.
pub(crate) fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec into `ts`, which lives on this stack.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// (pid, tid) of the calling thread.
pub(crate) fn ids() -> (u32, u32) {
    // SAFETY: getpid and gettid cannot fail.
    unsafe { (libc::getpid() as u32, libc::gettid() as u32) }
}

/// Where records go.
pub(crate) enum Destination {
    Stdout(io::Stdout),
    File(File),
}

impl Destination {
    /// `-` is stdout; anything else is a file, created or truncated.
    pub(crate) fn open(path: &str) -> io::Result<Self> {
        if path == "-" {
            Ok(Destination::Stdout(io::stdout()))
        } else {
            File::create(Path::new(path)).map(Destination::File)
        }
    }

    pub(crate) fn fd(&self) -> i32 {
        match self {
            Destination::Stdout(s) => s.as_raw_fd(),
            Destination::File(f) => f.as_raw_fd(),
        }
    }

    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Destination::Stdout(s) => {
                let mut l = s.lock();
                l.write_all(bytes)?;
                l.flush()
            }
            Destination::File(f) => f.write_all(bytes),
        }
    }
}

/// Numbers steps within a run and buffers their records.
pub(crate) struct Announcer {
    dest: Destination,
    buf: Vec<u8>,
    run: u32,
    step: u32,
    ids: (u32, u32),
    /// Every record of the current run, for the end-of-run summary.
    names: Vec<StepName>,
}

impl Announcer {
    pub(crate) fn new(dest: Destination) -> Self {
        Announcer { dest, buf: Vec::with_capacity(FLUSH_AT), run: 0, step: 0, ids: ids(), names: Vec::new() }
    }

    pub(crate) fn fd(&self) -> i32 {
        self.dest.fd()
    }

    pub(crate) fn ids(&self) -> (u32, u32) {
        self.ids
    }

    /// Starts run `run` (1-based): steps count from 1 again.
    pub(crate) fn begin_run(&mut self, run: u32) {
        self.run = run;
        self.step = 0;
        self.names.clear();
    }

    /// Steps announced so far in this run.
    pub(crate) fn names(&self) -> &[StepName] {
        &self.names
    }

    /// A record for the next step of this run, timed `t`.
    pub(crate) fn next(&mut self, name: StepName, t: (u64, u64)) -> StepRecord {
        self.step += 1;
        StepRecord::new(self.run, self.step, name, self.ids, t)
    }

    /// The `start` record (run 0, step 0).
    pub(crate) fn start_record(&self, t: (u64, u64)) -> StepRecord {
        StepRecord::new(0, 0, StepName::Start, self.ids, t)
    }

    /// Serializes, calls the hook, buffers; flushes if the buffer is large.
    pub(crate) fn emit(&mut self, rec: &StepRecord) -> io::Result<()> {
        let json = serde_json::to_vec(rec).map_err(io::Error::other)?;
        marker::call(&json);
        if rec.name != StepName::Start {
            self.names.push(rec.name);
        }
        self.buf.extend_from_slice(&json);
        self.buf.push(b'\n');
        if self.buf.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes what is buffered to the announce fd.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let res = self.dest.write_all(&self.buf);
        self.buf.clear();
        res
    }
}

impl Drop for Announcer {
    fn drop(&mut self) {
        // Drop cannot report (an explicit `flush` does); this only saves what it can.
        self.flush().ok();
    }
}

/// Runs `f` between two clock reads: `(result, (t_start_ns, t_end_ns))`.
pub(crate) fn timed<T>(f: impl FnOnce() -> T) -> (T, (u64, u64)) {
    let t0 = now_ns();
    let r = f();
    let t1 = now_ns();
    (r, (t0, t1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_is_monotonic_nanoseconds() {
        let (a, (t0, t1)) = timed(now_ns);
        assert!(t0 > 0 && t0 <= a && a <= t1, "{t0} {a} {t1}");
    }

    #[test]
    fn records_are_numbered_per_run_and_written_as_json_lines() {
        let path = std::env::temp_dir().join(format!("rdma-trace-announce-{}.jsonl", std::process::id()));
        let dest = Destination::open(path.to_str().unwrap()).unwrap();
        let mut a = Announcer::new(dest);
        a.emit(&a.start_record((1, 2))).unwrap();
        a.begin_run(1);
        let r = a.next(StepName::GetDeviceList, (3, 4));
        a.emit(&r).unwrap();
        let r = a.next(StepName::OpenDevice, (5, 6));
        a.emit(&r).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "", "nothing before a flush");
        a.begin_run(2);
        let r = a.next(StepName::GetDeviceList, (7, 8));
        a.emit(&r).unwrap();
        assert_eq!(a.names(), [StepName::GetDeviceList]);
        drop(a);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        let recs: Vec<StepRecord> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let got: Vec<(u32, u32, StepName)> = recs.iter().map(|r| (r.run, r.step, r.name)).collect();
        assert_eq!(
            got,
            [
                (0, 0, StepName::Start),
                (1, 1, StepName::GetDeviceList),
                (1, 2, StepName::OpenDevice),
                (2, 1, StepName::GetDeviceList),
            ]
        );
        assert!(recs.iter().all(|r| r.pid == std::process::id()));
    }
}
