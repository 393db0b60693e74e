//! An event line read without serde, for the layout rdma-trace writes: compact JSON, each
//! key at most once, strings without escapes, integers only. Anything else (a space, an
//! escape, a key it does not list, a null, a number serde would refuse) is not read here:
//! the caller reads that line with serde, so what a line means never depends on which of
//! the two read it (tests hold the two to the same result on every lab capture and on
//! damaged copies of their lines, and the fuzzer on whatever it makes).

use crate::event::{Comm, Event, EventKind, ExecContext, FdKind, KernelError, Name, Path, Stack};
use crate::fields::{FieldId, Fields, Value};
use std::collections::BTreeMap;

/// The event `line` holds, or None where the line is not in the plain layout (which says
/// nothing about whether it is a valid event: serde decides that).
pub fn event(line: &str) -> Option<Event> {
    let mut c = Cursor { s: line, at: 0 };
    let mut b = Builder::default();
    c.members(|c, key| b.take(key, c))?;
    if c.at != line.len() {
        return None;
    }
    b.finish()
}

struct Cursor<'a> {
    s: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.at += 1;
        Some(b)
    }

    fn eat(&mut self, want: u8) -> Option<()> {
        (self.next()? == want).then_some(())
    }

    /// A string without escapes or control characters (serde refuses those raw, and reads
    /// escapes: both are left to it).
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let bytes = self.s.as_bytes();
        let start = self.at;
        // Names and frames are short: a plain loop beats a vectorised search here.
        loop {
            match *bytes.get(self.at)? {
                b'"' => break,
                b'\\' => return None,
                b if b < 0x20 => return None,
                _ => self.at += 1,
            }
        }
        let out = &self.s[start..self.at];
        self.at += 1;
        Some(out)
    }

    /// An integer as JSON writes it (no leading zero, no fraction or exponent): whether a
    /// minus came before it, and its magnitude, if that fits.
    fn digits(&mut self) -> Option<(bool, u64)> {
        let bytes = self.s.as_bytes();
        let neg = self.peek()? == b'-';
        if neg {
            self.at += 1;
        }
        let start = self.at;
        let mut n: u64 = 0;
        while let Some(&b) = bytes.get(self.at)
            && b.is_ascii_digit()
        {
            n = n.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
            self.at += 1;
        }
        let len = self.at - start;
        let plain = len == 1 || (len > 1 && bytes[start] != b'0');
        let ends = matches!(self.peek(), Some(b',' | b'}' | b']'));
        (plain && ends && !(neg && n == 0)).then_some((neg, n))
    }

    fn u64(&mut self) -> Option<u64> {
        match self.digits()? {
            (false, n) => Some(n),
            (true, _) => None,
        }
    }

    fn u32(&mut self) -> Option<u32> {
        u32::try_from(self.u64()?).ok()
    }

    /// A field value: unsigned where it has no sign, signed where it has one and fits
    /// (`-0` is left to serde).
    fn value(&mut self) -> Option<Value> {
        match self.digits()? {
            (false, n) => Some(Value::U(n)),
            (true, n) => Some(Value::I(0i64.checked_sub_unsigned(n)?)),
        }
    }

    /// `open`, then items separated by commas (each read by `item`), then `close`; none
    /// at all is `open` right before `close`.
    fn list(&mut self, open: u8, close: u8, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(open)?;
        if self.peek()? == close {
            self.at += 1;
            return Some(());
        }
        loop {
            item(self)?;
            match self.next()? {
                b',' => continue,
                b if b == close => return Some(()),
                _ => return None,
            }
        }
    }

    /// An object: each member's name given to `member`, which reads its value.
    fn members(&mut self, mut member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.list(b'{', b'}', |c| {
            let name = c.string()?;
            c.eat(b':')?;
            member(c, name)
        })
    }

    /// `[]` or `["…",…]`, each element a plain string.
    fn strings(&mut self, into: &mut Vec<&'a str>) -> Option<()> {
        self.list(b'[', b']', |c| {
            into.push(c.string()?);
            Some(())
        })
    }

    fn i64(&mut self) -> Option<i64> {
        match self.digits()? {
            (false, n) => i64::try_from(n).ok(),
            (true, n) => 0i64.checked_sub_unsigned(n),
        }
    }

    /// `{"name":{"err":"ENOMEM","errno":12},…}`: pointers that held an ERR_PTR.
    fn errors(&mut self) -> Option<BTreeMap<String, KernelError>> {
        let mut out = BTreeMap::new();
        self.members(|c, name| {
            let (mut err, mut errno) = (None, None);
            c.members(|c, key| {
                match key {
                    "err" if err.is_none() => err = Some(c.string()?.to_string()),
                    "errno" if errno.is_none() => errno = Some(c.i64()?),
                    _ => return None,
                }
                Some(())
            })?;
            // A name given twice: left to serde, to say the same.
            out.insert(name.to_string(), KernelError { err: err?, errno: errno? }).is_none().then_some(())
        })?;
        Some(out)
    }

    fn fields(&mut self) -> Option<Fields> {
        let mut out = Fields::new();
        self.members(|c, name| {
            let v = c.value()?;
            let known = match FieldId::parse(name) {
                Some(id) => out.insert(id, v),
                None => out.insert_named(name, v),
            };
            // A name given twice: serde keeps the last; left to it, to say the same.
            known.is_none().then_some(())
        })?;
        Some(out)
    }
}

