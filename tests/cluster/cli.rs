//! Every CLI subcommand end to end against a three-node cluster: exit codes, output, JSON keys.

use std::time::{Duration, Instant};

use crate::ELECTION;
use crate::harness::{Cluster, phase};

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {out:?}"))
}

fn keys(v: &serde_json::Value, keys: &[&str]) {
    for k in keys {
        assert!(v.get(*k).is_some(), "missing {k} in {v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_runs_a_command_under_a_permit_and_every_other_subcommand_works() {
    let cluster = Cluster::start("cli-all", 3, "");
    cluster.leader(ELECTION).await;
    let ok = |args: &[&str]| cluster.cli_ok(args);
    ok(&["limit", "define", "db", "--concurrent", "1"]);
    ok(&[
        "limit",
        "define",
        "api",
        "--per-second",
        "2",
        "--burst",
        "2",
    ]);

    phase("acquire -- COMMAND: WEIR_FENCE, the command's exit status, released after");
    let (code, out, err) = cluster.cli(&[
        "acquire",
        "db",
        "--",
        "sh",
        "-c",
        "echo fence=$WEIR_FENCE units=$WEIR_UNITS; exit 7",
    ]);
    assert_eq!(code, 7, "{err}");
    let fence: u64 = out
        .trim()
        .strip_prefix("fence=")
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(fence > 0 && out.contains("units=1"), "{out}");
    let v = json(&ok(&["limit", "show", "db", "--json"]));
    assert_eq!(
        (v["in_use"].as_u64(), v["max_in_use"].as_u64()),
        (Some(0), Some(1)),
        "released after the command"
    );

    phase(
        "acquire -- COMMAND, interrupted: the command gets SIGTERM, its status is weir's, released",
    );
    let mut interrupted = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "acquire",
            "db",
            "--",
            "sh",
            "-c",
            "trap 'echo got-term; exit 5' TERM; echo ready; i=0; while [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done",
        ])
        .env("WEIR_SERVERS", cluster.servers().join(","))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(interrupted.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert_eq!(line, "ready\n", "the command started under the permit");
    assert_eq!(json(&ok(&["limit", "show", "db", "--json"]))["in_use"], 1);
    // What ctrl-c sends, to weir alone: it must pass it on as SIGTERM.
    let sent = std::process::Command::new("kill")
        .args(["-INT", &interrupted.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    line.clear();
    std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
    assert_eq!(line, "got-term\n", "the command was sent SIGTERM");
    assert_eq!(
        interrupted.wait().unwrap().code(),
        Some(5),
        "the command's status"
    );
    assert_eq!(
        json(&ok(&["limit", "show", "db", "--json"]))["in_use"],
        0,
        "released once the command ended"
    );

    phase("acquire --hold, --no-wait and --timeout while it is held");
    let holder = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["acquire", "db", "--hold", "3", "--json"])
        .env("WEIR_SERVERS", cluster.servers().join(","))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while json(&ok(&["limit", "show", "db", "--json"]))["in_use"] != 1 {
        assert!(Instant::now() < deadline, "the hold never took the permit");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, _, err) = cluster.cli(&["acquire", "db", "--no-wait", "--hold", "1"]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("busy: no room until a release; db lacks room: 1 of 1 in use, needs 1"),
        "{err}"
    );
    let (code, _, err) = cluster.cli(&["acquire", "db", "--timeout", "0.3", "--hold", "1"]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("timed out after 0.3 s waiting for default/db; db lacks room: 1 of 1 in use"),
        "{err}"
    );
    let held = holder.wait_with_output().unwrap();
    assert_eq!(held.status.code(), Some(0));
    keys(
        &json(&String::from_utf8_lossy(&held.stdout)),
        &["tenant", "name", "fence", "units"],
    );
    let (code, _, err) = cluster.cli(&["acquire", "db", "--units", "2", "--hold", "1"]);
    assert_eq!(code, 3);
    assert!(
        err.contains("refused: too large for default/db: 2 units, the limit grants at most 1"),
        "the refusal names the limit: {err}"
    );
    let (code, _, err) = cluster.cli(&["acquire", "nope", "--hold", "1"]);
    assert_eq!(
        (code, err.contains("refused: unknown limit default/nope")),
        (3, true),
        "{err}"
    );
    let (code, _, _) = cluster.cli(&["acquire", "db"]);
    assert_eq!(code, 2, "neither --hold nor a command");

    phase("tenant set, run reserve / release / settle / list, spent");
    let v = json(&ok(&[
        "tenant",
        "set",
        "--tenant",
        "acme",
        "--max-running",
        "1",
        "--budget-tokens",
        "100",
        "--json",
    ]));
    assert_eq!(
        (v["max_running"].as_u64(), v["budget_tokens"].as_u64()),
        (Some(1), Some(100))
    );
    assert_eq!(
        ok(&[
            "run", "reserve", "--tenant", "acme", "r1", "--period", "2026-12"
        ])
        .trim(),
        "admitted acme/r1"
    );
    ok(&[
        "run", "reserve", "--tenant", "acme", "r1", "--period", "2026-12",
    ]);
    let (code, _, err) = cluster.cli(&["run", "reserve", "--tenant", "acme", "r2"]);
    assert_eq!(code, 3);
    assert!(err.contains("too many runs in acme: 1 running"), "{err}");
    let runs = json(&ok(&["run", "list", "--tenant", "acme", "--json"]));
    assert_eq!(runs.as_array().unwrap().len(), 1);
    keys(&runs[0], &["run", "admitted_at_ms", "agent"]);
    // The same settlement twice: charged once, the second answered as a duplicate.
    let settle = [
        "run",
        "settle",
        "--tenant",
        "acme",
        "r1",
        "--epoch",
        "1",
        "--period",
        "2026-12",
        "--tokens",
        "100",
        "--minor",
        "250",
        "--release-slot",
        "--json",
    ];
    let v = json(&ok(&settle));
    assert_eq!(v["duplicate"], false);
    let v = json(&ok(&settle));
    assert_eq!(v["duplicate"], true);
    let (code, _, err) = cluster.cli(&[
        "run", "settle", "--tenant", "acme", "r1", "--epoch", "1", "--period", "2026-12",
        "--tokens", "1",
    ]);
    assert_eq!(code, 3);
    assert!(
        err.contains(
            "refused: conflict: acme run r1 epoch 1 was settled before with another payload"
        ),
        "the refusal names the settlement key: {err}"
    );
    let spent = json(&ok(&["spent", "--tenant", "acme", "2026-12", "--json"]));
    keys(
        &spent,
        &[
            "tenant",
            "period",
            "tokens",
            "minor_units",
            "held_tokens",
            "held_minor_units",
        ],
    );
    assert_eq!(
        (spent["tokens"].as_u64(), spent["minor_units"].as_u64()),
        (Some(100), Some(250))
    );
    phase("tenant show: ceilings, budgets, spend and halts; WEIR_TENANT names the tenant too");
    let shown = ok(&["tenant", "show", "--tenant", "acme", "--period", "2026-12"]);
    for line in [
        "max running   1 (0 running)",
        "budget tokens 100",
        "spent in 2026-12   100 tokens, 250 minor units",
        "halts         none",
    ] {
        assert!(shown.contains(line), "{line:?} not in {shown}");
    }
    let by_env = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["spent", "2026-12", "--json"])
        .env("WEIR_SERVERS", cluster.servers().join(","))
        .env("WEIR_TENANT", "acme")
        .output()
        .unwrap();
    let v = json(&String::from_utf8_lossy(&by_env.stdout));
    assert_eq!(
        (v["tenant"].as_str(), v["tokens"].as_u64()),
        (Some("acme"), Some(100))
    );
    let (code, _, err) = cluster.cli(&[
        "run", "reserve", "--tenant", "acme", "r2", "--period", "2026-12",
    ]);
    assert_eq!(code, 3);
    assert!(
        err.contains("budget exhausted for acme period 2026-12: spent 100 of 100 tokens"),
        "{err}"
    );
    // Holds: r2 holds 60 of 2027-01's 100 tokens; a second hold of 50 does not fit.
    ok(&[
        "run",
        "reserve",
        "--tenant",
        "acme",
        "r2",
        "--period",
        "2027-01",
        "--hold-tokens",
        "60",
    ]);
    let held = json(&ok(&["spent", "--tenant", "acme", "2027-01", "--json"]));
    assert_eq!(held["held_tokens"].as_u64(), Some(60));
    assert!(ok(&["spent", "--tenant", "acme", "2027-01"]).contains("held 60 tokens"));
    ok(&["tenant", "set", "--tenant", "acme", "--max-running", "none"]);
    let (code, _, err) = cluster.cli(&[
        "run",
        "reserve",
        "--tenant",
        "acme",
        "r3",
        "--period",
        "2027-01",
        "--hold-tokens",
        "50",
    ]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("+ 60 held + 50 asked of 100 tokens"), "{err}");
    ok(&["run", "release", "--tenant", "acme", "r2"]);
    assert_eq!(
        json(&ok(&["spent", "--tenant", "acme", "2027-01", "--json"]))["held_tokens"].as_u64(),
        Some(0),
        "a released slot frees its hold"
    );
    ok(&["run", "release", "--tenant", "acme", "r2"]);
    ok(&["run", "release", "--tenant", "acme", "r2"]);
    assert_eq!(
        json(&ok(&["run", "list", "--tenant", "acme", "--json"]))
            .as_array()
            .unwrap()
            .len(),
        0
    );

    phase("halt set / list / clear, and a command whose permit a halt takes");
    ok(&[
        "limit",
        "define",
        "job",
        "--concurrent",
        "1",
        "--tenant",
        "acme",
    ]);
    let runner = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "acquire", "job", "--tenant", "acme", "--agent", "bot", "--", "sleep", "30",
        ])
        .env("WEIR_SERVERS", cluster.servers().join(","))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while json(&ok(&["limit", "show", "job", "--tenant", "acme", "--json"]))["in_use"] != 1 {
        assert!(
            Instant::now() < deadline,
            "the command never got its permit"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    ok(&[
        "halt",
        "set",
        "--tenant",
        "acme",
        "--agent",
        "bot",
        "--reason",
        "runaway loop",
    ]);
    let done = runner.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&done.stderr);
    assert_eq!(
        done.status.code(),
        Some(3),
        "a lost permit exits 3: {stderr}"
    );
    assert!(
        stderr.contains("halted (agent bot): runaway loop"),
        "{stderr}"
    );
    let halts = json(&ok(&["halt", "list", "--tenant", "acme", "--json"]));
    assert_eq!(halts[0]["reason"], "runaway loop");
    keys(&halts[0], &["scope", "agent", "reason"]);
    let (code, _, err) =
        cluster.cli(&["run", "reserve", "--tenant", "acme", "r9", "--agent", "bot"]);
    assert_eq!(code, 3);
    assert!(
        err.contains("refused: halted acme (agent bot): runaway loop"),
        "the refusal names the tenant and prints the reason: {err}"
    );
    ok(&[
        "run", "reserve", "--tenant", "acme", "r9", "--agent", "human",
    ]);
    ok(&["halt", "clear", "--tenant", "acme", "--agent", "bot"]);
    assert_eq!(
        json(&ok(&["halt", "list", "--tenant", "acme", "--json"]))
            .as_array()
            .unwrap()
            .len(),
        0
    );
    ok(&["run", "release", "--tenant", "acme", "r9"]);
    ok(&[
        "run", "reserve", "--tenant", "acme", "r10", "--agent", "bot",
    ]);

    phase("limit remove");
    ok(&["limit", "remove", "api"]);
    let (code, _, _) = cluster.cli(&["limit", "show", "api"]);
    assert_eq!(code, 1);
}

