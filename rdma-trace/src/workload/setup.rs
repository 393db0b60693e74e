//! Bringing the verbs objects up, one announced step each: device, PD, buffers and MRs,
//! completion channel, CQs, two RC QPs connected to each other over the same port.

use super::announce::{Announcer, timed};
use super::buffer::Buffer;
use super::plan::pages_4k;
use super::step::{done, errno_of, fail};
use crate::steps::{BufferInfo, Config, CqInfo, DeviceInfo, Mode, MrInfo, PortInfo, QpInfo, StepName};
use anyhow::{Result, anyhow};
use sideway::ibverbs::AccessFlags;
use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::completion::{
    BasicCompletionQueue, CompletionChannel, CompletionQueue, GenericCompletionQueue,
};
use sideway::ibverbs::device::{DeviceInfo as _, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, Mtu};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{BasicQueuePair, QueuePair, QueuePairAttribute, QueuePairState};
use std::os::fd::AsRawFd;
use std::sync::Arc;

/// Entries of each CQ and work requests of each queue: one work request is in flight at a time.
const QUEUE_DEPTH: u32 = 16;
/// Starting packet sequence numbers of QP a and QP b.
const PSN_A: u32 = 0x1000;
const PSN_B: u32 = 0x2000;

/// Everything a run holds. Fields drop in this order if a run fails before teardown:
/// QPs, CQs, channel, MRs, buffers, PD, device.
pub(crate) struct Resources {
    pub qp_a: BasicQueuePair,
    pub qp_b: BasicQueuePair,
    pub send_cq: Arc<BasicCompletionQueue>,
    pub recv_cq: Arc<BasicCompletionQueue>,
    pub channel: Option<Arc<CompletionChannel>>,
    pub mrs: Vec<Arc<MemoryRegion>>,
    pub buffers: Vec<Buffer>,
    pub pd: Arc<ProtectionDomain>,
    pub ctx: Arc<DeviceContext>,
}

pub(crate) fn cq_info(
    role: &str,
    cq: &BasicCompletionQueue,
    channel: Option<&Arc<CompletionChannel>>,
) -> CqInfo {
    // SAFETY: the CQ is alive (borrowed); reading its cqe field.
    let (handle, cqe) = unsafe {
        let p = cq.cq();
        (p.as_ptr() as u64, p.as_ref().cqe)
    };
    CqInfo { role: role.to_string(), handle, cqe, channel_fd: channel.map(|c| c.as_raw_fd()) }
}

pub(crate) fn qp_info(role: &str, qp: &BasicQueuePair) -> QpInfo {
    // SAFETY: the QP is alive (borrowed); only its address is taken.
    let handle = unsafe { qp.qp().as_ptr() as u64 };
    QpInfo {
        role: role.to_string(),
        handle,
        qpn: qp.qp_number(),
        state: Some(format!("{:?}", qp.state())),
        dest_qpn: None,
    }
}

pub(crate) fn mr_info(index: usize, mr: &MemoryRegion, access: AccessFlags) -> MrInfo {
    // SAFETY: the MR is alive (borrowed); only its address is taken.
    let handle = unsafe { mr.mr().as_ptr() as u64 };
    let addr = mr.get_ptr() as u64;
    let length = mr.region_len() as u64;
    MrInfo {
        index: index as u32,
        handle,
        addr,
        length,
        lkey: mr.lkey(),
        rkey: mr.rkey(),
        access: access.bits() as u32,
        pages_4k: pages_4k(addr, length),
    }
}

fn mtu_bytes(m: Mtu) -> u32 {
    match m {
        Mtu::Mtu256 => 256,
        Mtu::Mtu512 => 512,
        Mtu::Mtu1024 => 1024,
        Mtu::Mtu2048 => 2048,
        Mtu::Mtu4096 => 4096,
    }
}

/// The first words of every "this machine cannot run verbs" error.
pub(crate) const NO_RDMA: &str = "rdma-core (libibverbs) not found / no RDMA devices";

