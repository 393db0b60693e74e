//! `--redact`: a capture to share. Kernel addresses (any value in the kernel part of the
//! x86-64 address space: struct pointers such as a umem, an MR, a CQ) and physical page
//! frame numbers (`pfn`) are replaced by stand-ins, the same stand-in for the same value
//! throughout the run, so every join (a umem from its pin to its release, a CQ to its
//! completions) still holds. Stacks are already `function+offset [module]`, never raw
//! addresses; user-space addresses (an MR's buffer, a mapping's start) are the program's own
//! and stay.

use crate::event::{Event, Value};
use std::collections::HashMap;

/// The lowest kernel address on x86-64 with 5-level paging (0xffff8… with 4 levels is
/// above it); user space ends below 0x0100000000000000 either way. The lab's kernels map
/// their structs at 0xff11…: a 4-level bound would miss every one.
pub const KERNEL_HALF: u64 = 0xff00_0000_0000_0000;
/// Stand-ins for kernel addresses: this base plus the order of first appearance (1, 2, …).
pub const KERNEL_STAND_IN: u64 = 0xffff_ffff_0000_0000;

/// Replaces kernel addresses with stand-ins, the same address by the same stand-in.
#[derive(Default)]
pub struct Redactor {
    kernel: HashMap<u64, u64>,
    frames: HashMap<u64, u64>,
}

fn stand_in(map: &mut HashMap<u64, u64>, base: u64, v: u64) -> u64 {
    let next = base + map.len() as u64 + 1;
    *map.entry(v).or_insert(next)
}

impl Redactor {
    /// A kernel address's stand-in (any other value as it is).
    fn kernel(&mut self, v: u64) -> u64 {
        if v >= KERNEL_HALF && crate::pipeline::render::err_ptr(v).is_none() {
            stand_in(&mut self.kernel, KERNEL_STAND_IN, v)
        } else {
            v
        }
    }

    /// A daemon's state: the kernel pointers in it (a pin's umem, a QP's CQs, a CQ's
    /// `struct ib_cq *`) get the stand-ins the events get, so the joins still hold.
    pub fn state(&mut self, st: &mut crate::capture::State) {
        for p in &mut st.processes {
            for m in &mut p.mrs {
                m.umem = m.umem.map(|u| self.kernel(u));
            }
        }
        for q in &mut st.qps {
            (q.send_cq, q.recv_cq) = (self.kernel(q.send_cq), self.kernel(q.recv_cq));
        }
        for c in &mut st.cqs {
            (c.kernel, c.handle) = (self.kernel(c.kernel), self.kernel(c.handle));
        }
    }

    /// Redacts the kernel addresses of one event in place.
    pub fn event(&mut self, ev: &mut Event) {
        use crate::event::FieldId;
        for (name, v) in ev.fields.iter_mut() {
            let Value::U(n) = v else { continue };
            let id = FieldId::parse(name);
            if matches!(id, Some(FieldId::MemlockLimit | FieldId::MemlockMax)) {
                continue; // a limit (unlimited = all ones), not an address
            }
            if id == Some(FieldId::Pfn) {
                *n = stand_in(&mut self.frames, 0, *n);
            } else if *n >= KERNEL_HALF && crate::pipeline::render::err_ptr(*n).is_none() {
                *n = stand_in(&mut self.kernel, KERNEL_STAND_IN, *n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::FieldId;

    fn bare() -> Event {
        let line = [
            r#"{"v":0,"ts_ns":1,"kind":"return","name":""#,
            &crate::event::ProbeId::UmemGet.to_string(),
            r#"","path":"pin","pid":1,"tid":1,"comm":"x","cpu":0}"#,
        ]
        .concat();
        serde_json::from_str(&line).unwrap()
    }

    #[test]
    fn kernel_addresses_get_stable_stand_ins_and_user_addresses_stay() {
        let mut ev = bare();
        ev.fields.insert(FieldId::Umem, Value::U(0xffff_8881_0a2b_c000));
        ev.fields.insert(FieldId::Addr, Value::U(0x7f00_1234_0000));
        ev.fields.insert(FieldId::Pfn, Value::U(0xfe000));
        ev.fields.insert(FieldId::Ret, Value::I(-12));
        let mut r = Redactor::default();
        let mut a = ev.clone();
        r.event(&mut a);
        assert_eq!(a.fields[FieldId::Umem], Value::U(KERNEL_STAND_IN + 1));
        assert_eq!(a.fields[FieldId::Addr], Value::U(0x7f00_1234_0000));
        assert_eq!(a.fields[FieldId::Pfn], Value::U(1));
        assert_eq!(a.fields[FieldId::Ret], Value::I(-12));
        // The same pointer later (its release): the same stand-in; another: the next.
        let mut b = ev.clone();
        b.fields.insert(FieldId::Cq, Value::U(0xffff_8881_0000_0040));
        r.event(&mut b);
        assert_eq!(b.fields[FieldId::Umem], Value::U(KERNEL_STAND_IN + 1));
        assert_eq!(b.fields[FieldId::Cq], Value::U(KERNEL_STAND_IN + 2));
        // An ERR_PTR is an errno, not an address.
        let mut c = bare();
        c.fields.insert(FieldId::Umem, Value::U(-12i64 as u64));
        r.event(&mut c);
        assert_eq!(c.fields[FieldId::Umem], Value::U(-12i64 as u64));
    }
}
