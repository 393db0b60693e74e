//! Reading what a counting run's programs aggregated (`plan::counted`): the maps of
//! `rdma-trace-ebpf`'s `counted` module, summed over CPUs, as plain values.

use super::attach::{AttachError, Loaded, map_err};
use crate::plan::select::Plan;
use crate::sink::Counted;
use aya::maps::{Array, HashMap, PerCpuHashMap};
use rdma_trace_common::{ProcCqs, ProcPins, ProcSite, SOFTIRQ_FUNCS};
use std::time::{Duration, Instant};

impl Loaded {
    /// The counts so far. An entry removed while the maps are walked is skipped.
    pub(crate) fn counted(&self, plan: &Plan) -> Result<Counted, AttachError> {
        let hits: PerCpuHashMap<_, ProcSite, u64> =
            PerCpuHashMap::try_from(self.map("PROC_HITS")?).map_err(map_err("PROC_HITS"))?;
        let mut out = Counted::default();
        for (key, per_cpu) in hits.iter().filter_map(Result::ok) {
            let Some(row) = crate::account::row_of_site(plan, key.site as usize) else { continue };
            out.hits.push((key.tgid, row, per_cpu.iter().sum()));
        }
        out.hits.sort();
        let comms: HashMap<_, u32, [u8; 16]> =
            HashMap::try_from(self.map("COMMS")?).map_err(map_err("COMMS"))?;
        for (tgid, comm) in comms.iter().filter_map(Result::ok) {
            let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
            out.comms.insert(tgid, String::from_utf8_lossy(&comm[..end]).into_owned());
        }
        let pins: HashMap<_, u32, ProcPins> =
            HashMap::try_from(self.map("PINS")?).map_err(map_err("PINS"))?;
        out.pins.extend(pins.iter().filter_map(Result::ok));
        let cqs: HashMap<_, u32, ProcCqs> = HashMap::try_from(self.map("CQS")?).map_err(map_err("CQS"))?;
        out.cqs.extend(cqs.iter().filter_map(Result::ok));
        Ok(out)
    }

    /// Tells the programs where the kernel's kretprobe trampoline is: an entry's return
    /// address there was put by another tool's return probe, and is no caller.
    pub(crate) fn set_kretprobe_trampoline(&mut self, range: (u64, u64)) -> Result<(), AttachError> {
        let mut m: Array<_, [u64; 2]> =
            Array::try_from(self.map_mut("TRAMPOLINE")?).map_err(map_err("TRAMPOLINE"))?;
        m.set(0, [range.0, range.1], 0).map_err(map_err("TRAMPOLINE"))
    }

    /// Tells the programs where softirq processing's functions are (`[start, end)`), for
    /// the context of a counted completion; at most `SOFTIRQ_FUNCS` of them.
    pub(crate) fn set_softirq_ranges(&mut self, ranges: &[(u64, u64)]) -> Result<(), AttachError> {
        let mut m: Array<_, [u64; 2]> =
            Array::try_from(self.map_mut("SOFTIRQ_RANGES")?).map_err(map_err("SOFTIRQ_RANGES"))?;
        for (i, (start, end)) in ranges.iter().take(SOFTIRQ_FUNCS).enumerate() {
            m.set(i as u32, [*start, *end], 0).map_err(map_err("SOFTIRQ_RANGES"))?;
        }
        Ok(())
    }
}

/// How long a gone process's counts stay served: Prometheus's default lookback, as a
/// streaming daemon keeps an ended process's row (`Engine::ended`).
pub(crate) const KEPT_AFTER_EXIT: Duration = Duration::from_secs(300);

/// Processes whose counts are served after they are gone, until `KEPT_AFTER_EXIT`: then
/// their entries leave the kernel's maps, so a daemon left running for days keeps its
/// maps to the processes of the last minutes.
#[derive(Default)]
pub(crate) struct Retiring {
    gone_since: std::collections::HashMap<u32, Instant>,
}

impl Retiring {
    /// Of the processes `counted` names, those gone for `KEPT_AFTER_EXIT` by `now`
    /// (`alive` says whether one still runs). A pid that runs again starts over.
    pub(crate) fn due(&mut self, counted: &Counted, now: Instant, alive: impl Fn(u32) -> bool) -> Vec<u32> {
        let mut named: Vec<u32> = counted.hits.iter().map(|h| h.0).collect();
        named.extend(counted.pins.keys().chain(counted.cqs.keys()));
        named.sort_unstable();
        named.dedup();
        self.gone_since.retain(|p, _| named.binary_search(p).is_ok());
        let mut due = Vec::new();
        for p in named {
            if alive(p) {
                self.gone_since.remove(&p);
                continue;
            }
            let since = *self.gone_since.entry(p).or_insert(now);
            if now.duration_since(since) >= KEPT_AFTER_EXIT {
                self.gone_since.remove(&p);
                due.push(p);
            }
        }
        due
    }
}

impl Loaded {
    /// Removes the counts of `tgids` from the kernel's maps.
    pub(crate) fn forget_counted(&mut self, tgids: &[u32]) -> Result<(), AttachError> {
        let mut hits: PerCpuHashMap<_, ProcSite, u64> =
            PerCpuHashMap::try_from(self.map_mut("PROC_HITS")?).map_err(map_err("PROC_HITS"))?;
        let keys: Vec<ProcSite> =
            hits.keys().filter_map(Result::ok).filter(|k| tgids.contains(&k.tgid)).collect();
        for k in keys {
            hits.remove(&k).ok();
        }
        let mut comms: HashMap<_, u32, [u8; 16]> =
            HashMap::try_from(self.map_mut("COMMS")?).map_err(map_err("COMMS"))?;
        for t in tgids {
            comms.remove(t).ok();
        }
        let mut pins: HashMap<_, u32, ProcPins> =
            HashMap::try_from(self.map_mut("PINS")?).map_err(map_err("PINS"))?;
        for t in tgids {
            pins.remove(t).ok();
        }
        let mut cqs: HashMap<_, u32, ProcCqs> =
            HashMap::try_from(self.map_mut("CQS")?).map_err(map_err("CQS"))?;
        for t in tgids {
            cqs.remove(t).ok();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gone_process_is_forgotten_after_the_lookback_and_a_running_one_never() {
        let c = Counted {
            hits: vec![(7, "umem_get (ib_umem_get)".into(), 1), (8, "umem_get (ib_umem_get)".into(), 1)],
            pins: [(9, ProcPins::default())].into(),
            ..Default::default()
        };
        let mut r = Retiring::default();
        let t0 = Instant::now();
        let alive = |p: u32| p == 7;
        assert!(r.due(&c, t0, alive).is_empty(), "gone just now: still served");
        assert!(r.due(&c, t0 + KEPT_AFTER_EXIT / 2, alive).is_empty());
        // 8 came back meanwhile (a new process with its pid): its wait starts over.
        assert!(r.due(&c, t0 + KEPT_AFTER_EXIT / 2 + Duration::from_secs(1), |p| p != 9).is_empty());
        assert_eq!(r.due(&c, t0 + KEPT_AFTER_EXIT, alive), [9]);
        assert_eq!(r.due(&c, t0 + KEPT_AFTER_EXIT * 2, alive), [8]);
    }
}