/// The parts of an event as they are read, each at most once.
#[derive(Default)]
struct Builder<'a> {
    seen: u32,
    v: Option<u32>,
    seq: Option<u64>,
    ts_ns: Option<u64>,
    kind: Option<EventKind>,
    name: Option<&'a str>,
    symbol: Option<&'a str>,
    path: Option<Path>,
    pid: Option<u32>,
    tid: Option<u32>,
    comm: Option<&'a str>,
    cpu: Option<u32>,
    fields: Option<Fields>,
    unreadable: Vec<&'a str>,
    not_followed: Vec<&'a str>,
    stack: Vec<&'a str>,
    context: Option<ExecContext>,
    fd_kind: Option<&'a str>,
    latency_ns: Option<u64>,
    cgroup_id: Option<u64>,
    cgroup: Option<&'a str>,
    errors: BTreeMap<String, KernelError>,
}

impl<'a> Builder<'a> {
    /// Marks key `bit` read; None if it was read before.
    fn once(&mut self, bit: u32) -> Option<()> {
        let bit = 1u32 << bit;
        let first = self.seen & bit == 0;
        self.seen |= bit;
        first.then_some(())
    }

    fn take(&mut self, key: &str, c: &mut Cursor<'a>) -> Option<()> {
        match key {
            "v" => self.once(0).and_then(|_| c.u32()).map(|x| self.v = Some(x)),
            "seq" => self.once(1).and_then(|_| c.u64()).map(|x| self.seq = Some(x)),
            "ts_ns" => self.once(2).and_then(|_| c.u64()).map(|x| self.ts_ns = Some(x)),
            "kind" => self.once(3).and_then(|_| kind(c.string()?)).map(|x| self.kind = Some(x)),
            "name" => self.once(4).and_then(|_| c.string()).map(|x| self.name = Some(x)),
            "symbol" => self.once(5).and_then(|_| c.string()).map(|x| self.symbol = Some(x)),
            "path" => self.once(6).and_then(|_| path(c.string()?)).map(|x| self.path = Some(x)),
            "pid" => self.once(7).and_then(|_| c.u32()).map(|x| self.pid = Some(x)),
            "tid" => self.once(8).and_then(|_| c.u32()).map(|x| self.tid = Some(x)),
            "comm" => self.once(9).and_then(|_| c.string()).map(|x| self.comm = Some(x)),
            "cpu" => self.once(10).and_then(|_| c.u32()).map(|x| self.cpu = Some(x)),
            "fields" => self.once(11).and_then(|_| c.fields()).map(|x| self.fields = Some(x)),
            "unreadable" => self.once(12).and_then(|_| c.strings(&mut self.unreadable)),
            "not_followed" => self.once(13).and_then(|_| c.strings(&mut self.not_followed)),
            "stack" => self.once(14).and_then(|_| c.strings(&mut self.stack)),
            "context" => self.once(15).and_then(|_| context(c.string()?)).map(|x| self.context = Some(x)),
            "fd_kind" => self.once(16).and_then(|_| c.string()).map(|x| self.fd_kind = Some(x)),
            "latency_ns" => self.once(17).and_then(|_| c.u64()).map(|x| self.latency_ns = Some(x)),
            "cgroup_id" => self.once(18).and_then(|_| c.u64()).map(|x| self.cgroup_id = Some(x)),
            "cgroup" => self.once(19).and_then(|_| c.string()).map(|x| self.cgroup = Some(x)),
            "errors" => self.once(20).and_then(|_| c.errors()).map(|x| self.errors = x),
            _ => None,
        }
    }

