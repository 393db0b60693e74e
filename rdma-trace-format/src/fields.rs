//! An event's named values. Every name rdma-trace writes is a `FieldId`, so code that reads
//! one is checked by the compiler; a name from a newer writer is kept as its string and
//! written back as it came. A handful per event, so vectors kept in name order rather than
//! a tree. It reads, writes and compares as the JSON object `{name: value, …}` with its
//! names in order, as a `BTreeMap` would.

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A name the catalog knows (a field, a kernel symbol) is borrowed from it when an event
/// is made; one read from a file is owned.
pub type Key = std::borrow::Cow<'static, str>;

/// A field value: unsigned (addresses, lengths, keys) or signed (return codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    U(u64),
    I(i64),
}

impl Value {
    pub fn as_u64(self) -> u64 {
        match self {
            Value::U(v) => v,
            Value::I(v) => v as u64,
        }
    }
}

named_ids! {
    /// A field the catalog, the syscall table or the engine names, listed in the names'
    /// order, so the derived order of the variants is the order the names are written in
    /// (tested). Its string form is what files and screens show.
    FieldId {
        Access = "access",
        Addr = "addr",
        Advice = "advice",
        Arg = "arg",
        AttrMask = "attr_mask",
        Bcnt = "bcnt",
        Buf = "buf",
        Channel = "channel",
        Cmd = "cmd",
        CompVector = "comp_vector",
        Context = "context",
        Count = "count",
        Cq = "cq",
        CqCqe = "cq_cqe",
        CqUserHandle = "cq_user_handle",
        Cqe = "cqe",
        DestQpNum = "dest_qp_num",
        DgidIid = "dgid_iid",
        DgidPrefix = "dgid_prefix",
        Dirfd = "dirfd",
        Epfd = "epfd",
        Events = "events",
        Exceptfds = "exceptfds",
        Fault = "fault",
        Fd = "fd",
        Fds = "fds",
        Flags = "flags",
        IndexMask = "index_mask",
        Info = "info",
        InfoSize = "info_size",
        Iova = "iova",
        Key = "key",
        Len = "len",
        Length = "length",
        Lkey = "lkey",
        Log2ElemSize = "log2_elem_size",
        Maxevents = "maxevents",
        MemlockLimit = "memlock_limit",
        MemlockMax = "memlock_max",
        Mode = "mode",
        Mr = "mr",
        MrId = "mr_id",
        Newfd = "newfd",
        Nfds = "nfds",
        Off = "off",
        Offset = "offset",
        Pages = "pages",
        Pathname = "pathname",
        Pfn = "pfn",
        PinnedVmPages = "pinned_vm_pages",
        Prot = "prot",
        Qp = "qp",
        QpNum = "qp_num",
        QpState = "qp_state",
        Readfds = "readfds",
        RecvCq = "recv_cq",
        Ret = "ret",
        Rkey = "rkey",
        SendCq = "send_cq",
        Sig = "sig",
        Sigmask = "sigmask",
        Sigsetsize = "sigsetsize",
        Size = "size",
        Start = "start",
        Timeout = "timeout",
        TimeoutMs = "timeout_ms",
        Tsp = "tsp",
        Udata = "udata",
        UdataInlen = "udata_inlen",
        UdataOutlen = "udata_outlen",
        Umem = "umem",
        UmemAddress = "umem_address",
        UmemDmabuf = "umem_dmabuf",
        UmemIova = "umem_iova",
        UmemLength = "umem_length",
        UmemOdp = "umem_odp",
        UserVirt = "user_virt",
        VmEnd = "vm_end",
        VmFlags = "vm_flags",
        VmPageProt = "vm_page_prot",
        VmPgoff = "vm_pgoff",
        VmStart = "vm_start",
        Writefds = "writefds",
    }
}

impl FieldId {
    /// `name`'s id, for tables built at compile time: an unknown name stops the build.
    pub const fn named(name: &str) -> FieldId {
        let mut i = 0;
        while i < Self::ALL.len() {
            if const_eq(Self::ALL[i].as_str(), name) {
                return Self::ALL[i];
            }
            i += 1;
        }
        panic!("a field name FieldId does not list")
    }
}

const fn const_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

