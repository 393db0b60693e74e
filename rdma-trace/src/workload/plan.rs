//! Pure planning: which work requests a run posts, which steps it announces, what it
//! expects back. The run follows this plan; the lab test checks the announced steps
//! against it.

use crate::steps::{Config, Mode, StepName};

/// A posted operation from QP `a` to QP `b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// RDMA WRITE into the last MR (no receive consumed, one completion on the send CQ).
    Write,
    /// SEND into a receive posted on `b` over the last MR (a send and a receive completion).
    Send,
}

/// One work request of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Work {
    pub wr_id: u64,
    pub op: Op,
    /// Byte written over the source before posting and checked at the destination after.
    pub fill: u8,
}

/// Receive work requests carry the send's wr_id with this bit set.
pub const RECV_WR_ID_BIT: u64 = 1 << 32;

/// `--iterations` work requests, alternating RDMA WRITE and SEND (WRITE first), wr_id 1, 2, …
pub(crate) fn work_plan(iterations: u32) -> Vec<Work> {
    (0..iterations)
        .map(|i| Work {
            wr_id: u64::from(i) + 1,
            op: if i % 2 == 0 { Op::Write } else { Op::Send },
            // 1..=255, never 0 (a fresh anonymous page reads 0)
            fill: (i % 255) as u8 + 1,
        })
        .collect()
}

/// Pages of 4 KiB that `[addr, addr+len)` spans: what the kernel's umem pin counts
/// (one definition, shared with the tracer's derived measures).
pub use crate::steps::pages_spanned as pages_4k;

/// Why a run's options do not make a run: each names the option.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ConfigError {
    #[error("--mr-sizes is empty")]
    NoSizes,
    #[error("--iterations must be at least 1")]
    NoIterations,
    #[error("--msg-size must be at least 1")]
    EmptyMessage,
    #[error(
        "--msg-size {msg_size} is larger than the smallest MR ({smallest} bytes): every transfer reads from the first MR and lands in the last"
    )]
    MessageOverMr { msg_size: u32, smallest: u64 },
    #[error("--msg-size is limited to 1 GiB")]
    MessageOver1G,
}

pub(crate) fn validate(c: &Config) -> Result<(), ConfigError> {
    let Some(&smallest) = c.mr_sizes.iter().min() else {
        return Err(ConfigError::NoSizes);
    };
    if c.iterations == 0 {
        return Err(ConfigError::NoIterations);
    }
    if c.msg_size == 0 {
        return Err(ConfigError::EmptyMessage);
    }
    if u64::from(c.msg_size) > smallest {
        return Err(ConfigError::MessageOverMr { msg_size: c.msg_size, smallest });
    }
    if c.msg_size > 1 << 30 {
        return Err(ConfigError::MessageOver1G);
    }
    Ok(())
}

/// Completion events a run waits for: one per signaled work request in events mode.
pub fn expected_cq_events(mode: Mode, iterations: u32) -> u32 {
    match mode {
        Mode::Events => iterations,
        Mode::Poll => 0,
    }
}

