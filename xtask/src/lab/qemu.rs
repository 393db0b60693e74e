//! Booting the guest under QEMU: KVM only where it can work, TCG otherwise; non-interactive
//! boots run as CI runs them (stdin from /dev/null) under a timeout, with the console
//! streamed through, saved, and watched for kernel panics and oopses.

use crate::util::{self, step};
use anyhow::{Context, Result, bail};
use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long the guest may stay silent after an oops before we call it stopped.
const OOPS_SILENCE: Duration = Duration::from_secs(60);
/// Console lines kept for the failure report.
const TAIL: usize = 40;

pub struct Boot<'a> {
    pub arch: super::Arch,
    pub vmlinuz: &'a Path,
    pub initrd: &'a Path,
    /// The host directory shared as 9p tag `host0` (mounted at /mnt/host).
    pub share: &'a Path,
    /// Extra kernel command line words (e.g. `lab.entry=`).
    pub append: String,
    /// Console on the terminal (a shell); otherwise stdin is /dev/null and output is watched.
    pub interactive: bool,
    pub timeout: Duration,
    /// Where the console is saved (non-interactive boots).
    pub console_log: Option<PathBuf>,
    pub extras: &'a Extras,
}

/// What only some boots need.
#[derive(Default)]
pub struct Extras {
    /// A virtio-serial port `rdma-trace` in the guest (`/dev/virtio-ports/rdma-trace`),
    /// whose host side is this Unix socket (QEMU listens; the host user owns it).
    pub virtio_socket: Option<PathBuf>,
    /// Keep the console off the terminal (saved to the log only): something else owns it.
    pub console_off_terminal: bool,
    /// Put the console on the terminal a whole line at a time, each line after this (for
    /// guests that run side by side, e.g. `[6.12]`).
    pub console_prefix: Option<String>,
    /// Set by the host to power the guest off (the boot then counts as a success).
    pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// One of a pair of guests joined by a virtual Ethernet wire (`cargo xtask lab --hosts 2`).
    pub wire: Option<Wire>,
}

/// A guest's end of the wire between two guests: a virtio NIC whose frames go to the other
/// guest's over UDP on the host's loopback (QEMU's socket netdev), so soft-RoCE traffic
/// really leaves one kernel and arrives in the other. Each guest gets one vCPU, so the pair
/// fits the host's two cores.
#[derive(Clone, Copy)]
pub struct Wire {
    /// 1 or 2: the guest's address is 10.0.0.<host>.
    pub host: u8,
    /// This guest's UDP port and its peer's.
    pub port: u16,
    pub peer_port: u16,
}

impl Wire {
    pub fn mac(self) -> String {
        format!("52:54:00:0a:00:{:02x}", self.host)
    }
}

pub struct Outcome {
    pub elapsed: Duration,
    /// Lines that looked like a kernel BUG/Oops/WARNING (the guest went on).
    pub oopses: Vec<String>,
}

/// The guest failed before its userspace started (e.g. a TCG glitch while the kernel patches
/// its own text at boot): nothing ran yet, so the boot may simply be retried.
#[derive(Debug)]
pub struct EarlyFailure(pub String);

impl std::fmt::Display for EarlyFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EarlyFailure {}

/// The guest kernel crashed (a panic, or silence after an oops) once its userspace ran.
/// `in_tracing` says whether the console's last lines name BPF, kprobes or their trampolines:
/// a crash there may be ours; a crash elsewhere (soft-RoCE on 6.12 has crashed in
/// `net_rx_action` and `rxe_sched_task` under the pair tests) is the lab's kernel.
#[derive(Debug)]
pub struct GuestCrash {
    pub in_tracing: bool,
    /// The first line that says where (`RIP: …`), if the console had one.
    pub at: Option<String>,
    pub msg: String,
}

impl std::fmt::Display for GuestCrash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for GuestCrash {}

