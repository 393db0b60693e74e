//! Where records were lost, and why: typed here, written as the same words a capture has
//! always carried (`"site":"output capture","reason":"queue full"`), so code compares
//! variants and readers of version 1 see no change. Words this build does not know (a
//! newer writer's) are kept as they were read.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// Where something was lost: an account row of the run (a probe site), or the stage that
/// fell behind.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LossSite {
    /// A probe's row of the account (`umem_get`, `umem_get return`, a syscall site).
    Probe(String),
    /// An eBPF program's runs the kernel skipped (`program kprobe_entry`).
    Program(String),
    /// A live output that fell behind (`output capture`, `output text`).
    Output(String),
    /// A daemon's subscriber that fell behind (`subscriber`).
    Subscriber,
    /// Ring records without a header (`ring records without a header`).
    Headerless,
}

impl fmt::Display for LossSite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LossSite::Probe(s) => f.pad(s),
            LossSite::Program(p) => f.pad(&format!("program {p}")),
            LossSite::Output(o) => f.pad(&format!("output {o}")),
            LossSite::Subscriber => f.pad("subscriber"),
            LossSite::Headerless => f.pad("ring records without a header"),
        }
    }
}

impl From<&str> for LossSite {
    fn from(s: &str) -> Self {
        match s {
            "subscriber" => LossSite::Subscriber,
            "ring records without a header" => LossSite::Headerless,
            _ => match (s.strip_prefix("program "), s.strip_prefix("output ")) {
                (Some(p), _) => LossSite::Program(p.into()),
                (_, Some(o)) => LossSite::Output(o.into()),
                _ => LossSite::Probe(s.into()),
            },
        }
    }
}

impl Default for LossSite {
    fn default() -> Self {
        LossSite::Probe(String::new())
    }
}

/// Why it was lost.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LossReason {
    /// The kernel did not run the program (a return probe out of instances, recursion).
    MissedByKernel,
    /// The program's run was skipped by the kernel (`bpf_prog_info`'s recursion misses).
    SkippedByKernel,
    /// No room in the BPF ring.
    RingFull,
    /// No scratch entry for a uprobe's record.
    NoScratch,
    /// A counting run's table was full: the hit, or what it charges, went uncounted.
    CountingTableFull,
    /// A counting run saw the hit but not its partner (a CQ made, a pin begun before the
    /// run): what it charges went to no one.
    NotJoined,
    /// Committed but not read when the run stopped.
    HeldPastShutdown,
    /// Read, but the enricher could not make an event of it (no plan for its slot).
    DroppedByEnricher,
    /// Read, but not a record this build can decode.
    Undecodable,
    /// An output's queue had no room for an event…
    QueueFull,
    /// …or for another record.
    QueueFullOther,
    /// A daemon's subscriber fell behind.
    SubscriberBehind,
    /// Words this build does not know.
    Other(String),
}

const REASONS: [(LossReason, &str); 12] = [
    (LossReason::MissedByKernel, "missed by the kernel"),
    (LossReason::SkippedByKernel, "skipped by the kernel"),
    (LossReason::RingFull, "ring full"),
    (LossReason::NoScratch, "no scratch"),
    (LossReason::CountingTableFull, "counting table full"),
    (LossReason::NotJoined, "not joined"),
    (LossReason::HeldPastShutdown, "held past shutdown"),
    (LossReason::DroppedByEnricher, "dropped by the enricher"),
    (LossReason::Undecodable, "undecodable"),
    (LossReason::QueueFull, "queue full"),
    (LossReason::QueueFullOther, "queue full (other records)"),
    (LossReason::SubscriberBehind, "this subscriber fell behind"),
];

impl LossReason {
    pub fn as_str(&self) -> &str {
        match self {
            LossReason::Other(s) => s,
            known => REASONS.iter().find(|(r, _)| r == known).map_or("", |(_, w)| w),
        }
    }
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl From<&str> for LossReason {
    fn from(s: &str) -> Self {
        REASONS.iter().find(|(_, w)| *w == s).map_or_else(|| LossReason::Other(s.into()), |(r, _)| r.clone())
    }
}

impl Default for LossReason {
    fn default() -> Self {
        LossReason::Other(String::new())
    }
}

/// In the order of their words, as a capture's maps of reasons have always been.
impl Ord for LossReason {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialOrd for LossReason {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// In the order of their words.
impl Ord for LossSite {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.to_string().cmp(&other.to_string())
    }
}

impl PartialOrd for LossSite {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

macro_rules! as_words {
    ($t:ty) => {
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = std::borrow::Cow::<str>::deserialize(d)?;
                Ok(<$t>::from(s.as_ref()))
            }
        }
    };
}
as_words!(LossSite);
as_words!(LossReason);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_reads_back_as_itself() {
        let sites = [
            "umem_get return",
            "program kprobe_entry",
            "output capture",
            "subscriber",
            "ring records without a header",
        ];
        for s in sites {
            assert_eq!(LossSite::from(s).to_string(), s);
        }
        assert_eq!(LossSite::from("output text"), LossSite::Output("text".into()));
        for (r, w) in REASONS {
            assert_eq!((LossReason::from(w), r.to_string()), (r.clone(), w.to_string()));
        }
        assert_eq!(LossReason::from("a newer reason").to_string(), "a newer reason");
        let json = serde_json::to_string(&(LossSite::Subscriber, LossReason::QueueFull)).unwrap();
        assert_eq!(json, r#"["subscriber","queue full"]"#);
    }
}