#[test]
fn bench_spawns_its_own_cluster_and_prints_the_json_shape() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args([
            "bench",
            "--spawn",
            "3",
            "--clients",
            "4",
            "--duration",
            "1",
            "--warmup",
            "0.2",
            "--limits",
            "4",
            "--json",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v = json(&String::from_utf8_lossy(&out.stdout));
    keys(
        &v,
        &[
            "workload",
            "clients",
            "ops",
            "ops_per_s",
            "p50_ms",
            "p99_ms",
            "p999_ms",
            "max_ms",
            "errors",
        ],
    );
    assert_eq!(
        (
            v["workload"].as_str(),
            v["clients"].as_u64(),
            v["verified"].as_bool()
        ),
        (Some("acquire-release"), Some(4), Some(true))
    );
    assert!(
        v["ops"].as_u64().unwrap() > 0,
        "some operations completed: {v}"
    );
    assert!(stderr.contains("[bench]"), "a progress line: {stderr}");
    let (code, _, _) = (
        std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["bench", "--failover", "1"])
            .output()
            .unwrap()
            .status
            .code(),
        (),
        (),
    );
    assert_eq!(code, Some(2), "--failover without --spawn is a usage error");
}

/// `weir bench --spawn 1 --workload WORKLOAD` with four clients for a second, and `extra`:
/// its exit status checked (0), its JSON report, and its stderr.
fn bench_on_one_node(workload: &str, extra: &[&str]) -> (serde_json::Value, String) {
    #[rustfmt::skip]
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["bench", "--spawn", "1", "--workload", workload, "--clients", "4",
               "--duration", "1", "--warmup", "0.2", "--limits", "1", "--json"])
        .args(extra)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{workload} {extra:?}: {stderr}");
    let v = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(v["workload"].as_str(), Some(workload), "{v}");
    (v, stderr)
}