/// Lists devices and opens `cfg.device`; queries its port and GID.
pub(super) fn open(cfg: &Config, ann: &mut Announcer) -> Result<(Arc<DeviceContext>, Gid, Mtu)> {
    let (list, t) = timed(DeviceList::new);
    let list = match list {
        Ok(l) => l,
        Err(e) => {
            let e = anyhow::Error::from(e);
            let hint = match errno_of(&e) {
                Some(libc::EOPNOTSUPP) => {
                    "libibverbs.so.1 could not be loaded (install rdma-core and ibverbs-providers)"
                }
                _ => "ibv_get_device_list failed",
            };
            let rec = ann.next(StepName::GetDeviceList, t);
            return Err(fail(ann, rec, e.context(format!("{NO_RDMA}: {hint}"))));
        }
    };
    let names: Vec<String> = list.iter().map(|d| d.name()).collect();
    let mut rec = ann.next(StepName::GetDeviceList, t);
    rec.devices = Some(names.clone());
    let Some(dev) = list.iter().find(|d| d.name() == cfg.device) else {
        let e = if names.is_empty() {
            anyhow!(
                "{NO_RDMA}: libibverbs found none (load rdma_rxe and `rdma link add rxe0 type rxe netdev IF`)"
            )
        } else {
            anyhow!("no RDMA device named {} (devices: {})", cfg.device, names.join(", "))
        };
        return Err(fail(ann, rec, e));
    };
    ann.emit(&rec)?;

    let (res, t) = timed(|| dev.open());
    let (ctx, mut rec) = done(ann, StepName::OpenDevice, t, res)?;
    // SAFETY: the context is open; reading its two fds.
    let (context, cmd_fd, async_fd) = unsafe {
        let p = ctx.context();
        (p.as_ptr() as u64, p.as_ref().cmd_fd, p.as_ref().async_fd)
    };
    rec.device = Some(DeviceInfo { name: cfg.device.clone(), context, cmd_fd, async_fd });
    ann.emit(&rec)?;
    drop(list);

    let (res, t) = timed(|| ctx.query_port(cfg.port));
    let (port, mut rec) = done(ann, StepName::QueryPort, t, res)?;
    rec.port = Some(PortInfo {
        port: cfg.port,
        state: Some(format!("{:?}", port.port_state())),
        active_mtu: Some(mtu_bytes(port.active_mtu())),
        ..PortInfo::default()
    });
    ann.emit(&rec)?;

    let (res, t) = timed(|| ctx.query_gid(cfg.port, cfg.gid_index));
    let (gid, mut rec) = done(ann, StepName::QueryGid, t, res)?;
    rec.port = Some(PortInfo {
        port: cfg.port,
        gid_index: Some(cfg.gid_index),
        gid: Some(gid.to_string()),
        ..PortInfo::default()
    });
    if gid.is_zero() {
        let e = anyhow!(
            "GID index {} of {} port {} is empty (`rdma link` shows the netdev; pick another --gid-index)",
            cfg.gid_index,
            cfg.device,
            cfg.port
        );
        return Err(fail(ann, rec, e));
    }
    ann.emit(&rec)?;
    Ok((ctx, gid, port.active_mtu()))
}

/// The access the MRs are registered with (`--odp` adds on-demand paging).
pub(crate) fn mr_access(cfg: &Config) -> AccessFlags {
    let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead;
    if cfg.odp { access | AccessFlags::OnDemand } else { access }
}

/// Maps and registers one buffer per `--mr-sizes` entry.
fn register(
    cfg: &Config,
    ann: &mut Announcer,
    pd: &Arc<ProtectionDomain>,
) -> Result<(Vec<Buffer>, Vec<Arc<MemoryRegion>>)> {
    let access = mr_access(cfg);
    let (mut buffers, mut mrs) = (Vec::new(), Vec::new());
    for (i, &size) in cfg.mr_sizes.iter().enumerate() {
        let len = usize::try_from(size).map_err(|_| anyhow!("MR size {size} does not fit this machine"))?;
        let (res, t) = timed(|| Buffer::map(len, cfg.hugepages));
        let (buf, mut rec) = done(ann, StepName::MapBuffer, t, res.map_err(anyhow::Error::from))?;
        rec.buffer = Some(BufferInfo {
            index: i as u32,
            addr: buf.addr(),
            length: size,
            mapped_length: buf.mapped_len() as u64,
            hugepages: buf.hugepages(),
        });
        ann.emit(&rec)?;
        // SAFETY: `buf` is mapped for `len` bytes and outlives the MR (MRs are deregistered
        // before buffers are unmapped, in teardown and in Resources' drop order).
        let (res, t) = timed(|| unsafe { pd.reg_mr(buf.addr() as usize, len, access) });
        buffers.push(buf);
        let (mr, mut rec) = done(ann, StepName::RegMr, t, res)?;
        rec.mr = Some(mr_info(i, &mr, access));
        ann.emit(&rec)?;
        mrs.push(mr);
    }
    Ok((buffers, mrs))
}

fn create_qp(
    ann: &mut Announcer,
    pd: &Arc<ProtectionDomain>,
    role: &str,
    cqs: [&Arc<BasicCompletionQueue>; 2],
) -> Result<BasicQueuePair> {
    let mut b = pd.create_qp_builder();
    b.setup_send_cq(GenericCompletionQueue::from(Arc::clone(cqs[0])))
        .setup_recv_cq(GenericCompletionQueue::from(Arc::clone(cqs[1])))
        .setup_max_send_wr(QUEUE_DEPTH)
        .setup_max_recv_wr(QUEUE_DEPTH)
        .setup_max_send_sge(1)
        .setup_max_recv_sge(1);
    let (res, t) = timed(|| b.build());
    let (qp, mut rec) = done(ann, StepName::CreateQp, t, res)?;
    rec.qp = Some(qp_info(role, &qp));
    ann.emit(&rec)?;
    Ok(qp)
}

