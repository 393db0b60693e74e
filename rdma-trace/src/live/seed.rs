//! The picture before the first event: what the kernel already holds when a daemon (or a
//! subscriber) comes late. MRs from the RDMA netlink resource tables (`rdma -j res show mr`:
//! pid, comm, length, keys) and each such process's uverbs mappings from /proc/<pid>/maps.
//! Everything found this way is marked `seeded`.

use crate::capture::{Mapping, PinnedRange, ProcessState, SeedError};
use std::collections::BTreeMap;

/// One MR as `rdma -j res show mr` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResMr {
    pub pid: u32,
    pub comm: String,
    pub length: u64,
    /// The restrack id (`mrn`): what the `rdma_core:mr_dereg` tracepoint names it by.
    pub mrn: u32,
    pub lkey: Option<u64>,
    pub rkey: Option<u64>,
}

/// Parses `rdma -j res show mr` (iproute2): a JSON array of MRs; keys are hex strings.
pub fn parse_res_mr(json: &str) -> Result<Vec<ResMr>, SeedError> {
    let v: serde_json::Value = serde_json::from_str(json)?;
    let arr = v.as_array().ok_or(SeedError::NotArray)?;
    Ok(arr
        .iter()
        .filter_map(|m| {
            Some(ResMr {
                // Kernel-owned MRs have no pid.
                pid: u32::try_from(m.get("pid")?.as_u64()?).ok()?,
                comm: m.get("comm").and_then(|c| c.as_str()).unwrap_or("").to_string(),
                length: m.get("mrlen")?.as_u64()?,
                mrn: u32::try_from(m.get("mrn")?.as_u64()?).ok()?,
                lkey: key(m, "lkey"),
                rkey: key(m, "rkey"),
            })
        })
        .collect())
}

/// A key as iproute2 prints it: a hex string.
fn key(m: &serde_json::Value, name: &str) -> Option<u64> {
    m.get(name).and_then(|k| k.as_str()).and_then(|k| u64::from_str_radix(k, 16).ok())
}

/// The uverbs mappings of `pid` (`/dev/infiniband/uverbsN` in /proc/<pid>/maps).
pub(crate) fn uverbs_maps(pid: u32) -> Vec<Mapping> {
    let Ok(maps) = procfs::process::Process::new(pid as i32).and_then(|p| p.maps()) else {
        return Vec::new();
    };
    maps.into_iter()
        .filter(|m| {
            matches!(&m.pathname, procfs::process::MMapPath::Path(p)
                if p.to_string_lossy().starts_with("/dev/infiniband/uverbs"))
        })
        .map(|m| Mapping {
            start: m.address.0,
            end: m.address.1,
            pgoff: m.offset / crate::units::PAGE,
            what: None,
        })
        .collect()
}

/// What the kernel holds now, per process, from `rdma` and /proc. `Err` says why nothing
/// could be read (no `rdma` tool, no netlink support).
pub fn now() -> Result<Vec<ProcessState>, SeedError> {
    let out = std::process::Command::new("rdma")
        .args(["-j", "res", "show", "mr"])
        .output()
        .map_err(SeedError::NoTool)?;
    if !out.status.success() {
        return Err(SeedError::Tool(String::from_utf8_lossy(&out.stderr).trim().to_string()));
    }
    Ok(group(parse_res_mr(&String::from_utf8_lossy(&out.stdout))?, uverbs_maps))
}

/// MRs grouped by process, with each process's mappings.
pub fn group(mrs: Vec<ResMr>, maps_of: impl Fn(u32) -> Vec<Mapping>) -> Vec<ProcessState> {
    let mut by_pid: BTreeMap<u32, ProcessState> = BTreeMap::new();
    for m in mrs {
        let p = by_pid.entry(m.pid).or_insert_with(|| ProcessState {
            pid: m.pid,
            comm: m.comm.clone(),
            seeded: true,
            ..Default::default()
        });
        // The kernel lists no address: what is charged is at least the length in pages.
        let charged = m.length.div_ceil(crate::units::PAGE) * crate::units::PAGE;
        p.pinned_bytes += charged;
        p.mrs.push(PinnedRange {
            length: m.length,
            charged,
            mr_id: Some(m.mrn),
            lkey: m.lkey,
            rkey: m.rkey,
            ..Default::default()
        });
    }
    for p in by_pid.values_mut() {
        p.mappings = maps_of(p.pid);
    }
    by_pid.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lab_rdma_res_listing_groups_by_process() {
        let json = include_str!("../../tests/fixtures/lab/session-7.3.rdma-res-mr.json");
        let mrs = parse_res_mr(json).unwrap();
        assert_eq!(mrs.len(), 2);
        assert_eq!(
            mrs[0],
            ResMr {
                pid: 146,
                comm: "ib_write_bw".into(),
                length: 131072,
                mrn: 0,
                lkey: Some(0x203),
                rkey: Some(0x203)
            }
        );
        let ps = group(mrs, |pid| {
            vec![Mapping { start: pid as u64, end: pid as u64 + 4096, pgoff: 0, what: None }]
        });
        assert_eq!(ps.len(), 2);
        assert!(ps.iter().all(|p| p.seeded && p.pinned_bytes == 131072 && p.mappings.len() == 1));
        // By pid: 145 holds mrn 1 (keys 0x3f3), 146 mrn 0; the dereg tracepoint names them so.
        let ids: Vec<_> = ps.iter().map(|p| (p.mrs[0].mr_id, p.mrs[0].lkey)).collect();
        assert_eq!(ids, vec![(Some(1), Some(0x3f3)), (Some(0), Some(0x203))]);
        assert!(parse_res_mr("{}").is_err());
    }
}
