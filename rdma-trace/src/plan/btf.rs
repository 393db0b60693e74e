//! Parameter positions and field offsets from the kernel's BTF (vmlinux + module split BTF).
//!
//! Rust eBPF has no CO-RE, so the programs never carry struct offsets: userspace resolves
//! each catalog field here, at load time, into a [`Resolved`] (argument position, pointer
//! hops with their offsets, final read size) that `select.rs` turns into a slot plan.

use btf_rs::{Btf, Type};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Why BTF could not be read or does not have what a probe reads.
#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    #[error("cannot read BTF {path}: {msg}")]
    Read { path: PathBuf, msg: String },
    #[error("no BTF for module {0} (is the module loaded? CONFIG_DEBUG_INFO_BTF_MODULES?)")]
    NoModule(String),
    #[error("function {0} not in BTF")]
    NoFunction(String),
    #[error("{func} has no parameter named {param}")]
    NoParam { func: String, param: String },
    #[error("{ty} has no member {member}")]
    NoMember { ty: String, member: String },
    #[error("{0}")]
    Shape(String),
}

/// How vmlinux BTF is read. Lazy (`Mmap`) is the default: planning reads a few dozen
/// types of ~100k, and `benches/plan.rs` measured it 6-9x faster than parsing all. Where
/// the kernel refuses to mmap /sys/kernel/btf/vmlinux (before 6.16), a copy of it in
/// memory is indexed lazily (`Copy`); parsing it whole (`Cache`) is the last resort.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backend {
    Cache,
    #[default]
    Mmap,
    Copy,
}

/// Where the vmlinux and module BTF blobs are: `/sys/kernel/btf` on a live system, a
/// directory of copies in tests.
pub struct BtfSource {
    dir: PathBuf,
    vmlinux: Btf,
    modules: HashMap<String, Btf>,
}

/// One resolved read: the source argument (or return), the offsets to follow (all hops
/// but the last read a pointer), and the final size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// Parameter index (0-based); `None` for the return value.
    pub arg: Option<usize>,
    pub offsets: Vec<u32>,
    pub size: u8,
}

impl BtfSource {
    /// The BTF of the kernel and its modules under `dir` (/sys/kernel/btf).
    pub fn open(dir: &Path) -> Result<Self, BtfError> {
        Self::open_with(dir, Backend::default())
    }

    /// `Backend::Mmap` indexes vmlinux lazily (fast start, a few lookups); `Cache` parses
    /// every type up front. `benches/plan.rs` compares them.
    pub fn open_with(dir: &Path, backend: Backend) -> Result<Self, BtfError> {
        let p = dir.join("vmlinux");
        let vmlinux = match backend {
            Backend::Cache => Btf::from_file(&p),
            // sysfs BTF can be mmapped only since Linux 6.16 (6.12 says ENODEV): then a copy
            // in memory is (`benches/plan.rs`: 0.19x of parsing it all).
            Backend::Mmap => Btf::from_file_with_backend(&p, btf_rs::Backend::Mmap)
                .or_else(|_| mmap_copy(&p))
                .or_else(|_| Btf::from_file(&p)),
            Backend::Copy => mmap_copy(&p),
        }
        .map_err(|e| BtfError::Read { path: p.clone(), msg: e.to_string() })?;
        Ok(Self { dir: dir.to_path_buf(), vmlinux, modules: HashMap::new() })
    }

    pub(crate) fn system() -> Result<Self, BtfError> {
        Self::open(Path::new("/sys/kernel/btf"))
    }

    /// Loads these modules' BTF now (missing ones are ignored), so that forward
    /// declarations can be completed from them (`others`).
    pub fn preload(&mut self, modules: &[&str]) {
        for m in modules {
            self.module(m).ok();
        }
    }

    /// The BTF of `module` and every other loaded module BTF (for forward declarations).
    pub fn with_others(&self, module: &str) -> Option<(&Btf, Vec<&Btf>)> {
        let main = if module == "vmlinux" { &self.vmlinux } else { self.modules.get(module)? };
        let others = self.modules.iter().filter(|(k, _)| k.as_str() != module).map(|(_, b)| b).collect();
        Some((main, others))
    }

