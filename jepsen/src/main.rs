//! `weir-jepsen`: runs one partition test and prints the checkers' verdicts. Exits 0 only
//! when every verdict is valid (1 when one is invalid, 2 on a harness error or an unknown).
//! `weir-jepsen sim` runs the deterministic simulator instead (`weir_jepsen::sim`).

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use clap::builder::TypedValueParser;
use weir_jepsen::cluster::Net;
use weir_jepsen::nemesis;
use weir_jepsen::netns::{self, Netns};
use weir_jepsen::run::{Plan, run, table};
use weir_jepsen::workload::{GoHolders, LeaseHolders, PythonHolders, TsHolders};

/// With `client-pause` requested, every which permit a Python, Go or TypeScript holder holds through a pause
/// past its TTL: often enough for a few a minute, rarely enough that most of its beliefs
/// are ordinary ones.
const PYTHON_PAUSE_EVERY: u64 = 5;

#[derive(Parser, Debug)]
#[command(name = "weir-jepsen", about = "Partition tests for Weir")]
struct Args {
    /// Comma list of partition,kill,pause,client-pause,clock,membership,delay,client-kill,
    /// power-loss,client-cut,client-delay, or `all` (in namespace mode, all but the last
    /// two: they need loopback mode's client fronts). Also the compound kinds, never in
    /// `all`: stall-then-kill, and with --nodes 5 kill-then-kill and
    /// stall-entry-then-kill-leader (judged by the `kept` checker).
    #[arg(long, default_value = "partition,kill,pause")]
    nemesis: String,
    /// Nodes in the cluster: 3, or 5 (quorum 3 of 5). On five, the faults that take one
    /// node can take two at once: kill or power off two (the leader among them, or not),
    /// isolate two, split 3|2 or 2|2|1 with the leader in a group of two. Five-node
    /// schedules are drawn apart from three-node ones: a seed's three-node schedule is
    /// the same with or without this option.
    #[arg(long, default_value_t = 3, value_parser = clap::builder::PossibleValuesParser::new(["3", "5"]).map(|s| s.parse::<u64>().expect("3 or 5")))]
    nodes: u64,
    /// Seconds of load and faults.
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// Seed of the fault schedule: the same seed replays the same schedule.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The weir binary (default: the one next to this harness).
    #[arg(long)]
    weir: Option<PathBuf>,
    /// Artifacts folder (history, node logs, verdict); default jepsen/runs/seed-N-<time>.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Network mode: `loopback` (a fault proxy on every link, no root) or `netns` (a network
    /// namespace per node, faults by nftables and tc; root).
    #[arg(long, default_value = "loopback", value_parser = ["loopback", "netns"])]
    net: String,
    /// Session TTL (ms) of the `fenced` workload's processes, the pausable holder's
    /// included; the client-pause nemesis pauses 1 to 2.5 s past it. Default: the harness's
    /// TTL, 3000. A longer TTL widens what a fast log clock or a zero margin opens in
    /// proportion (`jepsen/planted.sh`'s `margin-zero` row).
    #[arg(long, default_value_t = weir_jepsen::workload::TTL.as_millis() as u64)]
    fenced_ttl_ms: u64,
    /// Every node builds a snapshot after this many log entries and keeps no log behind it
    /// (`raft.snapshot_logs_since_last`; `max_in_snapshot_log_to_keep` 0, `purge_batch_size`
    /// 1), so snapshots are built, sent to lagging nodes, installed and loaded at restarts
    /// while the faults go on (a 30 s run applies a few thousand entries). 0: the nodes'
    /// defaults (10,000 entries, 1,000 kept), as a production cluster snapshots.
    #[arg(long, default_value_t = weir_jepsen::cluster::SNAPSHOT_EVERY)]
    snapshot_every: u64,
    /// Judge the history in this artifacts folder again instead of running.
    #[arg(long)]
    check: Option<PathBuf>,
    /// TLS on every node's client, peer and HTTP ports (a CA and certificates made in the
    /// artifacts folder's tls/), tokens with roles (admin, read, a tenant:NAME per tenant),
    /// every client with the least role its ops need; checked at the start to refuse
    /// plaintext and tokenless clients (the `security` row).
    #[arg(long)]
    secure: bool,
    /// Permit holders running the Python client (`clients/python`) as processes of their
    /// own, beside the Rust holders, on the same limits; their beliefs are judged with the
    /// rest. Every node then serves HTTP. Each pauses past its TTL every fifth permit when
    /// `client-pause` is requested.
    #[arg(long, default_value_t = 0)]
    python_holders: u64,
    /// The Python interpreter of the Python holders, with the client installed (a venv's
    /// `bin/python`); default `$WEIR_JEPSEN_PYTHON`, else `python3`.
    #[arg(long)]
    python: Option<PathBuf>,
    /// The Python holders' driver (default: `clients/python/tests/jepsen_holder.py`).
    #[arg(long)]
    python_holder_script: Option<PathBuf>,
    /// Permit holders running the Go client (`clients/go`) as processes of their own,
    /// beside the Rust holders, on the same limits; their beliefs are judged with the rest.
    /// Every node then serves HTTP. Each stops past its TTL every fifth permit when
    /// `client-pause` is requested.
    #[arg(long, default_value_t = 0)]
    go_holders: u64,
    /// The Go holders' binary (default: `clients/go/cmd/weir-jepsen-holder`, built with the
    /// `go` on PATH into a folder of the system's temporary directory).
    #[arg(long)]
    go_holder: Option<PathBuf>,
    /// Permit holders running the TypeScript client (`clients/typescript`, built: `npm ci`
    /// there) as processes of their own, beside the Rust holders, on the same limits, as the
    /// Python holders do.
    #[arg(long, default_value_t = 0)]
    ts_holders: u64,
    /// The Node of the TypeScript holders; default `$WEIR_JEPSEN_NODE`, else `node`.
    #[arg(long)]
    node: Option<PathBuf>,
    /// The TypeScript holders' driver (default: `clients/typescript/test/jepsen_holder.mjs`).
    #[arg(long)]
    ts_holder_script: Option<PathBuf>,
    /// Token-lease holders (the Rust client's `Session::lease`) on the leased rate limits,
    /// each deciding takes locally and falling back to the cluster, crashing and stalling
    /// now and then, beside a cluster taker on each limit; judged by the `leased` row (G1 in
    /// spend time). Every third holder leases `leased-fast` (burst 4), the others `leased`.
    #[arg(long, default_value_t = 0)]
    lease_holders: u64,
    /// Token-lease holders running the Python client's leases (`jepsen/lease_holder.py`,
    /// run by `--python`, whose client must have leases), beside the Rust ones on the same
    /// limits: the first two on `leased`, every third on `leased-fast`. Every node then
    /// serves HTTP.
    #[arg(long, default_value_t = 0)]
    python_lease_holders: u64,
    /// Envoy holders: processes calling every node's `ShouldRateLimit` (Envoy's rate-limit
    /// service, plaintext gRPC) on a rate limit of their own, hot enough that each node they
    /// ask decides from token leases of its own; judged by the `leased` row with the lease
    /// holders' takes. Every node then serves gRPC. Not with `--secure`.
    #[arg(long, default_value_t = 0)]
    rls_holders: u64,
    /// Every node hosts the metadata group and this many data groups (`groups` in its
    /// config); with 2 or more, every tenant of the run is placed in the last data group,
    /// every Rust client speaks to it, the nemesis's "leader" is its leader, and the
    /// monitor and the final convergence read its digests. The holders of other languages,
    /// the Envoy holders and `--secure` (which speak to the front doors or probe them, and
    /// those serve group 1) are refused with it.
    #[arg(long, default_value_t = 1)]
    groups: u32,
}

