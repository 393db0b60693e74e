//! docs/probes.md is generated from the catalog; this keeps it true.

#[test]
fn probes_md_matches_the_catalog() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/probes.md");
    let want = rdma_trace::plan::catalog::markdown();
    if std::env::var_os("RDMA_TRACE_BLESS").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "docs/probes.md is stale: run RDMA_TRACE_BLESS=1 cargo test -p rdma-trace --test docs"
    );
}
