//! Real eBPF on this machine's own kernel (needs root): every program passes the
//! verifier, the syscall tracepoints deliver this process's own calls with the right
//! arguments, forced ring-buffer loss is counted exactly, and the companion's step marker
//! carries its step records.

use rdma_trace::live::attach::Loaded;
use rdma_trace::pipeline::decode::{Raw, decode};
use rdma_trace::plan::{kernel, syscalls};
use rdma_trace_common::{CNT_HITS, CNT_RINGBUF_FULL, COUNTERS, SITE_SYS_ENTER, SITE_SYS_EXIT};

fn require_root() {
    if let Err(msg) = rdma_trace::live::privilege::check() {
        panic!("this test loads eBPF programs: {msg}");
    }
}

fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// The ring's records, as bytes (`decode` reads them in place: `decoded`).
fn ring_records(loaded: &mut Loaded, ring_bytes: usize) -> Vec<Vec<u8>> {
    let mut ring =
        rdma_trace::source::Ring::new(loaded.take_ring().expect("ring"), ring_bytes).expect("map ring");
    let mut out = Vec::new();
    ring.drain(|b| out.push(b.to_vec()));
    out
}

fn decoded(records: &[Vec<u8>]) -> Vec<Raw<'_>> {
    records.iter().map(|b| decode(b).expect("every record decodes")).collect()
}

#[test]
#[ignore = "needs root (loads eBPF programs): cargo xtask test runs it as root"]
fn every_program_passes_the_verifier() {
    require_root();
    let mut loaded = Loaded::new(1 << 16).expect("object loads");
    let names = loaded.program_names();
    // The kprobe and kretprobe shared by the kernel slots, 2 tracepoint slots, 2 syscall
    // tracepoints, the fork and exit followers, the uprobe and uretprobe shared by the
    // user slots, and the companion's step marker.
    assert_eq!(names.len(), 11, "programs: {names:?}");
    let mut failures = Vec::new();
    for n in &names {
        if let Err(e) = loaded.load_program(n) {
            failures.push(format!("{n}: {e}"));
        }
    }
    assert!(failures.is_empty(), "verifier rejected:\n{}", failures.join("\n\n"));
}

