//! The step record the workload announces, format version 0 (`docs/workload.md`).
//!
//! One JSON object per line, one line per step, written after the step ended. Numbers are
//! plain JSON integers (addresses, keys and handles too), as in the tracer's own event
//! format, so the two can be joined without parsing hex.

use serde::{Deserialize, Serialize};

use crate::PAGE as PAGE_SIZE;

/// Pages a umem of `size` bytes at `addr` pins (ib_umem_num_pages for 4 KiB pages).
pub fn pages_spanned(addr: u64, size: u64) -> u64 {
    if size == 0 {
        return 0;
    }
    let first = addr / PAGE_SIZE;
    let last = (addr + size - 1) / PAGE_SIZE;
    last - first + 1
}

/// The companion's executable, and its marker function (a uprobe there reads each step
/// record as it is announced; see `workload/marker.rs`).
pub const WORKLOAD_BIN: &str = "rdma-trace-workload";
pub const MARKER_SYMBOL: &str = "rdma_trace_step";

/// Format version written in every record's `v`.
pub const VERSION: u32 = 0;

/// What a step did, named after the verb (or the system call) it made.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum StepName {
    /// Run 0, step 0: the configuration and the announce fd, before any verb.
    Start,
    GetDeviceList,
    OpenDevice,
    QueryPort,
    QueryGid,
    AllocPd,
    MapBuffer,
    RegMr,
    CreateCompChannel,
    CreateCq,
    CreateQp,
    ModifyQpInit,
    ModifyQpRtr,
    ModifyQpRts,
    ReqNotifyCq,
    PostRecv,
    PostWrite,
    PostSend,
    GetCqEvent,
    AckCqEvents,
    PollCq,
    Hold,
    DestroyQp,
    DestroyCq,
    DestroyCompChannel,
    DeregMr,
    UnmapBuffer,
    DeallocPd,
    CloseDevice,
}

impl StepName {
    /// Every name, in the order a run uses them (for docs and tests).
    pub const ALL: &[StepName] = &[
        StepName::Start,
        StepName::GetDeviceList,
        StepName::OpenDevice,
        StepName::QueryPort,
        StepName::QueryGid,
        StepName::AllocPd,
        StepName::MapBuffer,
        StepName::RegMr,
        StepName::CreateCompChannel,
        StepName::CreateCq,
        StepName::CreateQp,
        StepName::ModifyQpInit,
        StepName::ModifyQpRtr,
        StepName::ModifyQpRts,
        StepName::ReqNotifyCq,
        StepName::PostRecv,
        StepName::PostWrite,
        StepName::PostSend,
        StepName::GetCqEvent,
        StepName::AckCqEvents,
        StepName::PollCq,
        StepName::Hold,
        StepName::DestroyQp,
        StepName::DestroyCq,
        StepName::DestroyCompChannel,
        StepName::DeregMr,
        StepName::UnmapBuffer,
        StepName::DeallocPd,
        StepName::CloseDevice,
    ];

    /// The name as it appears in a record.
    pub fn as_str(self) -> &'static str {
        match self {
            StepName::Start => "start",
            StepName::GetDeviceList => "get_device_list",
            StepName::OpenDevice => "open_device",
            StepName::QueryPort => "query_port",
            StepName::QueryGid => "query_gid",
            StepName::AllocPd => "alloc_pd",
            StepName::MapBuffer => "map_buffer",
            StepName::RegMr => "reg_mr",
            StepName::CreateCompChannel => "create_comp_channel",
            StepName::CreateCq => "create_cq",
            StepName::CreateQp => "create_qp",
            StepName::ModifyQpInit => "modify_qp_init",
            StepName::ModifyQpRtr => "modify_qp_rtr",
            StepName::ModifyQpRts => "modify_qp_rts",
            StepName::ReqNotifyCq => "req_notify_cq",
            StepName::PostRecv => "post_recv",
            StepName::PostWrite => "post_write",
            StepName::PostSend => "post_send",
            StepName::GetCqEvent => "get_cq_event",
            StepName::AckCqEvents => "ack_cq_events",
            StepName::PollCq => "poll_cq",
            StepName::Hold => "hold",
            StepName::DestroyQp => "destroy_qp",
            StepName::DestroyCq => "destroy_cq",
            StepName::DestroyCompChannel => "destroy_comp_channel",
            StepName::DeregMr => "dereg_mr",
            StepName::UnmapBuffer => "unmap_buffer",
            StepName::DeallocPd => "dealloc_pd",
            StepName::CloseDevice => "close_device",
        }
    }
}

/// How completions are waited for.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Arm the send CQ (ibv_req_notify_cq) and block in ibv_get_cq_event.
    Events,
    /// Busy-poll the send CQ with ibv_poll_cq.
    Poll,
}

