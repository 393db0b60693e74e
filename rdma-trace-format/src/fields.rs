//! An event's named values: a handful per event, so a vector kept sorted by name rather
//! than a tree (one allocation, no nodes to free). It reads, writes and compares as the
//! JSON object `{name: value, …}` with its names in order, as a `BTreeMap` would.

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

#[derive(Clone, Default, PartialEq, Eq)]
pub struct Fields(Vec<(Key, Value)>);

impl Fields {
    pub fn new() -> Self {
        Self::default()
    }

    /// Room for `n` values before it grows.
    pub fn with_capacity(n: usize) -> Self {
        Fields(Vec::with_capacity(n))
    }

    fn find(&self, name: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_ref().cmp(name))
    }

    pub fn get(&self, name: &str) -> Option<&Value> {
        self.find(name).ok().map(|i| &self.0[i].1)
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.find(name).is_ok()
    }

    /// Sets `name`; returns the value it replaced.
    pub fn insert(&mut self, name: Key, v: Value) -> Option<Value> {
        match self.find(&name) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, v)),
            Err(i) => {
                self.0.insert(i, (name, v));
                None
            }
        }
    }

    pub fn remove(&mut self, name: &str) -> Option<Value> {
        self.find(name).ok().map(|i| self.0.remove(i).1)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// By name, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&Key, &Value)> {
        self.0.iter().map(|(k, v)| (k, v))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&Key, &mut Value)> {
        self.0.iter_mut().map(|(k, v)| (&*k, v))
    }

    pub fn keys(&self) -> impl Iterator<Item = &Key> {
        self.0.iter().map(|(k, _)| k)
    }

    pub fn values(&self) -> impl Iterator<Item = &Value> {
        self.0.iter().map(|(_, v)| v)
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Value> {
        self.0.iter_mut().map(|(_, v)| v)
    }
}

impl<'a> IntoIterator for &'a Fields {
    type Item = (&'a Key, &'a Value);
    type IntoIter =
        std::iter::Map<std::slice::Iter<'a, (Key, Value)>, fn(&'a (Key, Value)) -> (&'a Key, &'a Value)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

impl std::ops::Index<&str> for Fields {
    type Output = Value;
    fn index(&self, name: &str) -> &Value {
        self.get(name).unwrap_or_else(|| panic!("no field {name}"))
    }
}

impl<K: Into<Key>> FromIterator<(K, Value)> for Fields {
    fn from_iter<I: IntoIterator<Item = (K, Value)>>(it: I) -> Self {
        let mut f = Fields::new();
        for (k, v) in it {
            f.insert(k.into(), v);
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
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k.as_ref(), v)?;
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
                let mut out = Fields(Vec::with_capacity(m.size_hint().unwrap_or(0).min(16)));
                // As a map reads it: a name given twice keeps its last value.
                while let Some(k) = m.next_key_seed(Name)? {
                    out.insert(k, m.next_value::<Value>()?);
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

/// Field names read from a stream: the same few names on every event, so each is made
/// once and shared (`intern`).
struct Name;

impl<'de> serde::de::DeserializeSeed<'de> for Name {
    type Value = Key;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Key, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Key, E> {
                Ok(intern(s))
            }
        }
        d.deserialize_str(V)
    }
}

/// Names kept for sharing, at most: a stream with more distinct names than this (none
/// that rdma-trace writes) has the rest made per event.
const NAMES_KEPT: usize = 4096;

/// `s` as a shared name: the first time it is seen it is kept for the life of the process
/// (at most `NAMES_KEPT` names), later reads borrow it.
fn intern(s: &str) -> Key {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static NAMES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut names = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let names = names.get_or_insert_with(HashSet::new);
    if let Some(k) = names.get(s) {
        return Key::Borrowed(k);
    }
    if names.len() >= NAMES_KEPT {
        return Key::Owned(s.to_string());
    }
    let kept: &'static str = Box::leak(s.to_string().into_boxed_str());
    names.insert(kept);
    Key::Borrowed(kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_as_an_ordered_object() {
        let f: Fields = serde_json::from_str(r#"{"size":4096,"addr":1,"ret":-12,"addr":2}"#).unwrap();
        assert_eq!(serde_json::to_string(&f).unwrap(), r#"{"addr":2,"ret":-12,"size":4096}"#);
        assert_eq!(f.get("ret"), Some(&Value::I(-12)));
        assert_eq!(f["size"], Value::U(4096));
        assert!(!f.contains_key("pages"));
        let mut g = f.clone();
        assert_eq!(g.remove("addr"), Some(Value::U(2)));
        assert_eq!(g.insert("pages".into(), Value::U(1)), None);
        assert_eq!(g.keys().map(|k| k.as_ref()).collect::<Vec<_>>(), ["pages", "ret", "size"]);
        let tree: std::collections::BTreeMap<String, Value> =
            serde_json::from_str(r#"{"size":4096,"addr":1,"ret":-12,"addr":2}"#).unwrap();
        assert_eq!(serde_json::to_string(&tree).unwrap(), serde_json::to_string(&f).unwrap());
    }
}