#[test]
#[ignore = "needs root (loads eBPF programs): cargo xtask test runs it as root"]
fn syscall_tracepoints_see_this_threads_calls() {
    require_root();
    kernel::ensure_tracefs().expect("tracefs");
    let mut loaded = Loaded::new(1 << 20).expect("object loads");
    loaded.attach_syscalls(syscalls::system_layout().expect("layout"), &syscalls::all_nrs()).expect("attach");
    let tid = gettid();
    let pid = std::process::id();
    let len = 3 * 4096usize;
    let mut pipe = [0i32; 2];
    // SAFETY: plain syscalls on memory and fds this test owns.
    let (addr, rfd, wfd, epfd) = unsafe {
        assert_eq!(libc::pipe(pipe.as_mut_ptr()), 0);
        let epfd = libc::epoll_create1(0);
        assert!(epfd >= 0);
        loaded.watch(tid).expect("watch");
        let addr = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(addr, libc::MAP_FAILED);
        libc::madvise(addr, len, libc::MADV_DONTNEED);
        assert_eq!(libc::write(pipe[1], b"doorbel".as_ptr().cast(), 7), 7);
        let mut n: libc::c_int = 0;
        libc::ioctl(pipe[0], libc::FIONREAD, &mut n);
        let mut pfd = libc::pollfd { fd: pipe[0], events: libc::POLLIN, revents: 0 };
        libc::poll(&mut pfd, 1, 0);
        let mut buf = [0u8; 16];
        assert_eq!(libc::read(pipe[0], buf.as_mut_ptr().cast(), 7), 7);
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 1];
        libc::epoll_wait(epfd, evs.as_mut_ptr(), 1, 0);
        libc::munmap(addr, len);
        let f = libc::open(c"/proc/self/status".as_ptr(), libc::O_RDONLY);
        libc::close(f);
        loaded.unwatch(tid).expect("unwatch");
        (addr as u64, pipe[0] as u64, pipe[1] as u64, epfd as u64)
    };
    let bytes = ring_records(&mut loaded, 1 << 20);
    let recs = decoded(&bytes);
    let enters: Vec<(&str, [u64; 6])> = recs
        .iter()
        .filter_map(|r| match r {
            Raw::Syscall { hdr, is_exit: false, nr, args, .. } => {
                assert_eq!((hdr.tgid, hdr.tid), (pid, tid), "only this thread is watched");
                Some((syscalls::by_nr(*nr).expect("a watched syscall").name, *args))
            }
            _ => None,
        })
        .collect();
    let find = |name: &str| {
        enters
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, a)| *a)
            .unwrap_or_else(|| panic!("no {name} in {enters:?}"))
    };
    let mmap = find("mmap");
    assert_eq!((mmap[1], mmap[2]), (len as u64, (libc::PROT_READ | libc::PROT_WRITE) as u64));
    assert_eq!(find("madvise")[..3], [addr, len as u64, libc::MADV_DONTNEED as u64]);
    assert_eq!(find("munmap")[..2], [addr, len as u64]);
    assert_eq!((find("write")[0], find("write")[2]), (wfd, 7));
    assert_eq!((find("read")[0], find("read")[2]), (rfd, 7));
    assert_eq!(find("ioctl")[..2], [rfd, libc::FIONREAD]);
    assert_eq!((find("poll")[1], find("poll")[2]), (1, 0));
    assert_eq!((find("epoll_wait")[0], find("epoll_wait")[2]), (epfd, 1));
    // open/openat carry the path they opened.
    let opens: Vec<u64> =
        syscalls::WATCHED.iter().filter(|s| s.name.starts_with("open")).map(|s| u64::from(s.nr)).collect();
    let opened = recs.iter().find_map(|r| match r {
        Raw::Syscall { is_exit: false, nr, path, .. } if opens.contains(nr) => {
            path.as_deref().map(str::to_string)
        }
        _ => None,
    });
    assert_eq!(opened.as_deref(), Some("/proc/self/status"));
    // Exit records carry return values: the mmap's is the address the call returned.
    let mmap_ret = recs.iter().find_map(|r| match r {
        Raw::Syscall { is_exit: true, nr, args, .. } if *nr == libc::SYS_mmap as u64 => Some(args[0]),
        _ => None,
    });
    assert_eq!(mmap_ret, Some(addr));
    // SAFETY: closing fds this test opened.
    unsafe {
        libc::close(pipe[0]);
        libc::close(pipe[1]);
        libc::close(epfd as i32);
    }
}

#[test]
#[ignore = "needs root (loads eBPF programs): cargo xtask test runs it as root"]
fn forced_ring_loss_is_counted_exactly() {
    require_root();
    kernel::ensure_tracefs().expect("tracefs");
    // One page of ring: about 39 syscall records fit; the consumer reads nothing until
    // the producer is done.
    let mut loaded = Loaded::new(4096).expect("object loads");
    loaded
        .attach_syscalls(syscalls::system_layout().expect("layout"), &[libc::SYS_madvise as u32])
        .expect("attach");
    let tid = gettid();
    const CALLS: u64 = 1000;
    // SAFETY: madvise on a mapping this test owns.
    unsafe {
        let addr = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(addr, libc::MAP_FAILED);
        loaded.watch(tid).expect("watch");
        for _ in 0..CALLS {
            libc::madvise(addr, 4096, libc::MADV_NORMAL);
        }
        loaded.unwatch(tid).expect("unwatch");
        libc::munmap(addr, 4096);
    }
    let produced = 2 * CALLS; // one enter and one exit record per call
    let c = loaded.counters().expect("counters");
    let hits = c[SITE_SYS_ENTER * COUNTERS + CNT_HITS] + c[SITE_SYS_EXIT * COUNTERS + CNT_HITS];
    let lost =
        c[SITE_SYS_ENTER * COUNTERS + CNT_RINGBUF_FULL] + c[SITE_SYS_EXIT * COUNTERS + CNT_RINGBUF_FULL];
    let mut tally = rdma_trace::account::Tally::default();
    let bytes = ring_records(&mut loaded, 4096);
    let recs = decoded(&bytes);
    for r in &recs {
        tally.read(Some(r.header()));
        tally.delivered(r.header());
    }
    let delivered = recs.len() as u64;
    assert_eq!(hits, produced, "every call was seen");
    assert!(
        lost > 0 && delivered > 0,
        "a one-page ring must both deliver and drop (delivered {delivered}, lost {lost})"
    );
    assert_eq!(lost, produced - delivered, "the drop count is exact");
    let stats = rdma_trace::account::per_site(&Default::default(), &c, &tally, None);
    let shown: u64 = stats.iter().map(|s| s.lost()).sum();
    assert_eq!(shown, lost, "what the user is shown equals what was lost");
    for s in &stats {
        assert_eq!(s.hits, s.delivered + s.lost(), "{s:?}");
        assert_eq!(s.held, 0, "{s:?}");
    }
}

