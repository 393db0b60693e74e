//! The one place that knows the byte layout of ring-buffer records.
//! Every record is length-checked and read with `read_unaligned`.

use rdma_trace_common::{
    EventHeader, KIND_PROBE_ENTRY, KIND_PROBE_RETURN, KIND_STEP, KIND_SYS_ENTER, KIND_SYS_EXIT, MAX_FETCH,
    MAX_STACK, PROBE_FIXED_LEN, ProbeHead, STEP_FIXED_LEN, STEP_JSON_MAX, SyscallEvent,
};
use std::borrow::Cow;

/// Why ring bytes are not a record (the loss is counted as undecodable).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("record of {0} bytes is shorter than an event header")]
    Short(usize),
    #[error("record kind {kind} needs {need} bytes, got {got}")]
    Size { kind: u8, need: usize, got: usize },
    #[error("unknown record kind {0}")]
    Kind(u8),
    #[error("step record cut at {len} of {asked} bytes")]
    StepCut { len: usize, asked: usize },
}

/// A decoded ring-buffer record, read in place: nothing of it is copied to the heap (a
/// path that is not UTF-8 is the exception).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Raw<'a> {
    Probe {
        hdr: EventHeader,
        is_return: bool,
        vals: [u64; MAX_FETCH],
        stack: Stack<'a>,
    },
    Syscall {
        hdr: EventHeader,
        is_exit: bool,
        nr: u64,
        args: [u64; 6],
        /// open/openat: the path opened.
        path: Option<Cow<'a, str>>,
    },
    /// A companion step announced through its marker: the record's JSON bytes, whole.
    Step {
        hdr: EventHeader,
        json: &'a [u8],
    },
}

/// A kernel stack as its record holds it: return addresses, innermost first (unaligned
/// 8-byte words, read one by one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stack<'a>(&'a [u8]);

impl<'a> Stack<'a> {
    /// The return addresses as the ring holds them (8 bytes each).
    pub(crate) fn bytes(&self) -> &'a [u8] {
        self.0
    }
    /// The return addresses, for the tests (the pipeline hands the bytes on whole).
    #[cfg(test)]
    fn iter(&self) -> impl Iterator<Item = u64> + 'a {
        self.0.chunks_exact(8).map(|w| u64::from_ne_bytes(w.try_into().unwrap_or_default()))
    }
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Raw<'_> {
    /// The record's common header.
    pub fn header(&self) -> &EventHeader {
        match self {
            Raw::Probe { hdr, .. } | Raw::Syscall { hdr, .. } | Raw::Step { hdr, .. } => hdr,
        }
    }
}

/// A step record: the fixed part, then `len` bytes of JSON. One the marker had to cut
/// (longer than `STEP_JSON_MAX`) is an error: half a JSON object says nothing.
fn step(b: &[u8], hdr: EventHeader) -> Result<Raw<'_>, DecodeError> {
    let size = |kind, need| DecodeError::Size { kind, need, got: b.len() };
    if b.len() < STEP_FIXED_LEN {
        return Err(size(KIND_STEP, STEP_FIXED_LEN));
    }
    let word = |at: usize| u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]) as usize;
    let (len, asked) = (word(rdma_trace_common::HEADER_LEN), word(rdma_trace_common::HEADER_LEN + 4));
    if len > STEP_JSON_MAX || b.len() < STEP_FIXED_LEN + len {
        return Err(size(KIND_STEP, STEP_FIXED_LEN + len));
    }
    if asked > len {
        return Err(DecodeError::StepCut { len, asked });
    }
    Ok(Raw::Step { hdr, json: &b[STEP_FIXED_LEN..STEP_FIXED_LEN + len] })
}

fn read<T: Copy>(b: &[u8], kind: u8) -> Result<T, DecodeError> {
    let need = size_of::<T>();
    if b.len() < need {
        return Err(DecodeError::Size { kind, need, got: b.len() });
    }
    // SAFETY: length checked above; T is a plain-data #[repr(C)] type for which every
    // bit pattern is valid; read_unaligned has no alignment requirement.
    Ok(unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<T>()) })
}

