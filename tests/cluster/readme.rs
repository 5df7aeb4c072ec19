//! The shell blocks of README.md and docs/*.md run as written against a cluster.
//!
//! Every fenced block tagged `sh`, `bash` or `console` is run, in document order, against
//! one single-node cluster this test starts, each block as one `sh` script (so an `export`
//! carries to the block's later lines), in a scratch directory that holds what the blocks
//! name: `config/` (the repository's), `ratelimit.yaml` and `edge.yaml` (copies of
//! docs/envoy-ratelimit.yaml) and an empty `backups/`. `weir` is the debug binary on
//! `PATH`, with `WEIR_SERVERS` naming the cluster; `./target/release/weir`,
//! `target/release/weir` and `cargo run --release --` are read as `weir`, and `/backups/` as
//! the scratch directory's `backups/`. In a `console` block only lines starting `$ ` are
//! commands; the rest is output.
//!
//! The convention of the documents:
//! - A command (a line, with its `\` continuation lines) must exit 0, unless its comment
//!   says `(exit N)`: then it must exit N.
//! - A block whose info string carries `no-run` is not run: it starts or stops nodes
//!   (`serve`, `kill`, `snapshot restore`), builds, fuzzes or benches, or needs a tool or a
//!   fixed port the test does not have. The block tagged `http-example` is run by
//!   `http::the_readme_curl_examples_run_against_a_follower` instead.
//! - An untagged block whose first command reads like a shell command (`weir `, `curl `,
//!   `cargo `, `./`) fails this test: tag it `sh` so it runs, or `sh no-run`.
//!
//! Each block has 30 s; the whole run takes a few seconds.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::ELECTION;
use crate::harness::{Cluster, phase};

/// Time one block may take before it is killed and the test fails.
const BLOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// One fenced block of a document: where it opens, its info string, its lines.
struct Block {
    file: &'static str,
    line: usize,
    info: String,
    lines: Vec<String>,
}

/// One command of a block: the document line it starts on, its text (continuation lines
/// joined by newlines) and the exit status its comment expects.
struct Step {
    line: usize,
    text: String,
    exit: i32,
}

/// The documents whose blocks run, relative to the repository root.
const DOCUMENTS: [&str; 6] = [
    "README.md",
    "docs/benchmarks.md",
    "docs/design.md",
    "docs/envoy.md",
    "docs/fuzzing.md",
    "docs/security.md",
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The fenced blocks of `file`, in order.
fn blocks(file: &'static str) -> Vec<Block> {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        let Some(fence) = line.trim_start().strip_prefix("```") else {
            if let Some(block) = open.as_mut() {
                block.lines.push(line.to_string());
            }
            continue;
        };
        match open.take() {
            Some(block) => blocks.push(block),
            None => {
                open = Some(Block {
                    file,
                    line: i + 1,
                    info: fence.trim().to_string(),
                    lines: Vec::new(),
                })
            }
        }
    }
    assert!(open.is_none(), "{file}: a fenced block is never closed");
    blocks
}

/// The expected exit status a command's comment names (`(exit N)`), else 0.
fn expected_exit(text: &str) -> i32 {
    let Some(comment) = text.split_once(" #").map(|(_, c)| c) else {
        return 0;
    };
    comment
        .split("(exit ")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .map(|n| {
            n.parse()
                .unwrap_or_else(|_| panic!("`(exit {n})` names no status"))
        })
        .unwrap_or(0)
}

/// The commands of `block`.
fn steps(block: &Block) -> Vec<Step> {
    let console = block.info.starts_with("console");
    let mut steps: Vec<Step> = Vec::new();
    let mut continued = false;
    for (i, raw) in block.lines.iter().enumerate() {
        let line = block.line + 1 + i;
        let text = if console && !continued {
            match raw.strip_prefix("$ ") {
                Some(command) => command,
                None => continue,
            }
        } else {
            raw.as_str()
        };
        if continued {
            let step = steps.last_mut().unwrap();
            step.text.push('\n');
            step.text.push_str(text);
        } else if !text.trim().is_empty() && !text.trim_start().starts_with('#') {
            steps.push(Step {
                line,
                text: text.to_string(),
                exit: 0,
            });
        }
        continued = text.trim_end().ends_with('\\');
    }
    for step in &mut steps {
        step.exit = expected_exit(&step.text);
    }
    steps
}