    fn finish(self) -> Option<Event> {
        let owned = |v: Vec<&str>| v.into_iter().map(str::to_string).collect();
        Some(Event {
            v: self.v?,
            seq: self.seq,
            ts_ns: self.ts_ns?,
            kind: self.kind?,
            name: Name::parse(self.name?),
            symbol: self.symbol.map(|s| s.to_string().into()),
            path: self.path?,
            pid: self.pid?,
            tid: self.tid?,
            comm: Comm::new(self.comm?),
            cpu: self.cpu?,
            fields: self.fields.unwrap_or_default(),
            unreadable: owned(self.unreadable),
            not_followed: owned(self.not_followed),
            stack: Stack::read(&self.stack),
            context: self.context,
            fd_kind: self.fd_kind.map(FdKind::read),
            latency_ns: self.latency_ns,
            cgroup_id: self.cgroup_id,
            cgroup: self.cgroup.map(Into::into),
            errors: self.errors,
            host: 0,
        })
    }
}

fn kind(s: &str) -> Option<EventKind> {
    Some(match s {
        "entry" => EventKind::Entry,
        "return" => EventKind::Return,
        "syscall_enter" => EventKind::SyscallEnter,
        "syscall_exit" => EventKind::SyscallExit,
        _ => return None,
    })
}

fn path(s: &str) -> Option<Path> {
    Some(match s {
        "pin" => Path::Pin,
        "mmap" => Path::Mmap,
        "completion" => Path::Completion,
        "teardown" => Path::Teardown,
        "verbs" => Path::Verbs,
        "syscall" => Path::Syscall,
        _ => return None,
    })
}

