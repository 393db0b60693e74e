//! Tearing a run down in the order the verbs require, one announced step per object:
//! QPs, CQs, the channel, MRs, buffers, the PD, the device.
//!
//! sideway destroys an object when its last `Arc` drops, so each step first takes sole
//! ownership (an object still shared is a bug here, reported as the step's failure) and
//! then drops it between the two clock reads.

use super::announce::{Announcer, now_ns, timed};
use super::setup::{Resources, cq_info, mr_info, qp_info};
use super::step::fail;
use crate::steps::{BufferInfo, StepName, StepRecord};
use anyhow::{Result, anyhow};
use sideway::ibverbs::AccessFlags;
use std::sync::Arc;

/// Sole ownership of `a`, or the step announced as failed.
fn sole<T>(ann: &mut Announcer, name: StepName, a: Arc<T>, what: &str) -> Result<T> {
    Arc::try_unwrap(a).map_err(|a| {
        let t = now_ns();
        let rec = ann.next(name, (t, t));
        fail(ann, rec, anyhow!("{what} is still referenced ({} owners) at teardown", Arc::strong_count(&a)))
    })
}

/// Drops `obj` between two clock reads and announces the step, filled by `fill`.
fn destroy<T>(ann: &mut Announcer, name: StepName, obj: T, fill: impl FnOnce(&mut StepRecord)) -> Result<()> {
    let ((), t) = timed(move || drop(obj));
    let mut rec = ann.next(name, t);
    fill(&mut rec);
    ann.emit(&rec)?;
    Ok(())
}

pub(crate) fn teardown(ann: &mut Announcer, r: Resources, access: AccessFlags) -> Result<()> {
    let Resources { qp_a, qp_b, send_cq, recv_cq, channel, mrs, buffers, pd, ctx } = r;

    let info = qp_info("a", &qp_a);
    destroy(ann, StepName::DestroyQp, qp_a, |r| r.qp = Some(info))?;
    let info = qp_info("b", &qp_b);
    destroy(ann, StepName::DestroyQp, qp_b, |r| r.qp = Some(info))?;

    let info = cq_info("send", &send_cq, channel.as_ref());
    let cq = sole(ann, StepName::DestroyCq, send_cq, "the send CQ")?;
    destroy(ann, StepName::DestroyCq, cq, |r| r.cq = Some(info))?;
    let info = cq_info("recv", &recv_cq, None);
    let cq = sole(ann, StepName::DestroyCq, recv_cq, "the recv CQ")?;
    destroy(ann, StepName::DestroyCq, cq, |r| r.cq = Some(info))?;

    if let Some(ch) = channel {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&*ch);
        let ch = sole(ann, StepName::DestroyCompChannel, ch, "the completion channel")?;
        destroy(ann, StepName::DestroyCompChannel, ch, |r| r.channel_fd = Some(fd))?;
    }

    for (i, mr) in mrs.into_iter().enumerate() {
        let info = mr_info(i, &mr, access);
        let mr = sole(ann, StepName::DeregMr, mr, "an MR")?;
        destroy(ann, StepName::DeregMr, mr, |r| r.mr = Some(info))?;
    }

    for (i, buf) in buffers.into_iter().enumerate() {
        let info = BufferInfo {
            index: i as u32,
            addr: buf.addr(),
            length: buf.len() as u64,
            mapped_length: buf.mapped_len() as u64,
            hugepages: buf.hugepages(),
        };
        let (res, t) = timed(move || buf.unmap());
        let (_, mut rec) = super::step::done(ann, StepName::UnmapBuffer, t, res)?;
        rec.buffer = Some(info);
        ann.emit(&rec)?;
    }

    // SAFETY: the PD is alive; only its address is taken.
    let handle = unsafe { pd.pd().as_ptr() as u64 };
    let pd = sole(ann, StepName::DeallocPd, pd, "the PD")?;
    destroy(ann, StepName::DeallocPd, pd, |r| r.pd = Some(handle))?;

    let ctx = sole(ann, StepName::CloseDevice, ctx, "the device context")?;
    destroy(ann, StepName::CloseDevice, ctx, |_| {})?;
    Ok(())
}