/// The nemeses `--nemesis` names (`all`: every one the network mode can inject); exits 2
/// on an unknown one.
fn nemeses(args: &Args) -> Vec<String> {
    let nemeses: Vec<String> = if args.nemesis == "all" {
        // The client link faults need loopback mode's client fronts.
        nemesis::ALL
            .iter()
            .filter(|k| args.net != "netns" || !nemesis::LOOPBACK_ONLY.contains(k))
            .map(|s| s.to_string())
            .collect()
    } else {
        args.nemesis
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    };
    let known = |k: &str| nemesis::ALL.contains(&k) || nemesis::COMPOUND.contains(&k);
    if let Some(bad) = nemeses.iter().find(|k| !known(k)) {
        eprintln!(
            "weir-jepsen: unknown nemesis {bad:?} (known: {}, and the compound {})",
            nemesis::ALL.join(","),
            nemesis::COMPOUND.join(",")
        );
        std::process::exit(2);
    }
    if let Some(five) = nemeses
        .iter()
        .find(|k| nemesis::FIVE_ONLY.contains(&k.as_str()))
        && args.nodes != 5
    {
        eprintln!(
            "weir-jepsen: --nemesis {five} takes two nodes down at once: it needs --nodes 5 (three would lose the quorum)"
        );
        std::process::exit(2);
    }
    nemeses
}

