//! `weir bench`'s arguments: the workloads, the systems to compare with, every option, and
//! the check that refuses a combination that makes no run.

use clap::{Args, ValueEnum};
use weir_core::bounds::KEYS_LIVE_MAX;

/// What each bench client does in a loop (the module doc of `bench` describes each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    AcquireRelease,
    RateTake,
    ReserveSettle,
    Mixed,
    Scale,
    KeyedTake,
    Multi,
    KeyedScale,
    Rls,
    LeasedTake,
    KeyedChurn,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::AcquireRelease => "acquire-release",
            Workload::RateTake => "rate-take",
            Workload::ReserveSettle => "reserve-settle",
            Workload::Mixed => "mixed",
            Workload::Scale => "scale",
            Workload::KeyedTake => "keyed-take",
            Workload::Multi => "multi",
            Workload::KeyedScale => "keyed-scale",
            Workload::Rls => "rls",
            Workload::LeasedTake => "leased-take",
            Workload::KeyedChurn => "keyed-churn",
        }
    }
}

/// A compound incident `--incident` puts a fresh cluster through (`incident.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Schedule {
    /// kill -9 of the leader.
    Kill,
    /// The leader stopped (SIGSTOP) for 5 s, then resumed.
    Stall,
    /// The leader stopped for 5 s and resumed, then the new leader killed 3 s later.
    StallThenKill,
    /// Five nodes: the leader killed, then the next leader killed 1 s after it is seen.
    KillThenKill,
    /// Five nodes: the clients' entry node (a follower) stopped for 5 s, the leader
    /// killed 1 s into it.
    StallFollowerThenKillLeader,
    /// The leader cut from the other nodes (both ways, by a proxy in front of every peer
    /// port), not from clients, for 5 s, then healed.
    PartitionLeader,
}

impl Schedule {
    pub fn name(self) -> &'static str {
        match self {
            Schedule::Kill => "kill",
            Schedule::Stall => "stall",
            Schedule::StallThenKill => "stall-then-kill",
            Schedule::KillThenKill => "kill-then-kill",
            Schedule::StallFollowerThenKillLeader => "stall-follower-then-kill-leader",
            Schedule::PartitionLeader => "partition-leader",
        }
    }

    /// The cluster's size: five where two nodes are down at once or in a row.
    pub fn nodes(self) -> u64 {
        match self {
            Schedule::KillThenKill | Schedule::StallFollowerThenKillLeader => 5,
            _ => 3,
        }
    }
}

/// A system to run the same permit cycle on, beside Weir.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Against {
    /// A three-member etcd on loopback (`etcd` on PATH; a build with the `etcd` feature).
    Etcd,
    /// Debian's `redis-server` on loopback: the take as a Lua token bucket, with
    /// `appendfsync always` and with `everysec`; with `keyed-scale`, the same buckets'
    /// memory.
    Redis,
}

