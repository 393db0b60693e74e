//! One clock for several hosts. Each host's events carry its own monotonic clock and, in the
//! header, its offset to its own wall clock; two hosts' wall clocks differ by however well
//! they are kept. A daemon serving metrics answers `GET /clock` with its wall clock, and
//! `daemon --clock-peer HOST:PORT` asks a peer's, NTP-style, and writes what it found into
//! its capture's header (`ClockSample`): the offset and, as its error bar, half the round
//! trip. `report` and `export` place the peer's events by it.

use crate::capture::{ClockSample, Header};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// The path a daemon's metrics server answers with its wall clock.
pub(crate) const PATH: &str = "/clock";

/// Exchanges per measurement; the one with the shortest round trip is kept.
pub(crate) const SAMPLES: u32 = 16;

/// A clock's time in ns.
pub(crate) fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime(2) with a valid timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// The wall clock, ns since the epoch.
pub(crate) fn wall_ns() -> i64 {
    clock_ns(libc::CLOCK_REALTIME)
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// What `GET /clock` answers: this host's wall clock (read last), name and boot.
pub fn answer() -> String {
    let (hostname, boot_id) =
        (read_trimmed("/proc/sys/kernel/hostname"), read_trimmed("/proc/sys/kernel/random/boot_id"));
    serde_json::json!({ "hostname": hostname, "boot_id": boot_id, "realtime_ns": wall_ns() }).to_string()
}

#[derive(serde::Deserialize)]
struct Answer {
    hostname: String,
    boot_id: String,
    realtime_ns: i64,
}

/// Why a peer's clock could not be measured.
#[derive(Debug, thiserror::Error)]
pub enum ClockError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("no address")]
    NoAddress,
    #[error("no sample")]
    NoSample,
    #[error("no body in the answer")]
    NoBody,
    #[error("not a clock answer: {body:?}: {source}")]
    NotAnAnswer { body: String, source: serde_json::Error },
    /// The peer, the path asked, how long it was given, and its last error.
    #[error("{peer} did not answer {PATH} within {} s: {last}", within.as_secs())]
    NoAnswer { peer: String, within: Duration, last: Box<ClockError> },
}

/// One exchange on a fresh connection (connected before `t0`, so the connect is not in the
/// round trip): (t0, the peer's answer, t2).
fn exchange(peer: &str) -> Result<(i64, Answer, i64), ClockError> {
    let addr = std::net::ToSocketAddrs::to_socket_addrs(peer)?.next().ok_or(ClockError::NoAddress)?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_nodelay(true)?;
    let request = format!("GET {PATH} HTTP/1.1\r\nHost: {peer}\r\nConnection: close\r\n\r\n");
    let t0 = wall_ns();
    s.write_all(request.as_bytes())?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 1024];
    // The answer is one small body: stop at its closing brace, not at the peer's close.
    loop {
        let n = s.read(&mut buf)?;
        reply.extend_from_slice(&buf[..n]);
        if n == 0 || reply.ends_with(b"}") || reply.len() > 16 * 1024 {
            break;
        }
    }
    let t2 = wall_ns();
    let text = String::from_utf8_lossy(&reply);
    let body = text.split("\r\n\r\n").nth(1).ok_or(ClockError::NoBody)?;
    let a: Answer = serde_json::from_str(body)
        .map_err(|source| ClockError::NotAnAnswer { body: body.to_string(), source })?;
    Ok((t0, a, t2))
}

