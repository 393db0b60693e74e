//! `cargo xtask demo`: boot the lab and show rdma-trace watching real verbs workloads over
//! rxe0. In a terminal: the TUI on the host, fed by the daemon in the guest through a
//! virtio-serial port, over the companion workload in a loop and a perftest pair; `q` ends
//! it and powers the guest off (its console is kept in a log). Without a terminal (CI): the
//! text stream on the console, then a story.

use super::qemu::Extras;
use super::{DemoArgs, Mode, Series};
use crate::util::step;
use anyhow::{Context, Result, bail};
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const DEMO_SH: &str = include_str!("guest/demo.sh");
const DEMO_TUI_SH: &str = include_str!("guest/demo-tui.sh");

pub fn demo(a: DemoArgs) -> Result<()> {
    let series = a.kernel.unwrap_or(Series::TrixieBackports);
    // Built before the boot, like vm-test: never build while QEMU runs.
    let bin = super::vmtest::build()?;
    super::share_binary(&bin, "rdma-trace")?;
    super::share_binary(&bin.with_file_name("rdma-trace-workload"), "rdma-trace-workload")?;
    let guests = super::prepare(&[series])?;
    let timeout = Duration::from_secs(a.timeout.unwrap_or(900));
    if !std::io::stdout().is_terminal() || a.text {
        let mode = Mode::Script { script: DEMO_SH, files: &[], timeout, log: "demo.console.log" };
        let rc = super::run_guest(&guests[0], mode)?.unwrap_or(0);
        if rc != 0 {
            bail!("the demo failed in the guest (exit {rc}); see the console above");
        }
        step("demo: done");
        return Ok(());
    }
    let socket = super::share_dir().join("demo.sock");
    std::fs::remove_file(&socket).ok();
    let stop = Arc::new(AtomicBool::new(false));
    let extras = Extras {
        virtio_socket: Some(socket.clone()),
        console_off_terminal: true,
        stop: Some(stop.clone()),
        ..Default::default()
    };
    let log = super::out_dir(series).join("demo.console.log");
    step(&format!("demo: the guest's console goes to {}", log.display()));
    let guest = guests.into_iter().next().context("a guest")?;
    let booted = std::thread::spawn(move || {
        let mode = Mode::Script {
            script: DEMO_TUI_SH,
            files: &[],
            timeout: Duration::from_secs(24 * 3600),
            log: "demo.console.log",
        };
        super::run_guest_with(&guest, mode, &extras)
    });
    // The TUI takes the terminal once QEMU is up (its own messages are printed by then).
    let t0 = Instant::now();
    while !socket.exists() {
        if booted.is_finished() || t0.elapsed() > Duration::from_secs(120) {
            stop.store(true, Ordering::Relaxed);
            let r = booted.join().map_err(|_| anyhow::anyhow!("the guest thread panicked"))?;
            r?;
            bail!("QEMU did not open {}", socket.display());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let tui = watch_tui(&bin, &socket, &booted);
    stop.store(true, Ordering::Relaxed);
    let guest = booted.join().map_err(|_| anyhow::anyhow!("the guest thread panicked"))?;
    let tui = tui?;
    guest?;
    std::fs::remove_file(&socket).ok();
    if !tui.success() {
        bail!("the TUI exited with {tui}");
    }
    step(&format!("demo: done; the guest's console is in {}", log.display()));
    Ok(())
}

/// Runs the TUI on the host until it quits; if the guest stops first (its script failed),
/// the TUI is told to end (SIGTERM: it restores the terminal) and the guest's failure is
/// what the demo reports.
fn watch_tui(
    bin: &std::path::Path,
    socket: &std::path::Path,
    booted: &std::thread::JoinHandle<Result<Option<i32>>>,
) -> Result<std::process::ExitStatus> {
    let mut child = std::process::Command::new(bin)
        .args(["tui", "--connect"])
        .arg(socket)
        .spawn()
        .context("starting the TUI")?;
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok(st);
        }
        if booted.is_finished() {
            // SAFETY: kill(2) of our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let st = child.wait()?;
            bail!("the guest stopped before the TUI was quit ({st}); see the console log");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
