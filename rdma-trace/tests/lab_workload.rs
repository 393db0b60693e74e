//! The companion workload (`rdma-trace-workload`) in the soft-RoCE lab guest
//! (`cargo xtask vm-test`): what it announces is checked against independent sources in the
//! same run — `rdma res show mr/qp -j` and `/proc/PID/status` VmPin while it holds its MRs,
//! and its own plan for the step sequence. Announce files are kept in
//! `$RDMA_TRACE_LAB_OUT/workload-*.jsonl`.

use rdma_trace::steps::{StepName, StepRecord};
use rdma_trace::workload::plan::{RECV_WR_ID_BIT, expected_cq_events, expected_steps};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The workload binary: `$RDMA_TRACE_WORKLOAD_BIN`, or beside `$RDMA_TRACE_BIN`.
fn workload_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("RDMA_TRACE_WORKLOAD_BIN") {
        return p.into();
    }
    let tracer = std::env::var_os("RDMA_TRACE_BIN")
        .expect("RDMA_TRACE_BIN (or RDMA_TRACE_WORKLOAD_BIN) is set in the lab");
    PathBuf::from(tracer).with_file_name("rdma-trace-workload")
}

fn out_dir() -> PathBuf {
    let d = std::env::var_os("RDMA_TRACE_LAB_OUT").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    std::fs::create_dir_all(&d).expect("create the lab output dir");
    d
}

/// What one workload process left behind.
struct Outcome {
    pid: u32,
    code: Option<i32>,
    stderr: Vec<String>,
    records: Vec<StepRecord>,
    /// `rdma res show mr -j`, `rdma res show qp -j` and VmPin (kB), taken during the hold.
    mrs: Vec<Value>,
    qps: Vec<Value>,
    vm_pin_kb: Option<u64>,
}

fn rdma_res(kind: &str) -> Vec<Value> {
    let out = Command::new("rdma")
        .args(["res", "show", kind, "-j"])
        .output()
        .expect("run `rdma res show` (iproute2)");
    assert!(out.status.success(), "rdma res show {kind}: {out:?}");
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap_or_else(|e| {
            panic!("rdma res show {kind} -j is not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout))
        })
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn vm_pin_kb(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmPin:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Runs the workload with `args`, announcing to `$RDMA_TRACE_LAB_OUT/<file>`; samples the
/// kernel's view when it says it is holding.
fn run(file: &str, args: &[&str]) -> Outcome {
    let path = out_dir().join(file);
    let mut child = Command::new(workload_bin())
        .args(args)
        .arg("--announce")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", workload_bin().display()));
    let pid = child.id();
    let (mut mrs, mut qps, mut pin) = (Vec::new(), Vec::new(), None);
    let mut stderr = Vec::new();
    for line in BufReader::new(child.stderr.take().unwrap()).lines() {
        let line = line.expect("read the workload's stderr");
        eprintln!("  | {line}");
        if line.contains("holding") {
            mrs = rdma_res("mr");
            qps = rdma_res("qp");
            pin = vm_pin_kb(pid);
        }
        stderr.push(line);
    }
    let status = child.wait().expect("wait for the workload");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let records = text
        .lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("{}:{}: {e}: {l}", path.display(), i + 1))
        })
        .collect();
    Outcome { pid, code: status.code(), stderr, records, mrs, qps, vm_pin_kb: pin }
}

fn named(o: &Outcome, name: StepName) -> Vec<&StepRecord> {
    o.records.iter().filter(|r| r.name == name).collect()
}