fn modify(
    ann: &mut Announcer,
    name: StepName,
    role: &str,
    qp: &mut BasicQueuePair,
    attr: &QueuePairAttribute,
    dest: Option<u32>,
) -> Result<()> {
    let (res, t) = timed(|| qp.modify(attr));
    let ((), mut rec) = done(ann, name, t, res)?;
    let mut info = qp_info(role, qp);
    info.dest_qpn = dest;
    rec.qp = Some(info);
    ann.emit(&rec)?;
    Ok(())
}

/// INIT → RTR → RTS for both QPs, each aimed at the other through the same port and GID.
fn connect(
    cfg: &Config,
    ann: &mut Announcer,
    a: &mut BasicQueuePair,
    b: &mut BasicQueuePair,
    gid: &Gid,
    mtu: Mtu,
) -> Result<()> {
    let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead;
    let mut init = QueuePairAttribute::new();
    init.setup_state(QueuePairState::Init)
        .setup_pkey_index(0)
        .setup_port(cfg.port)
        .setup_access_flags(access);
    modify(ann, StepName::ModifyQpInit, "a", a, &init, None)?;
    modify(ann, StepName::ModifyQpInit, "b", b, &init, None)?;
    let (qpn_a, qpn_b) = (a.qp_number(), b.qp_number());
    let gid_index =
        u8::try_from(cfg.gid_index).map_err(|_| anyhow!("--gid-index {} is above 255", cfg.gid_index))?;
    let rtr = |dest: u32, psn: u32| {
        let mut ah = AddressHandleAttribute::new();
        ah.setup_dest_lid(0)
            .setup_port(cfg.port)
            .setup_service_level(0)
            .setup_grh_src_gid_index(gid_index)
            .setup_grh_dest_gid(gid)
            .setup_grh_hop_limit(1);
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(mtu)
            .setup_dest_qp_num(dest)
            .setup_rq_psn(psn)
            .setup_max_dest_read_atomic(1)
            .setup_min_rnr_timer(12)
            .setup_address_vector(&ah);
        attr
    };
    modify(ann, StepName::ModifyQpRtr, "a", a, &rtr(qpn_b, PSN_B), Some(qpn_b))?;
    modify(ann, StepName::ModifyQpRtr, "b", b, &rtr(qpn_a, PSN_A), Some(qpn_a))?;
    let rts = |psn: u32| {
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(psn)
            .setup_timeout(14)
            .setup_retry_cnt(7)
            .setup_rnr_retry(7)
            .setup_max_read_atomic(1);
        attr
    };
    modify(ann, StepName::ModifyQpRts, "a", a, &rts(PSN_A), Some(qpn_b))?;
    modify(ann, StepName::ModifyQpRts, "b", b, &rts(PSN_B), Some(qpn_a))?;
    Ok(())
}

pub(crate) fn setup(cfg: &Config, ann: &mut Announcer) -> Result<Resources> {
    let (ctx, gid, mtu) = open(cfg, ann)?;

    let (res, t) = timed(|| ctx.alloc_pd());
    let (pd, mut rec) = done(ann, StepName::AllocPd, t, res)?;
    // SAFETY: the PD is alive; only its address is taken.
    rec.pd = Some(unsafe { pd.pd().as_ptr() as u64 });
    ann.emit(&rec)?;

    let (buffers, mrs) = register(cfg, ann, &pd)?;

    let channel = if cfg.mode == Mode::Events {
        let (res, t) = timed(|| ctx.create_comp_channel());
        let (ch, mut rec) = done(ann, StepName::CreateCompChannel, t, res)?;
        rec.channel_fd = Some(ch.as_raw_fd());
        ann.emit(&rec)?;
        Some(ch)
    } else {
        None
    };

    let mut b = ctx.create_cq_builder();
    b.setup_cqe(QUEUE_DEPTH);
    if let Some(ch) = &channel {
        b.setup_comp_channel(ch, 0);
    }
    let (res, t) = timed(|| b.build());
    let (send_cq, mut rec) = done(ann, StepName::CreateCq, t, res)?;
    rec.cq = Some(cq_info("send", &send_cq, channel.as_ref()));
    ann.emit(&rec)?;

    let (res, t) = timed(|| ctx.create_cq_builder().setup_cqe(QUEUE_DEPTH).build());
    let (recv_cq, mut rec) = done(ann, StepName::CreateCq, t, res)?;
    rec.cq = Some(cq_info("recv", &recv_cq, None));
    ann.emit(&rec)?;

    let mut qp_a = create_qp(ann, &pd, "a", [&send_cq, &recv_cq])?;
    let mut qp_b = create_qp(ann, &pd, "b", [&send_cq, &recv_cq])?;
    connect(cfg, ann, &mut qp_a, &mut qp_b, &gid, mtu)?;

    Ok(Resources { qp_a, qp_b, send_cq, recv_cq, channel, mrs, buffers, pd, ctx })
}
