//! The aya edge: load the eBPF object, write plans and filters into its maps, attach
//! programs. aya types do not leave this module (and `source.rs`, which owns the ring).

use crate::account::ProgramCost;
use crate::live::kprobe_events::{self, ReturnProbe};
use crate::plan::select::{Plan, Planned};
use aya::maps::{Array, HashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::uprobe::{UProbeAttachLocation, UProbeAttachPoint, UProbeScope};
use aya::programs::{KProbe, Program, TracePoint, UProbe};
use aya::{Ebpf, EbpfLoader};
use rdma_trace_common::{COUNTER_ENTRIES, COUNTERS, SlotPlan, SyscallLayout, return_site};
use std::time::{Duration, Instant};

/// The compiled eBPF object, embedded at build time.
pub(crate) static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/rdma-trace"));

/// Why the eBPF object could not be loaded, or a program or map used.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("loading the eBPF object: {0}")]
    Object(#[from] aya::EbpfError),
    #[error("program {0} is missing from the eBPF object")]
    NoProgram(String),
    #[error("program {name}: {source}")]
    Program {
        name: String,
        #[source]
        source: aya::programs::ProgramError,
    },
    #[error("map {0}: {1}")]
    Map(&'static str, String),
}

/// A loaded object, ready to attach.
pub struct Loaded {
    /// Kernel probe links by counter site, kept to ask the kernel for their missed counts
    /// (entries through aya, returns placed through tracefs). Dropped before `ebpf`. Each
    /// entry link's fd, opened by id once at attach (aya does not lend its own), is what
    /// the missed count is read through every stats tick.
    entry_links: Vec<(usize, aya::programs::links::FdLink, Option<std::os::fd::OwnedFd>)>,
    /// The kernel reports kprobe misses per link (6.7+), checked once.
    missed_reported: bool,
    returns: Vec<(usize, ReturnProbe)>,
    /// User-space probe and tracepoint links (aya holds them in their programs).
    user_links: usize,
    tracepoint_links: usize,
    /// Instances per return probe (`r<N>:`).
    pub return_instances: u32,
    ebpf: Ebpf,
}

/// Why a planned probe did not attach: the attach error's words with their causes, and
/// why disabling its slot failed too, if it did.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{why}{}", disabling.as_ref().map(|e| format!("; disabling it also failed: {e}")).unwrap_or_default())]
pub(crate) struct AttachFailed {
    pub why: String,
    pub disabling: Option<String>,
}

/// What happened to one planned probe.
#[derive(Clone, Debug)]
pub(crate) struct Outcome {
    pub id: crate::plan::catalog::ProbeId,
    pub symbol: &'static str,
    pub module: String,
    pub attached: Result<(), AttachFailed>,
    /// Attached, but not as asked (a return probe with the kernel's default instances).
    pub note: Option<String>,
    pub took: Duration,
}

/// `BPF_OBJ_GET_INFO_BY_FD` on a program fd. `struct bpf_prog_info` (UAPI, append-only):
/// run_time_ns, run_cnt and recursion_misses are its u64 words 24, 25 and 26.
fn prog_info(fd: i32, name: &str) -> Option<ProgramCost> {
    const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
    #[repr(C)]
    struct InfoAttr {
        bpf_fd: u32,
        info_len: u32,
        info: u64,
    }
    let mut info = [0u64; 28];
    let mut attr =
        InfoAttr { bpf_fd: fd as u32, info_len: size_of_val(&info) as u32, info: info.as_mut_ptr() as u64 };
    // SAFETY: bpf(2) with a valid attr of the size given, pointing at a buffer of
    // `info_len` bytes that outlives the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET_INFO_BY_FD,
            &mut attr as *mut InfoAttr,
            size_of::<InfoAttr>() as libc::c_uint,
        )
    };
    (r == 0).then(|| ProgramCost {
        name: name.to_string(),
        run_time_ns: info[24],
        run_cnt: info[25],
        recursion_misses: info[26],
    })
}

/// The per-site counters of a switched-off object (see `Loaded::switch_off`).
pub(crate) struct Counters {
    map: PerCpuArray<MapData, u64>,
}

impl Counters {
    pub(crate) fn read(&self) -> Result<Vec<u64>, AttachError> {
        sum_counters(&self.map)
    }
}

fn sum_counters<T: std::borrow::Borrow<MapData>>(m: &PerCpuArray<T, u64>) -> Result<Vec<u64>, AttachError> {
    let mut out = vec![0u64; COUNTER_ENTRIES];
    for (i, slot) in out.iter_mut().enumerate() {
        *slot = m.get(&(i as u32), 0).map_err(map_err("STATS"))?.iter().sum();
    }
    debug_assert_eq!(out.len() % COUNTERS, 0);
    Ok(out)
}

