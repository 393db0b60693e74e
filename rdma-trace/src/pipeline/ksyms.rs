//! Kernel address → `function+0xoff [module]`, from /proc/kallsyms (loaded once).

/// Kernel symbols by address (from /proc/kallsyms), for stacks.
pub struct Ksyms {
    /// (address, name, module) sorted by address.
    syms: Vec<(u64, String, Option<String>)>,
}

impl Ksyms {
    /// The symbols of a /proc/kallsyms text.
    pub fn parse(kallsyms: &str) -> Self {
        // Addresses read as 0 without root (kptr_restrict): nothing to symbolize then.
        let mut syms: Vec<_> = crate::plan::kernel::kallsyms_text(kallsyms)
            .filter(|(addr, _, _)| *addr != 0)
            .map(|(addr, name, module)| (addr, name.to_string(), module.map(str::to_string)))
            .collect();
        syms.sort_by_key(|s| s.0);
        Self { syms }
    }

    /// `[start, end)` of every function whose name starts with one of `prefixes` (its end:
    /// the next symbol's address), as a frame `symbolize` names that way falls in.
    pub(crate) fn ranges_of(&self, prefixes: &[&str]) -> Vec<(u64, u64)> {
        let named = |n: &str| prefixes.iter().any(|p| n.starts_with(p));
        let ends = self.syms.iter().skip(1).map(|s| s.0);
        self.syms.iter().zip(ends).filter(|(s, _)| named(&s.1)).map(|(s, end)| (s.0, end)).collect()
    }

    /// `name+0xoff` (with ` [module]` for module code); the raw address when unknown.
    pub(crate) fn symbolize(&self, addr: u64) -> String {
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

/// Stacks already symbolized, by their return addresses as the ring gave them: a path's
/// stacks recur, so each distinct one is named once and every event that has it shares it
/// (`event::Stack`). Bounded (`stack::STACKS_KEPT`).
#[derive(Default)]
pub struct StackCache {
    stacks: crate::event::Stacks<Box<[u8]>>,
}

impl StackCache {
    /// The stack whose return addresses are `raw` (8 bytes each, as the ring holds them).
    pub(crate) fn stack(&mut self, ksyms: &Ksyms, raw: &[u8]) -> crate::event::Stack {
        if raw.is_empty() {
            return crate::event::Stack::default();
        }
        self.stacks.get_or_make(
            raw,
            |k, _, raw| **k == *raw,
            |raw| {
                let addrs = raw.chunks_exact(8).map(|w| u64::from_ne_bytes(w.try_into().unwrap_or_default()));
                (raw.into(), addrs.map(|a| ksyms.symbolize(a).into_boxed_str()).collect())
            },
        )
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