fn context(s: &str) -> Option<ExecContext> {
    Some(match s {
        "process" => ExecContext::Process,
        "kworker" => ExecContext::Kworker,
        "softirq" => ExecContext::Softirq,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// Every event line of the lab's captures, as written by rdma-trace on real kernels.
    fn lab_event_lines() -> Vec<String> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut files: Vec<_> = ["rdma-trace/tests/fixtures/lab", "docs/guides/captures"]
            .iter()
            .flat_map(|d| std::fs::read_dir(root.join(d)).expect("fixture folder"))
            .map(|e| e.expect("entry").path())
            .filter(|p| {
                let n = p.to_string_lossy();
                (n.ends_with(".jsonl") || n.ends_with(".jsonl.zst")) && !n.contains(".steps.")
            })
            .collect();
        files.sort();
        assert!(files.len() >= 20, "the lab captures are where they were: {files:?}");
        let mut lines = Vec::new();
        for f in files {
            let mut text = String::new();
            let raw = std::fs::File::open(&f).expect("fixture");
            if f.to_string_lossy().ends_with(".zst") {
                zstd::stream::read::Decoder::new(raw).expect("zstd").read_to_string(&mut text)
            } else {
                std::io::BufReader::new(raw).read_to_string(&mut text)
            }
            .expect("read");
            lines.extend(text.lines().filter(|l| !l.contains("\"type\":\"")).map(str::to_string));
        }
        lines
    }

    fn serde(line: &str) -> Option<Event> {
        serde_json::from_str(line).ok()
    }

    /// What rdma-trace writes is read here, and read as serde reads it.
    #[test]
    fn every_lab_event_line_is_read_here_as_serde_reads_it() {
        let lines = lab_event_lines();
        assert!(lines.len() > 10_000, "{} event lines", lines.len());
        for (i, line) in lines.iter().enumerate() {
            let quick = event(line).unwrap_or_else(|| panic!("event line {i} left to serde: {line}"));
            assert_eq!(Some(quick), serde(line), "line {i}: {line}");
        }
    }

    /// A damaged line is either left to serde or read as serde reads it: never read as
    /// something else. Each position of one line of each shape is changed or deleted.
    #[test]
    fn a_damaged_line_is_never_read_otherwise_than_serde_reads_it() {
        let mut shapes = std::collections::HashSet::new();
        let sample: Vec<String> = lab_event_lines()
            .into_iter()
            .filter(|l| {
                let e = event(l).expect("lab line");
                shapes.insert((e.name.to_string(), e.kind as u8, e.stack.is_empty(), e.fields.len()))
            })
            .collect();
        assert!(sample.len() >= 30, "{} shapes", sample.len());
        let (mut read, mut left) = (0u64, 0u64);
        for line in &sample {
            let bytes = line.as_bytes();
            let step = (bytes.len() / 150).max(1);
            for at in (0..bytes.len()).step_by(step) {
                let deleted = [&bytes[..at], &bytes[at + 1..]].concat();
                let changed = b"\"\\ -09,}]x\x01".iter().map(|&c| {
                    let mut b = bytes.to_vec();
                    b[at] = c;
                    b
                });
                for b in std::iter::once(deleted).chain(changed) {
                    let Ok(text) = std::str::from_utf8(&b) else { continue };
                    match event(text) {
                        Some(ev) => {
                            read += 1;
                            assert_eq!(Some(ev), serde(text), "read otherwise than serde: {text}");
                        }
                        None => left += 1,
                    }
                }
            }
        }
        assert!(read > 1000 && left > 1000, "{read} read here, {left} left to serde");
    }

    #[test]
    fn numbers_and_names_at_their_edges() {
        let line = |fields: &str| {
            format!(
                r#"{{"v":1,"seq":5,"ts_ns":7,"kind":"entry","name":"umem_get","path":"pin","pid":1,"tid":1,"comm":"a","cpu":0,"fields":{fields}}}"#
            )
        };
        let read = |f: &str| event(&line(f)).map(|e| e.fields);
        assert_eq!(
            read(r#"{"ret":-9223372036854775808}"#).unwrap().get(FieldId::Ret),
            Some(Value::I(i64::MIN))
        );
        assert_eq!(
            read(r#"{"addr":18446744073709551615}"#).unwrap().get(FieldId::Addr),
            Some(Value::U(u64::MAX))
        );
        assert_eq!(read(r#"{"zz_newer":3}"#).unwrap().get_named("zz_newer"), Some(Value::U(3)));
        for left in [
            r#"{"ret":-9223372036854775809}"#,
            r#"{"addr":18446744073709551616}"#,
            r#"{"ret":-0}"#,
            r#"{"addr":01}"#,
            r#"{"addr":1.0}"#,
            r#"{"addr":1e3}"#,
            r#"{"addr":1,"addr":2}"#,
            r#"{"addr":null}"#,
            r#"{"a\u0062":1}"#,
            r#"{ "addr":1}"#,
        ] {
            assert_eq!(read(left), None, "{left}");
            // Each is either refused by serde or read by it, never read here.
            let _ = serde(&line(left));
        }
        assert!(event(&line("{}").replace("\"pid\":1,", "")).is_none(), "a missing pid");
        assert!(event(&line("{}").replace("}}", "},\"host\":1}")).is_none(), "a key not listed");
        assert!(event(&(line("{}") + " ")).is_none(), "trailing space");
    }
}
