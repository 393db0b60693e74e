//! Kernel address → `function+0xoff [module]`, from /proc/kallsyms (loaded once).

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