/// The steps one run announces, in order (without `start`, which comes once per process).
pub fn expected_steps(c: &Config) -> Vec<StepName> {
    use StepName::*;
    let events = c.mode == Mode::Events;
    let mut s = vec![GetDeviceList, OpenDevice, QueryPort, QueryGid, AllocPd];
    for _ in &c.mr_sizes {
        s.extend([MapBuffer, RegMr]);
    }
    if events {
        s.push(CreateCompChannel);
    }
    s.extend([CreateCq, CreateCq, CreateQp, CreateQp]);
    s.extend([ModifyQpInit, ModifyQpInit, ModifyQpRtr, ModifyQpRtr]);
    s.extend([ModifyQpRts, ModifyQpRts]);
    if events {
        s.push(ReqNotifyCq);
    }
    let plan = work_plan(c.iterations);
    for (i, w) in plan.iter().enumerate() {
        match w.op {
            Op::Write => s.push(PostWrite),
            Op::Send => s.extend([PostRecv, PostSend]),
        }
        if events {
            s.extend([GetCqEvent, AckCqEvents]);
        }
        s.push(PollCq);
        if w.op == Op::Send {
            s.push(PollCq);
        }
        if events && i + 1 < plan.len() {
            s.push(ReqNotifyCq);
        }
    }
    if c.hold_ms > 0 {
        s.push(Hold);
    }
    s.extend([DestroyQp, DestroyQp, DestroyCq, DestroyCq]);
    if events {
        s.push(DestroyCompChannel);
    }
    for _ in &c.mr_sizes {
        s.push(DeregMr);
    }
    for _ in &c.mr_sizes {
        s.push(UnmapBuffer);
    }
    s.extend([DeallocPd, CloseDevice]);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(mode: Mode, iterations: u32, sizes: &[u64]) -> Config {
        Config {
            device: "rxe0".into(),
            port: 1,
            gid_index: 1,
            mr_sizes: sizes.to_vec(),
            hugepages: false,
            mode,
            iterations,
            msg_size: 4096,
            repeat: false,
            hold_ms: 0,
            odp: false,
            announce: "-".into(),
        }
    }

    #[test]
    fn work_alternates_write_and_send_with_distinct_ids_and_fills() {
        let p = work_plan(4);
        let ops: Vec<Op> = p.iter().map(|w| w.op).collect();
        assert_eq!(ops, [Op::Write, Op::Send, Op::Write, Op::Send]);
        let ids: Vec<u64> = p.iter().map(|w| w.wr_id).collect();
        assert_eq!(ids, [1, 2, 3, 4]);
        assert!(p.iter().all(|w| w.fill != 0));
        assert!(work_plan(600).iter().all(|w| w.fill != 0));
        assert_ne!(p[0].fill, p[1].fill);
    }

    #[test]
    fn validate_names_the_offending_option() {
        assert!(validate(&config(Mode::Events, 4, &[4096, 1 << 20])).is_ok());
        let e = validate(&config(Mode::Events, 4, &[1024])).unwrap_err().to_string();
        assert!(e.contains("--msg-size"), "{e}");
        let e = validate(&config(Mode::Events, 0, &[4096])).unwrap_err().to_string();
        assert!(e.contains("--iterations"), "{e}");
        let e = validate(&config(Mode::Events, 1, &[])).unwrap_err().to_string();
        assert!(e.contains("--mr-sizes"), "{e}");
    }

    #[test]
    fn events_mode_waits_once_per_work_request_and_arms_before_each_wait() {
        let c = config(Mode::Events, 3, &[4096, 65536]);
        let s = expected_steps(&c);
        let count = |n: StepName| s.iter().filter(|x| **x == n).count();
        assert_eq!(count(StepName::GetCqEvent), 3);
        assert_eq!(count(StepName::GetCqEvent), expected_cq_events(c.mode, 3) as usize);
        assert_eq!(count(StepName::AckCqEvents), 3);
        assert_eq!(count(StepName::ReqNotifyCq), 3);
        assert_eq!(count(StepName::PostWrite), 2);
        assert_eq!(count(StepName::PostSend), 1);
        assert_eq!(count(StepName::PostRecv), 1);
        assert_eq!(count(StepName::RegMr), 2);
        assert_eq!(count(StepName::DeregMr), 2);
        assert_eq!(count(StepName::CreateCompChannel), 1);
        // every wait is preceded by an arm since the previous wait
        let mut armed = false;
        for n in &s {
            match n {
                StepName::ReqNotifyCq => armed = true,
                StepName::GetCqEvent => {
                    assert!(armed, "get_cq_event without req_notify_cq: {s:?}");
                    armed = false;
                }
                _ => {}
            }
        }
        assert_eq!(s.first(), Some(&StepName::GetDeviceList));
        assert_eq!(s.last(), Some(&StepName::CloseDevice));
    }

    #[test]
    fn poll_mode_has_no_channel_and_no_events() {
        let mut c = config(Mode::Poll, 2, &[4096]);
        c.hold_ms = 10;
        let s = expected_steps(&c);
        for n in [
            StepName::CreateCompChannel,
            StepName::ReqNotifyCq,
            StepName::GetCqEvent,
            StepName::AckCqEvents,
            StepName::DestroyCompChannel,
        ] {
            assert!(!s.contains(&n), "{n:?} in poll mode: {s:?}");
        }
        assert_eq!(expected_cq_events(Mode::Poll, 2), 0);
        assert_eq!(s.iter().filter(|x| **x == StepName::PollCq).count(), 3);
        let hold = s.iter().position(|x| *x == StepName::Hold).unwrap();
        let dereg = s.iter().position(|x| *x == StepName::DeregMr).unwrap();
        assert!(hold < dereg, "hold comes while the MRs are registered");
    }
}