/// The options a process ran with (the `start` record).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Config {
    pub device: String,
    pub port: u8,
    pub gid_index: u32,
    pub mr_sizes: Vec<u64>,
    pub hugepages: bool,
    pub mode: Mode,
    pub iterations: u32,
    pub msg_size: u32,
    #[serde(rename = "loop")]
    pub repeat: bool,
    pub hold_ms: u64,
    /// MRs registered for on-demand paging (IBV_ACCESS_ON_DEMAND).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub odp: bool,
    /// The announce destination as given (`-` is stdout).
    pub announce: String,
}

/// `open_device`: the device and the file descriptors libibverbs opened for it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct DeviceInfo {
    pub name: String,
    /// `struct ibv_context *`.
    pub context: u64,
    /// The uverbs command fd (`/dev/infiniband/uverbsN`): ioctl/write commands, mmaps.
    pub cmd_fd: i32,
    /// The async event fd.
    pub async_fd: i32,
}

/// `query_port` / `query_gid`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct PortInfo {
    pub port: u8,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub state: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub active_mtu: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub gid_index: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub gid: Option<String>,
}

/// `map_buffer` / `unmap_buffer`: the memory behind an MR.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct BufferInfo {
    /// Index in `--mr-sizes` order.
    pub index: u32,
    pub addr: u64,
    /// Bytes asked for (the MR's length).
    pub length: u64,
    /// Bytes mapped (rounded up to the page or huge page size).
    pub mapped_length: u64,
    pub hugepages: bool,
}

/// `reg_mr` / `dereg_mr`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct MrInfo {
    pub index: u32,
    /// `struct ibv_mr *`.
    pub handle: u64,
    pub addr: u64,
    pub length: u64,
    pub lkey: u32,
    pub rkey: u32,
    /// `ibv_access_flags` bits as passed to ibv_reg_mr.
    pub access: u32,
    /// Pages of 4 KiB the range spans (what the kernel's umem pin counts).
    pub pages_4k: u64,
}

/// `create_cq` / `destroy_cq` / `req_notify_cq` / `poll_cq`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct CqInfo {
    /// `send` (armed for events in events mode) or `recv` (always polled).
    pub role: String,
    /// `struct ibv_cq *`: the kernel keeps it as the CQ's user_handle, which
    /// `ib_uverbs_comp_handler` sees.
    pub handle: u64,
    /// Entries the CQ really has (ibv_cq.cqe, at least what was asked).
    pub cqe: i32,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub channel_fd: Option<i32>,
}

/// `create_qp` / `modify_qp_*` / `destroy_qp`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct QpInfo {
    /// `a` posts work, `b` is its peer (receives SENDs, is written to).
    pub role: String,
    /// `struct ibv_qp *`.
    pub handle: u64,
    pub qpn: u32,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub state: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub dest_qpn: Option<u32>,
}

/// A posted work request.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct WrInfo {
    pub wr_id: u64,
    /// `RDMA_WRITE`, `SEND` or `RECV`.
    pub opcode: String,
    pub qpn: u32,
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub remote_addr: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub rkey: Option<u32>,
    pub signaled: bool,
}

/// A work completion taken from a CQ.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct WcInfo {
    pub wr_id: u64,
    /// `ibv_wc_status` (0 = success).
    pub status: u32,
    pub status_name: String,
    /// `ibv_wc_opcode`.
    pub opcode: u32,
    pub opcode_name: String,
    pub byte_len: u32,
    pub qpn: u32,
}

/// A step that posts a work request (send, RDMA write, receive): what "per work request"
/// counts, in the report and in `explain bypass`.
pub fn is_work_request(name: StepName) -> bool {
    matches!(name, StepName::PostSend | StepName::PostWrite | StepName::PostRecv)
}

/// One step. Optional parts appear only on the steps they belong to.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct StepRecord {
    pub v: u32,
    /// 1, 2, … (`--loop` repeats runs); 0 for the `start` record.
    pub run: u32,
    /// 1, 2, … within a run.
    pub step: u32,
    pub name: StepName,
    pub pid: u32,
    pub tid: u32,
    /// The host it ran on where several are merged (`event::Task`); never written.
    #[serde(skip)]
    pub host: u16,
    /// CLOCK_MONOTONIC at the start and end of the step (the clock of bpf_ktime_get_ns).
    pub t_start_ns: u64,
    pub t_end_ns: u64,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub errno: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub config: Option<Config>,
    /// The fd the records are written to (the `start` record).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub announce_fd: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub devices: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub device: Option<DeviceInfo>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub port: Option<PortInfo>,
    /// `struct ibv_pd *`.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub pd: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub buffer: Option<BufferInfo>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub mr: Option<MrInfo>,
    /// The completion channel's fd (`anon_inode:[infinibandevent]`).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub channel_fd: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub cq: Option<CqInfo>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub qp: Option<QpInfo>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub wrs: Vec<WrInfo>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub wcs: Vec<WcInfo>,
    /// `get_cq_event`: the CQ handle the channel delivered (equals the send CQ's handle).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub event_cq: Option<u64>,
    /// `ack_cq_events`: events acknowledged.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub acked: Option<u32>,
    /// `poll_cq`: ibv_poll_cq calls made in the step (busy polling makes many).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub polls: Option<u64>,
    /// `hold`: how long the registered resources were held.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub hold_ms: Option<u64>,
}

