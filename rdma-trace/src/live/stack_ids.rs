//! Kernel stacks by id (`trace --stack-ids`): the programs keep each distinct stack in the
//! `STACKS` map (`bpf_get_stackid`) and a record carries its id, not its return addresses.
//! Here, at the edge, each record is given its stack back in the layout a copied stack has,
//! so decode and enrich read one layout; each id is looked up in the map once.

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
        let Some(id) = stack_id(b) else { return (b, false) };
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
        let len = offset_of!(ProbeHead, stack_len);
        self.buf[len..len + 4].copy_from_slice(&(stack.len() as u32).to_le_bytes());
        let at = offset_of!(ProbeHead, stack_id);
        self.buf[at..at + 4].copy_from_slice(&0u32.to_le_bytes());
        self.buf.extend_from_slice(stack);
        (&self.buf, lost)
    }
}

/// The stack id an entry record carries, if any.
fn stack_id(b: &[u8]) -> Option<u32> {
    if b.len() != PROBE_FIXED_LEN
        || b.get(offset_of!(rdma_trace_common::EventHeader, kind)) != Some(&KIND_PROBE_ENTRY)
    {
        return None;
    }
    let at = offset_of!(ProbeHead, stack_id);
    let id = u32::from_le_bytes(b[at..at + 4].try_into().ok()?);
    (id != 0).then_some(id)
}