#[derive(Args, Clone, Debug)]
pub struct BenchArgs {
    /// Start an N-node durable loopback cluster for the run (and remove it after).
    #[arg(long)]
    pub spawn: Option<u64>,
    /// With --spawn: keep the cluster's directory (each node's data, config and log) after
    /// the run, and log at `info` (openraft's elections included), to read what happened.
    #[arg(long)]
    pub keep_dir: bool,
    /// What each client does in a loop.
    #[arg(long, value_enum, default_value = "acquire-release")]
    pub workload: Workload,
    /// Concurrent clients, each with its own session (256 with --incident).
    #[arg(
        long,
        default_value_t = 64,
        default_value_if("incident", clap::builder::ArgPredicate::IsPresent, "256")
    )]
    pub clients: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Seconds of load before measuring.
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Limits the clients spread over.
    #[arg(long, default_value_t = 100)]
    pub limits: u32,
    /// `concurrent` of each limit.
    #[arg(long, default_value_t = 16)]
    pub concurrency: u32,
    /// Clients sharing one connection.
    #[arg(long, default_value_t = 16)]
    pub clients_per_connection: usize,
    /// Data groups the cluster runs (its nodes' `groups`; with --spawn, the nodes started
    /// so). With 2 or more, tenant `bench-g<G>` is placed in data group G, and client n
    /// works in group n mod GROUPS + 1 through a client of that group: the load spreads
    /// over the groups' leaders. For `acquire-release` and `rate-take`.
    #[arg(long, default_value_t = 1, value_name = "GROUPS")]
    pub groups: u32,
    /// Kill the leader this many times during the run (needs --spawn).
    #[arg(long, default_value_t = 0)]
    pub failover: u32,
    /// With --spawn: TLS on every port and an admin token (to measure what they cost).
    #[arg(long)]
    pub tls: bool,
    /// Also run the same cycle on another system and print both side by side.
    #[arg(long, value_enum)]
    pub against: Option<Against>,
    /// Sweep clients, limits and held permits (needs --spawn); write curve.json and
    /// curve-*.svg charts into this directory.
    #[arg(long, value_name = "DIR")]
    pub curve: Option<std::path::PathBuf>,
    /// Stop the leader (SIGSTOP, 4 s) this many times during the run (needs --spawn);
    /// sessions then have a 3 s TTL and each holds a permit throughout.
    #[arg(long, default_value_t = 0)]
    pub stall: u32,
    /// With `--workload rls` against given `--servers`: the nodes' gRPC addresses
    /// (`grpc_listen`), comma-separated; clients spread over them.
    #[arg(long, value_delimiter = ',', value_name = "ADDR")]
    pub grpc: Vec<String>,
    /// With `--workload rls`: each request names the next of N distinct API keys (in
    /// turn, across all clients) on one keyed rule of 100 a minute per key whose
    /// `keys_max` is N, as a gateway's per-key rule; an answer that finds no room for its
    /// key is an error. 0 (the default): one descriptor, one limit.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub rls_keys: u32,
    /// With `--workload leased-take`: the leased limit's rate, tokens a second (per key with
    /// --lease-keys); its burst is a tenth of it. The default, 100,000, binds at 256
    /// clients; a rate far above what the clients take (1e9) is the hot mode, where a
    /// lease covers every take.
    #[arg(long, value_name = "TOKENS_PER_S", default_value_t = 100_000.0)]
    pub lease_rate: f64,
    /// With `--workload leased-take`: one keyed limit over N keys drawn Zipf-distributed
    /// (exponent 1.1); each client leases the keys it has seen often and asks the cluster
    /// for the rest. 0 (the default): one limit.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub lease_keys: u32,
    /// A soak (needs --spawn): churn for --duration, sampling every node each SECS and
    /// printing one line per interval, then a verdict on each series' drift (with
    /// `--workload keyed-churn`, the key churn's intervals and verdict).
    #[arg(long, value_name = "SECS")]
    pub report_every: Option<f64>,
    /// With --report-every: kill the leader every SECS (0: never).
    #[arg(long, value_name = "SECS", default_value_t = 600.0)]
    pub kill_every: f64,
    /// With --report-every: stop the leader (SIGSTOP, 4 s) every SECS (0: never).
    #[arg(long, value_name = "SECS", default_value_t = 900.0)]
    pub stall_every: f64,
    /// Put a fresh cluster of its own through a compound incident while every client holds
    /// a permit (TTL 3 s); report the sessions that lost one, the grants that arrived
    /// already lost, and when grants resumed after each fault's election.
    #[arg(long, value_enum, value_name = "SCHEDULE")]
    pub incident: Option<Schedule>,
    /// With --incident: this many holders using the Python client (`clients/python`, in
    /// the interpreter `WEIR_BENCH_PYTHON` names, else `target/py-venv/bin/python`, else
    /// `python3`) beside the Rust clients.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub python: u32,
    /// With --incident: run the schedule this many times, each on a fresh cluster, and sum.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub runs: u32,
    /// With --report-every: write the drift of each series (keyed-churn: each node's RSS and
    /// the live keys) as an SVG chart to FILE.
    #[arg(long, value_name = "FILE")]
    pub chart: Option<std::path::PathBuf>,
    /// With --report-every: growth (percent, first quarter to last; keyed-churn: a node's
    /// RSS trend over the last half) above which a series is flagged.
    #[arg(long, value_name = "PCT", default_value_t = 20.0)]
    pub drift_threshold: f64,
    /// With `--workload keyed-scale`: the live keys to build (at most the cluster's bound,
    /// 10,000,000, the default).
    #[arg(long, value_name = "N", default_value_t = KEYS_LIVE_MAX as u64)]
    pub keys: u64,
    /// With `--workload keyed-churn`: new keys a minute, each taken from once and live for a
    /// minute after (at most 5,000,000, so twice that fits the live keys' bound).
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub keys_per_minute: u64,
}