/// Measures `peer`'s clock against this one: `SAMPLES` exchanges, the shortest round trip
/// kept. A peer not answering yet (its daemon still starting) is asked again until
/// `within` has passed.
pub fn measure(peer: &str, within: Duration) -> Result<ClockSample, ClockError> {
    let deadline = Instant::now() + within;
    let mut best: Option<ClockSample> = None;
    let mut samples = 0;
    let mut last_error = None;
    while samples < SAMPLES {
        match exchange(peer) {
            Ok((t0, a, t2)) => {
                samples += 1;
                let (offset_ns, rtt_ns) = ClockSample::from_exchange(t0, a.realtime_ns, t2);
                if best.as_ref().is_none_or(|b| rtt_ns < b.rtt_ns) {
                    best = Some(ClockSample {
                        peer: peer.to_string(),
                        hostname: a.hostname,
                        boot_id: a.boot_id,
                        offset_ns,
                        rtt_ns,
                        samples: 0,
                        at_ns: t2,
                    });
                }
            }
            Err(e) if samples == 0 && Instant::now() < deadline => {
                last_error = Some(e);
                std::thread::sleep(Duration::from_millis(250));
            }
            Err(e) if samples == 0 => {
                let last = Box::new(last_error.unwrap_or(e));
                return Err(ClockError::NoAnswer { peer: peer.to_string(), within, last });
            }
            Err(_) => break,
        }
    }
    let mut b = best.ok_or(ClockError::NoSample)?;
    b.samples = samples;
    Ok(b)
}

/// Where another boot's capture is placed against the first capture's clock.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Placed {
    /// How far its wall clock is ahead of the first capture's (measured), ns.
    pub offset_ns: i64,
    /// The error bar: half the round trip of the sample kept.
    pub error_ns: u64,
    /// The host that asked (its daemon's `--clock-peer`).
    pub measured_by: String,
}

/// `h`'s clock against `first`'s, from a sample either header holds of the other (the
/// shorter round trip if both): None when neither measured the other.
pub(crate) fn placed(first: &Header, h: &Header) -> Option<Placed> {
    let of_h = first.clocks.iter().filter(|c| c.boot_id == h.boot_id).map(|c| (c, 1, &first.hostname));
    let of_first = h.clocks.iter().filter(|c| c.boot_id == first.boot_id).map(|c| (c, -1, &h.hostname));
    of_h.chain(of_first).min_by_key(|(c, _, _)| c.rtt_ns).map(|(c, sign, by)| Placed {
        offset_ns: sign * c.offset_ns,
        error_ns: c.error_ns(),
        measured_by: by.clone(),
    })
}

/// How capture (or live source) `i`'s records are moved onto the first's: its times by
/// the difference of the two wall clocks' offsets less the measured offset, and, for
/// another boot, its records marked as host `i` (one story keeps each host apart).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Placement {
    pub shift_ns: i64,
    /// The host its records are on (`event::Task::host`): 0 for the first's boot.
    pub host: u16,
    /// Another boot's clock against the first's, where measured.
    pub placed: Option<Placed>,
    pub other_boot: bool,
}

impl Placement {
    /// Where source `i` is placed against the first source (`first`), from its header `h`.
    pub fn of(i: usize, first: &Header, h: &Header) -> Placement {
        let mut p =
            Placement { shift_ns: h.realtime_offset_ns - first.realtime_offset_ns, ..Default::default() };
        if h.boot_id != first.boot_id {
            p.other_boot = true;
            p.host = u16::try_from(i).unwrap_or(u16::MAX);
            p.placed = placed(first, h);
            p.shift_ns -= p.placed.as_ref().map_or(0, |c| c.offset_ns);
        }
        p
    }

    /// A time of this source on the first source's clock.
    pub fn time(&self, t: u64) -> u64 {
        (t as i64).saturating_add(self.shift_ns).max(0) as u64
    }

    /// Moves an event onto the first source's clock and names its host.
    pub fn event(&self, e: &mut crate::event::Event) {
        e.ts_ns = self.time(e.ts_ns);
        e.host = self.host;
    }

    pub(crate) fn step(&self, s: &mut crate::steps::StepRecord) {
        (s.t_start_ns, s.t_end_ns) = (self.time(s.t_start_ns), self.time(s.t_end_ns));
        s.host = self.host;
    }

