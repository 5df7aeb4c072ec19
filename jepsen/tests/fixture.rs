//! A real history kept as a fixture (`jepsen/fixtures/kill-30s-seed3/`): one short run of
//! the harness against a default build (`--nemesis kill --duration 30 --seed 3`, loopback,
//! debug binaries, on the 2-core machine), its history and node logs gzipped, its
//! `verdict.txt` as the run wrote it (plus the `client kill` row, split off `liveness` after
//! the recording and judged on the same history by `--check`). Every checker is run on it again and must give the
//! recorded verdict, so a checker change that turns a real valid run invalid (or unknown)
//! shows here; and a copy with one grant duplicated must be flagged by the checker that
//! exists for it (P2: a fence granted twice).

use std::io::Read;
use std::path::{Path, PathBuf};

use weir_jepsen::checker::Verdict;
use weir_jepsen::history::{Kind, NEMESIS, Op};
use weir_jepsen::run::{Outcome, judge};

const FIXTURE: &str = "fixtures/kill-30s-seed3";

/// The nemeses the fixture's run requested (its verdict.txt's header says so too).
const REQUESTED: [&str; 1] = ["kill"];

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(FIXTURE)
}

fn gunzip(name: &str) -> String {
    let path = dir().join(name);
    let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut text = String::new();
    flate2::read::GzDecoder::new(file)
        .read_to_string(&mut text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text
}

fn history() -> Vec<Op> {
    gunzip("history.jsonl.gz")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| serde_json::from_str(l).unwrap_or_else(|e| panic!("line {}: {e}", i + 1)))
        .collect()
}

fn logs() -> Vec<(String, String)> {
    (1..=3)
        .map(|n| (format!("node{n}"), gunzip(&format!("node{n}.log.gz"))))
        .collect()
}

/// Judges `ops` as `weir-jepsen --check` does: the faults fired are read from the history.
fn rejudge(ops: &[Op]) -> Outcome {
    let requested: Vec<String> = REQUESTED.iter().map(|s| s.to_string()).collect();
    let fired: Vec<&'static str> = weir_jepsen::nemesis::ALL
        .iter()
        .copied()
        .filter(|k| {
            ops.iter()
                .any(|o| o.process == NEMESIS && o.kind == Kind::Info && o.f == *k)
        })
        .collect();
    judge(ops, &logs(), &requested, &fired, false)
}

/// (checker, verdict label) of each row of the recorded verdict.txt's table.
fn recorded() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(dir().join("verdict.txt")).expect("verdict.txt");
    text.lines()
        .skip_while(|l| !l.starts_with("checker"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        // The checker's name fills 12 columns (names hold spaces), then the verdict.
        .map(|l| {
            let name = l[..12].trim_end().to_string();
            let label = l[13..].split_whitespace().next().unwrap_or("").to_string();
            (name, label)
        })
        .collect()
}

#[test]
fn every_checker_gives_the_recorded_verdict_on_the_real_history() {
    let ops = history();
    let outcome = rejudge(&ops);
    let now: Vec<(String, String)> = outcome
        .rows
        .iter()
        .map(|(name, _, v)| (name.to_string(), v.label().to_string()))
        .collect();
    let recorded = recorded();
    assert_eq!(recorded.len(), 18, "the recorded table has every checker");
    assert_eq!(
        now, recorded,
        "re-judged verdicts differ from the recorded ones"
    );
    assert!(outcome.all_valid(), "the recorded run was valid throughout");
}

#[test]
fn a_duplicated_grant_is_flagged_by_the_fence_checker() {
    let mut ops = history();
    // One grant on the mutex (concurrent 1), recorded again by a process of its own: its
    // invoke just before the original's acknowledgement, the same fence.
    let at = ops
        .iter()
        .position(|o| {
            o.kind == Kind::Ok
                && o.f == "acquire"
                && o.value["limit"] == "mutex"
                && o.value.get("fence").is_some()
        })
        .expect("a grant on mutex");
    let grant = ops[at].clone();
    let fence = grant.value["fence"].as_u64().expect("fence");
    let copy_process = 90_000;
    let invoke = Op {
        process: copy_process,
        kind: Kind::Invoke,
        f: "acquire".into(),
        value: serde_json::json!({"limit": "mutex"}),
        time_ns: grant.time_ns - 1,
    };
    let mut copy = grant.clone();
    copy.process = copy_process;
    copy.value["invoke_ns"] = (grant.time_ns - 1).into();
    ops.insert(at + 1, copy);
    ops.insert(at, invoke);
    let outcome = rejudge(&ops);
    let verdict = |name: &str| {
        outcome
            .rows
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|(_, _, v)| v.clone())
            .expect("row")
    };
    assert_eq!(
        verdict("P2 fences"),
        Verdict::Invalid(format!("fence {fence} granted twice on mutex"))
    );
    // The mutated history is still well formed: the flag is the fence checker's finding,
    // not a harness error.
    assert_eq!(verdict("history"), Verdict::Valid);
}