/// The most `--keys-per-minute`: the churn's limit allows twice its keys a minute live.
pub const KEYS_PER_MINUTE_MAX: u64 = KEYS_LIVE_MAX as u64 / 2;

/// Refuses arguments that make no run, with the usage message.
pub fn check(args: &BenchArgs) -> Result<(), &'static str> {
    if args.clients == 0 || args.limits == 0 || args.clients_per_connection == 0 {
        return Err("--clients, --limits and --clients-per-connection must be positive");
    }
    check_incident(args)?;
    if args.groups == 0 || args.groups > 16 {
        return Err("--groups is from 1 to 16, as a node's `groups`");
    }
    if args.groups > 1
        && (!matches!(args.workload, Workload::AcquireRelease | Workload::RateTake)
            || args.against.is_some()
            || args.curve.is_some()
            || args.incident.is_some()
            || args.report_every.is_some()
            || args.stall > 0)
    {
        return Err(
            "--groups of 2 or more is for --workload acquire-release or rate-take, without \
             --against, --curve, --incident, --report-every or --stall",
        );
    }
    if args.failover > 0 && args.spawn.is_none() {
        return Err("--failover needs --spawn (the bench kills the nodes it started)");
    }
    if args.keep_dir && args.spawn.is_none() && args.incident.is_none() {
        return Err(
            "--keep-dir needs --spawn (it keeps the directory of the cluster the bench starts)",
        );
    }
    match args.against {
        Some(Against::Etcd) => check_etcd(args)?,
        Some(Against::Redis) => check_redis(args)?,
        None => {}
    }
    if args.workload == Workload::Rls {
        check_rls(args)?;
    } else if args.rls_keys > 0 {
        return Err("--rls-keys is for --workload rls");
    }
    check_leased(args)?;
    check_keys(args)?;
    if args.curve.is_some() && (args.spawn.is_none() || args.against.is_some() || args.tls) {
        return Err("--curve needs --spawn, without --against or --tls");
    }
    if args.tls && args.spawn.is_none() {
        return Err("--tls needs --spawn (against given servers, use --ca and --token)");
    }
    if args.stall > 0 && args.spawn.is_none() {
        return Err("--stall needs --spawn (the bench stops the nodes it started)");
    }
    check_soak(args)?;
    if !(args.duration > 0.0
        && args.duration < 86_400.0
        && args.warmup >= 0.0
        && args.warmup < 3_600.0)
    {
        return Err("--duration must be in (0, 86400) and --warmup in [0, 3600) seconds");
    }
    Ok(())
}

fn check_etcd(args: &BenchArgs) -> Result<(), &'static str> {
    if !cfg!(feature = "etcd") {
        return Err(
            "--against etcd needs a weir built with the etcd client: cargo build --release --features etcd",
        );
    }
    // Three nodes, as etcd's three members.
    if args.spawn != Some(3)
        || args.workload != Workload::AcquireRelease
        || args.failover > 0
        || args.tls
    {
        return Err(
            "--against etcd needs --spawn 3 and the acquire-release workload, without --failover or --tls",
        );
    }
    Ok(())
}