/// `text` with the documents' ways of naming the binary and absolute paths read as the
/// scratch directory's.
fn localize(text: &str) -> String {
    text.replace("cargo run --release --", "weir")
        .replace("./target/release/weir", "weir")
        .replace("target/release/weir", "weir")
        .replace("/backups/", "backups/")
}

/// The script of `block`: each command, then a check of its status that names its line.
fn script(block: &Block) -> String {
    let mut script = String::new();
    for step in steps(block) {
        let first = step.text.lines().next().unwrap_or("").replace('\'', "");
        script.push_str(&format!(
            "{}\nrc=$?; if [ $rc -ne {exit} ]; then echo '{}:{}: exit '$rc', expected {exit}: {first}' >&2; exit 1; fi\n",
            localize(&step.text),
            block.file,
            step.line,
            exit = step.exit,
        ));
    }
    script
}

/// Whether an untagged block reads like shell commands.
fn looks_like_shell(block: &Block) -> bool {
    let first = block.lines.iter().find(|l| !l.trim().is_empty());
    first.is_some_and(|l| {
        let l = l.trim_start();
        ["weir ", "curl ", "cargo ", "./", "$ "]
            .iter()
            .any(|p| l.starts_with(p))
    })
}

/// A scratch directory holding what the blocks name, and a `bin/` with `weir` in it.
fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weir-readme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    std::fs::create_dir_all(dir.join("backups")).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_weir"), dir.join("bin/weir")).unwrap();
    std::os::unix::fs::symlink(root().join("config"), dir.join("config")).unwrap();
    for name in ["ratelimit.yaml", "edge.yaml"] {
        std::fs::copy(root().join("docs/envoy-ratelimit.yaml"), dir.join(name)).unwrap();
    }
    dir
}

/// Runs `script` in `dir` against `servers`, killed after [`BLOCK_TIMEOUT`]; returns
/// (success, stdout and stderr).
fn run(script: &str, dir: &Path, servers: &str) -> (bool, String) {
    let path = format!(
        "{}:{}",
        dir.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env("PATH", path)
        .env("WEIR_SERVERS", servers)
        .env_remove("WEIR_TOKEN")
        .env_remove("WEIR_CA")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + BLOCK_TIMEOUT;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn the_convention_reads_exit_statuses_and_continuations() {
    let block = Block {
        file: "x.md",
        line: 10,
        info: "sh".into(),
        lines: vec![
            "weir a    # refused (exit 3): why".into(),
            "# a comment line".into(),
            "weir b \\".into(),
            "  --c".into(),
        ],
    };
    let steps = steps(&block);
    assert_eq!(steps.len(), 2);
    assert_eq!((steps[0].line, steps[0].exit), (11, 3));
    assert_eq!(
        (steps[1].line, steps[1].text.as_str()),
        (13, "weir b \\\n  --c")
    );
    assert_eq!(steps[1].exit, 0);
    let console = Block {
        info: "console".into(),
        lines: vec!["$ weir status".into(), "leader 1".into()],
        ..block
    };
    assert_eq!(steps_text(&console), ["weir status"]);
}

fn steps_text(block: &Block) -> Vec<String> {
    steps(block).into_iter().map(|s| s.text).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documents_shell_blocks_run_as_written() {
    let all: Vec<Block> = DOCUMENTS.iter().flat_map(|f| blocks(f)).collect();
    let untagged: Vec<String> = all
        .iter()
        .filter(|b| b.info.is_empty() && looks_like_shell(b))
        .map(|b| format!("{}:{}", b.file, b.line))
        .collect();
    assert!(
        untagged.is_empty(),
        "untagged blocks of shell commands (tag them ```sh, or ```sh no-run): {untagged:?}"
    );
    let runnable: Vec<&Block> = all
        .iter()
        .filter(|b| {
            let mut words = b.info.split_whitespace();
            matches!(words.next(), Some("sh" | "bash" | "console"))
                && !words.any(|w| w == "no-run" || w == "http-example")
        })
        .collect();
    assert!(
        runnable.len() >= 4,
        "the README's runnable blocks were found: {}",
        runnable.len()
    );

    let cluster = Cluster::start("readme", 1, "");
    cluster.leader(ELECTION).await;
    let servers = cluster.servers().join(",");
    let dir = scratch();
    let mut failures = Vec::new();
    for block in runnable {
        phase(&format!("{}:{}", block.file, block.line));
        let (ok, output) = run(&script(block), &dir, &servers);
        if !ok {
            failures.push(format!("{}:{}: {output}", block.file, block.line));
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
