//! A symbolized kernel stack, stored once and shared by every event that has it. A path's
//! stacks repeat (every pin of a run goes through the same dozen frames), so each distinct
//! stack is made once — by the tracer from its return addresses, by a reader from its
//! frames' text — and the events hold a pointer to it. Written as the JSON array of its
//! frames, as it always was.

use serde::de::{SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

/// One frame, `function+0xoff [module]`.
pub type Frame = Arc<str>;

/// Distinct stacks kept for sharing, at most: past this the table starts again (a stream
/// with more distinct stacks than this only loses some sharing).
pub const STACKS_KEPT: usize = 1 << 16;

/// Innermost frame first.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Stack(Option<Arc<[Frame]>>);

impl Stack {
    pub fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|s| s.is_empty())
    }

    /// Whether `self` and `other` are the one stack stored (not only equal).
    pub fn same(&self, other: &Stack) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (a, b) => a.is_none() && b.is_none(),
        }
    }
}

impl std::ops::Deref for Stack {
    type Target = [Frame];
    fn deref(&self) -> &[Frame] {
        self.0.as_deref().unwrap_or(&[])
    }
}

impl From<Vec<Frame>> for Stack {
    fn from(v: Vec<Frame>) -> Self {
        if v.is_empty() { Stack(None) } else { Stack(Some(v.into())) }
    }
}

impl FromIterator<Frame> for Stack {
    fn from_iter<I: IntoIterator<Item = Frame>>(it: I) -> Self {
        it.into_iter().collect::<Vec<_>>().into()
    }
}

impl<'a> IntoIterator for &'a Stack {
    type Item = &'a Frame;
    type IntoIter = std::slice::Iter<'a, Frame>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl std::fmt::Debug for Stack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for Stack {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(s)
    }
}

/// The stacks read so far, by their frames' text: a reader that meets a stack it has
/// seen makes nothing new.
static READ: Mutex<Option<Stacks<()>>> = Mutex::new(None);

impl Stack {
    /// The stack these frames' text names, shared with every stack read before it with the
    /// same frames (while kept): what a reader makes of a capture's `"stack"`.
    pub(crate) fn read<T: AsRef<str> + Hash>(frames: &[T]) -> Stack {
        if frames.is_empty() {
            return Stack::default();
        }
        let mut read = READ.lock().unwrap_or_else(|e| e.into_inner());
        let read = read.get_or_insert_with(Stacks::default);
        let same = |_: &(), s: &Stack, f: &[T]| {
            s.len() == f.len() && s.iter().zip(f).all(|(a, b)| **a == *b.as_ref())
        };
        read.get_or_make(frames, same, |f| ((), f.iter().map(|t| t.as_ref().into()).collect()))
    }
}

impl<'de> Deserialize<'de> for Stack {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Stack;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of stack frames")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Stack, A::Error> {
                let mut frames: Vec<std::borrow::Cow<'de, str>> = Vec::with_capacity(32);
                while let Some(f) = seq.next_element_seed(FrameText)? {
                    frames.push(f);
                }
                Ok(Stack::read(&frames))
            }
        }
        d.deserialize_seq(V)
    }
}

/// A frame's text as read: borrowed from the line where it has no escapes.
struct FrameText;

impl<'de> serde::de::DeserializeSeed<'de> for FrameText {
    type Value = std::borrow::Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = std::borrow::Cow<'de, str>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a stack frame")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(std::borrow::Cow::Borrowed(s))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(std::borrow::Cow::Owned(s.to_string()))
            }
        }
        d.deserialize_str(V)
    }
}

/// Stacks made once each, found again by what they are made from (`K`: return addresses,
/// or frames' text) through its hash. At most `STACKS_KEPT`.
pub struct Stacks<K> {
    by_hash: HashMap<u64, Vec<(K, Stack)>>,
    kept: usize,
    /// The frames, shared among the stacks (a function's frame recurs in many).
    frames: HashMap<Box<str>, Frame>,
}

impl<K> Default for Stacks<K> {
    fn default() -> Self {
        Stacks { by_hash: HashMap::new(), kept: 0, frames: HashMap::new() }
    }
}

impl<K> Stacks<K> {
    /// The stack made from `from`: the one kept (`same` compares a kept key with `from`),
    /// or a new one, its key and frames from `make`.
    pub fn get_or_make<F: Hash + ?Sized>(
        &mut self,
        from: &F,
        same: impl Fn(&K, &Stack, &F) -> bool,
        make: impl FnOnce(&F) -> (K, Vec<Box<str>>),
    ) -> Stack {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        from.hash(&mut h);
        let hash = h.finish();
        if let Some(s) = self.by_hash.get(&hash).and_then(|l| l.iter().find(|(k, s)| same(k, s, from))) {
            return s.1.clone();
        }
        if self.kept >= STACKS_KEPT {
            self.by_hash.clear();
            self.frames.clear();
            self.kept = 0;
        }
        let (key, texts) = make(from);
        let frames: Vec<Frame> = texts
            .into_iter()
            .map(|t| match self.frames.get(&t) {
                Some(f) => Frame::clone(f),
                None => {
                    let f: Frame = Arc::from(&*t);
                    self.frames.insert(t, Frame::clone(&f));
                    f
                }
            })
            .collect();
        let stack = Stack::from(frames);
        self.by_hash.entry(hash).or_default().push((key, stack.clone()));
        self.kept += 1;
        stack
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stack read twice is stored once; it reads and writes as the array it was.
    #[test]
    fn a_stack_read_again_is_the_one_stored() {
        let text =
            r#"["ib_umem_get+0x5 [ib_uverbs]","rxe_reg_user_mr+0x9a [rdma_rxe]","do_syscall_64+0x82"]"#;
        let a: Stack = serde_json::from_str(text).unwrap();
        let b: Stack = serde_json::from_str(text).unwrap();
        assert!(a.same(&b));
        assert_eq!(serde_json::to_string(&a).unwrap(), text);
        assert_eq!(a[1].as_ref(), "rxe_reg_user_mr+0x9a [rdma_rxe]");
        let c: Stack = serde_json::from_str(r#"["ib_umem_get+0x5 [ib_uverbs]"]"#).unwrap();
        assert!(!a.same(&c) && a != c);
        let escaped: Stack = serde_json::from_str(r#"["a\"b"]"#).unwrap();
        assert_eq!(escaped[0].as_ref(), "a\"b");
        let none: Stack = serde_json::from_str("[]").unwrap();
        assert!(none.is_empty() && none.same(&Stack::default()));
    }

    /// Stacks made from return addresses: the same addresses, the same stack.
    #[test]
    fn stacks_by_address_are_made_once() {
        let mut s: Stacks<Vec<u64>> = Stacks::default();
        let made = |a: &[u64]| (a.to_vec(), a.iter().map(|x| format!("{x:#x}").into()).collect());
        let same = |k: &Vec<u64>, _: &Stack, a: &[u64]| k.as_slice() == a;
        let x = s.get_or_make(&[1u64, 2, 3][..], same, made);
        let y = s.get_or_make(&[1u64, 2, 3][..], same, made);
        let z = s.get_or_make(&[1u64, 2][..], same, made);
        assert!(x.same(&y) && !x.same(&z));
        assert!(Arc::ptr_eq(&x[0], &z[0]), "frames are shared among stacks");
    }
}
