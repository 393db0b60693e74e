//! `selftest`'s judgement on the companion's real lab captures (soft-RoCE, 6.12 and 7.3):
//! what passes, what is not run on soft-RoCE and why, that a damaged run fails the checks
//! it damages, and that the report names no address. The run itself is checked in the lab
//! (`lab_workload::lab_selftest_passes_on_soft_roce`).

use rdma_trace::cmd::selftest::gather;
use rdma_trace::output::selftest::{Device, Outcome, Provider, Report, judge, verdict};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lab").join(name)
}

fn outcomes(checks: &[rdma_trace::output::selftest::Judged]) -> Vec<(&'static str, Outcome)> {
    checks.iter().map(|c| (c.check, c.outcome.clone())).collect()
}

#[test]
fn the_companion_on_soft_roce_passes_with_two_checks_not_run() {
    for (k, release) in [("6.12", "6.12.118+deb13-amd64"), ("7.3", "7.3.4+deb13-amd64")] {
        let g = gather(&fixture(&format!("companion-{k}.jsonl"))).unwrap();
        let (provider, checks) = judge(&g.run(None));
        assert_eq!(provider, Provider::SoftRoce, "{k}");
        assert_eq!(
            outcomes(&checks),
            [
                ("companion", Outcome::Pass),
                ("probes", Outcome::Pass),
                ("mrs", Outcome::Pass),
                ("mappings", Outcome::Pass),
                ("doorbell cache mode", Outcome::NotRun),
                ("completion path", Outcome::Pass),
                ("interrupt context", Outcome::NotRun),
                ("loss", Outcome::Pass),
            ],
            "{k}: {checks:#?}"
        );
        let detail = |name: &str| checks.iter().find(|c| c.check == name).unwrap().detail.clone();
        // The companion's three MRs as it announced them, with their pages.
        assert!(
            detail("mrs").contains("4 KiB (1 page, keys), 64 KiB (16 pages, keys), 1 MiB (256 pages, keys)"),
            "{k}: {}",
            detail("mrs")
        );
        assert!(detail("mappings").contains("CQ ring ×2, receive queue ×2, send queue ×2"), "{k}");
        assert!(detail("doorbell cache mode").contains("soft-RoCE has no doorbell page"), "{k}");
        assert!(detail("interrupt context").contains("never from a device interrupt"), "{k}");
        assert!(detail("completion path").contains("kworker 6"), "{k}: {}", detail("completion path"));
        assert_eq!(
            verdict("rxe0", provider, &g.header.kernel_release, &checks),
            format!("selftest: PASS on rxe0 (soft-RoCE, kernel {release}): 6 checks passed, 2 not run")
        );
    }
}

/// The 7.3 capture without some of its lines.
fn without(dir: &Path, drop: &[&str]) -> PathBuf {
    let text = std::fs::read_to_string(fixture("companion-7.3.jsonl")).unwrap();
    let kept: Vec<&str> = text.lines().filter(|l| !drop.iter().any(|d| l.contains(d))).collect();
    let path = dir.join(format!("damaged-{}.jsonl", drop.len()));
    std::fs::write(&path, kept.join("\n") + "\n").unwrap();
    path
}

#[test]
fn a_run_that_lost_its_pins_or_its_end_fails_those_checks() {
    let dir = std::env::temp_dir().join(format!("rt-selftest-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let g = gather(&without(&dir, &["\"name\":\"umem_get\"", "\"type\":\"trailer\""])).unwrap();
    let (provider, checks) = judge(&g.run(None));
    let failed: Vec<&str> = checks.iter().filter(|c| c.outcome == Outcome::Fail).map(|c| c.check).collect();
    assert_eq!(failed, ["probes", "mrs", "loss"], "{checks:#?}");
    let detail = |name: &str| checks.iter().find(|c| c.check == name).unwrap().detail.clone();
    assert!(detail("probes").contains("umem_get (attached, never fired)"), "{}", detail("probes"));
    assert!(detail("loss").contains("cut short"), "{}", detail("loss"));
    assert_eq!(
        verdict("rxe0", provider, &g.header.kernel_release, &checks),
        "selftest: FAIL on rxe0 (soft-RoCE, kernel 7.3.4+deb13-amd64): probes, mrs, loss"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_report_names_kernel_driver_and_results_and_no_address() {
    let g = gather(&fixture("companion-7.3.jsonl")).unwrap();
    let run = g.run(None);
    let (provider, checks) = judge(&run);
    let v = verdict("rxe0", provider, &g.header.kernel_release, &checks);
    let device = Device {
        name: "rxe0".into(),
        fw_ver: Some("0.0.0".into()),
        node_type: Some("1: CA".into()),
        link_layer: Some("Ethernet".into()),
        ..Default::default()
    };
    let text = serde_json::to_string_pretty(&Report::new(&run, &device, provider, &v, &checks)).unwrap();
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["kernel_release"], "7.3.4+deb13-amd64");
    assert_eq!(json["provider"], "soft-roce");
    assert_eq!(json["device"]["fw_ver"], "0.0.0");
    assert_eq!(json["verdict"], v.as_str());
    assert_eq!(json["checks"].as_array().unwrap().len(), 8);
    assert_eq!(json["fired"]["umem_get"], 6);
    // Probes that never fired are listed with their status (mlx5's: attached, no NIC).
    let silent = json["silent"].as_array().unwrap();
    assert!(silent.iter().any(|s| s["probe"] == "mlx5_reg_mr" && s["status"] == "attached"), "{silent:?}");
    // No address: nothing in hex, and no number as large as a user or kernel pointer.
    assert!(!text.contains("0x"), "{text}");
    let big = text
        .split(|c: char| !c.is_ascii_digit())
        .filter(|d| !d.is_empty())
        .any(|d| d.parse::<u128>().is_ok_and(|n| n >= 1 << 32));
    assert!(!big, "{text}");
}