#[derive(Clone, Default, PartialEq, Eq)]
pub struct Fields {
    /// By id, which is by name.
    known: Vec<(FieldId, Value)>,
    /// Names this build does not know (a newer writer's), by name.
    other: Vec<(Box<str>, Value)>,
}

impl Fields {
    pub fn new() -> Self {
        Self::default()
    }

    /// Room for `n` values before it grows.
    pub fn with_capacity(n: usize) -> Self {
        Fields { known: Vec::with_capacity(n), other: Vec::new() }
    }

    fn find(&self, id: FieldId) -> Result<usize, usize> {
        self.known.binary_search_by(|(k, _)| k.cmp(&id))
    }

    pub fn get(&self, id: FieldId) -> Option<Value> {
        self.find(id).ok().map(|i| self.known[i].1)
    }

    pub fn contains(&self, id: FieldId) -> bool {
        self.find(id).is_ok()
    }

    /// Sets `id`; returns the value it replaced.
    pub fn insert(&mut self, id: FieldId, v: Value) -> Option<Value> {
        match self.find(id) {
            Ok(i) => Some(std::mem::replace(&mut self.known[i].1, v)),
            Err(i) => {
                self.known.insert(i, (id, v));
                None
            }
        }
    }

    pub fn remove(&mut self, id: FieldId) -> Option<Value> {
        self.find(id).ok().map(|i| self.known.remove(i).1)
    }

    /// A value by its written name, known to this build or not (a file's, a person's).
    pub fn get_named(&self, name: &str) -> Option<Value> {
        match FieldId::parse(name) {
            Some(id) => self.get(id),
            None => self.other.iter().find(|(k, _)| &**k == name).map(|(_, v)| *v),
        }
    }

    /// Sets a value by its written name (the format's reader).
    pub fn insert_named(&mut self, name: &str, v: Value) -> Option<Value> {
        if let Some(id) = FieldId::parse(name) {
            return self.insert(id, v);
        }
        match self.other.binary_search_by(|(k, _)| (**k).cmp(name)) {
            Ok(i) => Some(std::mem::replace(&mut self.other[i].1, v)),
            Err(i) => {
                self.other.insert(i, (name.into(), v));
                None
            }
        }
    }

    pub fn remove_named(&mut self, name: &str) -> Option<Value> {
        match FieldId::parse(name) {
            Some(id) => self.remove(id),
            None => {
                let i = self.other.iter().position(|(k, _)| &**k == name)?;
                Some(self.other.remove(i).1)
            }
        }
    }

    pub fn len(&self) -> usize {
        self.known.len() + self.other.len()
    }

    pub fn is_empty(&self) -> bool {
        self.known.is_empty() && self.other.is_empty()
    }

    /// The known values, by id.
    pub fn known(&self) -> impl Iterator<Item = (FieldId, Value)> + '_ {
        self.known.iter().copied()
    }

    /// Every value by its written name, in name order: the known and the newer writer's
    /// merged, as the object is written.
    pub fn iter(&self) -> Iter<'_> {
        Iter { known: &self.known, other: &self.other }
    }

    /// Every value with its written name, to change in place (redaction).
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&str, &mut Value)> {
        let known = self.known.iter_mut().map(|(k, v)| (k.as_str(), v));
        known.chain(self.other.iter_mut().map(|(k, v)| (&**k, v)))
    }

    pub fn values(&self) -> impl Iterator<Item = Value> + '_ {
        self.iter().map(|(_, v)| v)
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Value> {
        self.known.iter_mut().map(|(_, v)| v).chain(self.other.iter_mut().map(|(_, v)| v))
    }
}

/// `Fields::iter`: the two name-ordered lists merged.
pub struct Iter<'a> {
    known: &'a [(FieldId, Value)],
    other: &'a [(Box<str>, Value)],
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, Value);
    fn next(&mut self) -> Option<Self::Item> {
        let take_known = match (self.known.first(), self.other.first()) {
            (Some((k, _)), Some((o, _))) => k.as_str() < &**o,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return None,
        };
        if take_known {
            let ((k, v), rest) = self.known.split_first()?;
            self.known = rest;
            Some((k.as_str(), *v))
        } else {
            let ((k, v), rest) = self.other.split_first()?;
            self.other = rest;
            Some((&**k, *v))
        }
    }
}

