//! A container's verbs program, named by its cgroup: the companion runs in a cgroup laid out
//! as Docker's systemd driver makes them (`/system.slice/docker-<id>.scope`). Every event of
//! the companion carries that cgroup's id (the inode of its directory) and path, and the
//! container id it names; `report` names the container on the process's line and in its
//! JSON.

mod common;

use common::*;
use rdma_trace::capture::Record;
use rdma_trace::event::{EventKind, ProbeId};
use rdma_trace::source::capture::{Reader, open};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_container_cgroup_named_in_capture_and_report() {
    let dir = out_dir("container");
    let id = "0123456789abcdef".repeat(4);
    let rel = format!("/system.slice/docker-{id}.scope");
    let cg = Path::new("/sys/fs/cgroup").join(rel.trim_start_matches('/'));
    std::fs::create_dir_all(&cg).expect("a cgroup (cgroup2 is mounted at /sys/fs/cgroup)");
    let ino = std::fs::metadata(&cg).unwrap().ino();
    let capture = dir.join("capture.jsonl");
    // The shell moves itself into the cgroup, then becomes the companion.
    let script = format!(
        "echo $$ > {}/cgroup.procs && exec {} --mr-sizes 64K --iterations 1 --announce /dev/null",
        cg.display(),
        workload_bin().display()
    );
    let st = Command::new(tracer_bin())
        .args(["trace", "-q", "-o"])
        .arg(&capture)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("rdma-trace.stderr")).unwrap())
        .status()
        .expect("run rdma-trace");
    std::fs::remove_dir(&cg).ok();
    assert!(st.success(), "trace -- the companion in a container's cgroup: {st}");
    let events: Vec<_> = Reader::new(open(&capture).unwrap(), true)
        .filter_map(|r| match r.expect("the capture reads") {
            Record::Event(e) => Some(std::sync::Arc::unwrap_or_clone(e)),
            _ => None,
        })
        .collect();
    let companion: Vec<_> = events.iter().filter(|e| e.comm == "rdma-trace-work").collect();
    assert!(companion.len() > 20, "the companion's events: {}", companion.len());
    for e in &companion {
        assert_eq!(e.cgroup_id, Some(ino), "the cgroup's inode: {e:?}");
        assert_eq!(e.cgroup.as_deref(), Some(rel.as_str()), "{e:?}");
        assert_eq!(e.container(), Some(id.as_str()));
    }
    let pins = companion.iter().filter(|e| e.is(ProbeId::UmemGet) && e.kind == EventKind::Entry).count();
    assert_eq!(pins, 1, "its one 64 KiB pin, in the container");
    // Before the move, the shell ran in the root cgroup.
    assert!(
        events.iter().any(|e| e.comm == "sh" && e.cgroup.as_deref() == Some("/")),
        "the shell's events before it moved name the root cgroup"
    );

    let out = Command::new(tracer_bin()).arg("report").arg(&capture).output().expect("report");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l.contains("rdma-trace-work") && l.contains("[container 0123456789ab]")),
        "the report's process line names the container:\n{text}"
    );
    let out =
        Command::new(tracer_bin()).args(["report", "--json"]).arg(&capture).output().expect("report --json");
    let r: rdma_trace::output::report::Report =
        serde_json::from_slice(&out.stdout).expect("the report's JSON");
    let p = r.processes.iter().find(|p| p.comm == "rdma-trace-work").expect("the companion in the report");
    assert_eq!(p.cgroup.as_deref(), Some(rel.as_str()));
}
