//! Kernel stacks by id (`trace --stack-ids`): the programs keep each distinct stack in the
//! `STACKS` map (`bpf_get_stackid`) and a record carries its id, not its return addresses.
//! Here, at the edge, each record is given its stack back in the layout a copied stack has,
//! so decode and enrich read one layout; each id is looked up in the map once. Where the
//! kernel's walk misses the probed function's caller (arm64: it is in x30 at the entry),
//! the record carries it as its one stack word, and it goes in second, as the programs put
//! it into a copied stack (`with_caller`).

use aya::maps::{MapData, StackTraceMap};
use rdma_trace_common::{KIND_PROBE_ENTRY, MAX_STACK, PROBE_FIXED_LEN, ProbeHead};
use std::collections::HashMap;
use std::mem::offset_of;

pub(crate) struct StackIds {
    map: StackTraceMap<MapData>,
    /// Each id's return addresses, as the record's stack bytes (little-endian u64s); an
    /// id the map did not have is kept as `None`.
    known: HashMap<u32, Option<Box<[u8]>>>,
    buf: Vec<u8>,
}

impl StackIds {
    pub(crate) fn new(map: StackTraceMap<MapData>) -> Self {
        StackIds { map, known: HashMap::new(), buf: Vec::new() }
    }

    /// Distinct stacks seen.
    pub(crate) fn distinct(&self) -> usize {
        self.known.values().filter(|s| s.is_some()).count()
    }

    /// `b` as if its stack had been copied: an entry record that names a stack id gets the
    /// stack's bytes after its fixed part (and its id cleared); any other record is `b`.
    /// True with it when the map did not have the id: the record goes on without a stack.
    pub(crate) fn resolve<'a>(&'a mut self, b: &'a [u8]) -> (&'a [u8], bool) {
        let Some((id, caller)) = stack_id(b) else { return (b, false) };
        let map = &self.map;
        let known = self.known.entry(id).or_insert_with(|| {
            let t = map.get(&(id - 1), 0).ok()?;
            Some(t.frames().iter().take(MAX_STACK).flat_map(|f| f.ip.to_le_bytes()).collect())
        });
        let (stack, lost): (&[u8], bool) = match known {
            Some(s) => (s, false),
            None => (&[], true),
        };
        self.buf.clear();
        self.buf.extend_from_slice(&b[..PROBE_FIXED_LEN]);
        let at = offset_of!(ProbeHead, stack_id);
        self.buf[at..at + 4].copy_from_slice(&0u32.to_le_bytes());
        with_caller(&mut self.buf, stack, caller);
        let n = (self.buf.len() - PROBE_FIXED_LEN) as u32;
        let len = offset_of!(ProbeHead, stack_len);
        self.buf[len..len + 4].copy_from_slice(&n.to_le_bytes());
        (&self.buf, lost)
    }
}

/// Appends `stack` to `out`, with `caller` second unless the walk has it there already (a
/// tail call left the grandparent's address), at most `MAX_STACK` frames.
fn with_caller(out: &mut Vec<u8>, stack: &[u8], caller: Option<[u8; 8]>) {
    let frames: Vec<&[u8]> = stack.chunks_exact(8).collect();
    let Some(c) = caller.filter(|c| !frames.is_empty() && frames.get(1) != Some(&&c[..])) else {
        out.extend_from_slice(stack);
        return;
    };
    out.extend_from_slice(frames[0]);
    out.extend_from_slice(&c);
    for f in frames.iter().skip(1).take(MAX_STACK - 2) {
        out.extend_from_slice(f);
    }
}

/// The stack id an entry record carries, if any, with the caller's return address when the
/// record carries one.
fn stack_id(b: &[u8]) -> Option<(u32, Option<[u8; 8]>)> {
    if b.len() < PROBE_FIXED_LEN
        || b.get(offset_of!(rdma_trace_common::EventHeader, kind)) != Some(&KIND_PROBE_ENTRY)
    {
        return None;
    }
    let caller = match b.len() - PROBE_FIXED_LEN {
        0 => None,
        8 => Some(b[PROBE_FIXED_LEN..].try_into().ok()?),
        _ => return None,
    };
    let at = offset_of!(ProbeHead, stack_id);
    let id = u32::from_le_bytes(b[at..at + 4].try_into().ok()?);
    (id != 0).then_some((id, caller))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(ws: &[u64]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn the_caller_goes_second_once() {
        let mut out = Vec::new();
        with_caller(&mut out, &words(&[10, 30, 40]), Some(20u64.to_le_bytes()));
        assert_eq!(out, words(&[10, 20, 30, 40]));
        out.clear();
        with_caller(&mut out, &words(&[10, 20, 40]), Some(20u64.to_le_bytes()));
        assert_eq!(out, words(&[10, 20, 40]), "a tail call's: the walk has it");
        out.clear();
        with_caller(&mut out, &words(&[10, 30]), None);
        assert_eq!(out, words(&[10, 30]), "x86-64 carries none");
        out.clear();
        let full: Vec<u64> = (0..MAX_STACK as u64).collect();
        with_caller(&mut out, &words(&full), Some(99u64.to_le_bytes()));
        assert_eq!(out.len(), MAX_STACK * 8, "the outermost frame goes");
    }
}
