//! The probes on a real kernel RDMA stack (soft-RoCE in the lab guest, both kernels).
//!
//! One traced session runs real workloads nobody here wrote (ib_write_bw, ibv_rc_pingpong -e,
//! rping) with rdma-trace and bpftrace attached side by side, sampling independent sources
//! while the MRs live (`rdma res show mr`, /proc/<pid>/maps, /proc/<pid>/status). The tests
//! below each check one claim against that session.

use rdma_trace::event::FieldId;
mod common;

use common::*;
use rdma_trace::event::{Event, EventKind, ExecContext};
use rdma_trace::source::capture::parse_jsonl;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// What a workload process showed while it ran.
#[derive(Debug, Default)]
struct Sample {
    /// CLOCK_MONOTONIC just before and just after /proc was read: what /proc showed
    /// happened before `after_ns`, and everything before `ts_ns` shows.
    ts_ns: u64,
    after_ns: u64,
    maps: String,
    vmpin_kb: Option<u64>,
}

#[derive(Debug, Default)]
struct Session {
    events: Vec<Event>,
    tracer_stderr: String,
    bpftrace_out: String,
    /// pid → local (RKey, VAddr) printed by ib_write_bw.
    write_bw: HashMap<u32, (u64, u64)>,
    /// `rdma -j res show mr` taken while ib_write_bw's MRs lived.
    rdma_res_mr: String,
    samples: HashMap<u32, Sample>,
    /// pids of every workload process.
    workload_pids: HashSet<u32>,
    dir: PathBuf,
}

fn write_bw_local(out: &str) -> Option<(u64, u64)> {
    let line = out.lines().find(|l| l.contains("local address:"))?;
    let tok: Vec<&str> = line.split_whitespace().collect();
    let after = |k: &str| {
        let i = tok.iter().position(|t| *t == k)?;
        u64::from_str_radix(tok.get(i + 1)?.trim_start_matches("0x"), 16).ok()
    };
    Some((after("RKey")?, after("VAddr")?))
}

fn sample(pid: u32) -> Sample {
    let ts_ns = monotonic_ns();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let vmpin_kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmPin:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok());
    Sample { ts_ns, after_ns: monotonic_ns(), maps, vmpin_kb }
}

fn run_session() -> Session {
    let dir = out_dir("session");
    let mut sess = Session { dir: dir.clone(), ..Default::default() };
    let capture = dir.join("capture.jsonl");
    let tr_err = dir.join("rdma-trace.stderr");
    let t0 = Instant::now();
    let mut tracer = std::process::Command::new(tracer_bin())
        .args(["trace", "-q", "-o"])
        .arg(&capture)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&tr_err).unwrap())
        .spawn()
        .expect("start rdma-trace");
    wait_for(&tr_err, "rdma-trace: tracing", &mut tracer, 120).expect("rdma-trace attaches");
    let attach_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let mut bt = Bpftrace::for_this_kernel().start(&dir);
    let bt_out = dir.join("bpftrace.out");
    let bt_s = t1.elapsed().as_secs_f64();
    std::fs::write(
        dir.join("attach-times.txt"),
        format!("rdma-trace {attach_s:.1} s\nbpftrace {bt_s:.1} s\n"),
    )
    .unwrap();

    // 1. ib_write_bw: sample independent sources while its MRs are registered.
    let (s, c) = pair(
        &dir,
        "ib_write_bw",
        &["ib_write_bw", "-F", "-d", "rxe0", "-x", "1", "-D", "4"],
        &["ib_write_bw", "-F", "-d", "rxe0", "-x", "1", "-D", "4", SERVER_IP],
    );
    let (spid, cpid) = (s.id(), c.id());
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(30) {
        let res = run_output("rdma", &["-j", "res", "show", "mr"]);
        let both = [spid, cpid].iter().all(|p| res.contains(&format!("\"pid\":{p}")));
        // perftest registers its MR before it creates the CQ, so a pid can own an MR while
        // it has no queue mapped yet: sample only once both have mapped a queue.
        let (ss, cs) = (sample(spid), sample(cpid));
        let mapped = [&ss, &cs].iter().all(|x| x.maps.contains("/dev/infiniband/uverbs"));
        if both && mapped {
            sess.samples.insert(spid, ss);
            sess.samples.insert(cpid, cs);
            sess.rdma_res_mr = res;
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    finish(s, c, "ib_write_bw");
    for (pid, who) in [(spid, "server"), (cpid, "client")] {
        let out = std::fs::read_to_string(dir.join(format!("ib_write_bw-{who}.log"))).unwrap();
        let local = write_bw_local(&out)
            .unwrap_or_else(|| panic!("ib_write_bw {who} printed no local address:\n{out}"));
        sess.write_bw.insert(pid, local);
    }
    sess.workload_pids.extend([spid, cpid]);

    // 2. ibv_rc_pingpong with completion events; 3. rping (rdma_cm, CQ events).
    let (s, c) = pair(
        &dir,
        "rc_pingpong",
        &["ibv_rc_pingpong", "-e", "-d", "rxe0", "-g", "1", "-n", "50"],
        &["ibv_rc_pingpong", "-e", "-d", "rxe0", "-g", "1", "-n", "50", SERVER_IP],
    );
    sess.workload_pids.extend([s.id(), c.id()]);
    finish(s, c, "ibv_rc_pingpong -e");
    let (s, c) = pair(
        &dir,
        "rping",
        &["rping", "-s", "-a", SERVER_IP, "-C", "10"],
        &["rping", "-c", "-a", SERVER_IP, "-C", "10"],
    );
    sess.workload_pids.extend([s.id(), c.id()]);
    finish(s, c, "rping");

    std::thread::sleep(Duration::from_millis(500));
    interrupt(&tracer);
    let st = wait_timeout(&mut tracer, 60);
    assert!(st.success(), "rdma-trace exit: {st}");
    interrupt(&bt);
    wait_timeout(&mut bt, 60);
    sess.tracer_stderr = std::fs::read_to_string(&tr_err).unwrap();
    sess.bpftrace_out = std::fs::read_to_string(&bt_out).unwrap();
    std::fs::write(dir.join("rdma-res-mr.json"), &sess.rdma_res_mr).unwrap();
    let text = std::fs::read_to_string(&capture).expect("capture written");
    sess.events = parse_jsonl(&text).expect("capture parses");
    sess
}

fn session() -> &'static Session {
    static S: OnceLock<Session> = OnceLock::new();
    S.get_or_init(run_session)
}