impl GuestCrash {
    fn of(tail: &[String], msg: String) -> GuestCrash {
        let trace = tail.iter().filter(|l| !l.contains("Modules linked in"));
        let in_tracing =
            trace.clone().any(|l| ["bpf", "kprobe", "rethook", "ftrace"].iter().any(|w| l.contains(w)));
        let at = trace.clone().find_map(|l| l.split_once("RIP: ").map(|(_, r)| r.trim().to_string()));
        GuestCrash { in_tracing, at, msg }
    }
}

/// Printed by the guest's /init once userspace runs.
const USERSPACE_MARK: &str = "[lab-init] userspace up";

/// KVM when the CPU shows vmx/svm and /dev/kvm opens; TCG otherwise.
/// `RDMA_TRACE_LAB_ACCEL=tcg|kvm` overrides.
fn accel() -> (&'static str, Vec<&'static str>) {
    let want = std::env::var("RDMA_TRACE_LAB_ACCEL").unwrap_or_default();
    let kvm_ok = || {
        let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let virt = cpu
            .lines()
            .filter(|l| l.starts_with("flags"))
            .any(|l| l.split_whitespace().any(|f| f == "vmx" || f == "svm"));
        virt && File::options().read(true).write(true).open("/dev/kvm").is_ok()
    };
    if want == "kvm" || (want != "tcg" && kvm_ok()) {
        ("kvm", vec!["-accel", "kvm", "-cpu", "host"])
    } else if std::env::var("RDMA_TRACE_LAB_TCG").is_ok_and(|v| v == "multi") {
        ("tcg", vec!["-accel", "tcg,thread=multi", "-cpu", "max"])
    } else {
        // Single-threaded TCG by default: with multi-threaded TCG (QEMU 7.2) the guest
        // kernel's live code patching (static keys flipped when tracepoints attach) raced
        // the other vCPU and oopsed on the int3 ("Oops: int3 … trace_syscall_enter"),
        // seen twice in ~20 boots. Measured: a whole vm-test boot took 88 s either way.
        ("tcg", vec!["-accel", "tcg,thread=single", "-cpu", "max"])
    }
}

/// The QEMU that runs a guest of `arch`.
pub fn program(arch: super::Arch) -> &'static str {
    match arch {
        super::Arch::X86_64 => "qemu-system-x86_64",
        super::Arch::Arm64 => "qemu-system-aarch64",
    }
}

fn command(b: &Boot) -> (Command, &'static str) {
    let mut c = Command::new(program(b.arch));
    let (cpus, mem) = if b.extras.wire.is_some() { ("1", "3G") } else { ("2", "4G") };
    let (name, console) = match b.arch {
        super::Arch::X86_64 => {
            let (name, accel) = accel();
            c.args(["-machine", "q35"]).args(accel);
            (name, "ttyS0")
        }
        // Always TCG on this x86-64 host. The emulated pointer authentication is QEMU's
        // own cheap algorithm (`pauth-impdef`): the architected one costs more than the rest
        // of the CPU's emulation in a kernel built with PAC, as Debian's is.
        super::Arch::Arm64 => {
            c.args(["-machine", "virt", "-accel", "tcg,thread=multi", "-cpu", "max,pauth-impdef=on"]);
            ("tcg", "ttyAMA0")
        }
    };
    c.args(["-smp", cpus, "-m", mem]);
    c.args(["-nographic", "-no-reboot", "-display", "none", "-serial", "mon:stdio", "-nic", "none"]);
    c.arg("-kernel").arg(b.vmlinuz).arg("-initrd").arg(b.initrd);
    c.arg("-append").arg(format!("console={console} quiet panic=-1 {}", b.append));
    c.arg("-virtfs")
        .arg(format!("local,path={},mount_tag=host0,security_model=none,id=host0", b.share.display()));
    if let Some(w) = b.extras.wire {
        c.arg("-netdev")
            .arg(format!("socket,id=wire,udp=127.0.0.1:{},localaddr=127.0.0.1:{}", w.peer_port, w.port))
            .arg("-device")
            .arg(format!("virtio-net-pci,netdev=wire,mac={}", w.mac()));
    }
    if let Some(sock) = &b.extras.virtio_socket {
        c.args(["-device", "virtio-serial-pci", "-chardev"])
            .arg(format!("socket,id=rt0,path={},server=on,wait=off", sock.display()))
            .args(["-device", "virtserialport,chardev=rt0,name=rdma-trace"]);
    }
    (c, name)
}

