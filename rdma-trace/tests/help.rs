//! Issue 40 item 10, help is the truth: every subcommand's `--help` runs; every flag that
//! the help texts, the README and docs/ name for a subcommand is one that subcommand takes;
//! what `--help` says `--json` writes is written; and the README's reading examples run on
//! lab captures as they are written.

use clap::CommandFactory;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_rdma-trace")
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn lab(name: &str) -> String {
    root().join("rdma-trace/tests/fixtures/lab").join(name).display().to_string()
}

/// What one subcommand takes: its long and short flags, and the values of its value enums.
struct Takes {
    longs: BTreeSet<String>,
    shorts: BTreeSet<char>,
    values: BTreeSet<String>,
}

fn takes(cmd: &clap::Command) -> Takes {
    let mut t = Takes {
        longs: ["help", "version"].map(String::from).into(),
        shorts: ['h', 'V'].into(),
        values: BTreeSet::new(),
    };
    for a in cmd.get_arguments() {
        t.longs.extend(a.get_long_and_visible_aliases().unwrap_or_default().into_iter().map(String::from));
        t.shorts.extend(a.get_short_and_visible_aliases().unwrap_or_default());
        if a.is_positional() {
            t.values.extend(a.get_possible_values().iter().map(|v| v.get_name().to_string()));
        }
    }
    t
}

fn subcommands() -> Vec<(String, Takes)> {
    let cli = rdma_trace::cli::Cli::command();
    cli.get_subcommands().map(|s| (s.get_name().to_string(), takes(s))).collect()
}

/// The flags a command line names for a subcommand: from the words after the subcommand's
/// name up to a `--` that ends the options (or a `#` comment).
fn flags_after(words: &[&str]) -> Vec<String> {
    words
        .iter()
        .take_while(|w| **w != "--" && !w.starts_with('#'))
        .filter(|w| w.starts_with('-') && **w != "-")
        .map(|w| w.trim_end_matches([',', '.', ')', ';', ':']).split('=').next().unwrap_or("").to_string())
        .collect()
}

/// Every (subcommand, flag) a text names: in backticked spans and in lines that read
/// `[sudo] rdma-trace SUB …`, and, in a subcommand's own help (`own`), a bare `--flag`
/// outside such a span, which is its own. `--x` up to three words after a subcommand's name
/// on its line of plain prose ("diff --fail-on tripped", "the daemon runs with --x") is
/// that subcommand's.
fn named_flags(text: &str, names: &[String], own: Option<&str>) -> Vec<(String, String)> {
    let is_sub = |w: &str| names.iter().any(|n| n == w);
    let mut out = Vec::new();
    let mut spans: Vec<String> = text.split('`').skip(1).step_by(2).map(String::from).collect();
    spans.extend(
        text.lines()
            .map(str::trim)
            .filter(|l| l.starts_with("rdma-trace ") || l.starts_with("sudo rdma-trace "))
            .map(String::from),
    );
    for span in &spans {
        let words: Vec<&str> = span.split_whitespace().collect();
        let start = words.iter().position(|w| *w != "sudo" && *w != "rdma-trace").unwrap_or(words.len());
        match (words.get(start), own) {
            (Some(sub), _) if is_sub(sub) => {
                out.extend(flags_after(&words[start + 1..]).into_iter().map(|f| (sub.to_string(), f)))
            }
            // `--flag …` in a subcommand's own help is its own.
            (Some(w), Some(o)) if w.starts_with('-') => {
                out.extend(flags_after(&words[start..]).into_iter().map(|f| (o.to_string(), f)))
            }
            _ => {}
        }
    }
    // Prose outside the spans.
    let prose: Vec<&str> = text.split('`').step_by(2).collect();
    // Line by line: a help's option list puts each flag at the head of its own line.
    for part in prose.iter().flat_map(|p| p.lines()) {
        let words: Vec<&str> = part.split_whitespace().collect();
        for (i, w) in words.iter().enumerate() {
            let w = w.trim_start_matches(['(', '[']);
            if !w.starts_with("--") || w == "--" {
                continue;
            }
            let flag = flags_after(&[w]).pop().unwrap_or_default();
            let before = words[i.saturating_sub(3)..i].iter().rev().find(|b| is_sub(b));
            match (before, own) {
                (Some(b), _) => out.push((b.to_string(), flag)),
                (None, Some(o)) => out.push((o.to_string(), flag)),
                (None, None) => {}
            }
        }
    }
    out
}