fn check_redis(args: &BenchArgs) -> Result<(), &'static str> {
    if args.spawn != Some(3)
        || !matches!(
            args.workload,
            Workload::RateTake | Workload::Rls | Workload::LeasedTake | Workload::KeyedScale
        )
        || args.failover > 0
        || args.stall > 0
        || args.tls
    {
        return Err(
            "--against redis needs --spawn 3 and the rate-take or rls workload (both are run), leased-take or keyed-scale, without --failover, --stall or --tls",
        );
    }
    Ok(())
}

fn check_leased(args: &BenchArgs) -> Result<(), &'static str> {
    let default_rate = args.lease_rate == 100_000.0;
    if args.workload != Workload::LeasedTake && (!default_rate || args.lease_keys > 0) {
        return Err("--lease-rate and --lease-keys are for --workload leased-take");
    }
    if !(args.lease_rate >= 10.0 && args.lease_rate <= 1e10) {
        return Err("--lease-rate must be in [10, 1e10] tokens a second");
    }
    if args.lease_keys as usize > weir_core::bounds::KEYS_LIVE_MAX {
        return Err("--lease-keys is at most the cluster's live keys bound, 10,000,000");
    }
    Ok(())
}

fn check_keys(args: &BenchArgs) -> Result<(), &'static str> {
    if args.workload != Workload::KeyedScale && args.keys != KEYS_LIVE_MAX as u64 {
        return Err("--keys is for --workload keyed-scale");
    }
    if !(1..=KEYS_LIVE_MAX as u64).contains(&args.keys) {
        return Err("--keys must be in 1..=10,000,000 (the cluster's live keys bound)");
    }
    if args.workload != Workload::KeyedChurn {
        return match args.keys_per_minute != 100_000 {
            true => Err("--keys-per-minute is for --workload keyed-churn"),
            false => Ok(()),
        };
    }
    if !(1..=KEYS_PER_MINUTE_MAX).contains(&args.keys_per_minute) {
        return Err("--keys-per-minute must be in 1..=5,000,000");
    }
    if args.report_every.is_none() || args.kill_every != 600.0 || args.stall_every != 900.0 {
        return Err(
            "--workload keyed-churn needs --report-every (and --spawn), without --kill-every or --stall-every",
        );
    }
    Ok(())
}

fn check_rls(args: &BenchArgs) -> Result<(), &'static str> {
    if args.spawn.is_none() && args.grpc.is_empty() {
        return Err("--workload rls needs --spawn, or the nodes' gRPC addresses in --grpc");
    }
    if args.tls || args.failover > 0 || args.stall > 0 || args.curve.is_some() {
        return Err("--workload rls runs without --tls, --failover, --stall or --curve");
    }
    if args.rls_keys as usize > weir_core::bounds::KEYS_LIVE_MAX {
        return Err("--rls-keys is at most the cluster's live keys bound, 10,000,000");
    }
    Ok(())
}

fn check_incident(args: &BenchArgs) -> Result<(), &'static str> {
    let Some(_) = args.incident else {
        return match args.python > 0 || args.runs != 1 {
            true => Err("--python and --runs go with --incident"),
            false => Ok(()),
        };
    };
    if args.spawn.is_some()
        || args.failover > 0
        || args.stall > 0
        || args.tls
        || args.curve.is_some()
        || args.against.is_some()
        || args.report_every.is_some()
        || args.workload != Workload::AcquireRelease
    {
        return Err(
            "--incident starts its own cluster for each run: without --spawn, --failover, --stall, --tls, --curve, --against, --report-every or --workload",
        );
    }
    if args.runs == 0 || args.runs > 1_000 || args.python > 1_000 {
        return Err("--runs must be in 1..=1000 and --python at most 1000");
    }
    Ok(())
}