/// `--check DIR`: judges a recorded run's history (and its nodes' logs) again, prints the
/// table and exits with its code.
fn recheck(dir: &Path, nemeses: &[String], secure: bool) -> ! {
    let ops = match weir_jepsen::history::read_jsonl(&dir.join("history.jsonl")) {
        Ok(ops) => ops,
        Err(e) => {
            eprintln!("weir-jepsen: {e}");
            std::process::exit(2);
        }
    };
    let logs: Vec<(String, String)> = (1..=weir_jepsen::addrs::MAX_NODES)
        .filter_map(|n| {
            std::fs::read_to_string(dir.join(format!("node{n}.log")))
                .ok()
                .map(|t| (format!("node{n}"), t))
        })
        .collect();
    // Which faults fired is in the history itself.
    let fired: Vec<&'static str> = nemesis::ALL
        .iter()
        .chain(nemesis::COMPOUND.iter())
        .copied()
        .filter(|k| {
            ops.iter().any(|o| {
                o.process == weir_jepsen::history::NEMESIS
                    && o.kind == weir_jepsen::history::Kind::Info
                    && o.f == *k
            })
        })
        .collect();
    let outcome = weir_jepsen::run::judge(&ops, &logs, nemeses, &fired, secure);
    print!("{}", table(&outcome));
    print!("{}", weir_jepsen::checker::coverage::report(&ops));
    std::process::exit(exit_code(&outcome));
}

/// Refuses `--groups` out of range, or of 2 or more with what speaks to the front doors.
fn check_groups(args: &Args) -> Result<(), String> {
    if !(1..=16).contains(&args.groups) {
        return Err(format!("{} is not from 1 to 16", args.groups));
    }
    let front_door = args.python_holders
        + args.go_holders
        + args.ts_holders
        + args.python_lease_holders
        + args.rls_holders
        > 0;
    if args.groups > 1 && (front_door || args.secure) {
        return Err(
            "the Python, Go, TypeScript and Envoy holders and --secure speak to the front \
             doors, which serve data group 1 alone: not with 2 or more groups"
                .into(),
        );
    }
    Ok(())
}

