//! `weir bench`: load the cluster with a workload and report throughput and latency.
//!
//! Workloads: `acquire-release` (each client acquires a permit of one of `--limits` limits
//! of `--concurrency` and releases it; each is one operation), `rate-take` (takes of a rate
//! limit that holds nothing), `reserve-settle` (reserve a run, then settle it releasing the
//! slot), `mixed` (a rotation of the three), `keyed-take` (takes of one keyed rate limit,
//! each naming one of 100,000 keys drawn Zipf-distributed with exponent 1.1, `zipf.rs`),
//! `multi` (takes of three limits in one request: a tenant-wide rate, a keyed per-model
//! rate over 16 models, and a global rate), and `scale` (builds the scale point — 10,000
//! sessions, 100,000 held permits, 1,000 limits — and reports node memory and snapshot
//! costs), and `keyed-scale` (builds the keyed point — one keyed limit with every live key
//! the bounds allow, or `--keys N` — and reports node memory, snapshot costs and the bytes
//! of a live key; with `--against redis` also what the same keys cost as Redis's Lua
//! buckets), and `keyed-churn` (with `--report-every`: `--keys-per-minute` new keys a
//! minute, each live for a minute, with every node's RSS and the live keys sampled and
//! judged, `churn.rs`).
//! Latencies go into an HDR histogram (µs, 3 significant digits); a progress line
//! is printed every second to stderr.
//!
//! `--spawn N` starts a durable N-node cluster on loopback with the default config in a
//! temporary directory, and removes it afterwards; with `--tls` that cluster has
//! development certificates (TLS on the client port, mutual TLS between peers) and an
//! admin token, and the bench connects with both. Against given `--servers`, the global
//! `--ca` and `--token` apply. `--failover K` (with `--spawn`) kills the
//! leader with SIGKILL K times during the run, measures from each kill to the first
//! operation sent after it that succeeds, restarts the node, and at the end checks that no
//! acknowledged operation was lost. `--stall K` (with `--spawn`) stops the leader with
//! SIGSTOP K times, each for `STALL` (4 s, longer than the sessions' TTL), measures grants
//! resuming the same way, resumes it with SIGCONT, and reports how many sessions lost a
//! permit: with `--stall` every session has a 3 s TTL and holds one permit of its own for the
//! whole run besides its workload, and a session counts as having lost a permit if any of
//! its permits was ever seen lost (deadline, expiry).
//!
//! `--report-every SECS` (with `--spawn`) makes the run a soak (`soak.rs`): sessions,
//! permits and keys churn for `--duration` while the leader is killed every `--kill-every`
//! and stopped every `--stall-every` seconds; every node's memory, open files, threads, log
//! and snapshot bytes, and the p99, are printed each interval and charted (`--chart FILE`),
//! and each series' growth over the run is judged at the end.
//!
//! `--against etcd` (with `--spawn 3` and `acquire-release`) then runs the same cycle on a
//! three-member etcd on loopback and prints both side by side (`etcd.rs`; the etcd client
//! is only in a build with the `etcd` feature).
//!
//! `--workload rls` is `rate-take`'s take over Envoy's gRPC rate-limit protocol (`rls.rs`).
//! `--against redis` (with `--spawn 3` and `rate-take` or `rls`) runs Weir's `rate-take` and
//! `rls`, then the same take as a Lua token bucket on a loopback Redis fsyncing `always`
//! and then `everysec`, and prints the four side by side (`redis.rs`, over `resp.rs`); with
//! `keyed-scale`, the keyed point's keys as Lua buckets in Redis, their memory beside Weir's.
//!
//! `--workload leased-take` (`load.rs`): every client leases a share of one rate limit of
//! `--lease-rate` tokens a second (burst a tenth of it) and takes one token at a time, from
//! its lease's local bucket when it has one, else from the cluster (quiet for a while after
//! the cluster said it had no room, `weir_client`'s `leased` module). The default rate binds
//! at 256 clients; a rate far above demand (`--lease-rate 1e9`) is the hot mode, where a
//! lease covers every take. `--lease-keys N` makes it one keyed limit over N keys drawn
//! Zipf-distributed: each client leases the keys it has seen often (at most 32) and asks the
//! cluster for the rest. Every take is counted in the ms it was decided, and at the end
//! every window of the run is checked against `burst + rate × window` (for the limit, or
//! each of the 16 hottest keys); the report gives the commands the takes cost per 1,000
//! takes (takes asked of the cluster, granted or not, and lease requests). With `--against
//! redis` the same clients then take from Redis's bucket (one that never runs short).
//!
//! `--incident SCHEDULE` puts a fresh cluster of its own (three nodes, five for the
//! schedules that take two) through a compound incident, `--runs` times, while
//! `--clients` Rust clients (256 by default) and `--python N` Python holders each hold a
//! permit with a 3 s TTL, and reports per run the sessions that lost a permit, the grants
//! that arrived already lost, and for each fault the time to the new leader and the gap
//! from it to the first grant (`incident.rs`; the schedules in `docs/benchmarks.md`).
//!
//! `--curve DIR` (with `--spawn`) sweeps clients, limits and held permits and writes
//! `DIR/curve.json` and charts `DIR/curve-*.svg` (`curve.rs`, drawn by `svg.rs`).
//!
//! - `args.rs`: the options and the check of their combinations;
//! - `spawn.rs`: the `--spawn` cluster;
//! - `external.rs`: the compared systems' processes and temporary directory;
//! - `etcd.rs`: the etcd cluster, its load, and the side-by-side comparison;
//! - `rls.rs`: the gRPC client and load of `--workload rls`;
//! - `redis.rs`, `resp.rs`: the Redis server, its Lua bucket, its load, the comparison;
//! - `spend_check.rs`: `leased-take`'s check of every window in spend time;
//! - `load.rs`: the load workloads, the failover kills and the final verification;
//! - `cpu.rs`: CPU seconds of the bench and its nodes over the measured window;
//! - `zipf.rs`: the Zipf key sampler of `keyed-take`;
//! - `scale.rs`: the scale point;
//! - `keyed_point.rs`: the keyed point;
//! - `churn.rs`: the keyed churn (`--workload keyed-churn`);
//! - `soak.rs`: the soak (`--report-every`);
//! - `incident.rs`, `incident_holder.py`: the compound incidents (`--incident`) and the
//!   Python holder they run; `peer_proxy.rs`: the peer links `partition-leader` cuts;
//! - `report.rs`: the recorder the clients share and the printed results;
//! - `output.rs`: how the bench prints (text or JSON) and its exit statuses.
//!
//! This crate owns everything of `weir bench`; the `weir` command line only parses its
//! [`BenchArgs`] (a `clap::Args`) and calls [`run`]. It starts clusters through
//! `weir-launcher` and reaches them through `weir-client`. Must never depend on: the `weir`
//! crate (which depends on this one); and it is never a dependency of weir-core,
//! weir-client or weir-server. Where it sits among the crates: `docs/design.md`.

