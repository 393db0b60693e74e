//! An event written as its capture line by hand, byte for byte what serde_json writes for
//! it (a test holds the two together on every lab event and on awkward strings), without
//! serde's per-value calls: the capture writer runs once per event on a live run.

use crate::event::{EventKind, ExecContext, Numbered};
use crate::fields::Value;

impl Numbered<'_> {
    /// Appends the record's JSON (no newline) to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"v\":");
        int(out, u64::from(self.v));
        out.extend_from_slice(b",\"seq\":");
        int(out, self.seq);
        out.extend_from_slice(b",\"ts_ns\":");
        int(out, self.ts_ns);
        out.extend_from_slice(b",\"kind\":\"");
        out.extend_from_slice(kind(self.kind).as_bytes());
        out.extend_from_slice(b"\",\"name\":");
        string(out, self.name.as_str());
        if let Some(s) = self.symbol {
            out.extend_from_slice(b",\"symbol\":");
            string(out, s);
        }
        out.extend_from_slice(b",\"path\":\"");
        out.extend_from_slice(self.path.as_str().as_bytes());
        out.extend_from_slice(b"\",\"pid\":");
        int(out, u64::from(self.pid));
        out.extend_from_slice(b",\"tid\":");
        int(out, u64::from(self.tid));
        out.extend_from_slice(b",\"comm\":");
        string(out, self.comm);
        out.extend_from_slice(b",\"cpu\":");
        int(out, u64::from(self.cpu));
        out.extend_from_slice(b",\"fields\":{");
        for (i, (k, v)) in self.fields.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            string(out, k);
            out.push(b':');
            match v {
                Value::U(u) => int(out, u),
                Value::I(s) => int(out, s),
            }
        }
        out.push(b'}');
        strings(out, "unreadable", self.unreadable.iter().map(String::as_str));
        strings(out, "not_followed", self.not_followed.iter().map(String::as_str));
        strings(out, "stack", self.stack.iter().map(|f| &**f));
        if let Some(c) = self.context {
            out.extend_from_slice(b",\"context\":\"");
            out.extend_from_slice(context(c).as_bytes());
            out.push(b'"');
        }
        if let Some(fd) = self.fd_kind {
            out.extend_from_slice(b",\"fd_kind\":");
            string(out, fd.as_str());
        }
        if let Some(l) = self.latency_ns {
            out.extend_from_slice(b",\"latency_ns\":");
            int(out, l);
        }
        if let Some(id) = self.cgroup_id {
            out.extend_from_slice(b",\"cgroup_id\":");
            int(out, id);
        }
        if let Some(c) = self.cgroup {
            out.extend_from_slice(b",\"cgroup\":");
            string(out, c);
        }
        if !self.errors.is_empty() {
            out.extend_from_slice(b",\"errors\":{");
            for (i, (name, e)) in self.errors.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                string(out, name);
                out.extend_from_slice(b":{\"err\":");
                string(out, &e.err);
                out.extend_from_slice(b",\"errno\":");
                int(out, e.errno);
                out.push(b'}');
            }
            out.push(b'}');
        }
        out.push(b'}');
    }
}

fn int(out: &mut Vec<u8>, v: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// `,"key":["a","b"]`, or nothing for none (as the record skips an empty list).
fn strings<'s>(out: &mut Vec<u8>, key: &str, items: impl Iterator<Item = &'s str>) {
    let mut first = true;
    for s in items {
        if first {
            out.extend_from_slice(b",\"");
            out.extend_from_slice(key.as_bytes());
            out.extend_from_slice(b"\":[");
            first = false;
        } else {
            out.push(b',');
        }
        string(out, s);
    }
    if !first {
        out.push(b']');
    }
}

/// A JSON string: as it is where nothing needs escaping (names, frames, paths), else as
/// serde_json escapes it.
fn string(out: &mut Vec<u8>, s: &str) {
    if s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        serde_json::to_writer(&mut *out, s).expect("a Vec takes every write");
        return;
    }
    out.push(b'"');
    out.extend_from_slice(s.as_bytes());
    out.push(b'"');
}

fn kind(k: EventKind) -> &'static str {
    match k {
        EventKind::Entry => "entry",
        EventKind::Return => "return",
        EventKind::SyscallEnter => "syscall_enter",
        EventKind::SyscallExit => "syscall_exit",
    }
}

fn context(c: ExecContext) -> &'static str {
    match c {
        ExecContext::Process => "process",
        ExecContext::Kworker => "kworker",
        ExecContext::Softirq => "softirq",
    }
}

#[cfg(test)]
mod tests {
    use crate::event::{Event, FdKind, KernelError, Numbered};
    use crate::fields::{FieldId, Value};

    fn both(ev: &Event, seq: u64) -> (String, String) {
        let n = Numbered::new(ev, 1, seq);
        let mut mine = Vec::new();
        n.write(&mut mine);
        (String::from_utf8(mine).unwrap(), serde_json::to_string(&n).unwrap())
    }

    /// Awkward text everywhere a string goes, every optional part set and unset, and the
    /// numbers at their ends.
    #[test]
    fn writes_what_serde_writes() {
        let line = r#"{"v":1,"seq":3,"ts_ns":18446744073709551615,"kind":"return","name":"umem_get","symbol":"__ib_umem_get","path":"pin","pid":4294967295,"tid":0,"comm":"a","cpu":3,"fields":{"addr":0,"ret":-9223372036854775808,"zz_newer":7},"unreadable":["x"],"not_followed":["umem","y"],"stack":["f+0x1/0x2","g"],"context":"softirq","fd_kind":"comp_channel","latency_ns":5,"cgroup_id":9,"cgroup":"/a/b"}"#;
        let base: Event = serde_json::from_str(line).unwrap();
        let (mine, serde) = both(&base, 3);
        assert_eq!(mine, serde);
        assert_eq!(mine, line, "the layout the quick reader reads");
        let odd = "q\"b\\s\n\t\r\u{1}\u{1f}\u{7f}é→";
        let mut e = base.clone();
        e.comm = odd.into();
        e.name = odd.into();
        e.symbol = Some(odd.to_string().into());
        e.unreadable = vec![odd.into(), String::new()];
        e.stack = vec![std::sync::Arc::<str>::from(odd)].into();
        e.fd_kind = Some(FdKind::read(odd));
        e.cgroup = Some(odd.into());
        e.fields.insert_named(odd, Value::I(-1));
        e.errors.insert(odd.into(), KernelError { err: odd.into(), errno: -4 });
        e.errors.insert("umem".into(), KernelError { err: "ENOMEM".into(), errno: 12 });
        let (mine, serde) = both(&e, 0);
        assert_eq!(mine, serde);
        let mut bare = base;
        bare.symbol = None;
        bare.unreadable.clear();
        bare.not_followed.clear();
        bare.stack = Default::default();
        bare.context = None;
        bare.fd_kind = None;
        bare.latency_ns = None;
        bare.cgroup_id = None;
        bare.cgroup = None;
        bare.fields = Default::default();
        let (mine, serde) = both(&bare, u64::MAX);
        assert_eq!(mine, serde);
        bare.fields.insert(FieldId::Ret, Value::I(i64::MAX));
        let (mine, serde) = both(&bare, 1);
        assert_eq!(mine, serde);
    }
}