#[test]
fn bench_runs_the_keyed_take_and_multi_workloads_without_a_refusal() {
    // A take of the keyed limit without its key, or of the parts without the model's key,
    // is refused: no error at all says every take named its keys.
    for workload in ["keyed-take", "multi"] {
        let (v, stderr) = bench_on_one_node(workload, &[]);
        assert!(v["ops"].as_u64().unwrap() > 0, "{workload}: {v}");
        assert_eq!(v["errors"].as_u64(), Some(0), "{workload}: {v}\n{stderr}");
    }
}

#[test]
fn bench_leased_take_decides_takes_locally_and_checks_the_bound_in_spend_time() {
    // A limit the clients exhaust, one far above what they take (the hot mode), and 10 Zipf
    // keys of which each client leases the ones it sees often.
    for extra in [&[][..], &["--lease-rate", "1e9"], &["--lease-keys", "10"]] {
        let (v, stderr) = bench_on_one_node("leased-take", extra);
        assert_eq!(v["errors"].as_u64(), Some(0), "{extra:?}: {v}\n{stderr}");
        let line = stderr
            .lines()
            .find(|l| l.starts_with("[bench] leased-take: "))
            .unwrap_or_else(|| panic!("no leased-take figures: {stderr}"));
        assert!(line.contains("under its bound"), "{line}");
        let lease = &v["lease"];
        let figure = |name: &str| {
            lease[name]
                .as_u64()
                .unwrap_or_else(|| panic!("{name}: {v}"))
        };
        assert!(
            figure("local_takes") > 0,
            "no take was decided locally: {v}"
        );
        assert!(
            lease["worst_window_over_bound"].as_f64().unwrap() <= 0.0,
            "{v}"
        );
        let per_1k = (figure("cluster_asks") + figure("lease_requests")) as f64 * 1000.0
            / (figure("local_takes") + figure("cluster_takes")) as f64;
        let reported = lease["commands_per_1k_takes"].as_f64().unwrap();
        assert!((per_1k - reported).abs() < 1e-6, "{v}");
        if extra.first() == Some(&"--lease-rate") {
            // Every take is covered by a lease: none asked of the cluster, and the four
            // leases cost their first request, their end, and few renewals if any.
            assert_eq!(figure("cluster_asks"), 0, "{v}");
            assert!(figure("lease_requests") <= 16, "{v}");
        }
        if extra.first() == Some(&"--lease-keys") {
            assert_eq!(lease["keys"].as_u64(), Some(10), "{v}");
            assert_eq!(lease["keys_checked"].as_u64(), Some(10), "{v}");
            // A key is asked of the cluster until it is seen often: one command a take.
            assert!(figure("cluster_asks") >= 4, "{v}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_rate_take_proposes_one_command_per_take() {
    let cluster = Cluster::start("cli-bench-take", 1, "");
    let leader = cluster.leader(ELECTION).await;
    #[rustfmt::skip]
    let out = cluster.cli_ok(&["bench", "--workload", "rate-take", "--clients", "4",
                               "--duration", "1", "--warmup", "0", "--limits", "1", "--json"]);
    let v = json(&out);
    let ops = v["ops"].as_f64().unwrap();
    assert!(ops > 0.0 && v["errors"].as_u64() == Some(0), "{v}");
    let url = format!("http://{}/metrics", cluster.node(leader).config.http_listen);
    let text = reqwest::get(&url).await.unwrap().text().await.unwrap();
    let commands: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("weir_batch_commands_sum "))
        .expect("the commands proposed")
        .parse()
        .unwrap();
    // A take is one command; besides them the run defines two limits, opens and closes four
    // sessions and keeps them alive. A permit dropped after each take would propose a
    // release beside it: twice the takes.
    assert!(
        commands >= ops && commands < ops * 1.2 + 50.0,
        "{commands} commands proposed for {ops} takes"
    );
}

#[test]
fn bench_runs_the_rls_workload_over_grpc_on_a_spawned_cluster() {
    #[rustfmt::skip]
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["bench", "--spawn", "3", "--workload", "rls", "--clients", "4",
               "--duration", "1", "--warmup", "0.2", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(v["workload"].as_str(), Some("rls"), "{v}");
    assert_eq!(v["clients"].as_u64(), Some(4), "{v}");
    // Every take answered OK and named the limit: a descriptor no limit matched, or a
    // refusal, would count as an error.
    assert!(v["ops"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["errors"].as_u64(), Some(0), "{v}\n{stderr}");
    assert!(v["p50_ms"].as_f64().unwrap() > 0.0, "{v}");
    // Distinct API keys on one keyed rule: every answer OK with its key's bucket.
    #[rustfmt::skip]
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["bench", "--spawn", "3", "--workload", "rls", "--rls-keys", "500",
               "--clients", "4", "--duration", "1", "--warmup", "0.2", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v = json(&String::from_utf8_lossy(&out.stdout));
    assert!(v["ops"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["errors"].as_u64(), Some(0), "{v}\n{stderr}");
    // The keys the run asked and what the rule held: every key within the bound, none
    // answered without room, and some live while the run went on.
    let keys = &v["keys"];
    assert_eq!(keys["keys"].as_u64(), Some(500), "{v}");
    assert_eq!(keys["keys_max"].as_u64(), Some(500), "{v}");
    assert_eq!(keys["keys_full"].as_u64(), Some(0), "{v}");
    let live = keys["live_max"].as_u64().unwrap();
    assert!((1..=500).contains(&live), "{v}");
    let rounds = keys["rounds"].as_f64().unwrap();
    assert!(rounds > 0.0, "{v}");
    let per_minute = keys["distinct_per_minute"].as_u64().unwrap();
    assert!((1..=500).contains(&per_minute), "{v}");
}

/// `redis-server` on PATH, where `.ci/run` installs it; elsewhere the test says it skipped.
fn redis_installed() -> bool {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .any(|dir| dir.join("redis-server").is_file())
}

#[test]
fn bench_against_redis_runs_weirs_takes_and_redis_lua_bucket_with_both_fsyncs() {
    if !redis_installed() {
        eprintln!("skipped: redis-server is not installed (Debian: redis-server)");
        return;
    }
    #[rustfmt::skip]
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["bench", "--spawn", "3", "--against", "redis", "--workload", "rate-take",
               "--clients", "4", "--duration", "1", "--warmup", "0.2", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v = json(&String::from_utf8_lossy(&out.stdout));
    for (run, workload) in [
        ("weir_rate_take", "rate-take"),
        ("weir_rls", "rls"),
        ("redis_always", "rate-take"),
        ("redis_everysec", "rate-take"),
    ] {
        let r = &v[run];
        assert_eq!(r["workload"].as_str(), Some(workload), "{run}: {v}");
        assert!(r["ops"].as_u64().unwrap() > 0, "{run}: {v}");
        // On Redis a refused take of the bucket that never runs short is an error too.
        assert_eq!(r["errors"].as_u64(), Some(0), "{run}: {v}\n{stderr}");
    }
    let ratio = v["rate_take_over_always"].as_f64().unwrap();
    let expected = v["weir_rate_take"]["ops_per_s"].as_f64().unwrap()
        / v["redis_always"]["ops_per_s"].as_f64().unwrap();
    assert!((ratio - expected).abs() < 1e-9, "{v}");
    // Each Redis ran in a directory of its own, removed with it.
    for fsync in ["always", "everysec"] {
        let dir = std::env::temp_dir().join(format!("weir-bench-redis-{fsync}-{pid}"));
        assert!(!dir.exists(), "{} left behind", dir.display());
        // redis-server rewrites its command line, but it works in its directory.
        let running = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path().join("cwd")).ok())
            .any(|cwd| cwd.to_string_lossy().starts_with(&*dir.to_string_lossy()));
        assert!(!running, "a redis-server of {} still runs", dir.display());
    }
}

/// `weir bench --spawn 3 --workload keyed-scale --keys 2000`, with `--against redis` where
/// Redis is installed: the live keys built and what each costs, on the nodes and in Redis.
#[test]
fn bench_keyed_scale_builds_the_keys_asked_and_measures_them_in_redis_too() {
    let redis = redis_installed();
    if !redis {
        eprintln!("redis-server is not installed (Debian: redis-server): Weir's side only");
    }
    #[rustfmt::skip]
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["bench", "--spawn", "3", "--workload", "keyed-scale", "--keys", "2000", "--json"])
        .args(if redis { &["--against", "redis"][..] } else { &[] })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let v = json(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(v["workload"].as_str(), Some("keyed-scale"), "{v}");
    assert_eq!(v["live_keys"].as_u64(), Some(2000), "{v}");
    let nodes = v["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3, "{v}");
    for n in nodes {
        for figure in [
            "rss_mib",
            "rss_mib_before",
            "rss_bytes_per_key",
            "snapshot_bytes_per_key",
        ] {
            assert!(n[figure].as_f64().is_some(), "{figure} of {n}");
        }
        assert!(n["snapshot_bytes_per_key"].as_f64().unwrap() > 0.0, "{n}");
    }
    if !redis {
        return;
    }
    let r = &v["against"]["redis"];
    assert_eq!(r["keys"].as_u64(), Some(2000), "{v}");
    assert_eq!(r["persistence"].as_str(), Some("everysec"), "{v}");
    assert_eq!(
        (r["before"]["keys"].as_u64(), r["after"]["keys"].as_u64()),
        (Some(0), Some(2000)),
        "{v}"
    );
    let grown =
        r["after"]["used_memory"].as_f64().unwrap() - r["before"]["used_memory"].as_f64().unwrap();
    let per_key = r["used_memory_bytes_per_key"].as_f64().unwrap();
    assert!(
        per_key > 0.0 && (grown / 2000.0 - per_key).abs() <= 0.5,
        "{v}"
    );
    assert!(r["after"]["rss_bytes"].as_u64().unwrap() > 0, "{v}");
    assert!(r["rss_bytes_per_key"].as_i64().is_some(), "{v}");
    // The Redis ran in a directory of its own, removed with it.
    let dir = std::env::temp_dir().join(format!("weir-bench-redis-everysec-{pid}"));
    assert!(!dir.exists(), "{} left behind", dir.display());
}

#[test]
fn bench_keeps_the_spawned_clusters_directory_and_its_election_logs_when_asked() {
    let weir = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(args)
            .output()
            .unwrap()
    };
    let out = weir(&[
        "bench",
        "--spawn",
        "3",
        "--clients",
        "2",
        "--duration",
        "0.5",
        "--warmup",
        "0",
        "--limits",
        "2",
        "--keep-dir",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let dir = stderr
        .lines()
        .find_map(|l| l.strip_prefix("[bench] the cluster's directory, kept after the run: "))
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| panic!("the kept directory is named: {stderr}"));
    let logs: String = (1..=3)
        .map(|id| std::fs::read_to_string(dir.join(format!("node{id}.log"))).unwrap_or_default())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        logs.contains("become leader"),
        "openraft's election lines are logged: {} bytes of logs",
        logs.len()
    );
    let out = weir(&["bench", "--keep-dir"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--keep-dir needs --spawn"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn completions_and_the_man_page_are_generated_for_every_shell() {
    let weir = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    for shell in ["bash", "zsh", "fish"] {
        let script = weir(&["completions", shell]);
        assert!(
            script.contains("acquire") && script.contains("tenant"),
            "{shell}"
        );
    }
    let man = weir(&["man"]);
    assert!(
        man.contains(".TH weir"),
        "roff: {}",
        &man[..200.min(man.len())]
    );
    assert!(man.contains("acquire"));
}

/// `weir limits apply` refuses, before it sends anything and saying nothing was applied,
/// a file one apply cannot carry: too many limits, too many bytes, or a device that never
/// ends (read no further than the bound).
#[test]
fn limits_apply_refuses_a_file_one_apply_cannot_carry_and_says_nothing_was_applied() {
    let dir = std::env::temp_dir().join(format!("weir-cli-apply-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let many = dir.join("many.toml");
    let text: String = (0..300)
        .map(|i| format!("[limits.l{i}]\nconcurrent = 1\n"))
        .collect();
    std::fs::write(&many, text).unwrap();
    let huge = dir.join("huge.toml");
    std::fs::write(&huge, format!("# {}\n", "x".repeat(2 << 20))).unwrap();
    let apply = |file: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["limits", "apply", file])
            .env("WEIR_SERVERS", "127.0.0.1:1")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), stderr)
    };
    for (file, needle) in [
        (many.to_str().unwrap(), "the file defines 300 limits"),
        (huge.to_str().unwrap(), "larger than 1048576 bytes"),
        ("/dev/urandom", "larger than 1048576 bytes"),
    ] {
        let (code, stderr) = apply(file);
        assert_eq!(code, Some(2), "{file}: {stderr}");
        assert!(
            stderr.contains(needle) && stderr.contains("nothing was applied"),
            "{file}: {stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A refusal of a request of several parts names the part that lacked room and what it
/// lacked, and a `Busy` answer's retry time reads in seconds from now, not as a log time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_names_the_part_without_room_and_a_retry_in_seconds() {
    let cluster = Cluster::start("cli-room", 1, "");
    cluster.leader(ELECTION).await;
    let ok = |args: &[&str]| cluster.cli_ok(args);
    ok(&["limit", "define", "wide", "--concurrent", "5"]);
    ok(&["limit", "define", "narrow", "--concurrent", "1"]);
    // One token every 10 s: a refusal's retry is several seconds away.
    ok(&[
        "limit",
        "define",
        "slow",
        "--per-second",
        "0.1",
        "--burst",
        "1",
        "--keyed",
    ]);

    phase("narrow held: a request on wide and narrow names narrow");
    let mut holder = cluster.spawn_cli(&["acquire", "narrow", "--hold", "30"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while json(&ok(&["limit", "show", "narrow", "--json"]))["in_use"] != 1 {
        assert!(Instant::now() < deadline, "the hold never took the permit");
        std::thread::sleep(Duration::from_millis(20));
    }
    let args = [
        "acquire",
        "wide",
        "--part",
        "narrow",
        "--no-wait",
        "--hold",
        "0",
    ];
    let (code, _, err) = cluster.cli(&args);
    assert_eq!(code, 3, "{err}");
    assert_eq!(
        err.trim(),
        "weir: refused: busy: no room until a release; narrow lacks room: 1 of 1 in use, needs 1"
    );
    let args = [
        "acquire",
        "wide",
        "--part",
        "narrow",
        "--timeout",
        "0.2",
        "--hold",
        "0",
    ];
    let (code, _, err) = cluster.cli(&args);
    assert_eq!(code, 3, "{err}");
    assert_eq!(
        err.trim(),
        "weir: refused: timed out after 0.2 s waiting for default/wide; \
         narrow lacks room: 1 of 1 in use, needs 1"
    );
    holder.kill().unwrap();
    let _ = holder.wait();

    phase("a keyed rate part out of tokens: retry in seconds, the part and its key named");
    ok(&[
        "acquire",
        "wide",
        "--part",
        "slow@alice",
        "--no-wait",
        "--hold",
        "0",
    ]);
    let args = [
        "acquire",
        "wide",
        "--part",
        "slow@alice",
        "--no-wait",
        "--hold",
        "0",
    ];
    let (code, _, err) = cluster.cli(&args);
    assert_eq!(code, 3, "{err}");
    let rest = err
        .trim()
        .strip_prefix("weir: refused: busy: retry in ")
        .unwrap_or_else(|| panic!("{err}"));
    let (seconds, rest) = rest.split_once(" s; ").unwrap_or_else(|| panic!("{err}"));
    let seconds: f64 = seconds.parse().unwrap_or_else(|_| panic!("{err}"));
    assert!(seconds > 0.0 && seconds <= 10.0, "{err}");
    assert_eq!(
        rest,
        "slow@alice lacks room: 0 of 1 tokens at its last refill, needs 1 (refills 0.1 a second)"
    );
}