fn entries<'a>(s: &'a Session, name: &'a str) -> impl Iterator<Item = &'a Event> + 'a {
    s.events.iter().filter(move |e| e.name == name && e.kind == EventKind::Entry)
}

/// Each entry with the next return of the same probe on the same thread.
fn calls<'a>(s: &'a Session, name: &str) -> Vec<(&'a Event, &'a Event)> {
    let mut out = Vec::new();
    for (i, e) in s.events.iter().enumerate() {
        if e.name == name && e.kind == EventKind::Entry {
            let ret = s.events[i + 1..]
                .iter()
                .find(|r| r.name == name && r.kind == EventKind::Return && r.tid == e.tid)
                .unwrap_or_else(|| panic!("{name} entry at {} has no return", e.ts_ns));
            out.push((e, ret));
        }
    }
    out
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_probes_plan_attaches_every_probe() {
    let out = run_output(tracer_bin().to_str().unwrap(), &["probes"]);
    std::fs::write(out_dir("session").join("probes.txt"), &out).unwrap();
    let kallsyms = common::kallsyms_names();
    for spec in rdma_trace::plan::catalog::CATALOG {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(spec.id.as_str()))
            .unwrap_or_else(|| panic!("{} missing from `rdma-trace probes`:\n{out}", spec.id));
        // A function this kernel does not have (6.1 has no rxe_rereg_user_mr) is skipped
        // with that reason; every other one attaches.
        let absent = spec.symbols.iter().all(|s| !kallsyms.contains(s.name));
        if absent && line.contains("not in this kernel") {
            continue;
        }
        assert!(line.contains("attached"), "{} not attached: {line}", spec.id);
        if spec.hardware_only {
            assert!(line.contains("hardware NIC"), "{} not labelled hardware-only: {line}", spec.id);
        }
    }
    let umem = umem_symbol();
    assert!(out.lines().any(|l| l.starts_with("umem_get") && l.contains(umem)), "umem_get on {umem}:\n{out}");
    // mlx5_ib is loaded in the lab without a device: the mmap numbers rdma-trace decodes
    // were held against this kernel's own.
    let n = rdma_trace::plan::mlx5::constants().len();
    let agree =
        format!("mlx5 mmap offsets: the {n} numbers rdma-trace decodes agree with this kernel's mlx5_ib");
    assert!(out.lines().any(|l| l == agree), "no line {agree:?} in:\n{out}");
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_probes_counts_equal_bpftrace_with_no_loss() {
    let s = session();
    let (report, equal) = compare_counts(&s.events, &Bpftrace::for_this_kernel(), &s.bpftrace_out);
    std::fs::write(s.dir.join("counts.txt"), &report).unwrap();
    assert!(equal, "counts differ:\n{report}\nbpftrace said:\n{}", s.bpftrace_out);
    for id in ["umem_get", "rxe_reg_mr", "uverbs_mmap", "rxe_mmap", "comp_handler", "umem_release"] {
        assert!(entries(s, id).count() > 0, "{id} never fired:\n{report}");
    }
    let lost = tool_losses(&s.tracer_stderr);
    assert!(lost.is_empty(), "rdma-trace lost events: {lost:?}\n{}", s.tracer_stderr);
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_probes_write_bw_rkey_and_vaddr_match_reg_mr_and_umem() {
    let s = session();
    let regs = calls(s, "rxe_reg_mr");
    let umems = calls(s, "umem_get");
    for (pid, (rkey, vaddr)) in &s.write_bw {
        let (entry, ret) = regs
            .iter()
            .find(|(e, _)| {
                e.pid == *pid
                    && (e.field(FieldId::Start).unwrap()
                        ..e.field(FieldId::Start).unwrap() + e.field(FieldId::Length).unwrap())
                        .contains(vaddr)
            })
            .unwrap_or_else(|| panic!("no reg_mr of pid {pid} covers VAddr {vaddr:#x}"));
        assert_eq!(ret.field(FieldId::Rkey), Some(*rkey), "pid {pid}: rkey printed by ib_write_bw");
        let (start, len) = (entry.field(FieldId::Start).unwrap(), entry.field(FieldId::Length).unwrap());
        let (ue, ur) = umems
            .iter()
            .find(|(e, _)| e.pid == *pid && e.field(FieldId::Addr) == Some(start))
            .unwrap_or_else(|| panic!("no umem pin of pid {pid} at {start:#x}"));
        assert_eq!(ue.field(FieldId::Size), Some(len), "umem size = MR length");
        assert!(ue.ts_ns > entry.ts_ns && ur.ts_ns < ret.ts_ns, "the pin happens inside reg_mr");
        assert_eq!((ur.field(FieldId::UmemAddress), ur.field(FieldId::UmemLength)), (Some(start), Some(len)));
        assert!(ur.latency_ns.is_some_and(|l| l > 0), "pin latency measured");
        assert_eq!(ur.field(FieldId::Pages), Some(rdma_trace::steps::pages_spanned(start, len)));
    }
}

fn json_u64(v: &serde_json::Value) -> Option<u64> {
    v.as_u64().or_else(|| v.as_str().and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()))
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_probes_reg_mr_matches_rdma_res_show_mr() {
    let s = session();
    assert!(!s.rdma_res_mr.is_empty(), "rdma res show mr was never sampled with both ib_write_bw MRs");
    let res: serde_json::Value = serde_json::from_str(&s.rdma_res_mr).expect("rdma -j output");
    let regs = calls(s, "rxe_reg_mr");
    let mut checked = 0;
    for mr in res.as_array().expect("a JSON array") {
        let Some(pid) = mr.get("pid").and_then(json_u64) else {
            continue;
        };
        if !s.write_bw.contains_key(&(pid as u32)) {
            continue;
        }
        let (lkey, rkey, len) = (
            mr.get("lkey").and_then(json_u64),
            mr.get("rkey").and_then(json_u64),
            mr.get("mrlen").and_then(json_u64),
        );
        let found = regs.iter().any(|(e, r)| {
            u64::from(e.pid) == pid
                && r.field(FieldId::Lkey) == lkey
                && r.field(FieldId::Rkey) == rkey
                && e.field(FieldId::Length) == len
        });
        assert!(found, "rdma res mr {mr} has no matching reg_mr event");
        checked += 1;
    }
    assert!(checked >= 2, "expected ib_write_bw's MRs in:\n{}", s.rdma_res_mr);
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_probes_uverbs_mappings_match_proc_maps() {
    let s = session();
    assert!(!s.samples.is_empty(), "no /proc samples were taken");
    for (pid, smp) in &s.samples {
        let maps: Vec<(u64, u64)> = smp
            .maps
            .lines()
            .filter(|l| l.contains("/dev/infiniband/uverbs"))
            .filter_map(|l| {
                let (a, b) = l.split_whitespace().next()?.split_once('-')?;
                Some((u64::from_str_radix(a, 16).ok()?, u64::from_str_radix(b, 16).ok()?))
            })
            .collect();
        assert!(!maps.is_empty(), "pid {pid} has no uverbs mappings:\n{}", smp.maps);
        let vmas: HashSet<(u64, u64)> = entries(s, "uverbs_mmap")
            .filter(|e| e.pid == *pid && e.ts_ns < smp.after_ns)
            .map(|e| (e.field(FieldId::VmStart).unwrap(), e.field(FieldId::VmEnd).unwrap()))
            .collect();
        for m in &maps {
            assert!(
                vmas.contains(m),
                "pid {pid}: mapping {:#x}-{:#x} not seen by ib_uverbs_mmap {vmas:x?}",
                m.0,
                m.1
            );
        }
    }
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_probes_pinned_pages_match_vmpin() {
    let s = session();
    let pins = calls(s, "umem_get");
    for (pid, smp) in &s.samples {
        // The pages of the umems live at `t` (pinned, not yet released).
        let live_at = |t: u64| -> u64 {
            pins.iter()
                .filter(|(e, r)| e.pid == *pid && r.ts_ns < t && r.field(FieldId::Umem).is_some())
                .filter(|(_, r)| {
                    let umem = r.field(FieldId::Umem);
                    !entries(s, "umem_release").any(|x| x.field(FieldId::Umem) == umem && x.ts_ns < t)
                })
                .map(|(_, r)| r.field(FieldId::Pages).unwrap())
                .sum()
        };
        // /proc was read between the two: a pin or release inside that window may or may
        // not show; outside it, VmPin must equal the pages exactly.
        let (before, after) = (live_at(smp.ts_ns), live_at(smp.after_ns));
        assert!(
            smp.vmpin_kb == Some(before * 4) || smp.vmpin_kb == Some(after * 4),
            "pid {pid}: VmPin {:?} kB vs pages pinned by live umems ({before} before the read, {after} after)",
            smp.vmpin_kb
        );
        assert!(before.max(after) > 0, "pid {pid}: sampled while it held no pin");
    }
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_probes_completions_join_the_workloads_cqs() {
    let s = session();
    let created = Bpftrace::created_cqs(&s.bpftrace_out);
    assert!(!created.is_empty(), "bpftrace saw no ibv_create_cq return:\n{}", s.bpftrace_out);
    let comps: Vec<&Event> = entries(s, "comp_handler").collect();
    assert!(!comps.is_empty());
    for c in &comps {
        let h = c.field(FieldId::CqUserHandle).expect("cq_user_handle read");
        assert!(
            created.contains(&h),
            "completion on CQ handle {h:#x}, not one the workloads created: {created:x?}"
        );
        // Where it ran, as its frames show: soft-RoCE's queued work in a kworker (6.12,
        // 7.3), or its tasklet in the softirq a workload's own system call ran as it
        // re-enabled bottom halves (6.1); never the workload's thread outside a syscall.
        let frame = |p: &str| c.stack.iter().any(|f| f.starts_with(p));
        match c.context {
            Some(ExecContext::Kworker) => {
                assert!(frame("process_one_work") && c.comm.starts_with("kworker"), "{c:?}");
                assert!(!s.workload_pids.contains(&c.pid), "a kworker is no workload: {c:?}");
            }
            Some(ExecContext::Softirq) => {
                assert!(frame("tasklet_action") && frame("handle_softirqs"), "a tasklet: {c:?}");
                assert!(frame("do_syscall_64") || !s.workload_pids.contains(&c.pid), "{c:?}");
            }
            other => panic!("soft-RoCE completes in a kworker or a tasklet, not {other:?}: {c:?}"),
        }
        assert!(
            c.stack.first().is_some_and(|f| f.starts_with("ib_uverbs_comp_handler")),
            "stack: {:?}",
            c.stack
        );
    }
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_probes_udata_read_at_its_btf_position() {
    // udata is the 6th parameter of rxe_reg_user_mr on 6.12 and the 7th (on the stack) on
    // 7.x. rdma-core's rxe provider sends no driver-private bytes with reg_mr, so a correctly
    // read udata is a kernel pointer to an ib_udata with inlen = outlen = 0.
    let s = session();
    let regs: Vec<&Event> = entries(s, "rxe_reg_mr").collect();
    assert!(!regs.is_empty());
    for e in regs {
        assert!(e.unreadable.is_empty() && e.not_followed.is_empty(), "{e:?}");
        let udata = e.field(FieldId::Udata).unwrap();
        // Kernel half of the address space (5-level paging puts it at 0xff00…).
        assert!(udata >= 0xff00_0000_0000_0000, "udata {udata:#x} is not a kernel pointer");
        assert_eq!(
            (e.field(FieldId::UdataInlen), e.field(FieldId::UdataOutlen)),
            (Some(0), Some(0)),
            "{e:?}"
        );
    }
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_probes_control_path_stacks() {
    let s = session();
    let umem = umem_symbol();
    let reg = entries(s, "umem_get").next().expect("a umem pin");
    assert!(reg.stack.first().is_some_and(|f| f.starts_with(umem)), "{:?}", reg.stack);
    assert!(reg.stack.iter().any(|f| f.starts_with("rxe_reg_user_mr")), "{:?}", reg.stack);
    assert!(reg.stack.iter().any(|f| f.starts_with("ib_uverbs_ioctl") || f.starts_with("ib_uverbs_write")));
    let mm = entries(s, "rxe_mmap").next().expect("an rxe mmap");
    assert!(mm.stack.iter().any(|f| f.starts_with("ib_uverbs_mmap")), "{:?}", mm.stack);
    assert_eq!(mm.context, Some(ExecContext::Process));
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_probes_user_verbs_calls_enclose_their_kernel_work() {
    // uprobes on libibverbs' default symbol versions: every kernel MR registration of a
    // workload sits inside the user-space ibv_reg_mr(_iova2) call that caused it, on the
    // same thread, with the same range and the same keys.
    let s = session();
    let mut user = calls(s, "ibv_reg_mr_iova2");
    user.extend(calls(s, "ibv_reg_mr"));
    assert!(!user.is_empty(), "no ibv_reg_mr uprobe fired");
    for (ke, kr) in calls(s, "rxe_reg_mr").into_iter().filter(|(e, _)| s.workload_pids.contains(&e.pid)) {
        let (ue, ur) = user
            .iter()
            .filter(|(ue, ur)| ue.tid == ke.tid && ue.ts_ns < ke.ts_ns && ur.ts_ns > kr.ts_ns)
            .min_by_key(|(ue, _)| ke.ts_ns - ue.ts_ns)
            .unwrap_or_else(|| panic!("kernel reg_mr {ke:?} has no enclosing ibv_reg_mr call"));
        assert_eq!(ue.field(FieldId::Addr), ke.field(FieldId::Start), "{ue:?}");
        assert_eq!(ue.field(FieldId::Length), ke.field(FieldId::Length));
        assert_eq!(
            (ur.field(FieldId::Lkey), ur.field(FieldId::Rkey)),
            (kr.field(FieldId::Lkey), kr.field(FieldId::Rkey))
        );
        assert_eq!(ue.path, rdma_trace::event::Path::Verbs);
    }
    // ibv_create_cq returns: the same CQ handles bpftrace's uretprobe saw.
    let ours: HashSet<u64> =
        calls(s, "ibv_create_cq").iter().filter_map(|(_, r)| r.field(FieldId::Cq)).collect();
    let theirs = Bpftrace::created_cqs(&s.bpftrace_out);
    assert_eq!(ours, theirs, "ibv_create_cq results: rdma-trace vs bpftrace");
    for c in entries(s, "comp_handler") {
        assert!(ours.contains(&c.field(FieldId::CqUserHandle).unwrap()), "{c:?}");
    }
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_probes_uprobes_fire_on_binaries_served_over_9p() {
    // The companion's step marker, in the binary as the host share (9p) serves it: one hit
    // per announced step.
    let dir = out_dir("session");
    let w = workload_bin();
    let script = format!(
        "uprobe:{}:rdma_trace_step {{ @steps = count(); }} BEGIN {{ printf(\"ready\\n\"); }}",
        w.display()
    );
    let out = dir.join("uprobe-9p.bpftrace.out");
    let mut bt = spawn_logged("bpftrace", &["-e", &script], &out);
    wait_for(&out, "ready", &mut bt, 120).expect("bpftrace attaches to the 9p binary");
    let steps = dir.join("uprobe-9p.steps.jsonl");
    let st = std::process::Command::new(&w)
        .args(["--mr-sizes", "4K", "--iterations", "2", "--announce"])
        .arg(&steps)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    interrupt(&bt);
    wait_timeout(&mut bt, 60);
    let announced = std::fs::read_to_string(&steps).unwrap().lines().count() as u64;
    let text = std::fs::read_to_string(&out).unwrap();
    let hits: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("@steps: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert_eq!(hits, announced, "{text}");
}
