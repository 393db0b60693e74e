//! `cargo xtask demo`: boot the lab and show rdma-trace watching real verbs workloads
//! (ibv_rc_pingpong -e, rping, ib_write_bw) over rxe0, its events streamed to the console.

use super::{DemoArgs, Mode, Series};
use crate::util::step;
use anyhow::{Result, bail};
use std::time::Duration;

const DEMO_SH: &str = include_str!("guest/demo.sh");

pub fn demo(a: DemoArgs) -> Result<()> {
    let series = a.kernel.unwrap_or(Series::TrixieBackports);
    // Built before the boot, like vm-test: never build while QEMU runs.
    let bin = super::vmtest::build()?;
    super::share_binary(&bin, "rdma-trace")?;
    super::share_binary(&bin.with_file_name("rdma-trace-workload"), "rdma-trace-workload")?;
    let guests = super::prepare(&[series])?;
    let timeout = Duration::from_secs(a.timeout.unwrap_or(900));
    let mode = Mode::Script { script: DEMO_SH, files: &[], timeout, log: "demo.console.log" };
    let rc = super::run_guest(&guests[0], mode)?.unwrap_or(0);
    if rc != 0 {
        bail!("the demo failed in the guest (exit {rc}); see the console above");
    }
    step("demo: done");
    Ok(())
}
