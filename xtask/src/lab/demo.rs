//! `cargo xtask demo`: boot the lab and show rdma-trace watching real verbs workloads over
//! rxe0. In a terminal: the TUI on the host, fed by the daemon in the guest through a
//! virtio-serial port, over the companion workload in a loop and a perftest pair; `q` ends
//! it and powers the guest off (its console is kept in a log). Without a terminal (CI): the
//! text stream on the console, then a story. `--hosts 2`: two guests on a wire, a daemon in
//! each, both on one TUI.

use super::qemu::Extras;
use super::{DemoArgs, Mode, Series};
use crate::util::step;
use anyhow::{Context, Result, bail};
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const DEMO_SH: &str = include_str!("guest/demo.sh");
/// The TUI demos' guest scripts, each after the lines that find the virtio port.
const DEMO_TUI_SH: &str = concat!(include_str!("guest/demo-port.sh"), include_str!("guest/demo-tui.sh"));
const DEMO_PAIR_SH: &str = concat!(include_str!("guest/demo-port.sh"), include_str!("guest/demo-pair.sh"));

pub fn demo(a: DemoArgs) -> Result<()> {
    let series = a.kernel.unwrap_or(Series::TrixieBackports);
    // Built before the boot, like vm-test: never build while QEMU runs.
    let bin = super::vmtest::build()?;
    super::share_binary(&bin, "rdma-trace")?;
    super::share_binary(&bin.with_file_name("rdma-trace-workload"), "rdma-trace-workload")?;
    let guests = super::prepare(&[series])?;
    let timeout = Duration::from_secs(a.timeout.unwrap_or(900));
    if a.hosts == 2 {
        if !std::io::stdout().is_terminal() || a.text {
            bail!("demo --hosts 2 shows both hosts on the TUI: run it in a terminal");
        }
        let guest = guests.into_iter().next().context("a guest")?;
        return pair(&bin, guest);
    }
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
    let tui = watch_tui(&bin, std::slice::from_ref(&socket), &booted);
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

/// Two guests on a wire, a daemon in each serving the host through its own virtio port,
/// and one TUI on the host connected to both.
fn pair(bin: &std::path::Path, guest: super::Guest) -> Result<()> {
    let sockets: Vec<_> = [1, 2].iter().map(|h| super::share_dir().join(format!("demo-{h}.sock"))).collect();
    sockets.iter().for_each(|s| drop(std::fs::remove_file(s)));
    let stop = Arc::new(AtomicBool::new(false));
    step(&format!(
        "demo: two guests; their consoles go to {}",
        super::out_dir(guest.series).join("demo-pair.host{1,2}.console.log").display()
    ));
    let (for_guests, stopped) = (sockets.clone(), stop.clone());
    let booted = std::thread::spawn(move || {
        let extras = |host: u8| super::qemu::Extras {
            virtio_socket: Some(for_guests[usize::from(host) - 1].clone()),
            console_off_terminal: true,
            stop: Some(stopped.clone()),
            ..Default::default()
        };
        super::run_pair_with(&guest, DEMO_PAIR_SH, &[], Duration::from_secs(24 * 3600), "demo-pair", &extras)
            .map(|rcs| rcs.into_iter().find(|&rc| rc != 0))
    });
    let t0 = Instant::now();
    while !sockets.iter().all(|s| s.exists()) {
        if booted.is_finished() || t0.elapsed() > Duration::from_secs(120) {
            stop.store(true, Ordering::Relaxed);
            booted.join().map_err(|_| anyhow::anyhow!("the guests' thread panicked"))??;
            bail!("QEMU did not open {}", sockets[0].display());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let tui = watch_tui(bin, &sockets, &booted);
    stop.store(true, Ordering::Relaxed);
    let guests = booted.join().map_err(|_| anyhow::anyhow!("the guests' thread panicked"))?;
    let tui = tui?;
    guests?;
    sockets.iter().for_each(|s| drop(std::fs::remove_file(s)));
    if !tui.success() {
        bail!("the TUI exited with {tui}");
    }
    step("demo: done");
    Ok(())
}

/// Runs the TUI on the host until it quits; if the guest stops first (its script failed),
/// the TUI is told to end (SIGTERM: it restores the terminal) and the guest's failure is
/// what the demo reports.
fn watch_tui(
    bin: &std::path::Path,
    sockets: &[std::path::PathBuf],
    booted: &std::thread::JoinHandle<Result<Option<i32>>>,
) -> Result<std::process::ExitStatus> {
    let mut tui = std::process::Command::new(bin);
    tui.arg("tui");
    for s in sockets {
        tui.arg("--connect").arg(s);
    }
    let mut child = tui.spawn().context("starting the TUI")?;
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