impl StepRecord {
    /// The process it ran in, on its host.
    pub fn process(&self) -> crate::event::Task {
        crate::event::Task::new(self.host, self.pid)
    }

    /// The thread it ran in, on its host.
    pub fn thread(&self) -> crate::event::Task {
        crate::event::Task::new(self.host, self.tid)
    }

    /// A successful step with nothing attached yet.
    pub fn new(run: u32, step: u32, name: StepName, ids: (u32, u32), t: (u64, u64)) -> Self {
        StepRecord {
            v: VERSION,
            run,
            step,
            name,
            pid: ids.0,
            tid: ids.1,
            host: 0,
            t_start_ns: t.0,
            t_end_ns: t.1,
            ok: true,
            errno: None,
            error: None,
            config: None,
            announce_fd: None,
            devices: None,
            device: None,
            port: None,
            pd: None,
            buffer: None,
            mr: None,
            channel_fd: None,
            cq: None,
            qp: None,
            wrs: Vec::new(),
            wcs: Vec::new(),
            event_cq: None,
            acked: None,
            polls: None,
            hold_ms: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_serialize_as_documented() {
        for n in StepName::ALL {
            let json = serde_json::to_string(n).unwrap();
            assert_eq!(json, format!("\"{}\"", n.as_str()));
            let back: StepName = serde_json::from_str(&json).unwrap();
            assert_eq!(back, *n);
        }
    }

    #[test]
    fn docs_describe_every_step() {
        let doc = include_str!("../../docs/workload.md");
        let missing: Vec<&str> =
            StepName::ALL.iter().map(|n| n.as_str()).filter(|n| !doc.contains(&format!("`{n}`"))).collect();
        assert!(missing.is_empty(), "docs/workload.md lacks {missing:?}");
    }

    #[test]
    fn reg_mr_record_has_exactly_its_fields() {
        let mut r = StepRecord::new(1, 7, StepName::RegMr, (100, 101), (5, 9));
        r.mr = Some(MrInfo {
            index: 0,
            handle: 0x5555_0000,
            addr: 0x7f00_0000_0000,
            length: 4096,
            lkey: 0x1234,
            rkey: 0x1234,
            access: 7,
            pages_4k: 1,
        });
        let line = serde_json::to_string(&r).unwrap();
        assert!(
            line.starts_with(r#"{"v":0,"run":1,"step":7,"name":"reg_mr","pid":100,"tid":101,"#),
            "{line}"
        );
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["mr", "name", "ok", "pid", "run", "step", "t_end_ns", "t_start_ns", "tid", "v"]);
        assert_eq!(v["v"], 0);
        assert_eq!(v["name"], "reg_mr");
        assert_eq!(v["mr"]["lkey"], 0x1234);
        assert_eq!(v["mr"]["addr"], 0x7f00_0000_0000u64);
        let back: StepRecord = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn failed_step_carries_errno_and_message() {
        let mut r = StepRecord::new(1, 3, StepName::RegMr, (1, 1), (1, 2));
        r.ok = false;
        r.errno = Some(12);
        r.error = Some("Cannot allocate memory (os error 12)".into());
        let line = serde_json::to_string(&r).unwrap();
        assert!(line.contains("\"ok\":false"), "{line}");
        assert!(line.contains("\"errno\":12"), "{line}");
        assert!(!line.contains("\"wcs\""), "empty lists are left out: {line}");
    }

    #[test]
    fn config_names_loop_as_loop() {
        let c = Config {
            device: "rxe0".into(),
            port: 1,
            gid_index: 1,
            mr_sizes: vec![4096],
            hugepages: false,
            mode: Mode::Events,
            iterations: 4,
            msg_size: 4096,
            repeat: true,
            hold_ms: 0,
            odp: false,
            announce: "-".into(),
        };
        let v = serde_json::to_value(&c).unwrap();
        assert_eq!(v["loop"], true);
        assert_eq!(v["mode"], "events");
    }
}