fn check_soak(args: &BenchArgs) -> Result<(), &'static str> {
    let Some(every) = args.report_every else {
        return match args.chart.is_some() {
            true => Err("--chart needs --report-every (it charts the soak's intervals)"),
            false => Ok(()),
        };
    };
    if args.spawn.is_none()
        || args.failover > 0
        || args.stall > 0
        || args.curve.is_some()
        || args.against.is_some()
    {
        return Err(
            "--report-every needs --spawn (it samples the nodes it started), without --failover, --stall, --curve or --against (use --kill-every and --stall-every)",
        );
    }
    if !(every > 0.0 && args.duration >= 4.0 * every) {
        return Err("--report-every must be positive and --duration at least four intervals");
    }
    if !(args.kill_every >= 0.0 && args.stall_every >= 0.0 && args.drift_threshold >= 0.0) {
        return Err("--kill-every, --stall-every and --drift-threshold must not be negative");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn checked(args: &[&str]) -> Result<(), &'static str> {
        let cli = Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))
            .expect("the options parse");
        check(&cli.bench)
    }

    fn parsed(args: &[&str]) -> BenchArgs {
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))
            .expect("the options parse")
            .bench
    }

    #[test]
    fn groups_run_the_permit_and_rate_workloads_and_refuse_the_rest() {
        assert_eq!(parsed(&[]).groups, 1);
        for ok in [
            &["--spawn", "3", "--groups", "4"][..],
            &["--spawn", "3", "--groups", "2", "--workload", "rate-take"],
            &["--spawn", "3", "--groups", "16", "--failover", "1"],
        ] {
            assert_eq!(checked(ok), Ok(()), "{ok:?}");
        }
        for (bad, says) in [
            (&["--groups", "0"][..], "--groups is from 1 to 16"),
            (&["--groups", "17"], "--groups is from 1 to 16"),
            (
                &["--groups", "2", "--workload", "mixed"],
                "--groups of 2 or more is for",
            ),
            (
                &["--groups", "2", "--stall", "1", "--spawn", "3"],
                "--groups of 2 or more is for",
            ),
        ] {
            let err = checked(bad).unwrap_err();
            assert!(err.starts_with(says), "{bad:?}: {err}");
        }
    }

    #[test]
    fn an_incident_runs_256_clients_unless_told_and_refuses_what_it_cannot_run() {
        assert_eq!(parsed(&[]).clients, 64);
        assert_eq!(parsed(&["--incident", "kill"]).clients, 256);
        assert_eq!(parsed(&["--incident", "kill", "--clients", "8"]).clients, 8);
        assert_eq!(
            parsed(&["--incident", "stall-then-kill"]).incident,
            Some(Schedule::StallThenKill)
        );
        assert_eq!(Schedule::KillThenKill.nodes(), 5);
        assert_eq!(Schedule::StallThenKill.nodes(), 3);
        for ok in [
            &[
                "--incident",
                "kill-then-kill",
                "--python",
                "4",
                "--runs",
                "20",
            ][..],
            &["--incident", "stall", "--keep-dir"],
        ] {
            assert_eq!(checked(ok), Ok(()), "{ok:?}");
        }
        assert_eq!(checked(&["--incident", "partition-leader"]), Ok(()));
        assert!(
            checked(&["--incident", "kill", "--failover", "1"])
                .unwrap_err()
                .starts_with("--incident starts its own cluster")
        );
        assert!(checked(&["--incident", "kill", "--runs", "0"]).is_err());
        assert_eq!(
            checked(&["--runs", "3"]),
            Err("--python and --runs go with --incident")
        );
    }

    #[test]
    fn lease_options_go_with_leased_take_and_are_bounded() {
        let leased = ["--workload", "leased-take", "--lease-rate"];
        assert_eq!(checked(&[&leased[..], &["1e9"]].concat()), Ok(()));
        assert_eq!(
            checked(&[&leased[..], &["1e9", "--lease-keys", "100000"]].concat()),
            Ok(())
        );
        assert_eq!(
            checked(&["--lease-keys", "10"]),
            Err("--lease-rate and --lease-keys are for --workload leased-take")
        );
        assert!(checked(&[&leased[..], &["0"]].concat()).is_err());
        assert!(checked(&[&leased[..], &["1e11"]].concat()).is_err());
    }

    #[test]
    fn rls_and_redis_runs_are_checked() {
        assert_eq!(checked(&["--spawn", "3", "--workload", "rls"]), Ok(()));
        assert_eq!(checked(&["--workload", "rls", "--grpc", "a:1,b:2"]), Ok(()));
        assert_eq!(
            checked(&["--workload", "rls"]),
            Err("--workload rls needs --spawn, or the nodes' gRPC addresses in --grpc")
        );
        assert!(checked(&["--spawn", "3", "--workload", "rls", "--tls"]).is_err());
        let redis = ["--spawn", "3", "--against", "redis", "--workload"];
        for workload in ["rate-take", "rls", "leased-take", "keyed-scale"] {
            let args: Vec<&str> = redis.iter().copied().chain([workload]).collect();
            assert_eq!(checked(&args), Ok(()), "{workload}");
        }
        for refused in [
            &["--spawn", "3", "--against", "redis"][..],
            &[
                "--spawn",
                "1",
                "--against",
                "redis",
                "--workload",
                "rate-take",
            ],
            &[
                "--spawn",
                "3",
                "--against",
                "redis",
                "--workload",
                "rls",
                "--failover",
                "1",
            ],
            &[
                "--spawn",
                "1",
                "--against",
                "redis",
                "--workload",
                "keyed-scale",
            ],
            &[
                "--spawn",
                "3",
                "--against",
                "redis",
                "--workload",
                "keyed-take",
            ],
        ] {
            assert!(
                checked(refused)
                    .unwrap_err()
                    .starts_with("--against redis needs --spawn 3")
            );
        }
    }

    #[test]
    fn keys_go_with_keyed_scale_and_keys_per_minute_with_keyed_churn_within_the_bound() {
        assert_eq!(parsed(&[]).keys, 10_000_000);
        assert_eq!(parsed(&[]).keys_per_minute, 100_000);
        let scale = ["--spawn", "3", "--workload", "keyed-scale", "--keys"];
        assert_eq!(checked(&[&scale[..], &["1000000"]].concat()), Ok(()));
        assert_eq!(checked(&[&scale[..], &["10000000"]].concat()), Ok(()));
        for bad in ["0", "10000001"] {
            assert_eq!(
                checked(&[&scale[..], &[bad]].concat()),
                Err("--keys must be in 1..=10,000,000 (the cluster's live keys bound)"),
                "{bad}"
            );
        }
        assert_eq!(
            checked(&["--keys", "5"]),
            Err("--keys is for --workload keyed-scale")
        );
        #[rustfmt::skip]
        let churn = ["--spawn", "3", "--workload", "keyed-churn", "--duration", "600",
                     "--report-every", "30", "--chart", "churn.svg"];
        assert_eq!(checked(&churn), Ok(()));
        assert_eq!(
            checked(&[&churn[..], &["--keys-per-minute", "5000000"]].concat()),
            Ok(())
        );
        assert_eq!(
            checked(&[&churn[..], &["--keys-per-minute", "5000001"]].concat()),
            Err("--keys-per-minute must be in 1..=5,000,000")
        );
        assert_eq!(
            checked(&[&churn[..], &["--keys-per-minute", "0"]].concat()),
            Err("--keys-per-minute must be in 1..=5,000,000")
        );
        assert_eq!(
            checked(&["--keys-per-minute", "10"]),
            Err("--keys-per-minute is for --workload keyed-churn")
        );
        let refusal = Err(
            "--workload keyed-churn needs --report-every (and --spawn), without --kill-every or --stall-every",
        );
        assert_eq!(
            checked(&["--spawn", "3", "--workload", "keyed-churn"]),
            refusal
        );
        assert_eq!(
            checked(&[&churn[..], &["--kill-every", "60"]].concat()),
            refusal
        );
        assert!(
            checked(&[
                "--workload",
                "keyed-churn",
                "--report-every",
                "5",
                "--duration",
                "20"
            ])
            .unwrap_err()
            .starts_with("--report-every needs --spawn")
        );
    }
}