/// What to run, from the arguments: the `weir` binary (beside this one unless `--weir`
/// names it) and the output folder (`--out`, else `jepsen/runs/seed-N-<time>`).
fn plan(args: Args, nemeses: Vec<String>, net: Net) -> Plan {
    let weir = args.weir.unwrap_or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(|d| d.join("weir")))
            .unwrap_or_else(|| PathBuf::from("weir"))
    });
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let out = args
        .out
        .unwrap_or_else(|| PathBuf::from(format!("jepsen/runs/seed-{}-{stamp}", args.seed)));
    let interpreter = args
        .python
        .clone()
        .or_else(|| std::env::var_os("WEIR_JEPSEN_PYTHON").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("python3"));
    let python = (args.python_holders > 0).then(|| PythonHolders {
        count: args.python_holders,
        python: args
            .python
            .or_else(|| std::env::var_os("WEIR_JEPSEN_PYTHON").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("python3")),
        script: args
            .python_holder_script
            .unwrap_or_else(PythonHolders::default_script),
        pause_every: if nemeses.iter().any(|k| k == "client-pause") {
            PYTHON_PAUSE_EVERY
        } else {
            0
        },
    });
    let go = (args.go_holders > 0).then(|| {
        let (binary, built_in) = match args.go_holder {
            Some(binary) => (binary, None),
            // Outside the run's folder, which the cluster's start makes afresh.
            None => {
                let dir = std::env::temp_dir()
                    .join(format!("weir-jepsen-go-holder-{}", std::process::id()));
                let binary = GoHolders::build(&dir).unwrap_or_else(|e| {
                    let _ = std::fs::remove_dir_all(&dir);
                    eprintln!("weir-jepsen: {e}");
                    std::process::exit(2);
                });
                (binary, Some(dir))
            }
        };
        GoHolders {
            count: args.go_holders,
            binary,
            built_in,
            pause_every: if nemeses.iter().any(|k| k == "client-pause") {
                PYTHON_PAUSE_EVERY
            } else {
                0
            },
        }
    });
    let ts = (args.ts_holders > 0).then(|| TsHolders {
        count: args.ts_holders,
        node: args
            .node
            .or_else(|| std::env::var_os("WEIR_JEPSEN_NODE").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("node")),
        script: args
            .ts_holder_script
            .unwrap_or_else(TsHolders::default_script),
        pause_every: if nemeses.iter().any(|k| k == "client-pause") {
            PYTHON_PAUSE_EVERY
        } else {
            0
        },
    });
    let leases = (args.lease_holders + args.python_lease_holders > 0).then_some(LeaseHolders {
        count: args.lease_holders,
        python: args.python_lease_holders,
        interpreter,
    });
    Plan {
        weir,
        out,
        seed: args.seed,
        nodes: args.nodes,
        duration: Duration::from_secs(args.duration),
        nemeses,
        net,
        secure: args.secure,
        fenced_ttl: Duration::from_millis(args.fenced_ttl_ms),
        snapshot_every: args.snapshot_every,
        python,
        go,
        ts,
        leases,
        rls: args.rls_holders,
        groups: args.groups,
    }
}

/// `weir-jepsen sim`: the deterministic simulator over many seeds (`jepsen::sim`).
#[derive(Parser, Debug)]
#[command(
    name = "weir-jepsen sim",
    about = "Runs the deterministic simulator: every seed a whole cluster on simulated time and network"
)]
struct SimArgs {
    /// How many seeds, from --first.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    first: u64,
    /// Nodes in each cluster: 3 or 5.
    #[arg(long, default_value_t = 3, value_parser = clap::builder::PossibleValuesParser::new(["3", "5"]).map(|s| s.parse::<usize>().expect("3 or 5")))]
    nodes: usize,
    /// Threads running seeds side by side (each seed on a runtime of its own).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Simulated seconds of load and faults in each seed.
    #[arg(long, default_value_t = weir_jepsen::sim::run::WORKLOAD_MS_DEFAULT / 1_000)]
    seconds: u64,
    /// Prints each run's events: every op, every nemesis event, every node's final digest.
    #[arg(long)]
    trace: bool,
}

/// Runs the simulator as `args` ask; the exit status (0 when every seed passed).
fn sim(args: SimArgs) -> i32 {
    use weir_jepsen::sim::driver;
    let options = driver::Options {
        first: args.first,
        seeds: args.seeds,
        threads: args.threads,
        trace: args.trace,
        config: weir_jepsen::sim::run::Config {
            nodes: args.nodes,
            workload_ms: args.seconds * 1_000,
            refusals_recorded_as_grants: false,
        },
    };
    if !weir_server::sim::REPLAY_EXACT {
        eprintln!(
            "sim: warning: built without --cfg tokio_unstable (RUSTFLAGS replaces the workspace's .cargo/config.toml): tokio's own random draws are not seeded, so a seed's replay may differ"
        );
    }
    let summary = driver::run(options);
    print!("{}", driver::report(&summary, &options));
    i32::from(!summary.failures().is_empty())
}