/// Checks every run makes: format, pid, clock, plan, completions of every posted request.
fn check_common(o: &Outcome) {
    assert_eq!(o.code, Some(0), "exit code; stderr: {:?}", o.stderr);
    let start = &o.records[0];
    assert_eq!(start.name, StepName::Start);
    let cfg = start.config.clone().expect("start record has the config");
    let mut last_t = 0;
    for r in &o.records {
        assert_eq!(r.v, 0);
        assert!(r.ok, "step failed: {r:?}");
        assert_eq!(r.pid, o.pid, "pid of {r:?}");
        assert!(r.t_start_ns <= r.t_end_ns && r.t_start_ns >= last_t, "clock order at {r:?}");
        last_t = r.t_end_ns;
    }
    let names: Vec<StepName> = o.records[1..].iter().map(|r| r.name).collect();
    assert_eq!(names, expected_steps(&cfg), "announced steps differ from the plan");
    let steps: Vec<u32> = o.records[1..].iter().map(|r| r.step).collect();
    assert_eq!(steps, (1..=steps.len() as u32).collect::<Vec<_>>());

    // every posted work request completed once, successfully, with its byte count
    let qp_a = named(o, StepName::CreateQp)
        .into_iter()
        .find_map(|r| r.qp.as_ref().filter(|q| q.role == "a").map(|q| q.qpn))
        .expect("QP a created");
    let mut wcs: BTreeMap<u64, Vec<_>> = BTreeMap::new();
    for r in named(o, StepName::PollCq) {
        for w in &r.wcs {
            wcs.entry(w.wr_id).or_default().push(w.clone());
        }
    }
    let posted: Vec<_> = o
        .records
        .iter()
        .filter(|r| matches!(r.name, StepName::PostWrite | StepName::PostSend | StepName::PostRecv))
        .flat_map(|r| r.wrs.iter())
        .collect();
    assert_eq!(posted.iter().filter(|w| w.opcode != "RECV").count() as u32, cfg.iterations);
    for wr in &posted {
        let got = wcs.get(&wr.wr_id).unwrap_or_else(|| panic!("no completion for {wr:?}"));
        assert_eq!(got.len(), 1, "completions of wr_id {}: {got:?}", wr.wr_id);
        let wc = &got[0];
        assert_eq!((wc.status, wc.status_name.as_str()), (0, "SUCCESS"), "{wc:?}");
        assert_eq!(wc.byte_len, wr.length, "{wc:?}");
        assert_eq!(wc.opcode_name, wr.opcode, "{wc:?}");
        if wr.opcode == "RECV" {
            assert_ne!(wr.wr_id & RECV_WR_ID_BIT, 0);
        } else {
            assert_eq!(wc.qpn, qp_a, "{wc:?}");
        }
    }
    assert_eq!(wcs.len(), posted.len(), "completions nobody posted: {wcs:?}");
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_workload_events_agree_with_rdma_res_and_vmpin() {
    let o = run(
        "workload-events.jsonl",
        &["--mode", "events", "--mr-sizes", "4K,64K,1M", "--iterations", "6", "--hold-ms", "2000"],
    );
    check_common(&o);

    // one completion event per work request, each naming the armed send CQ
    let send_cq = named(&o, StepName::CreateCq)
        .into_iter()
        .find_map(|r| r.cq.as_ref().filter(|c| c.role == "send").cloned())
        .expect("send CQ created");
    let chan = named(&o, StepName::CreateCompChannel)[0].channel_fd;
    assert_eq!(send_cq.channel_fd, chan);
    let events = named(&o, StepName::GetCqEvent);
    assert_eq!(events.len() as u32, expected_cq_events(rdma_trace::steps::Mode::Events, 6));
    for e in &events {
        assert_eq!(e.event_cq, Some(send_cq.handle), "{e:?}");
    }
    assert_eq!(named(&o, StepName::AckCqEvents).len(), events.len());

    // the kernel's MR table, sampled during the hold, lists exactly the announced MRs
    let regs: Vec<_> = named(&o, StepName::RegMr).into_iter().map(|r| r.mr.clone().unwrap()).collect();
    assert_eq!(regs.len(), 3);
    let ours: Vec<&Value> = o.mrs.iter().filter(|m| m["pid"].as_u64() == Some(u64::from(o.pid))).collect();
    assert_eq!(ours.len(), regs.len(), "rdma res show mr: {:?}", o.mrs);
    for mr in &regs {
        let hex = |k: &str| -> Vec<u32> {
            ours.iter()
                .filter_map(|m| {
                    m[k].as_str().and_then(|s| u32::from_str_radix(s.trim_start_matches("0x"), 16).ok())
                })
                .collect()
        };
        assert!(hex("lkey").contains(&mr.lkey), "lkey {:#x} not in {ours:?}", mr.lkey);
        assert!(hex("rkey").contains(&mr.rkey), "rkey {:#x} not in {ours:?}", mr.rkey);
        let m = ours
            .iter()
            .find(|m| m["lkey"].as_str().and_then(|s| u32::from_str_radix(s, 16).ok()) == Some(mr.lkey))
            .unwrap();
        assert_eq!(m["mrlen"].as_u64(), Some(mr.length), "{m}");
    }
    // pages pinned by the process (pinned_vm, what the umem pin charges) = the pages announced
    let pages: u64 = regs.iter().map(|m| m.pages_4k).sum();
    assert_eq!(o.vm_pin_kb, Some(pages * 4), "VmPin vs announced pages_4k");

    // the kernel's QP table: both QPs, connected to each other, ready to send
    let qps: BTreeMap<u32, u32> = named(&o, StepName::ModifyQpRts)
        .into_iter()
        .filter_map(|r| r.qp.as_ref().map(|q| (q.qpn, q.dest_qpn.unwrap())))
        .collect();
    let kernel: Vec<&Value> = o.qps.iter().filter(|q| q["pid"].as_u64() == Some(u64::from(o.pid))).collect();
    let lqpns: BTreeSet<u32> = kernel.iter().filter_map(|q| q["lqpn"].as_u64()).map(|n| n as u32).collect();
    assert_eq!(lqpns, qps.keys().copied().collect(), "rdma res show qp: {:?}", o.qps);
    for q in &kernel {
        let l = q["lqpn"].as_u64().unwrap() as u32;
        assert_eq!(q["state"].as_str(), Some("RTS"), "{q}");
        if let Some(r) = q["rqpn"].as_u64() {
            assert_eq!(Some(&(r as u32)), qps.get(&l), "{q}");
        }
    }
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_workload_poll_mode_busy_polls_without_events() {
    let o = run("workload-poll.jsonl", &["--mode", "poll", "--mr-sizes", "4K,16M", "--iterations", "4"]);
    check_common(&o);
    assert!(named(&o, StepName::GetCqEvent).is_empty());
    assert!(named(&o, StepName::CreateCompChannel).is_empty());
    let polls: u64 = named(&o, StepName::PollCq).iter().filter_map(|r| r.polls).sum();
    assert!(polls >= 6, "at least one ibv_poll_cq per completion: {polls}");
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_workload_hugepages_map_huge_and_say_when_there_are_none() {
    const NR: &str = "/proc/sys/vm/nr_hugepages";
    let before = std::fs::read_to_string(NR).expect("read nr_hugepages");
    std::fs::write(NR, "0").expect("empty the huge page pool");
    let none = run("workload-hugepages-none.jsonl", &["--hugepages", "--mr-sizes", "4M"]);
    std::fs::write(NR, "8").expect("reserve 8 huge pages");
    let some = run(
        "workload-hugepages.jsonl",
        &["--hugepages", "--mr-sizes", "4K,4M", "--iterations", "2", "--hold-ms", "500"],
    );
    std::fs::write(NR, before.trim()).expect("restore nr_hugepages");

    assert_eq!(none.code, Some(1));
    assert_eq!(none.stderr.len(), 1, "one error line: {:?}", none.stderr);
    assert!(
        none.stderr[0].contains("no huge pages available") && none.stderr[0].contains("nr_hugepages"),
        "{:?}",
        none.stderr
    );
    let failed = none.records.last().unwrap();
    assert_eq!((failed.name, failed.ok), (StepName::MapBuffer, false));

    check_common(&some);
    let huge = 2u64 << 20;
    for r in named(&some, StepName::MapBuffer) {
        let b = r.buffer.as_ref().unwrap();
        assert!(b.hugepages && b.mapped_length % huge == 0 && b.addr % huge == 0, "{b:?}");
    }
    let ours = some.mrs.iter().filter(|m| m["pid"].as_u64() == Some(u64::from(some.pid))).count();
    assert_eq!(ours, 2, "rdma res show mr: {:?}", some.mrs);
}

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_workload_unknown_device_is_one_clear_line() {
    let o = run("workload-nodev.jsonl", &["--device", "nope0"]);
    assert_eq!(o.code, Some(1));
    assert_eq!(o.stderr.len(), 1, "{:?}", o.stderr);
    assert!(o.stderr[0].contains("no RDMA device named nope0 (devices: rxe0"), "{:?}", o.stderr);
    let last = o.records.last().unwrap();
    assert_eq!((last.name, last.ok), (StepName::GetDeviceList, false));
    assert_eq!(last.devices.as_deref(), Some(&["rxe0".to_string()][..]));
}
