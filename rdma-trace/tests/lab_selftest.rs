//! `rdma-trace selftest` in the soft-RoCE lab guest (`cargo xtask vm-test`): the run a
//! person with a NIC would make, on rxe0. It passes, names what cannot run on soft-RoCE, and
//! its report holds the kernel it ran on and the companion's own MR sizes and pages, with no
//! address. The report and the printout are kept in `$RDMA_TRACE_LAB_OUT/selftest/`.

mod common;

use common::{out_dir, tracer_bin};
use std::process::Command;

#[test]
#[ignore = "lab: needs the soft-RoCE guest (cargo xtask vm-test)"]
fn lab_selftest_passes_on_soft_roce() {
    let dir = out_dir("selftest");
    let report = dir.join("selftest.json");
    let out = Command::new(tracer_bin())
        .args(["selftest", "--device", "rxe0", "-o"])
        .arg(&report)
        .output()
        .expect("rdma-trace selftest");
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    std::fs::write(dir.join("selftest.out"), format!("{printed}\n--- stderr\n{said}")).unwrap();
    assert!(out.status.success(), "selftest failed ({}):\n{printed}\n{said}", out.status);

    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap().trim().to_string();
    let verdict = printed.lines().rev().find(|l| l.starts_with("selftest: ")).expect("a verdict line");
    assert_eq!(
        verdict,
        format!("selftest: PASS on rxe0 (soft-RoCE, kernel {release}): 6 checks passed, 2 not run"),
        "{printed}"
    );

    let text = std::fs::read_to_string(&report).expect("the report file");
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["kernel_release"], release.as_str());
    assert_eq!(json["device"]["name"], "rxe0");
    assert_eq!(json["device"]["link_layer"], "Ethernet", "{text}");
    assert_eq!(json["provider"], "soft-roce");
    let check = |name: &str| {
        json["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == name)
            .unwrap_or_else(|| panic!("no check {name}: {text}"))
            .clone()
    };
    for name in ["companion", "probes", "mrs", "mappings", "completion path", "loss"] {
        assert_eq!(check(name)["outcome"], "pass", "{name}: {text}");
    }
    for name in ["doorbell cache mode", "interrupt context"] {
        assert_eq!(check(name)["outcome"], "not-run", "{name}: {text}");
        assert!(check(name)["detail"].as_str().unwrap().contains("soft-RoCE"), "{name}: {text}");
    }
    // The sizes selftest gave the companion, pinned page by page.
    let mrs = check("mrs")["detail"].as_str().unwrap().to_string();
    assert!(mrs.contains("4 KiB (1 page, keys), 64 KiB (16 pages, keys), 1 MiB (256 pages, keys)"), "{mrs}");
    assert!(check("loss")["detail"].as_str().unwrap().ends_with(", 0 lost (any process)"), "{text}");
    assert!(json["fired"]["umem_get"].as_u64().unwrap() >= 6, "{text}");
    assert!(!text.contains("0x"), "an address in the report:\n{text}");
}
