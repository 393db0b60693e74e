//! Planning: the catalog of probes against this kernel (kallsyms, BTF, tracefs formats)
//! and the installed libibverbs → a plan per slot, or a reason to skip. Pure but for
//! `here`, which reads this machine.

pub(crate) mod arch;
pub mod btf;
pub mod catalog;
pub mod counted;
pub mod elfsym;
pub(crate) mod here;
pub mod kernel;
pub mod mlx5;
pub mod select;
pub mod syscalls;
