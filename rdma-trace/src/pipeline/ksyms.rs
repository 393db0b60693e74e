//! Kernel address → `function+0xoff [module]`, from /proc/kallsyms (loaded once).

use crate::event::Frame;

pub struct Ksyms {
    /// (address, name, module) sorted by address.
    syms: Vec<(u64, String, Option<String>)>,
}

impl Ksyms {
    pub fn parse(kallsyms: &str) -> Self {
        // Addresses read as 0 without root (kptr_restrict): nothing to symbolize then.
        let mut syms: Vec<_> = crate::plan::kernel::kallsyms_text(kallsyms)
            .filter(|(addr, _, _)| *addr != 0)
            .map(|(addr, name, module)| (addr, name.to_string(), module.map(str::to_string)))
            .collect();
        syms.sort_by_key(|s| s.0);
        Self { syms }
    }

    /// `name+0xoff` (with ` [module]` for module code); the raw address when unknown.
    pub fn symbolize(&self, addr: u64) -> String {
        let i = self.syms.partition_point(|s| s.0 <= addr);
        if i == 0 {
            return format!("{addr:#x}");
        }
        let (base, name, module) = &self.syms[i - 1];
        match module {
            Some(m) => format!("{name}+{:#x} [{m}]", addr - base),
            None => format!("{name}+{:#x}", addr - base),
        }
    }
}

/// Frames already symbolized, by address: a stack's return addresses recur, so each is
/// named once and shared. Bounded: past `FRAMES_KEPT` addresses it starts over.
#[derive(Default)]
pub struct FrameCache {
    by_address: std::collections::HashMap<u64, Frame>,
}

const FRAMES_KEPT: usize = 1 << 16;

impl FrameCache {
    pub fn frame(&mut self, ksyms: &Ksyms, addr: u64) -> Frame {
        if let Some(f) = self.by_address.get(&addr) {
            return Frame::clone(f);
        }
        if self.by_address.len() >= FRAMES_KEPT {
            self.by_address.clear();
        }
        let f: Frame = ksyms.symbolize(addr).into();
        self.by_address.insert(addr, Frame::clone(&f));
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_symbol_below() {
        let k = Ksyms::parse(
            "ffffffffc0a01000 t ib_uverbs_mmap\t[ib_uverbs]\nffffffff81000000 T do_syscall_64\nffffffffc0a02000 t other\t[ib_uverbs]\n",
        );
        assert_eq!(k.symbolize(0xffffffffc0a01010), "ib_uverbs_mmap+0x10 [ib_uverbs]");
        assert_eq!(k.symbolize(0xffffffff81000005), "do_syscall_64+0x5");
        assert_eq!(k.symbolize(0x1000), "0x1000");
    }
}