impl<'a> IntoIterator for &'a Fields {
    type Item = (&'a str, Value);
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl std::ops::Index<FieldId> for Fields {
    type Output = Value;
    fn index(&self, id: FieldId) -> &Value {
        let i = self.find(id).unwrap_or_else(|_| panic!("no field {id}"));
        &self.known[i].1
    }
}

impl FromIterator<(FieldId, Value)> for Fields {
    fn from_iter<I: IntoIterator<Item = (FieldId, Value)>>(it: I) -> Self {
        let mut f = Fields::new();
        for (k, v) in it {
            f.insert(k, v);
        }
        f
    }
}

impl std::fmt::Debug for Fields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl Serialize for Fields {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.len()))?;
        for (k, v) in self {
            m.serialize_entry(k, &v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Fields {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Fields;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of named values")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<Fields, A::Error> {
                let mut out = Fields::with_capacity(m.size_hint().unwrap_or(0).min(16));
                // As a map reads it: a name given twice keeps its last value.
                while let Some(k) = m.next_key_seed(Name)? {
                    let v = m.next_value::<Value>()?;
                    match k {
                        Ok(id) => out.insert(id, v),
                        Err(other) => out.insert_named(&other, v),
                    };
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

/// A field name read from a stream: its id, without a copy, or (a newer writer's) the name.
struct Name;

impl<'de> serde::de::DeserializeSeed<'de> for Name {
    type Value = Result<FieldId, Box<str>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Result<FieldId, Box<str>>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(FieldId::parse(s).ok_or_else(|| s.into()))
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_as_an_ordered_object() {
        let f: Fields = serde_json::from_str(r#"{"size":4096,"addr":1,"ret":-12,"addr":2}"#).unwrap();
        assert_eq!(serde_json::to_string(&f).unwrap(), r#"{"addr":2,"ret":-12,"size":4096}"#);
        assert_eq!(f.get(FieldId::Ret), Some(Value::I(-12)));
        assert_eq!(f[FieldId::Size], Value::U(4096));
        assert!(!f.contains(FieldId::Pages));
        let mut g = f.clone();
        assert_eq!(g.remove(FieldId::Addr), Some(Value::U(2)));
        assert_eq!(g.insert(FieldId::Pages, Value::U(1)), None);
        assert_eq!(g.iter().map(|(k, _)| k).collect::<Vec<_>>(), ["pages", "ret", "size"]);
        let tree: std::collections::BTreeMap<String, Value> =
            serde_json::from_str(r#"{"size":4096,"addr":1,"ret":-12,"addr":2}"#).unwrap();
        assert_eq!(serde_json::to_string(&tree).unwrap(), serde_json::to_string(&f).unwrap());
    }

    /// A newer writer's names are kept, shown by name and written back in their place.
    #[test]
    fn a_name_this_build_does_not_know_is_kept_in_order() {
        let text = r#"{"addr":1,"b_future":7,"cq":2,"zz_future":-3}"#;
        let f: Fields = serde_json::from_str(text).unwrap();
        assert_eq!(serde_json::to_string(&f).unwrap(), text);
        assert_eq!(f.get_named("b_future"), Some(Value::U(7)));
        assert_eq!(f.get_named("cq"), Some(Value::U(2)));
        assert_eq!(f.len(), 4);
        let mut g = f.clone();
        assert_eq!(g.remove_named("zz_future"), Some(Value::I(-3)));
        assert_eq!(serde_json::to_string(&g).unwrap(), r#"{"addr":1,"b_future":7,"cq":2}"#);
    }

    /// The derived order of the ids is the order of their names, which the writer relies
    /// on; and each name reads back as its id.
    #[test]
    fn ids_are_listed_in_name_order_and_parse_back() {
        for w in FieldId::ALL.windows(2) {
            assert!(w[0].as_str() < w[1].as_str(), "{} before {}", w[0], w[1]);
            assert!(w[0] < w[1]);
        }
        for id in FieldId::ALL {
            assert_eq!(FieldId::parse(id.as_str()), Some(*id));
            assert_eq!(FieldId::named(id.as_str()), *id);
        }
    }
}