    /// The BTF that describes `module` (`vmlinux` for built-in code), loaded once.
    pub fn module(&mut self, module: &str) -> Result<&Btf, BtfError> {
        if module == "vmlinux" {
            return Ok(&self.vmlinux);
        }
        if !self.modules.contains_key(module) {
            let p = self.dir.join(module);
            if !p.exists() {
                return Err(BtfError::NoModule(module.to_string()));
            }
            let b = Btf::from_split_file(&p, &self.vmlinux)
                .map_err(|e| BtfError::Read { path: p.clone(), msg: e.to_string() })?;
            self.modules.insert(module.to_string(), b);
        }
        Ok(&self.modules[module])
    }
}

/// Copies `path` into an anonymous memory file and indexes that lazily (through its
/// /proc/self/fd path; the file is gone once the last mapping is).
fn mmap_copy(path: &Path) -> Result<Btf, btf_rs::Error> {
    use std::os::fd::FromRawFd;
    let mut src = std::fs::File::open(path)?;
    // SAFETY: a NUL-terminated name and no flags; the fd returned is owned below.
    let fd = unsafe { libc::memfd_create(c"rdma-trace-btf".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    // SAFETY: a fresh fd that nothing else owns.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    std::io::copy(&mut src, &mut file)?;
    Btf::from_file_with_backend(format!("/proc/self/fd/{fd}"), btf_rs::Backend::Mmap)
}

fn err<T: std::fmt::Display>(e: T) -> BtfError {
    BtfError::Shape(e.to_string())
}

/// A function's prototype: parameter names in order, and the return type.
pub struct Proto {
    pub params: Vec<(String, Type)>,
    pub ret: Type,
}

/// The prototype of function `func`: its parameters' names and types.
pub fn proto(btf: &Btf, func: &str) -> Result<Proto, BtfError> {
    let types = btf.resolve_types_by_name(func).map_err(|_| BtfError::NoFunction(func.into()))?;
    let f = types
        .iter()
        .find_map(|t| if let Type::Func(f) = t { Some(f.clone()) } else { None })
        .ok_or_else(|| BtfError::NoFunction(func.into()))?;
    let Type::FuncProto(fp) = btf.resolve_chained_type(&f).map_err(err)? else {
        return Err(BtfError::Shape(format!("{func}: BTF func without a prototype")));
    };
    let mut params = Vec::new();
    for p in &fp.parameters {
        let name = btf.resolve_name(p).map_err(err)?;
        let ty = btf.resolve_chained_type(p).map_err(err)?;
        params.push((name, ty));
    }
    let ret = if fp.return_type_id() == 0 {
        Type::Void
    } else {
        btf.resolve_type_by_id(fp.return_type_id()).map_err(err)?
    };
    Ok(Proto { params, ret })
}

/// Strips typedefs, const, volatile, restrict and type tags.
fn strip(btf: &Btf, mut t: Type) -> Result<Type, BtfError> {
    loop {
        t = match &t {
            Type::Typedef(x) => btf.resolve_chained_type(x).map_err(err)?,
            Type::Const(x) | Type::Volatile(x) | Type::Restrict(x) => {
                btf.resolve_chained_type(x).map_err(err)?
            }
            Type::TypeTag(x) => btf.resolve_chained_type(x).map_err(err)?,
            _ => return Ok(t),
        }
    }
}

fn size_of(btf: &Btf, t: &Type) -> Result<usize, BtfError> {
    Ok(match strip(btf, t.clone())? {
        Type::Int(i) => i.size(),
        Type::Ptr(_) => 8,
        Type::Enum(e) => e.size(),
        Type::Enum64(e) => e.size(),
        Type::Struct(s) | Type::Union(s) => s.size(),
        other => return Err(BtfError::Shape(format!("cannot size a {}", other.name()))),
    })
}

fn type_name(btf: &Btf, t: &Type) -> String {
    t.as_btf_type().and_then(|b| btf.resolve_name(b).ok()).unwrap_or_else(|| t.name().to_string())
}

/// The struct a pointer points at; a forward declaration is completed by name from the
/// same BTF, else from `others` (vmlinux and rdma_rxe only declare `struct ib_ucq_object`;
/// ib_uverbs defines it).
fn pointee_struct<'b>(
    btf: &'b Btf,
    t: &Type,
    others: &[&'b Btf],
) -> Result<(btf_rs::Struct, &'b Btf), BtfError> {
    let Type::Ptr(p) = strip(btf, t.clone())? else {
        return Err(BtfError::Shape(format!("{} is not a pointer", type_name(btf, t))));
    };
    match strip(btf, btf.resolve_chained_type(&p).map_err(err)?)? {
        Type::Struct(s) | Type::Union(s) => Ok((s, btf)),
        Type::Fwd(fwd) => {
            let name = btf.resolve_name(&fwd).map_err(err)?;
            struct_named(btf, others, &name)
                .ok_or_else(|| BtfError::Shape(format!("struct {name} is only declared, never defined")))
        }
        other => Err(BtfError::Shape(format!("pointer to {} is not a struct", other.name()))),
    }
}

/// The definition of `struct name` in `btf`, else in one of `others`, with the BTF it is in.
fn struct_named<'b>(btf: &'b Btf, others: &[&'b Btf], name: &str) -> Option<(btf_rs::Struct, &'b Btf)> {
    std::iter::once(btf).chain(others.iter().copied()).find_map(|b| {
        let types = b.resolve_types_by_name(name).ok()?;
        types.into_iter().find_map(|t| if let Type::Struct(s) = t { Some((s, b)) } else { None })
    })
}

/// Finds `member` in `s`, looking inside anonymous struct/union members; returns the
/// byte offset and the member's type.
fn member(btf: &Btf, s: &btf_rs::Struct, name: &str) -> Result<Option<(u32, Type)>, BtfError> {
    for m in &s.members {
        let mname = btf.resolve_name(m).map_err(err)?;
        let mty = btf.resolve_chained_type(m).map_err(err)?;
        if m.bitfield_size().is_some_and(|b| b != 0) && mname == name {
            return Err(BtfError::Shape(format!("{name} is a bitfield")));
        }
        if mname == name {
            return Ok(Some((m.bit_offset() / 8, mty)));
        }
        if mname.is_empty()
            && let Type::Struct(inner) | Type::Union(inner) = strip(btf, mty)?
            && let Some((off, t)) = member(btf, &inner, name)?
        {
            return Ok(Some((m.bit_offset() / 8 + off, t)));
        }
    }
    Ok(None)
}

/// Resolves `path` (see `catalog::Field`) starting from a value of type `start`.
pub(crate) fn resolve_path(
    btf: &Btf,
    start: &Type,
    path: &str,
    others: &[&Btf],
) -> Result<(Vec<u32>, u8), BtfError> {
    if path.is_empty() {
        let size = size_of(btf, start)?;
        if size > 8 {
            return Err(BtfError::Shape(format!("value of {size} bytes does not fit a register")));
        }
        return Ok((Vec::new(), size as u8));
    }
    // `(name)rest`: the value is a pointer the prototype types loosely (`void *obj`),
    // read as a pointer to `struct name`.
    if let Some((name, rest)) = path.strip_prefix('(').and_then(|p| p.split_once(')')) {
        if !matches!(strip(btf, start.clone())?, Type::Ptr(_)) {
            return Err(BtfError::Shape(format!("({name}): {} is not a pointer", type_name(btf, start))));
        }
        return resolve_from_struct(btf, name, rest, others);
    }
    walk(btf, Start::Pointer(start.clone()), path, others)
}

/// Resolves `path` starting from a pointer to `struct name` (e.g. the current task:
/// `task_struct`), defined in `btf` or one of `others`.
pub fn resolve_from_struct(
    btf: &Btf,
    name: &str,
    path: &str,
    others: &[&Btf],
) -> Result<(Vec<u32>, u8), BtfError> {
    let (s, b) = struct_named(btf, others, name)
        .ok_or_else(|| BtfError::Shape(format!("no struct {name} in this kernel's BTF")))?;
    walk(b, Start::Struct(s), path, others)
}

enum Start {
    /// A value of this (pointer) type.
    Pointer(Type),
    /// A pointer to this struct.
    Struct(btf_rs::Struct),
}

/// One `.`-segment of a hop: a member name, with an array index (`rlim[8]`) or without.
fn segment(seg: &str) -> Result<(&str, Option<usize>), BtfError> {
    let Some((name, rest)) = seg.split_once('[') else { return Ok((seg, None)) };
    let idx = rest.strip_suffix(']').and_then(|i| i.parse().ok());
    idx.map(|i| (name, Some(i))).ok_or_else(|| BtfError::Shape(format!("bad array index in {seg}")))
}

/// Walks `path`'s hops (`->` reads a pointer, `.` an embedded member, `[i]` an array
/// element): the offset added before each read, and the last read's size.
fn walk(btf: &Btf, start: Start, path: &str, others: &[&Btf]) -> Result<(Vec<u32>, u8), BtfError> {
    let mut offsets = Vec::new();
    // The BTF the current type's ids belong to: a hop may cross into another module's BTF.
    let mut here = btf;
    let (mut cur, mut first) = match start {
        Start::Pointer(t) => (t, None),
        Start::Struct(s) => (Type::Struct(s.clone()), Some(s)),
    };
    for hop in path.split("->") {
        let s = match first.take() {
            Some(s) => s,
            None => {
                let (s, b) = pointee_struct(here, &cur, others)?;
                here = b;
                s
            }
        };
        let sname = here.resolve_name(&s).unwrap_or_default();
        let mut off = 0u32;
        let mut ty: Option<Type> = None;
        let mut within = s;
        for seg in hop.split('.') {
            let (name, index) = segment(seg)?;
            let (o, mut t) = member(here, &within, name)?.ok_or_else(|| BtfError::NoMember {
                ty: format!("struct {sname}"),
                member: name.to_string(),
            })?;
            off += o;
            if let Some(i) = index {
                let Type::Array(a) = strip(here, t.clone())? else {
                    return Err(BtfError::Shape(format!("{name} is not an array")));
                };
                if i >= a.len() {
                    return Err(BtfError::Shape(format!("{name}[{i}]: the array has {} elements", a.len())));
                }
                t = here.resolve_chained_type(&a).map_err(err)?;
                off += (i * size_of(here, &t)?) as u32;
            }
            if let Type::Struct(inner) | Type::Union(inner) = strip(here, t.clone())? {
                within = inner;
            }
            ty = Some(t);
        }
        offsets.push(off);
        cur = ty.ok_or_else(|| BtfError::Shape(format!("empty hop in {path}")))?;
    }
    let size = size_of(here, &cur)?;
    if size > 8 {
        return Err(BtfError::Shape(format!("{path}: {size} bytes is not a scalar")));
    }
    if offsets.len() > rdma_trace_common::MAX_HOPS {
        return Err(BtfError::Shape(format!("{path}: more than {} hops", rdma_trace_common::MAX_HOPS)));
    }
    Ok((offsets, size as u8))
}

/// Resolves a parameter (by any of its `|`-separated names) or the return value, then
/// the field path behind it.
pub fn resolve(
    btf: &Btf,
    func: &str,
    proto: &Proto,
    param: Option<&str>,
    path: &str,
    others: &[&Btf],
) -> Result<Resolved, BtfError> {
    let (arg, start) = match param {
        None => (None, proto.ret.clone()),
        Some(names) => {
            let (i, (_, t)) = proto
                .params
                .iter()
                .enumerate()
                .find(|(_, (n, _))| names.split('|').any(|want| want == n))
                .ok_or_else(|| BtfError::NoParam { func: func.into(), param: names.into() })?;
            (Some(i), t.clone())
        }
    };
    let (offsets, size) = resolve_path(btf, &start, path, others)?;
    Ok(Resolved { arg, offsets, size })
}