fn is_panic(l: &str) -> bool {
    l.contains("Kernel panic") || l.contains("end Kernel panic")
}

fn is_oops(l: &str) -> bool {
    l.contains("BUG:") || l.contains("Oops:") || l.contains("general protection fault")
}

/// Boots the guest and returns when it powers off. Fails on timeout, panic, a stopped
/// guest after an oops, or a QEMU error.
pub fn boot(b: &Boot) -> Result<Outcome> {
    let (mut cmd, accel) = command(b);
    let shape = match b.extras.wire {
        Some(w) => format!("host {} of 2, 1 vCPU, 3 GiB", w.host),
        None => "2 vCPUs, 4 GiB".into(),
    };
    step(&format!("lab: booting {} ({accel}, {shape})", b.vmlinuz.display()));
    let start = Instant::now();
    if b.interactive {
        let st = cmd.status().with_context(|| format!("could not start {}", program(b.arch)))?;
        if !st.success() {
            bail!("QEMU failed ({st})");
        }
        return Ok(Outcome { elapsed: start.elapsed(), oopses: vec![] });
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not start `{}`", util::describe(&cmd)))?;
    let mut out = child.stdout.take().context("QEMU stdout")?;
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut log = match &b.console_log {
        Some(p) => Some(File::create(p).with_context(|| format!("creating {}", p.display()))?),
        None => None,
    };
    let mut tail: VecDeque<String> = VecDeque::new();
    let mut line = Vec::new();
    let mut oopses = Vec::new();
    let mut oops_at: Option<Instant> = None;
    let mut panic_at: Option<Instant> = None;
    let mut panic_ended = false;
    let mut userspace = false;
    let mut last_output = Instant::now();
    let mut last_note = Instant::now();
    let stdout = std::io::stdout();
    let mut failure = loop {
        match rx.recv_timeout(Duration::from_millis(500)) {
            Ok(chunk) => {
                last_output = Instant::now();
                if !b.extras.console_off_terminal && b.extras.console_prefix.is_none() {
                    let mut o = stdout.lock();
                    o.write_all(&chunk).ok();
                    o.flush().ok();
                }
                if let Some(f) = log.as_mut() {
                    f.write_all(&chunk).ok();
                }
                for &c in &chunk {
                    if c != b'\n' {
                        line.push(c);
                        continue;
                    }
                    let l = String::from_utf8_lossy(&line).trim_end_matches('\r').to_string();
                    line.clear();
                    if let (false, Some(p)) = (b.extras.console_off_terminal, &b.extras.console_prefix) {
                        let mut o = stdout.lock();
                        writeln!(o, "{p} {l}").ok();
                        o.flush().ok();
                    }
                    userspace |= l.contains(USERSPACE_MARK);
                    if is_panic(&l) && panic_at.is_none() {
                        panic_at = Some(Instant::now());
                    }
                    if is_oops(&l) {
                        oopses.push(l.clone());
                        oops_at.get_or_insert_with(Instant::now);
                    }
                    if l.contains("end Kernel panic") {
                        panic_ended = true;
                    }
                    tail.push_back(l);
                    if tail.len() > TAIL {
                        tail.pop_front();
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break None,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        let now = Instant::now();
        if b.extras.stop.as_ref().is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed)) {
            child.kill().ok();
            child.wait().ok();
            reader.join().ok();
            return Ok(Outcome { elapsed: start.elapsed(), oopses });
        }
        if panic_ended || panic_at.is_some_and(|t| now - t > Duration::from_secs(5)) {
            break Some("the guest kernel panicked".to_string());
        }
        if oops_at.is_some() && now - last_output > OOPS_SILENCE {
            break Some(format!(
                "the guest stopped after a kernel BUG/Oops (silent for {} s)",
                OOPS_SILENCE.as_secs()
            ));
        }
        if now - start > b.timeout {
            break Some(format!("the boot timed out after {} s", b.timeout.as_secs()));
        }
        if !b.extras.console_off_terminal
            && now - last_output > Duration::from_secs(15)
            && now - last_note > Duration::from_secs(15)
        {
            last_note = now;
            let p = b.extras.console_prefix.as_deref().map(|p| format!("{p} ")).unwrap_or_default();
            eprintln!("{p}[xtask] guest running, {} s elapsed", (now - start).as_secs());
        }
    };
    if failure.is_none() && panic_at.is_some() {
        failure = Some("the guest kernel panicked".to_string());
    }
    let crashed = panic_at.is_some() || (oops_at.is_some() && failure.is_some());
    if failure.is_some() {
        child.kill().ok();
    }
    let st = child.wait().context("waiting for QEMU")?;
    reader.join().ok();
    if let Some(why) = failure {
        let shown: Vec<String> = tail.into_iter().collect();
        let msg = format!("{why}; QEMU stopped. Last console lines:\n{}", shown.join("\n"));
        if !userspace {
            return Err(EarlyFailure(msg).into());
        }
        if crashed {
            return Err(GuestCrash::of(&shown, msg).into());
        }
        bail!(msg);
    }
    if !st.success() {
        bail!("QEMU exited with {st}");
    }
    Ok(Outcome { elapsed: start.elapsed(), oopses })
}

#[cfg(test)]
mod tests {
    use super::GuestCrash;

    /// The last console lines of the 6.12 pair guest that crashed in CI (stop 56's run):
    /// soft-RoCE's send path, no BPF or kprobe frame.
    const RXE_CRASH: &str = "\
[   46.826777]  rxe_xmit_packet+0x27a/0x300 [rdma_rxe]
[   46.826954]  send_common_ack.isra.0+0x58/0xb0 [rdma_rxe]
[   46.827093]  rxe_receiver+0x1d5c/0x24e0 [rdma_rxe]
[   46.827257]  do_task+0x68/0x1f0 [rdma_rxe]
[   46.827317]  process_one_work+0x18b/0x340
[   46.827767]  </TASK>
[   46.827861] Modules linked in: crc32_generic virtio_net mlx5_ib rdma_rxe ib_uverbs ib_core 9p
[   46.828915] ---[ end trace 0000000000000000 ]---
[   46.829134] RIP: 0010:net_rx_action+0xef/0x420
[   46.830059] Kernel panic - not syncing: Fatal exception in interrupt";

    fn lines(s: &str) -> Vec<String> {
        s.lines().map(str::to_string).collect()
    }

    #[test]
    fn a_crash_outside_tracing_says_where_and_may_be_booted_again() {
        let c = GuestCrash::of(&lines(RXE_CRASH), String::new());
        assert!(!c.in_tracing);
        assert_eq!(c.at.as_deref(), Some("0010:net_rx_action+0xef/0x420"));
    }

    #[test]
    fn a_crash_with_a_bpf_or_kprobe_frame_is_ours_to_answer_for() {
        for frame in ["bpf_prog_6deef7357e7b4530_kprobe_entry+0x2c/0x6e", "kprobe_ftrace_handler+0x110/0x1d0"]
        {
            let tail = RXE_CRASH.replace("process_one_work+0x18b/0x340", frame);
            assert!(GuestCrash::of(&lines(&tail), String::new()).in_tracing, "{frame}");
        }
    }
}