pub(super) fn map_err(name: &'static str) -> impl Fn(aya::maps::MapError) -> AttachError {
    move |e| AttachError::Map(name, e.to_string())
}

impl Loaded {
    /// Loads the object (maps are created; programs are loaded lazily). `ring_bytes`
    /// must be a power-of-two multiple of the page size.
    pub fn new(ring_bytes: u32) -> Result<Self, AttachError> {
        Self::with_stack_map(ring_bytes, 1)
    }

    /// As `new`, with room for `stacks` kernel stacks by id (`STACK_ID` plans; the map
    /// has one entry otherwise).
    pub(crate) fn with_stack_map(ring_bytes: u32, stacks: u32) -> Result<Self, AttachError> {
        let ebpf = EbpfLoader::new()
            .map_max_entries("EVENTS", ring_bytes)
            .map_max_entries("STACKS", stacks)
            .load(EBPF_OBJECT)?;
        Ok(Self {
            entry_links: Vec::new(),
            missed_reported: crate::plan::kernel::release_at_least(6, 7),
            returns: Vec::new(),
            user_links: 0,
            tracepoint_links: 0,
            return_instances: kprobe_events::DEFAULT_INSTANCES,
            ebpf,
        })
    }

    /// Names of every program in the object.
    pub fn program_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.ebpf.programs().map(|(n, _)| n.to_string()).collect();
        v.sort();
        v
    }

    /// Loads (verifies) one program without attaching it.
    pub fn load_program(&mut self, name: &str) -> Result<(), AttachError> {
        let prog = self.ebpf.program_mut(name).ok_or_else(|| AttachError::NoProgram(name.into()))?;
        let res = match prog {
            Program::KProbe(p) => p.load(),
            Program::TracePoint(p) => p.load(),
            Program::UProbe(p) => p.load(),
            _ => {
                return Err(AttachError::NoProgram(format!("{name} (unexpected program type)")));
            }
        };
        match res {
            Ok(()) | Err(aya::programs::ProgramError::AlreadyLoaded) => Ok(()),
            Err(source) => Err(AttachError::Program { name: name.into(), source }),
        }
    }

    /// A map of the object by name.
    pub(super) fn map(&self, name: &'static str) -> Result<&aya::maps::Map, AttachError> {
        self.ebpf.map(name).ok_or_else(|| AttachError::Map(name, "missing".into()))
    }

    pub(super) fn map_mut(&mut self, name: &'static str) -> Result<&mut aya::maps::Map, AttachError> {
        self.ebpf.map_mut(name).ok_or_else(|| AttachError::Map(name, "missing".into()))
    }

    /// Loads (verifies) a program and returns it as its type.
    fn typed_program<P>(&mut self, name: &str) -> Result<&mut P, AttachError>
    where
        for<'p> &'p mut P: TryFrom<&'p mut Program>,
    {
        self.load_program(name)?;
        self.ebpf
            .program_mut(name)
            .and_then(|p| p.try_into().ok())
            .ok_or_else(|| AttachError::NoProgram(name.into()))
    }

    fn set_plan(&mut self, site: usize, plan: &SlotPlan) -> Result<(), AttachError> {
        let mut plans: Array<&mut MapData, SlotPlan> =
            Array::try_from(self.map_mut("PLANS")?).map_err(map_err("PLANS"))?;
        plans.set(site as u32, plan, 0).map_err(map_err("PLANS"))
    }

    fn attach_kprobe(&mut self, prog: &str, symbol: &str, site: usize) -> Result<(), AttachError> {
        let p: &mut KProbe = self.typed_program(prog)?;
        let err = |source| AttachError::Program { name: prog.into(), source };
        let id = p.attach(symbol, 0).map_err(err)?;
        let link = p.take_link(id).map_err(err)?;
        let link = aya::programs::links::FdLink::try_from(link)
            .map_err(|e| AttachError::Map("probe link", format!("{symbol}: not a BPF link ({e})")))?;
        let fd = link.info().ok().and_then(|i| kprobe_events::link_fd_by_id(i.id()).ok());
        self.entry_links.push((site, link, fd));
        Ok(())
    }

    /// A return probe with `return_instances` instances, placed through tracefs. Where
    /// that fails, aya places it with the kernel's default instances and the note says so.
    fn attach_kretprobe(&mut self, prog: &str, p: &Planned) -> Result<Option<String>, AttachError> {
        let site = return_site(p.slot);
        let instances = self.return_instances;
        let k: &mut KProbe = self.typed_program(prog)?;
        let fd = k.fd().map_err(|source| AttachError::Program { name: prog.into(), source })?;
        let tracefs = std::path::Path::new(crate::plan::kernel::TRACEFS);
        match ReturnProbe::attach(tracefs, p.symbol, instances, std::os::fd::AsFd::as_fd(fd), p.slot) {
            Ok(r) => {
                self.returns.push((site, r));
                Ok(None)
            }
            Err(e) => {
                self.attach_kprobe(prog, p.symbol, site)?;
                Ok(Some(format!("return probe with the kernel's default instances, not {instances} ({e})")))
            }
        }
    }

    fn attach_tracepoint(&mut self, prog: &str, category: &str, name: &str) -> Result<(), AttachError> {
        let p: &mut TracePoint = self.typed_program(prog)?;
        p.attach(category, name).map_err(|source| AttachError::Program { name: prog.into(), source })?;
        self.tracepoint_links += 1;
        Ok(())
    }

    fn attach_uprobe(
        &mut self,
        prog: &str,
        path: &std::path::Path,
        offset: u64,
        slot: usize,
    ) -> Result<(), AttachError> {
        let p: &mut UProbe = self.typed_program(prog)?;
        let point = UProbeAttachPoint {
            location: UProbeAttachLocation::AbsoluteOffset(offset),
            cookie: Some(slot as u64),
        };
        p.attach(point, path, UProbeScope::AllProcesses)
            .map_err(|source| AttachError::Program { name: prog.into(), source })?;
        self.user_links += 1;
        Ok(())
    }

    /// The companion's step marker (`step_marker` on its `rdma_trace_step`), in every
    /// process running that binary.
    pub fn attach_step_marker(&mut self, binary: &std::path::Path) -> Result<(), AttachError> {
        let prog = "step_marker";
        let p: &mut UProbe = self.typed_program(prog)?;
        let point = UProbeAttachPoint {
            location: UProbeAttachLocation::Symbol(crate::steps::MARKER_SYMBOL),
            cookie: None,
        };
        p.attach(point, binary, UProbeScope::AllProcesses)
            .map_err(|source| AttachError::Program { name: prog.into(), source })?;
        self.user_links += 1;
        Ok(())
    }

    /// Tells the shared kprobe programs which slot this function is: its kallsyms address,
    /// and that plus the entry pad (a kprobe placed past x86's ENDBR reports that address).
    fn route_function(&mut self, p: &Planned) -> Result<(), AttachError> {
        let addr = p.address.filter(|a| *a != 0).ok_or_else(|| {
            AttachError::Map(
                "FUNC_SLOTS",
                format!("no address for {} in /proc/kallsyms (not root?)", p.symbol),
            )
        })?;
        let mut m: HashMap<&mut MapData, u64, u32> =
            HashMap::try_from(self.map_mut("FUNC_SLOTS")?).map_err(map_err("FUNC_SLOTS"))?;
        for a in [addr, addr + crate::plan::arch::HOST.entry_pad] {
            m.insert(a, p.slot as u32, 0).map_err(map_err("FUNC_SLOTS"))?;
        }
        Ok(())
    }

    fn attach_one(&mut self, p: &Planned) -> Result<Option<String>, AttachError> {
        let mut note = None;
        self.set_plan(p.slot, &p.entry)?;
        if let Some(ret) = &p.ret {
            self.set_plan(return_site(p.slot), ret)?;
        }
        match p.spec.kind {
            crate::plan::catalog::Kind::Kprobe => {
                self.route_function(p)?;
                // The return first: the kernel runs the handlers of one address newest
                // first, and a kretprobe's replaces the return address (arm64's x30) that
                // the entry program reads for the stack's caller (`with_caller`).
                if let Some(rp) = p.return_program() {
                    note = self.attach_kretprobe(&rp, p)?;
                }
                self.attach_kprobe(&p.entry_program(), p.symbol, p.slot)?;
            }
            crate::plan::catalog::Kind::Tracepoint { category } => {
                self.attach_tracepoint(&p.entry_program(), category, p.symbol)?;
            }
            crate::plan::catalog::Kind::Uprobe { .. } => {
                let (path, off) =
                    p.target.clone().ok_or_else(|| AttachError::NoProgram("uprobe without target".into()))?;
                self.attach_uprobe(&p.entry_program(), &path, off, p.slot)?;
                if let Some(rp) = p.return_program() {
                    self.attach_uprobe(&rp, &path, off, p.slot)?;
                }
            }
        }
        Ok(note)
    }

    /// Loads the object and attaches every planned probe.
    /// Plans that take stacks by id (`STACK_ID`) get room for `STACK_IDS` of them.
    pub(crate) fn attach_new(
        plan: &Plan,
        ring_bytes: u32,
        return_instances: u32,
    ) -> Result<(Self, Vec<Outcome>), AttachError> {
        let by_id = plan.probes.iter().any(|p| p.entry.stack == rdma_trace_common::STACK_ID);
        let mut loaded =
            Self::with_stack_map(ring_bytes, if by_id { rdma_trace_common::STACK_IDS } else { 1 })?;
        loaded.return_instances = return_instances;
        let outcomes = loaded.attach_plan(plan);
        Ok((loaded, outcomes))
    }

    /// Attaches every planned probe; one that fails is disabled and reported, the rest go on.
    pub(crate) fn attach_plan(&mut self, plan: &Plan) -> Vec<Outcome> {
        let mut out = Vec::new();
        for p in &plan.probes {
            let t0 = Instant::now();
            let (mut res, note) = match self.attach_one(p) {
                Ok(note) => (Ok(()), note),
                Err(e) => (Err(AttachFailed { why: format!("{e:#}"), disabling: None }), None),
            };
            if let Err(failed) = &mut res {
                // Disable the slot: a half-attached probe (entry without return) emits nothing.
                let off = SlotPlan::default();
                if let Err(e) =
                    self.set_plan(p.slot, &off).and_then(|()| self.set_plan(return_site(p.slot), &off))
                {
                    failed.disabling = Some(e.to_string());
                }
            }
            out.push(Outcome {
                id: p.spec.id,
                symbol: p.symbol,
                module: p.module.clone(),
                attached: res,
                note,
                took: t0.elapsed(),
            });
        }
        out
    }

    /// Attaches the raw_syscalls tracepoints for `nrs`, with the record layout given.
    pub fn attach_syscalls(&mut self, layout: SyscallLayout, nrs: &[u32]) -> Result<(), AttachError> {
        {
            let mut l: Array<&mut MapData, SyscallLayout> =
                Array::try_from(self.map_mut("SYSCALL_LAYOUT")?).map_err(map_err("SYSCALL_LAYOUT"))?;
            l.set(0, layout, 0).map_err(map_err("SYSCALL_LAYOUT"))?;
        }
        {
            let mut m: HashMap<&mut MapData, u32, u8> =
                HashMap::try_from(self.map_mut("SYSCALLS")?).map_err(map_err("SYSCALLS"))?;
            for nr in nrs {
                m.insert(nr, 1, 0).map_err(map_err("SYSCALLS"))?;
            }
        }
        self.attach_tracepoint("sys_enter", "raw_syscalls", "sys_enter")?;
        self.attach_tracepoint("sys_exit", "raw_syscalls", "sys_exit")?;
        self.attach_tracepoint("sched_fork", "sched", "sched_process_fork")?;
        self.attach_tracepoint("sched_exit", "sched", "sched_process_exit")?;
        // Exits now remove the uprobe programs' per-thread scratch entries, so those
        // programs keep them from one hit to the next.
        let mut p: Array<&mut MapData, u32> =
            Array::try_from(self.map_mut("EXIT_PRUNES")?).map_err(map_err("EXIT_PRUNES"))?;
        p.set(0, 1, 0).map_err(map_err("EXIT_PRUNES"))
    }

    fn targets(&mut self) -> Result<HashMap<&mut MapData, u32, u8>, AttachError> {
        HashMap::try_from(self.map_mut("TARGETS")?).map_err(map_err("TARGETS"))
    }

    /// Watches the syscalls of a process (tgid) or a single thread (tid).
    pub fn watch(&mut self, id: u32) -> Result<(), AttachError> {
        self.targets()?.insert(id, 1, 0).map_err(map_err("TARGETS"))
    }

    /// Stops watching the syscalls of process `id`.
    pub fn unwatch(&mut self, id: u32) -> Result<(), AttachError> {
        self.targets()?.remove(&id).map_err(map_err("TARGETS"))
    }

    /// Counters summed over CPUs, as a flat `site * COUNTERS + reason` table.
    pub fn counters(&self) -> Result<Vec<u64>, AttachError> {
        let m: PerCpuArray<&MapData, u64> = PerCpuArray::try_from(
            self.ebpf.map("STATS").ok_or_else(|| AttachError::Map("STATS", "missing".into()))?,
        )
        .map_err(map_err("STATS"))?;
        sum_counters(&m)
    }

    /// The kernel's own figures for every loaded program (`bpf_prog_info`): runs and run
    /// time (counted while `kernel.bpf_stats_enabled` is on) and recursion misses (runs
    /// the kernel skipped because another BPF program was running on that CPU: events that
    /// no counter of ours can see).
    pub(crate) fn program_costs(&self) -> Vec<ProgramCost> {
        use std::os::fd::{AsFd, AsRawFd};
        let mut out = Vec::new();
        for (name, prog) in self.ebpf.programs() {
            let Ok(fd) = prog.fd() else { continue };
            if let Some(c) = prog_info(fd.as_fd().as_raw_fd(), name) {
                out.push(c);
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Per counter site, the probe hits the kernel counted but no program saw (kprobe
    /// `missed`: re-entered, or a return probe out of instances). `None` where the kernel
    /// cannot tell (before 6.7 the link info has no such field).
    pub(crate) fn kernel_missed(&self) -> Option<Vec<u64>> {
        use std::os::fd::AsFd;
        if !self.missed_reported {
            return None;
        }
        let mut out = vec![0u64; rdma_trace_common::COUNTER_SITES];
        for (site, _, fd) in &self.entry_links {
            out[*site] += kprobe_events::link_missed(fd.as_ref()?.as_fd()).ok()?;
        }
        for (site, r) in &self.returns {
            out[*site] += r.missed().ok()?;
        }
        Some(out)
    }

    /// The links held now, by kind.
    pub(crate) fn links(&self) -> crate::account::Links {
        crate::account::Links {
            kernel: self.entry_links.len(),
            returns: self.returns.len(),
            user: self.user_links,
            tracepoints: self.tracepoint_links,
        }
    }

    /// Switches every program off without detaching it: each plan slot inactive (the
    /// probe programs return before counting or writing) and the watch table empty (the
    /// syscall, fork and exit programs find nobody to follow), and the step marker told
    /// (`STEPS_OFF`). Takes the counters. Records committed before this are still read.
    pub(crate) fn switch_off(&mut self) -> Result<Counters, AttachError> {
        let mut plans: Array<&mut MapData, SlotPlan> =
            Array::try_from(self.map_mut("PLANS")?).map_err(map_err("PLANS"))?;
        for site in 0..plans.len() {
            let mut plan = plans.get(&site, 0).map_err(map_err("PLANS"))?;
            if plan.active != 0 {
                plan.active = 0;
                plans.set(site, plan, 0).map_err(map_err("PLANS"))?;
            }
        }
        let mut off: Array<&mut MapData, u32> =
            Array::try_from(self.map_mut("STEPS_OFF")?).map_err(map_err("STEPS_OFF"))?;
        off.set(0, 1, 0).map_err(map_err("STEPS_OFF"))?;
        let mut targets = self.targets()?;
        let watched: Vec<u32> = targets.keys().filter_map(Result::ok).collect();
        for id in watched {
            // An entry its task's exit removed meanwhile is gone already.
            targets.remove(&id).ok();
        }
        let m =
            self.ebpf.take_map("STATS").ok_or_else(|| AttachError::Map("STATS", "already taken".into()))?;
        Ok(Counters { map: PerCpuArray::try_from(m).map_err(map_err("STATS"))? })
    }

    /// Lets the links go after this process exits (`detach::after_exit`), or, if the
    /// helper cannot be started, here and now. Says which.
    pub(crate) fn let_go(mut self) -> Result<(), std::io::Error> {
        let mut events = super::detach::Events { file: Default::default(), names: Vec::new() };
        for (_, r) in &self.returns {
            let (file, name) = r.event();
            events.file = file.to_path_buf();
            events.names.push(name.to_string());
        }
        let handed = super::detach::after_exit(&events);
        if handed.is_ok() {
            for (_, r) in &mut self.returns {
                r.leave_event();
            }
        }
        handed
    }

    /// Takes the map of kernel stacks by id (once).
    pub(crate) fn take_stacks(&mut self) -> Result<super::stack_ids::StackIds, AttachError> {
        let m =
            self.ebpf.take_map("STACKS").ok_or_else(|| AttachError::Map("STACKS", "already taken".into()))?;
        Ok(super::stack_ids::StackIds::new(aya::maps::StackTraceMap::try_from(m).map_err(map_err("STACKS"))?))
    }

    /// Takes the event ring buffer (once).
    pub fn take_ring(&mut self) -> Result<RingBuf<MapData>, AttachError> {
        let m =
            self.ebpf.take_map("EVENTS").ok_or_else(|| AttachError::Map("EVENTS", "already taken".into()))?;
        RingBuf::try_from(m).map_err(map_err("EVENTS"))
    }
}