/// The header of a record, if it is long enough to have one.
pub fn header(b: &[u8]) -> Option<EventHeader> {
    read(b, 0).ok()
}

/// A probe record: the fixed part, then only the `stack_len` bytes of stack used.
fn probe(b: &[u8], hdr: EventHeader) -> Result<Raw<'_>, DecodeError> {
    let head: ProbeHead = read(b, hdr.kind)?;
    let need = PROBE_FIXED_LEN + head.stack_len as usize;
    if !head.stack_len.is_multiple_of(8) || head.stack_len as usize > 8 * MAX_STACK || b.len() < need {
        return Err(DecodeError::Size { kind: hdr.kind, need, got: b.len() });
    }
    Ok(Raw::Probe {
        hdr,
        is_return: hdr.kind == KIND_PROBE_RETURN,
        vals: head.vals,
        stack: Stack(&b[PROBE_FIXED_LEN..need]),
    })
}

/// A syscall record; open/openat's path read where it lies.
fn syscall(b: &[u8], hdr: EventHeader) -> Result<Raw<'_>, DecodeError> {
    let e: SyscallEvent = read(b, hdr.kind)?;
    let at = std::mem::offset_of!(SyscallEvent, path);
    let bytes = &b[at..at + e.path.len()];
    let n = bytes.iter().position(|&c| c == 0).unwrap_or(bytes.len());
    let path = (n > 0).then(|| String::from_utf8_lossy(&bytes[..n]));
    Ok(Raw::Syscall { hdr, is_exit: hdr.kind == KIND_SYS_EXIT, nr: e.nr, args: e.args, path })
}

