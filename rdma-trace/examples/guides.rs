//! Writes docs/guides/ from the lab captures beside it (`cargo xtask guides` runs this after
//! the lab has made them).
//!
//! Usage: guides CAPTURES_DIR OUT_DIR

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [captures, out] = &args[..] else { anyhow::bail!("usage: guides CAPTURES_DIR OUT_DIR") };
    for g in rdma_trace::cmd::explain::guides(std::path::Path::new(captures))? {
        let path = std::path::Path::new(out).join(g.file);
        std::fs::write(&path, g.markdown)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