/// `weir-jepsen sim-groups`: many Raft groups on simulated processes, with a model of their
/// CPU (`weir_server::sim::groups`).
#[derive(Parser, Debug)]
#[command(
    name = "weir-jepsen sim-groups",
    about = "Measures in simulated time what more Raft groups on the same processes buy: one run of the permit cycle per group count, the processes' CPU modelled"
)]
struct GroupsArgs {
    /// Group counts to run, in order (the first is the ratios' base).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16")]
    groups: Vec<u64>,
    /// Simulated node processes (at least 3: every group has three voters).
    #[arg(long, default_value_t = 16)]
    processes: u64,
    /// Cores of each process.
    #[arg(long, default_value_t = 1)]
    cores: usize,
    /// Closed-loop clients of each group.
    #[arg(long, default_value_t = 1_024)]
    clients_per_group: usize,
    /// Simulated seconds measured in each run (after 0.3 s of warm-up).
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// Kill process 1 (every replica on it) halfway through each run; it restarts a second
    /// later.
    #[arg(long)]
    kill: bool,
    /// Move a tenant to the next group every this many simulated ms of the measured window
    /// (freeze, adopt, drop; clients follow `Moved`). A bare `--moves` is every 20 ms.
    #[arg(long, num_args = 0..=1, default_missing_value = "20")]
    moves: Option<u64>,
    /// How long a client holds a permit, simulated ms.
    #[arg(long, default_value_t = 1)]
    hold_ms: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// Runs `args`'s group counts and prints one line each; 1 when a limit was over-granted or
/// a run failed, 2 on bad arguments.
fn sim_groups(args: GroupsArgs) -> i32 {
    use weir_server::sim::groups::{Shape, run};
    if args.processes < 3
        || args.cores == 0
        || args.groups.contains(&0)
        || args.seconds <= 0.0
        || args.moves == Some(0)
    {
        eprintln!(
            "sim-groups: --processes at least 3, --cores and every --groups at least 1, --seconds and --moves above 0"
        );
        return 2;
    }
    println!(
        "{} processes of {} core(s), {} clients a group, {} s measured, seed {}{}",
        args.processes,
        args.cores,
        args.clients_per_group,
        args.seconds,
        args.seed,
        if args.kill {
            ", process 1 killed halfway"
        } else {
            ""
        }
    );
    if let Some(every) = args.moves {
        println!(
            "a tenant moved every {every} ms, permits held {} ms",
            args.hold_ms
        );
    }
    println!(
        "groups  ops/s (simulated)  x first  per group  busiest process  retried  moved  over capacity  wall s"
    );
    let mut base = None;
    let mut status = 0;
    for &groups in &args.groups {
        let shape = Shape {
            clients_per_group: args.clients_per_group,
            seconds: args.seconds,
            kill: args.kill,
            move_every_ms: args.moves,
            hold_ms: args.hold_ms,
            seed: args.seed,
            ..Shape::new(args.processes, args.cores, groups)
        };
        let dir =
            std::env::temp_dir().join(format!("weir-sim-groups-{}-{groups}", std::process::id()));
        let started = std::time::Instant::now();
        let result = run(&shape, &dir);
        let _ = std::fs::remove_dir_all(&dir);
        let report = match result {
            Ok(r) => r,
            Err(e) => {
                eprintln!("sim-groups: {groups} groups: {e}");
                status = 1;
                continue;
            }
        };
        let first = *base.get_or_insert(report.ops_per_s);
        let busiest = report.cpu_busy.values().copied().fold(0.0, f64::max);
        println!(
            "{groups:>6}  {:>17.0}  {:>7.2}  {:>9.0}  {:>14.0}%  {:>7}  {:>5}  {:>13}  {:>6.1}",
            report.ops_per_s,
            report.ops_per_s / first,
            report.ops_per_s / groups as f64,
            busiest * 100.0,
            report.retried,
            report.moved,
            report.over_capacity.len(),
            started.elapsed().as_secs_f64()
        );
        for over in &report.over_capacity {
            println!("        over capacity: {over}");
            status = 1;
        }
    }
    status
}

fn main() {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv
        .get(1)
        .is_some_and(|a| a == weir_jepsen::workload::COMMAND_FLAG)
    {
        // The CLI holder's command (`weir acquire cli -- weir-jepsen --cli-command ...`).
        std::process::exit(weir_jepsen::workload::command_main(&argv[2..]));
    }
    if argv.get(1).is_some_and(|a| a == "sim-groups") {
        std::process::exit(sim_groups(GroupsArgs::parse_from(&argv[1..])));
    }
    if argv.get(1).is_some_and(|a| a == "sim") {
        std::process::exit(sim(SimArgs::parse_from(&argv[1..])));
    }
    let args = Args::parse();
    let nemeses = nemeses(&args);
    if args.rls_holders > 0 && args.secure {
        eprintln!("--rls-holders: the Envoy holders speak plaintext gRPC; not with --secure");
        std::process::exit(2);
    }
    if let Err(why) = check_groups(&args) {
        eprintln!("--groups: {why}");
        std::process::exit(2);
    }
    if let Some(dir) = &args.check {
        recheck(dir, &nemeses, args.secure);
    }
    let net = if args.net == "netns" {
        match std::env::var(netns::PREFIX_ENV) {
            // Re-executed inside the clients' namespace by the process that made them.
            Ok(prefix) => Net::Netns(Netns {
                prefix,
                nodes: args.nodes,
            }),
            Err(_) => std::process::exit(run_in_namespaces(args.nodes)),
        }
    } else {
        Net::Loopback
    };
    let plan = plan(args, nemeses, net);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    // Interrupted, the run is dropped, and with it the cluster, whose nodes are killed.
    let result = runtime.block_on(async {
        tokio::select! {
            r = run(&plan) => r,
            _ = interrupted() => Err("interrupted: the nodes were stopped, the run is not judged".to_string()),
        }
    });
    if let Some(dir) = plan.go.as_ref().and_then(|g| g.built_in.as_ref()) {
        let _ = std::fs::remove_dir_all(dir);
    }
    match result {
        Ok(outcome) => {
            print!("{}", table(&outcome));
            println!(
                "faults fired: {:?}; {} ops; artifacts in {}",
                outcome.fired,
                outcome.ops,
                plan.out.display()
            );
            std::process::exit(exit_code(&outcome));
        }
        Err(e) => {
            eprintln!("weir-jepsen: {e}");
            std::process::exit(2);
        }
    }
}

/// 0 when every verdict is valid, 1 when one is invalid, 2 otherwise (an unknown).
fn exit_code(outcome: &weir_jepsen::run::Outcome) -> i32 {
    if outcome.all_valid() {
        0
    } else if outcome
        .rows
        .iter()
        .any(|(_, _, v)| matches!(v, weir_jepsen::checker::Verdict::Invalid(_)))
    {
        1
    } else {
        2
    }
}

/// Resolves on ctrl-c or SIGTERM.
async fn interrupted() {
    let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    else {
        // Without a SIGTERM handler, ctrl-c still works.
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// Namespace mode's outer process: makes the namespaces, runs this same command again inside
/// the clients' one, and deletes them when it ends (ctrl-c and SIGTERM included); `nodes`
/// node namespaces. Returns the exit code.
fn run_in_namespaces(nodes: u64) -> i32 {
    if let Err(e) = netns::available() {
        eprintln!("weir-jepsen: {e}");
        return 2;
    }
    netns::reap_stale();
    let netns = match Netns::create(&format!("wj{}", std::process::id()), nodes) {
        Ok(n) => n,
        Err(e) => {
            eprintln!("weir-jepsen: cannot build the namespaces: {e}");
            return 2;
        }
    };
    let code = match std::env::current_exe() {
        Ok(exe) => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async {
                let child = tokio::process::Command::new("ip")
                    .args(["netns", "exec", &netns.ns("c")])
                    .arg(exe)
                    .args(std::env::args_os().skip(1))
                    .env(netns::PREFIX_ENV, &netns.prefix)
                    .kill_on_drop(true)
                    .spawn();
                let mut child = match child {
                    Ok(c) => c,
                    Err(e) => {
                        eprintln!("weir-jepsen: cannot enter the namespaces: {e}");
                        return 2;
                    }
                };
                let status = tokio::select! {
                    s = child.wait() => s,
                    _ = interrupted() => {
                        // Pass it on (a ctrl-c reached it already), and give it time to
                        // stop its nodes.
                        if let Some(pid) = child.id() {
                            let _ = std::process::Command::new("kill")
                                .args(["-TERM", &pid.to_string()])
                                .status();
                        }
                        match tokio::time::timeout(Duration::from_secs(20), child.wait()).await {
                            Ok(s) => s,
                            Err(_) => {
                                let _ = child.kill().await;
                                child.wait().await
                            }
                        }
                    }
                };
                status.ok().and_then(|s| s.code()).unwrap_or(2)
            })
        }
        Err(e) => {
            eprintln!("weir-jepsen: cannot find this program: {e}");
            2
        }
    };
    netns.destroy();
    code
}
