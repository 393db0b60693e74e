//! `rdma-trace probes`: the plan for this kernel — each catalog probe, the symbol and
//! module it resolved to, attached or skipped, and why.

use crate::plan::here;

use std::fmt::Write;

/// Lists the plan; with `attach`, attaches each probe to prove it loads (which needs the
/// privileges `trace` needs: refused like `trace` without them).
pub fn run(attach: bool, json: bool) -> anyhow::Result<i32> {
    if attach && let Err(msg) = crate::live::privilege::check() {
        eprintln!("{msg}");
        eprintln!("rdma-trace: `rdma-trace probes --no-attach` shows the plan without privileges");
        return Ok(2);
    }
    let planning = here::plan_here(&[]);
    let mut out = String::new();
    if let Some(why) = &planning.blocked {
        eprintln!("rdma-trace: {why}");
    }
    let outcomes = if attach && !planning.plan.probes.is_empty() {
        crate::plan::kernel::ensure_tracefs().ok();
        let (_loaded, o) = crate::live::attach::Loaded::attach_new(
            &planning.plan,
            1 << 16,
            crate::live::kprobe_events::DEFAULT_INSTANCES,
        )?;
        Some(o)
    } else {
        None
    };
    if json {
        print!("{}", json_lines(&planning.plan, outcomes.as_deref()));
        return Ok(0);
    }
    // Columns as wide as their longest entry (a kernel's symbols can be long).
    let skipped_syms: Vec<String> = planning
        .plan
        .skipped
        .iter()
        .map(|s| s.spec.symbols.iter().map(|s| s.name).collect::<Vec<_>>().join("|"))
        .collect();
    let plan = &planning.plan;
    let ids =
        plan.probes.iter().map(|p| p.spec.id.as_str()).chain(plan.skipped.iter().map(|s| s.spec.id.as_str()));
    let w_id = ids.map(str::len).max().unwrap_or(0).max("probe".len());
    let syms = plan.probes.iter().map(|p| p.symbol.len()).chain(skipped_syms.iter().map(String::len));
    let w_sym = syms.max().unwrap_or(0).max("symbol".len());
    let w_mod = plan.probes.iter().map(|p| p.module.len()).max().unwrap_or(0).max("module".len());
    writeln!(out, "{:<w_id$} {:<w_sym$} {:<w_mod$} {:<9} note", "probe", "symbol", "module", "status")?;
    for p in &planning.plan.probes {
        let (status, mut note) = match outcomes.as_ref().and_then(|o| o.iter().find(|o| o.id == p.spec.id)) {
            Some(o) => match &o.attached {
                Ok(()) => {
                    let mut n = format!("{} ms", o.took.as_millis());
                    if let Some(x) = &o.note {
                        n.push_str(&format!("; {x}"));
                    }
                    ("attached".to_string(), n)
                }
                Err(e) => ("skipped".to_string(), format!("attach failed: {e}")),
            },
            None => ("planned".to_string(), String::new()),
        };
        if p.spec.hardware_only {
            if !note.is_empty() {
                note.push_str("; ");
            }
            note.push_str("fires only with a hardware NIC (not observed on soft-RoCE)");
        }
        writeln!(out, "{:<w_id$} {:<w_sym$} {:<w_mod$} {:<9} {note}", p.spec.id, p.symbol, p.module, status)?;
    }
    for (s, sym) in planning.plan.skipped.iter().zip(&skipped_syms) {
        writeln!(out, "{:<w_id$} {:<w_sym$} {:<w_mod$} {:<9} {}", s.spec.id, sym, "-", "skipped", s.reason)?;
    }
    if let Some(check) = &planning.mlx5 {
        writeln!(out, "{check}")?;
    }
    writeln!(
        out,
        "(plan resolved from /proc/kallsyms and /sys/kernel/btf in {} ms)",
        planning.took.as_millis()
    )?;
    print!("{out}");
    Ok(0)
}

/// `--json`: one object a line, planned probes first, then the skipped.
fn json_lines(plan: &crate::plan::select::Plan, outcomes: Option<&[crate::live::attach::Outcome]>) -> String {
    use crate::plan::catalog::Kind;
    let kind = |k: &Kind| match k {
        Kind::Kprobe => "kprobe",
        Kind::Tracepoint { .. } => "tracepoint",
        Kind::Uprobe { .. } => "uprobe",
    };
    let mut out = String::new();
    for p in &plan.probes {
        let outcome = outcomes.and_then(|o| o.iter().find(|o| o.id == p.spec.id));
        let (status, reason) = match outcome.map(|o| &o.attached) {
            Some(Ok(())) => ("attached", None),
            Some(Err(e)) => ("skipped", Some(format!("attach failed: {e}"))),
            None => ("planned", None),
        };
        let v = serde_json::json!({
            "id": p.spec.id.as_str(), "kind": kind(&p.spec.kind), "symbol": p.symbol,
            "module": p.module, "return": p.ret.is_some(), "status": status, "reason": reason,
            "hardware_only": p.spec.hardware_only,
            "path": p.target.as_ref().map(|t| t.0.display().to_string()),
        });
        out.push_str(&format!("{v}\n"));
    }
    for s in &plan.skipped {
        // The same keys as a planned probe's: what was never resolved is null.
        let v = serde_json::json!({
            "id": s.spec.id.as_str(), "kind": kind(&s.spec.kind), "symbol": null,
            "module": null, "return": null, "status": "skipped", "reason": s.reason.to_string(),
            "hardware_only": s.spec.hardware_only, "path": null,
        });
        out.push_str(&format!("{v}\n"));
    }
    out
}