#![forbid(unsafe_code)]

// Declared in layers, highest first: a file imports only modules below its own
// (`tests/layering` holds the crate to this list).
mod curve;
mod incident;
mod churn;
mod soak;
mod keyed_point;
mod scale;
#[cfg(feature = "etcd")]
mod etcd;
mod redis;
mod resp;
mod external;
mod rls;
mod load;
/// Also the cluster tests' way to cut one node's peer links while its clients reach it.
pub mod peer_proxy;
mod report;
mod spawn;
mod args;
mod cpu;
mod svg;
mod spend_check;
mod zipf;
mod output;

use std::time::Duration;

pub use args::BenchArgs;
use args::{Against, Workload, check};
pub use output::{EXIT_ERROR, EXIT_OK, EXIT_USAGE, Exit, Output};

use weir_launcher::leader_among_with;
use weir_proto::tls::ClientSecurity;

/// Runs `weir bench` against `servers` (or the cluster it spawns) with the client's TLS and
/// token; prints the results to `out` and returns the exit status.
pub fn run(args: &BenchArgs, servers: &[String], security: &ClientSecurity, out: &Output) -> Exit {
    if let Err(why) = check(args) {
        eprintln!("weir bench: {why}");
        return EXIT_USAGE;
    }
    // A pool. One thread used less of the machine (3.4 s of bench CPU against 4.4 s at 256
    // clients) but moved neither throughput nor the p99 beyond the noise
    // (docs/benchmarks.md, "What was tried and reverted", with the build it was measured on).
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("weir bench: {e}");
            return EXIT_ERROR;
        }
    };
    runtime.block_on(async {
        if let Some(schedule) = args.incident {
            return incident::run(args, schedule, out)
                .await
                .unwrap_or_else(|e| {
                    eprintln!("weir bench: {e}");
                    EXIT_ERROR
                });
        }
        let mut spawned = match args
            .spawn
            .map(|n| {
                spawn::start_with(n, args.tls, args.keep_dir, |configs| {
                    for c in configs {
                        c.groups = args.groups;
                    }
                })
            })
            .transpose()
        {
            Ok(s) => s,
            Err(e) => {
                eprintln!("weir bench: {e}");
                return EXIT_ERROR;
            }
        };
        let servers = spawned
            .as_ref()
            .map_or_else(|| servers.to_vec(), |c| c.servers());
        let security = spawned
            .as_ref()
            .map_or_else(|| security.clone(), |c| c.client_security().clone());
        if leader_among_with(&servers, Duration::from_secs(20), &security)
            .await
            .is_none()
        {
            eprintln!("weir bench: no leader among {servers:?}");
            return EXIT_ERROR;
        }
        let result = if args.workload == Workload::Scale {
            scale::run(&servers, &security, out).await
        } else if args.workload == Workload::KeyedScale {
            let redis = args.against == Some(Against::Redis);
            keyed_point::run(&servers, &security, args.keys, redis, spawned.take(), out).await
        } else if args.workload == Workload::KeyedChurn {
            match spawned.as_mut() {
                Some(cluster) => churn::run(args, &servers, &security, cluster, out).await,
                None => Err("--workload keyed-churn needs --spawn".into()),
            }
        } else if args.report_every.is_some() {
            match spawned.as_mut() {
                Some(cluster) => soak::run(args, &servers, &security, cluster, out).await,
                None => Err("--report-every needs --spawn".into()),
            }
        } else if let Some(dir) = &args.curve {
            curve::run(args, &servers, &security, dir, out).await
        } else if let Some(Against::Redis) = args.against {
            redis::against(args, &servers, &security, spawned.take(), out).await
        } else if args.workload == Workload::Rls {
            rls::run(args, &servers, &security, spawned.as_ref(), out).await
        } else if let Some(Against::Etcd) = args.against {
            #[cfg(feature = "etcd")]
            {
                against_etcd(args, &servers, &security, spawned.take(), out).await
            }
            #[cfg(not(feature = "etcd"))]
            unreachable!("check() refuses --against without the etcd feature")
        } else {
            load::run(args, &servers, &security, spawned.as_mut(), out).await
        };
        result.unwrap_or_else(|e| {
            eprintln!("weir bench: {e}");
            EXIT_ERROR
        })
    })
}

/// Weir first (then its cluster is stopped, so the two never share the CPU), then etcd;
/// prints both side by side.
#[cfg(feature = "etcd")]
async fn against_etcd(
    args: &BenchArgs,
    servers: &[String],
    security: &ClientSecurity,
    mut spawned: Option<weir_launcher::LocalCluster>,
    out: &Output,
) -> Result<Exit, String> {
    let weir = load::measure_load(args, servers, security, spawned.as_mut()).await?;
    drop(spawned);
    eprintln!(
        "[bench] weir: {:.0} ops/s, p50 {:.3} ms; now etcd",
        weir.ops_per_s, weir.p50_ms
    );
    let cluster = etcd::EtcdCluster::start()?;
    let etcd = etcd::run(args, &cluster).await?;
    drop(cluster);
    let comparison = etcd::Comparison::new(weir, etcd);
    comparison.print(out);
    Ok(if comparison.weir.verified {
        EXIT_OK
    } else {
        EXIT_ERROR
    })
}
