//! From raw records to events: decode (bytes → typed records), enrich (names, rendered
//! values, symbolized stacks, fds), correlate (latency pairs, the story).

pub mod correlate;
pub mod decode;
pub mod enrich;
pub mod fds;
pub mod ksyms;
pub mod limits;
pub mod redact;
pub mod render;
