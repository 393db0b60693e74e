//! What a syscall's file descriptor is: the RDMA kinds by name, any other file by its
//! path. Written as those words (`"fd_kind":"uverbs"`), as captures always carried it.

use crate::fields::Key;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum FdKind {
    /// `/dev/infiniband/uverbsN`: the verbs device, whose ioctls, mmaps and (on soft-RoCE)
    /// doorbell writes are the RDMA path.
    Uverbs,
    /// A completion channel (`anon_inode:[infinibandevent]`): its read is the wakeup.
    CompChannel,
    /// `/dev/infiniband/rdma_cm`: the connection manager.
    RdmaCm,
    /// Any other file, by the path its fd points at.
    Other(Key),
}

impl FdKind {
    /// The fd of `/proc/PID/fd`'s link target (or the path an open named).
    pub fn of_target(target: &str) -> FdKind {
        if target.starts_with("/dev/infiniband/uverbs") {
            FdKind::Uverbs
        } else if target == "anon_inode:[infinibandevent]" {
            FdKind::CompChannel
        } else if target.starts_with("/dev/infiniband/rdma_cm") {
            FdKind::RdmaCm
        } else {
            FdKind::Other(target.to_string().into())
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            FdKind::Uverbs => "uverbs",
            FdKind::CompChannel => "comp_channel",
            FdKind::RdmaCm => "rdma_cm",
            FdKind::Other(path) => path,
        }
    }

    /// As a capture writes it: the three names are the kinds, anything else a path.
    pub fn read(s: &str) -> FdKind {
        match s {
            "uverbs" => FdKind::Uverbs,
            "comp_channel" => FdKind::CompChannel,
            "rdma_cm" => FdKind::RdmaCm,
            other => FdKind::Other(other.to_string().into()),
        }
    }

    /// One of the RDMA kinds (what the data phase and the report count by kind).
    pub fn is_rdma(&self) -> bool {
        !matches!(self, FdKind::Other(_))
    }
}

impl fmt::Display for FdKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl Serialize for FdKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// As written: the three names are the kinds, anything else a path.
impl<'de> Deserialize<'de> for FdKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<str>::deserialize(d)?;
        Ok(FdKind::read(&s))
    }
}
