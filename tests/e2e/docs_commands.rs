//! The docs say what is true: every shell command in README.md and docs/*.md
//! (```sh blocks) is checked against the built binary, and every flag of
//! every `berth <command> --help` is documented.
//!
//! Which commands run, by one rule each (printed for every command):
//! - `berth explain`/`berth simulate` over a dump (`--cluster FILE`), and
//!   `berth ... --help`: run offline, and must succeed; a `[--flag value]`
//!   part runs both without and with it.
//! - `python3 docs/check_links.py ...`: run when python3 is on PATH.
//! - other `berth` commands (a live cluster, a server, the demo, a
//!   benchmark, or a pipeline): not run; each `--flag` they use must be
//!   one the command's `--help` lists.
//! - anything else (kubectl, helm, docker, cargo, perf, ...): not run.
//!
//! Every command: each repository path it names (examples/, deploy/,
//! charts/, tools/, docs/, ci/, crates/, tests/) must exist.

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and docs/*.md, each with its text.
fn pages() -> Vec<(String, String)> {
    let mut files = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs")).expect("docs/").filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "md")).collect();
    docs.sort();
    files.extend(docs);
    files.into_iter().map(|p| (p.strip_prefix(root()).unwrap_or(&p).display().to_string(), std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))).collect()
}

/// The commands of the ```sh blocks: continuation lines joined, comments
/// dropped; each with "file:line".
fn commands(page: &str, text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut in_sh = false;
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.starts_with("```") {
            in_sh = !in_sh && t == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        let code = strip_comment(line);
        let (start, mut joined) = pending.take().unwrap_or((i + 1, String::new()));
        joined.push_str(code.trim_end().trim_end_matches('\\'));
        joined.push(' ');
        if code.trim_end().ends_with('\\') {
            pending = Some((start, joined));
        } else if !joined.trim().is_empty() {
            out.push((format!("{page}:{start}"), joined.trim().to_string()));
        }
    }
    out
}

/// `line` without a `#` comment (one at the start, or after whitespace,
/// outside quotes).
fn strip_comment(line: &str) -> &str {
    let (mut single, mut double) = (false, false);
    let mut prev_space = true;
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && prev_space => return &line[..i],
            _ => {}
        }
        prev_space = c.is_whitespace();
    }
    line
}

/// Shell words (quotes removed; no expansion).
fn words(cmd: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let (mut single, mut double, mut any) = (false, false, false);
    for c in cmd.chars() {
        match c {
            '\'' if !double => {
                single = !single;
                any = true;
            }
            '"' if !single => {
                double = !double;
                any = true;
            }
            c if c.is_whitespace() && !single && !double => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            c => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The berth arguments of a command that runs berth, whichever way the
/// docs spell it (`berth`, `cargo run --release --`, `target/release/berth`,
/// behind `/usr/bin/time -v`).
fn berth_args(w: &[String]) -> Option<Vec<String>> {
    let mut w: Vec<String> = w.to_vec();
    if w.first().is_some_and(|s| s == "/usr/bin/time") {
        w.drain(..w.iter().position(|s| s.ends_with("berth")).unwrap_or(w.len()));
    }
    if w.len() >= 4 && w[0] == "cargo" && w[1] == "run" && w[2] == "--release" && w[3] == "--" {
        return Some(w[4..].to_vec());
    }
    match w.first().map(String::as_str) {
        Some("berth") | Some("target/release/berth") => Some(w[1..].to_vec()),
        _ => None,
    }
}

fn berth() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_berth"));
    c.current_dir(root()).env_remove("RUST_LOG");
    c
}

/// The long flags `berth <sub> --help` lists.
fn help_flags(sub: &str) -> Vec<String> {
    let out = berth().args([sub, "--help"]).output().expect("berth runs");
    assert!(out.status.success(), "berth {sub} --help: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut flags: Vec<String> = text
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let l = if l.starts_with('-') && !l.starts_with("--") { l.split_once(", ").map(|(_, r)| r).unwrap_or(l) } else { l };
            l.strip_prefix("--").map(|r| format!("--{}", r.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).next().unwrap_or("")))
        })
        .filter(|f| f != "--help" && f != "--version" && f.len() > 2)
        .collect();
    flags.dedup();
    flags
}

/// Paths into the repository that a command names.
fn repo_paths(w: &[String]) -> Vec<String> {
    const DIRS: [&str; 8] = ["examples/", "deploy/", "charts/", "tools/", "docs/", "ci/", "crates/", "tests/"];
    w.iter()
        .flat_map(|s| s.split('=').map(|p| p.trim_matches(|c| c == '[' || c == ']').to_string()).collect::<Vec<_>>())
        .filter(|s| DIRS.iter().any(|d| s.starts_with(d)) && !s.contains('*') && !s.contains('$'))
        .collect()
}

/// Variants of a command with `[...]` optional parts: all left out, all kept.
fn variants(cmd: &str) -> Vec<String> {
    if !cmd.contains('[') {
        return vec![cmd.to_string()];
    }
    let mut without = String::new();
    let mut depth = 0;
    for c in cmd.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            c if depth == 0 => without.push(c),
            _ => {}
        }
    }
    vec![without, cmd.replace(['[', ']'], "")]
}

#[test]
fn every_shell_command_in_the_docs_runs_or_is_skipped_by_a_rule() {
    let mut failures = Vec::new();
    let (mut ran, mut checked, mut skipped) = (0, 0, 0);
    let mut helps: std::collections::HashMap<String, Vec<String>> = std::collections::HashMap::new();
    let all: Vec<(String, String)> = pages().iter().flat_map(|(page, text)| commands(page, text)).collect();
    assert!(all.len() > 20, "too few shell commands found in the docs: {all:?}");
    for (at, cmd) in &all {
        let w = words(cmd);
        for p in repo_paths(&w) {
            if !root().join(&p).exists() {
                failures.push(format!("{at}: `{cmd}` names {p}, which is not in the repository"));
            }
        }
        let Some(args) = berth_args(&w) else {
            if w.first().is_some_and(|s| s == "python3") && w.get(1).is_some_and(|s| s == "docs/check_links.py") {
                match Command::new("sh").arg("-c").arg(cmd).current_dir(root()).output() {
                    Ok(out) if out.status.success() => {
                        ran += 1;
                        println!("RAN      {at}: {cmd}");
                    }
                    Ok(out) => failures.push(format!("{at}: `{cmd}` failed: {}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))),
                    Err(e) => {
                        skipped += 1;
                        println!("SKIPPED  {at}: {cmd} (python3 not runnable: {e})");
                    }
                }
            } else {
                skipped += 1;
                println!("SKIPPED  {at}: {cmd} (not berth: needs {})", w.first().map(String::as_str).unwrap_or("?"));
            }
            continue;
        };
        let Some(sub) = args.first().cloned().filter(|s| !s.starts_with('-') && !s.starts_with('<')) else {
            skipped += 1;
            println!("SKIPPED  {at}: {cmd} (no subcommand)");
            continue;
        };
        let known = helps.entry(sub.clone()).or_insert_with(|| help_flags(&sub)).clone();
        for f in args.iter().filter(|a| a.starts_with("--")).map(|a| a.split('=').next().unwrap_or(a).trim_start_matches('[').trim_end_matches(']').to_string()) {
            if !known.contains(&f) {
                failures.push(format!("{at}: `{cmd}`: berth {sub} has no flag {f} (its --help lists {})", known.join(" ")));
            }
        }
        let pipeline = cmd.contains('|') || cmd.contains('&') || cmd.contains('>') || cmd.contains("$(");
        let offline = matches!(sub.as_str(), "explain" | "simulate") && args.iter().any(|a| a == "--cluster" || a == "-f");
        let help = args.iter().any(|a| a == "--help");
        if pipeline || !(offline || help) {
            checked += 1;
            let why = if pipeline { "a pipeline or background job" } else { "needs a live cluster, a server, or runs long" };
            println!("FLAGS    {at}: {cmd} (not run: {why}; its flags checked)");
            continue;
        }
        let line = w.join(" ");
        let from = line.find(&sub).unwrap_or(0);
        for v in variants(&line[from..]) {
            let vw = words(&v);
            let missing: Vec<&String> = vw.iter().filter(|s| s.ends_with(".yaml") && !root().join(s).exists()).collect();
            if !missing.is_empty() {
                failures.push(format!("{at}: `{v}` names {missing:?}, not in the repository (use examples/)"));
                continue;
            }
            let out = berth().args(&vw).output().expect("berth runs");
            if out.status.success() {
                ran += 1;
                println!("RAN      {at}: berth {v}");
            } else {
                failures.push(format!("{at}: `berth {v}` failed: {}", String::from_utf8_lossy(&out.stderr)));
            }
        }
    }
    println!("{ran} run, {checked} flag-checked, {skipped} skipped");
    assert!(ran >= 5, "too few commands ran: {ran}");
    assert!(failures.is_empty(), "{} doc command(s) wrong:\n{}", failures.len(), failures.join("\n"));
}

/// Every flag of every command is documented on the command's page.
#[test]
fn every_flag_of_every_command_is_documented() {
    let pages: std::collections::HashMap<String, String> = pages().into_iter().collect();
    let page_of = [
        ("run", "docs/configuration.md"),
        ("explain", "docs/explain-simulate.md"),
        ("simulate", "docs/explain-simulate.md"),
        ("dump", "docs/explain-simulate.md"),
        ("cluster", "docs/local-cluster.md"),
        ("demo", "docs/local-cluster.md"),
        ("bench", "docs/benchmarks.md"),
        ("cluster-bench", "docs/benchmarks.md"),
        ("differential", "docs/testing.md"),
    ];
    let mut missing = Vec::new();
    for (sub, page) in page_of {
        let text = pages.get(page).unwrap_or_else(|| panic!("{page} missing"));
        for f in help_flags(sub) {
            // A flag is documented when the page names it as a word: `--flag` followed by no more of a name.
            let named = text.match_indices(&f).any(|(i, _)| !text[i + f.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '-'));
            if !named {
                missing.push(format!("berth {sub} {f} (in {page})"));
            }
        }
    }
    assert!(missing.is_empty(), "flags that --help lists and the docs do not:\n{}", missing.join("\n"));
}

/// The defaults the docs state are the ones --help shows.
#[test]
fn documented_defaults_match_help() {
    let help = |sub: &str| String::from_utf8_lossy(&berth().args([sub, "--help"]).output().expect("berth runs").stdout).into_owned();
    let explain = std::fs::read_to_string(root().join("docs/explain-simulate.md")).expect("docs");
    for sub in ["explain", "simulate"] {
        assert!(help(sub).contains("[default: 0x5eed]") && explain.contains("(default `0x5eed`)"), "--seed");
    }
    let run = help("run");
    let config = std::fs::read_to_string(root().join("docs/configuration.md")).expect("docs");
    assert!(run.contains("[default: 0.0.0.0:10259]") && config.contains("| `--bind-address` | `0.0.0.0:10259`"), "--bind-address");
    assert!(run.contains("/debug/shadow"), "--bind-address serves /debug/shadow too: {run}");
}

#[test]
fn the_parser_of_the_docs_reads_what_the_docs_write() {
    let c = commands("x.md", "```sh\nberth a --b c \\\n  --d 'e f'   # note\n# only a comment\nkubectl get x -o jsonpath='{.a}{\"\\n\"}'\n```\n```yaml\nnot: sh\n```\n");
    assert_eq!(c.len(), 2, "{c:?}");
    assert_eq!(words(&c[0].1), ["berth", "a", "--b", "c", "--d", "e f"]);
    assert_eq!(c[0].0, "x.md:2");
    assert_eq!(variants("explain --cluster x [--config y] --pod p"), ["explain --cluster x  --pod p", "explain --cluster x --config y --pod p"]);
    assert_eq!(berth_args(&words("cargo run --release -- demo")), Some(vec!["demo".to_string()]));
}