/// Decodes one ring record (borrowing its bytes).
pub fn decode(b: &[u8]) -> Result<Raw<'_>, DecodeError> {
    if b.len() < size_of::<EventHeader>() {
        return Err(DecodeError::Short(b.len()));
    }
    let hdr: EventHeader = read(b, 0)?;
    match hdr.kind {
        KIND_PROBE_ENTRY | KIND_PROBE_RETURN => probe(b, hdr),
        KIND_SYS_ENTER | KIND_SYS_EXIT => syscall(b, hdr),
        KIND_STEP => step(b, hdr),
        k => Err(DecodeError::Kind(k)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdma_trace_common::{HEADER_LEN, ProbeEvent};

    fn hdr(kind: u8) -> EventHeader {
        EventHeader {
            ts_ns: 5,
            tgid: 10,
            tid: 11,
            comm: *b"ibv_rc_pingpong\0",
            cpu: 1,
            kind,
            slot: 3,
            fail_mask: 0,
            skip_mask: 0,
            cgroup_id: 0,
        }
    }

    fn bytes<T>(v: &T) -> Vec<u8> {
        // SAFETY: reading the bytes of a plain-data value.
        unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()).to_vec() }
    }

    #[test]
    fn probe_entry_round_trip() {
        let mut e = ProbeEvent {
            hdr: hdr(KIND_PROBE_ENTRY),
            vals: [0; 8],
            stack_len: 16,
            stack_id: 0,
            stack: [0; 32],
        };
        e.vals[0] = 0x7f00_0000_1000;
        e.stack[0] = 0xffff_ffff_c000_0010;
        e.stack[1] = 0xffff_ffff_c000_0020;
        let b = bytes(&e);
        let r = decode(&b).unwrap();
        let Raw::Probe { hdr, is_return, vals, stack } = r else { panic!("not a probe: {r:?}") };
        assert!(!is_return);
        assert_eq!(hdr.slot, 3);
        assert_eq!(vals[0], 0x7f00_0000_1000);
        assert_eq!(stack.iter().collect::<Vec<_>>(), vec![0xffff_ffff_c000_0010, 0xffff_ffff_c000_0020]);
    }

    #[test]
    fn probe_records_carry_only_the_stack_used() {
        let mut e = ProbeEvent {
            hdr: hdr(KIND_PROBE_RETURN),
            vals: [7; 8],
            stack_len: 8,
            stack_id: 0,
            stack: [0; 32],
        };
        e.stack[0] = 0xffff_ffff_c000_0010;
        let b = bytes(&e);
        let r = decode(&b[..PROBE_FIXED_LEN + 8]).unwrap();
        let Raw::Probe { is_return, vals, stack, .. } = r else { panic!("not a probe: {r:?}") };
        assert!(is_return);
        assert_eq!((vals, stack.iter().collect::<Vec<_>>()), ([7; 8], vec![0xffff_ffff_c000_0010]));
        assert_eq!(
            decode(&b[..PROBE_FIXED_LEN + 4]),
            Err(DecodeError::Size {
                kind: KIND_PROBE_RETURN,
                need: PROBE_FIXED_LEN + 8,
                got: PROBE_FIXED_LEN + 4
            })
        );
        e.stack_len = 0;
        assert!(
            matches!(decode(&bytes(&e)[..PROBE_FIXED_LEN]), Ok(Raw::Probe { ref stack, .. }) if stack.is_empty())
        );
        assert_eq!(header(&b).map(|h| h.slot), Some(3));
        assert_eq!(header(&b[..HEADER_LEN - 1]), None);
    }

    #[test]
    fn short_and_unknown_records_are_errors() {
        assert_eq!(decode(&[0u8; 7]), Err(DecodeError::Short(7)));
        let h = bytes(&hdr(KIND_SYS_ENTER));
        assert_eq!(
            decode(&h),
            Err(DecodeError::Size { kind: KIND_SYS_ENTER, need: size_of::<SyscallEvent>(), got: HEADER_LEN })
        );
        assert_eq!(decode(&bytes(&hdr(99))), Err(DecodeError::Kind(99)));
    }

    #[test]
    fn step_records_carry_their_json_whole_or_are_refused() {
        let json = br#"{"v":0,"run":1,"step":7,"name":"reg_mr"}"#;
        let mut b = bytes(&hdr(KIND_STEP));
        b.extend((json.len() as u32).to_ne_bytes());
        b.extend((json.len() as u32).to_ne_bytes());
        b.extend(json);
        let r = decode(&b).unwrap();
        assert_eq!(r, Raw::Step { hdr: hdr(KIND_STEP), json: &json[..] });
        assert_eq!(
            decode(&b[..b.len() - 1]),
            Err(DecodeError::Size { kind: KIND_STEP, need: b.len(), got: b.len() - 1 })
        );
        b[HEADER_LEN + 4..HEADER_LEN + 8].copy_from_slice(&2000u32.to_ne_bytes());
        assert_eq!(decode(&b), Err(DecodeError::StepCut { len: json.len(), asked: 2000 }));
    }

    #[test]
    fn unaligned_input_decodes() {
        let mut e = SyscallEvent {
            hdr: hdr(KIND_SYS_EXIT),
            nr: 9,
            args: [0xfffffffffffffff4, 0, 0, 0, 0, 0],
            path: [0; rdma_trace_common::PATH_LEN],
        };
        let mut b = vec![0u8];
        b.extend(bytes(&e));
        let r = decode(&b[1..]).unwrap();
        assert_eq!(
            r,
            Raw::Syscall { hdr: hdr(KIND_SYS_EXIT), is_exit: true, nr: 9, args: e.args, path: None }
        );
        e.path[..22].copy_from_slice(b"/dev/infiniband/uverbs");
        let b = bytes(&e);
        let r = decode(&b).unwrap();
        let Raw::Syscall { path, .. } = r else { panic!() };
        assert_eq!(path.as_deref(), Some("/dev/infiniband/uverbs"));
    }
}
