//! The records rdma-trace shares with files, pipes and other programs, and nothing else:
//! `event` (what a probe saw), `capture` (the stream around events: header, stats, loss,
//! state, steps, trailer), `reader` (reading such a stream, damage named by line) and
//! `steps` (the companion workload's step record). It knows no kernel and no probe spec;
//! the tracer's catalog says how each probe's fields are shown.

/// An enum of names written as strings (`ProbeId`, `FieldId`): its variants, `ALL`,
/// `as_str`, `parse`, and `Display` as the string. Code compares the variants, so a
/// misspelt name does not compile.
macro_rules! named_ids {
    ($(#[$doc:meta])* $name:ident { $($v:ident = $s:literal,)* }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name { $($v,)* }

        impl $name {
            pub const ALL: &[$name] = &[$($name::$v,)*];
            pub const fn as_str(self) -> &'static str {
                match self { $($name::$v => $s,)* }
            }
            pub fn parse(s: &str) -> Option<Self> {
                match s { $($s => Some($name::$v),)* _ => None }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.as_str())
            }
        }
    };
}

pub mod capture;
pub mod event;
pub mod fd;
pub mod fields;
pub mod loss;
/// Open for the fuzzer, which holds it to serde's reading.
#[doc(hidden)]
pub mod quick;
pub mod reader;
pub mod stack;
pub mod steps;
mod write;

/// The page size of the architecture the programs are built for (x86-64): what a pin
/// charges per page and what `vm_pgoff` counts in.
pub const PAGE: u64 = 4096;