    /// Moves a daemon's state onto the first source's clock and names its host.
    pub fn state(&self, st: &mut crate::capture::State) {
        st.ts_ns = self.time(st.ts_ns);
        st.processes.iter_mut().for_each(|p| p.host = self.host);
        for q in &mut st.qps {
            q.host = self.host;
            q.last_post_ns = q.last_post_ns.map(|t| self.time(t));
        }
        st.cqs.iter_mut().for_each(|c| c.host = self.host);
    }
}

/// The offset as people read it: `+12.345 ms ± 0.210 ms`.
pub(crate) fn describe(c: &ClockSample) -> String {
    offset_text(c.offset_ns, c.error_ns())
}

/// A measured clock offset in words, with its error bar.
pub fn offset_text(offset_ns: i64, error_ns: u64) -> String {
    let ms = |ns: f64| ns / 1e6;
    format!("{:+.3} ms ± {:.3} ms", ms(offset_ns as f64), ms(error_ns as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer 250 ms ahead, a 2 ms round trip answered at its middle: offset 250 ms, ±1 ms.
    #[test]
    fn an_exchange_gives_the_offset_and_half_the_round_trip() {
        let (off, rtt) = ClockSample::from_exchange(1_000_000_000, 1_251_000_000, 1_002_000_000);
        assert_eq!((off, rtt), (250_000_000, 2_000_000));
        let c = ClockSample { offset_ns: off, rtt_ns: rtt, ..Default::default() };
        assert_eq!(describe(&c), "+250.000 ms ± 1.000 ms");
    }

    /// Against this host's own metrics server: the offset is within its error bar of zero,
    /// and the answer names this host and boot.
    #[test]
    fn this_host_measured_against_itself_is_within_its_error_bar() {
        let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let bound = crate::serve::http::serve("127.0.0.1:0", text).unwrap();
        let c = measure(&bound.to_string(), Duration::from_secs(5)).unwrap();
        assert_eq!(c.samples, SAMPLES);
        assert_eq!(c.boot_id, read_trimmed("/proc/sys/kernel/random/boot_id"));
        assert!(c.offset_ns.unsigned_abs() <= c.error_ns(), "{c:?}");
        assert!(c.rtt_ns < 1_000_000_000, "{c:?}");
    }

    /// Either end's measurement places the other, with the sign turned for the far end's.
    #[test]
    fn a_capture_is_placed_by_either_end_s_sample() {
        let h = |name: &str, boot: &str, clocks: Vec<ClockSample>| Header {
            hostname: name.into(),
            boot_id: boot.into(),
            clocks,
            ..Default::default()
        };
        let s = |boot: &str, offset_ns, rtt_ns| ClockSample {
            boot_id: boot.into(),
            offset_ns,
            rtt_ns,
            ..Default::default()
        };
        let (a, b) = (h("a", "A", vec![s("B", 300, 40)]), h("b", "B", vec![s("A", -310, 20)]));
        assert_eq!(placed(&a, &b), Some(Placed { offset_ns: 310, error_ns: 10, measured_by: "b".into() }));
        let a_only = h("a", "A", vec![s("B", 300, 40)]);
        assert_eq!(placed(&a_only, &h("b", "B", vec![])).map(|p| p.offset_ns), Some(300));
        // B first, measured only by A: A is 300 behind B.
        assert_eq!(placed(&h("b", "B", vec![]), &a_only).map(|p| p.offset_ns), Some(-300));
        // B first, holding its own sample of A (the shorter round trip): taken as it is.
        assert_eq!(placed(&b, &a_only).map(|p| p.offset_ns), Some(-310));
        assert_eq!(placed(&h("a", "A", vec![]), &h("c", "C", vec![])), None);
    }

    #[test]
    fn a_peer_that_never_answers_is_named_in_the_error() {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let e = measure(&free.to_string(), Duration::from_millis(300)).unwrap_err().to_string();
        assert!(e.contains(&free.to_string()) && e.contains("/clock"), "{e}");
    }
}