fn check(where_: &str, text: &str, subs: &[(String, Takes)], own: Option<&str>, bad: &mut Vec<String>) {
    let names: Vec<String> = subs.iter().map(|(n, _)| n.clone()).collect();
    for (sub, flag) in named_flags(text, &names, own) {
        let t = &subs.iter().find(|(n, _)| *n == sub).unwrap().1;
        let ok = match flag.strip_prefix("--") {
            Some(long) => t.longs.contains(long),
            None => flag.chars().skip(1).all(|c| t.shorts.contains(&c)),
        };
        if !ok {
            bad.push(format!("{where_}: `{sub} {flag}`, which {sub} does not take"));
        }
    }
}

#[test]
fn every_subcommand_has_help_and_every_flag_named_is_taken() {
    let subs = subcommands();
    assert!(subs.len() >= 9, "{} subcommands", subs.len());
    let mut bad = Vec::new();
    let top = Command::new(bin()).arg("--help").output().unwrap();
    assert!(top.status.success());
    check("rdma-trace --help", &String::from_utf8_lossy(&top.stdout), &subs, None, &mut bad);
    for (name, _) in &subs {
        let out = Command::new(bin()).args([name.as_str(), "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && out.stderr.is_empty(), "{name} --help: {:?}", out);
        assert!(help.contains("Usage: rdma-trace"), "{name} --help: {help}");
        check(&format!("{name} --help"), &help, &subs, Some(name), &mut bad);
        // Short help (-h) is the same command's, shorter.
        let short = Command::new(bin()).args([name.as_str(), "-h"]).output().unwrap();
        assert!(short.status.success() && short.stdout.len() <= out.stdout.len(), "{name} -h");
    }
    let mut docs = vec![root().join("README.md"), root().join("ARCHITECTURE.md")];
    for dir in ["docs", "docs/guides"] {
        let mut md: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
            .unwrap()
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        md.sort();
        docs.extend(md);
    }
    for d in &docs {
        let text = std::fs::read_to_string(d).unwrap();
        check(&d.strip_prefix(root()).unwrap_or(d).display().to_string(), &text, &subs, None, &mut bad);
    }
    assert!(bad.is_empty(), "flags named but not taken:\n{}", bad.join("\n"));
}

/// The explain topics the README and help list (`explain mr|mmap|…`) are the ones it takes.
#[test]
fn the_explain_topics_named_are_the_ones_taken() {
    let subs = subcommands();
    let explain = &subs.iter().find(|(n, _)| n == "explain").unwrap().1;
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let listed: Vec<&str> = readme
        .split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|s| s.strip_prefix("rdma-trace explain "))
        .filter(|s| s.contains('|'))
        .flat_map(|s| s.split('|'))
        .collect();
    assert!(listed.len() >= 5, "{listed:?}");
    let listed: BTreeSet<String> = listed.into_iter().map(String::from).collect();
    assert_eq!(listed, explain.values, "README lists {listed:?}, explain takes {:?}", explain.values);
}

/// `explain --json` writes what its help says: the values by name, the functions it names.
#[test]
fn explain_json_writes_what_its_help_names() {
    let help = Command::new(bin()).args(["explain", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout).replace('\n', " ");
    assert!(help.contains("its values by name, the functions it names"), "{help}");
    for topic in ["mr", "mmap", "cq", "bypass", "fork"] {
        let out = Command::new(bin())
            .args(["explain", topic, "--json"])
            .arg(lab("companion-7.3.jsonl"))
            .output()
            .unwrap();
        assert!(out.status.success(), "explain {topic}: {}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let values = v["values"].as_object().unwrap_or_else(|| panic!("explain {topic}: no values: {v}"));
        assert!(!values.is_empty() && values.values().all(|n| n.is_u64()), "explain {topic}: {values:?}");
        // The path topics name the kernel's functions; bypass and fork count syscalls.
        let functions = v["functions"].as_array().unwrap();
        let kernel =
            |f: &serde_json::Value| f.as_str().is_some_and(|f| f.starts_with("ib_") || f.starts_with("rxe_"));
        if ["mr", "mmap", "cq"].contains(&topic) {
            assert!(functions.iter().any(kernel), "explain {topic}: {functions:?}");
        }
    }
}

/// The README's examples of the reading commands, run as written on lab captures (its
/// file names replaced by them, outputs into a scratch directory): each exits as the README
/// says, and says something.
#[test]
fn the_readme_reading_examples_run_on_lab_captures() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let dir = std::env::temp_dir().join(format!("rt-help-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let scratch = |n: &str| dir.join(n).display().to_string();
    let file = |w: &str| -> Option<String> {
        Some(match w {
            "run.jsonl" => lab("companion-7.3.jsonl"),
            "a.jsonl" | "host-a.jsonl" => lab("pair-7.3.host1.jsonl.zst"),
            "b.jsonl" | "host-b.jsonl" => lab("pair-7.3.host2.jsonl.zst"),
            "base.jsonl" => lab("companion-6.12.jsonl"),
            "new.jsonl" => lab("companion-7.3.jsonl"),
            "run.trace.json" | "pin.svg" => scratch(w),
            _ => return None,
        })
    };
    let mut ran = Vec::new();
    // The command lines of its shell blocks.
    let blocks: Vec<&str> =
        readme.split("```").skip(1).step_by(2).filter(|b| b.starts_with("sh\n")).collect();
    for line in blocks.iter().flat_map(|b| b.lines()).filter(|l| l.starts_with("rdma-trace ")) {
        let cmd = line.split(" #").next().unwrap().trim();
        let words: Vec<&str> = cmd.split_whitespace().skip(1).collect();
        // Those that need a daemon or a terminal are the lab's and tmux tests' to run.
        if words.contains(&"--connect") || words[0] == "tui" || words[0] == "probes" {
            continue;
        }
        let args: Vec<String> = words.iter().map(|w| file(w).unwrap_or_else(|| w.to_string())).collect();
        let out = Command::new(bin()).args(&args).output().unwrap();
        let code = out.status.code();
        // `diff --fail-on` exits 1 when the threshold is broken, as the README says.
        let fine = code == Some(0) || (words[0] == "diff" && code == Some(1));
        assert!(fine, "README `{cmd}` exited {code:?}: {}", String::from_utf8_lossy(&out.stderr));
        let wrote = args.iter().any(|a| a.starts_with(&*dir.to_string_lossy()) && Path::new(a).is_file());
        assert!(!out.stdout.is_empty() || wrote, "README `{cmd}` printed and wrote nothing");
        if words[0] == "diff" && code == Some(1) {
            let said = String::from_utf8_lossy(&out.stdout);
            assert!(said.contains("pin-p99"), "README `{cmd}` broke a threshold it does not name: {said}");
        }
        ran.push(words[0].to_string());
    }
    let ran: BTreeSet<String> = ran.into_iter().collect();
    for want in ["story", "replay", "report", "diff", "export", "explain"] {
        assert!(ran.contains(want), "no README example of {want} was run: {ran:?}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// `diff --json` writes the keys docs/report.md names for it, with `[A, B]` per metric.
#[test]
fn diff_json_writes_the_keys_its_doc_names() {
    let doc = std::fs::read_to_string(root().join("docs/report.md")).unwrap();
    let para = doc.split("\n\n").find(|p| p.contains("`rdma-trace diff A B --json` prints")).unwrap();
    let out = Command::new(bin())
        .args(["diff", "--json"])
        .args([lab("companion-6.12.jsonl"), lab("companion-7.3.jsonl")])
        .args(["--fail-on", "pin-p99=+0%,pin-p99=-0%"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let have: BTreeSet<String> = v.as_object().unwrap().keys().cloned().collect();
    let named: BTreeSet<String> =
        ["metrics", "new_stacks", "missing_stacks", "failed"].map(String::from).into();
    for k in &named {
        assert!(para.contains(&format!("`{k}`")), "docs/report.md's diff paragraph does not name {k}");
    }
    assert_eq!(have, named, "diff --json writes {have:?}");
    let metrics = v["metrics"].as_object().unwrap();
    assert!(metrics.values().all(|ab| ab.as_array().is_some_and(|a| a.len() == 2)), "{metrics:?}");
    // 7.3's pins are not 6.12's to the nanosecond: a threshold of 0 % either way on pin-p99
    // breaks, and `failed` says so in a sentence that names it.
    assert_eq!(out.status.code(), Some(1));
    let failed = v["failed"].as_array().unwrap();
    assert!(failed.iter().any(|f| f.as_str().is_some_and(|f| f.contains("pin-p99"))), "{failed:?}");
}