#[test]
#[ignore = "needs root (loads eBPF programs): cargo xtask test runs it as root"]
fn children_of_a_watched_thread_are_watched() {
    require_root();
    kernel::ensure_tracefs().expect("tracefs");
    let mut loaded = Loaded::new(1 << 20).expect("object loads");
    loaded.attach_syscalls(syscalls::system_layout().expect("layout"), &syscalls::all_nrs()).expect("attach");
    let tid = gettid();
    loaded.watch(tid).expect("watch");
    let child = std::process::Command::new("dd")
        .args(["if=/dev/zero", "of=/dev/null", "bs=513", "count=3", "status=none"])
        .status()
        .expect("dd runs");
    assert!(child.success());
    loaded.unwatch(tid).expect("unwatch");
    let bytes = ring_records(&mut loaded, 1 << 20);
    let recs = decoded(&bytes);
    // dd's own reads and writes of 513 bytes, seen although only this thread was watched.
    let dd: Vec<(&str, u64)> = recs
        .iter()
        .filter_map(|r| match r {
            Raw::Syscall { hdr, is_exit: false, nr, args, .. } if hdr.tgid != std::process::id() => {
                Some((syscalls::by_nr(*nr)?.name, args[2]))
            }
            _ => None,
        })
        .filter(|(_, count)| *count == 513)
        .collect();
    assert_eq!(dd.iter().filter(|(n, _)| *n == "read").count(), 3, "{dd:?}");
    assert_eq!(dd.iter().filter(|(n, _)| *n == "write").count(), 3, "{dd:?}");
}

/// The step marker, attached in the companion binary, carries every step record the
/// companion wrote to its announce file, byte for byte once parsed (on this host the
/// companion stops at its failing `get_device_list`: two records, `start` and the failure).
#[test]
#[ignore = "needs root (loads eBPF programs): cargo xtask test runs it as root"]
fn step_marker_carries_the_companions_records() {
    require_root();
    let workload = std::path::Path::new(env!("CARGO_BIN_EXE_rdma-trace-workload"));
    let mut loaded = Loaded::new(1 << 16).expect("object loads");
    loaded.attach_step_marker(workload).expect("step marker attaches");
    let file = std::env::temp_dir().join(format!("rdma-trace-steps-{}.jsonl", std::process::id()));
    let st = std::process::Command::new(workload)
        .args(["--announce", file.to_str().expect("utf-8 path")])
        .stderr(std::process::Stdio::null())
        .status()
        .expect("companion runs");
    let written = rdma_trace::pipeline::correlate::story::read_steps(&file).expect("announce file");
    std::fs::remove_file(&file).ok();
    assert!(written.len() >= 2, "the companion wrote {written:?} (exit {st})");
    let bytes = ring_records(&mut loaded, 1 << 16);
    let carried: Vec<_> = decoded(&bytes)
        .into_iter()
        .map(|r| match r {
            Raw::Step { hdr, json } => {
                let s = rdma_trace::pipeline::enrich::step(json).expect("a step record");
                assert_eq!((hdr.tgid, hdr.tid), (s.pid, s.tid), "the record's thread announced it");
                assert!(hdr.ts_ns >= s.t_end_ns, "announced after the step ended");
                s
            }
            other => panic!("only the marker is attached, got {other:?}"),
        })
        .collect();
    assert_eq!(carried, written);
}
