//! `--against etcd`: the same permit cycle on a three-member etcd, measured in the same run
//! as Weir, printed side by side.
//!
//! The cycle is what a user would write on etcd for a permit: acquire = one transaction
//! that puts the client's key if it is absent (`create_revision == 0`) under the client's
//! lease, release = delete the key. Each is one operation, as in Weir's `acquire-release`;
//! every bench client has its own lease (granted before measuring, as a Weir client opens
//! its session first) and `--clients-per-connection` clients share one gRPC channel to all
//! members (etcd's own client balances over them; followers forward writes to the leader).
//!
//! The etcd members run with etcd's defaults (an fsync per WAL write, 100 ms heartbeat, 1 s
//! election timeout) on loopback ports from the launcher's allocator, each in its own data
//! directory under one temporary directory, removed when the cluster is dropped. Nothing is
//! installed: `etcd` must be on PATH (Debian's `etcd-server`).
//!
//! The module, and with it the etcd client (and so gRPC), is only in a build with the
//! `etcd` feature; without it `--against etcd` says how to get a build that has it.

use std::process::Command;
use std::time::Duration;

use serde::Serialize;

use super::external::{External, find_program};
use super::report::{LoadReport, load_average, ratio, table};
use crate::output::Output;
use weir_launcher::free_port;

/// Members of the etcd cluster: three, as Weir's `--spawn 3`.
pub const MEMBERS: usize = 3;

/// How long the members may take to elect a leader and answer a write.
const READY_WAIT: Duration = Duration::from_secs(30);

/// A three-member etcd on loopback, killed and removed on drop (by its [`External`]).
pub struct EtcdCluster {
    _external: External,
    /// `http://127.0.0.1:PORT` of each member's client port.
    pub endpoints: Vec<String>,
}

impl EtcdCluster {
    /// Starts the members (the caller waits until they answer).
    pub fn start() -> Result<EtcdCluster, String> {
        let etcd = find_program("etcd", "etcd-server")?;
        let mut external = External::new("etcd")?;
        let mut endpoints = vec![];
        let mut peers = vec![];
        for _ in 0..MEMBERS {
            endpoints.push(format!("http://127.0.0.1:{}", free_port()?));
            peers.push(format!("http://127.0.0.1:{}", free_port()?));
        }
        let initial: Vec<String> = peers
            .iter()
            .enumerate()
            .map(|(i, p)| format!("e{}={p}", i + 1))
            .collect();
        let initial = initial.join(",");
        for (i, peer) in peers.iter().enumerate() {
            let name = format!("e{}", i + 1);
            let mut command = Command::new(&etcd);
            command
                .args(["--name", &name])
                .arg("--data-dir")
                .arg(external.dir().join(&name))
                .args(["--listen-client-urls", &endpoints[i]])
                .args(["--advertise-client-urls", &endpoints[i]])
                .args(["--listen-peer-urls", peer])
                .args(["--initial-advertise-peer-urls", peer])
                .args(["--initial-cluster", &initial])
                .args(["--initial-cluster-state", "new"])
                .args(["--initial-cluster-token", "weir-bench"])
                .args(["--logger", "zap", "--log-level", "error"]);
            external.spawn(command, &format!("{name}.log"))?;
        }
        Ok(EtcdCluster {
            _external: external,
            endpoints,
        })
    }
}

/// Weir and etcd on the same cycle, same clients, same run.
#[derive(Serialize)]
pub struct Comparison {
    pub weir: LoadReport,
    pub etcd: LoadReport,
    /// Weir's ops/s over etcd's.
    pub throughput_ratio: f64,
    /// Weir's p50 over etcd's.
    pub p50_ratio: f64,
    /// The load average when the run ended.
    pub load_average: [f64; 3],
}

impl Comparison {
    pub fn new(weir: LoadReport, etcd: LoadReport) -> Comparison {
        Comparison {
            throughput_ratio: ratio(weir.ops_per_s, etcd.ops_per_s),
            p50_ratio: ratio(weir.p50_ms, etcd.p50_ms),
            weir,
            etcd,
            load_average: load_average(),
        }
    }

    pub fn print(&self, out: &Output) {
        let value = serde_json::to_value(self).expect("a comparison serializes");
        out.print(value, || self.text());
    }

    fn text(&self) -> String {
        let [l1, l5, l15] = self.load_average;
        format!(
            "acquire-release with {} clients, {:.1} s each\n{}\n\
             weir/etcd: throughput {:.2}x, p50 {:.2}x; load average {l1:.2} {l5:.2} {l15:.2}{}",
            self.weir.clients,
            self.weir.duration_s,
            table(&[("weir", &self.weir), ("etcd", &self.etcd)]),
            self.throughput_ratio,
            self.p50_ratio,
            if self.weir.verified {
                ""
            } else {
                "\nweir: VIOLATION found (see above)"
            }
        )
    }
}

pub use load::run;

/// The etcd side of the load: clients in the permit cycle for the warm-up and the duration.
mod load {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
    use tokio::task::JoinHandle;

    use super::super::args::BenchArgs;
    use super::super::report::{LoadReport, Recorder, histogram, measured_window};
    use super::{EtcdCluster, READY_WAIT};

    /// Keys of the bench, all under this prefix.
    const PREFIX: &str = "/weir-bench/permit";

    /// Waits (bounded) until the cluster takes a write.
    async fn ready(cluster: &EtcdCluster) -> Result<Client, String> {
        let until = Instant::now() + READY_WAIT;
        loop {
            let attempt = async {
                let mut c = Client::connect(&cluster.endpoints, None).await?;
                c.put(format!("{PREFIX}/ready"), "1", None).await?;
                Ok::<_, etcd_client::Error>(c)
            };
            match tokio::time::timeout(Duration::from_secs(2), attempt).await {
                Ok(Ok(c)) => return Ok(c),
                Ok(Err(e)) if Instant::now() >= until => {
                    return Err(format!("etcd did not answer within 30 s: {e}"));
                }
                Err(_) if Instant::now() >= until => {
                    return Err("etcd did not answer within 30 s".into());
                }
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }

    /// Runs the cycle on `cluster` with `args`' clients, warm-up and duration.
    pub async fn run(args: &BenchArgs, cluster: &EtcdCluster) -> Result<LoadReport, String> {
        ready(cluster).await?;
        eprintln!("[bench] etcd: {} members answer", super::MEMBERS);
        let recorder = Arc::new(Recorder::new());
        // A lease outlives the run: the client never needs a keep-alive inside it.
        let ttl_s = (args.warmup + args.duration) as i64 + 60;
        let mut clients: Vec<JoinHandle<()>> = vec![];
        let mut client = None;
        for n in 0..args.clients {
            if n % args.clients_per_connection == 0 || client.is_none() {
                client = Some(
                    Client::connect(&cluster.endpoints, None)
                        .await
                        .map_err(|e| format!("etcd connect: {e}"))?,
                );
            }
            let c = client.clone().expect("connected above");
            clients.push(tokio::spawn(cycle(c, n, ttl_s, recorder.clone())));
        }
        tokio::time::sleep(Duration::from_secs_f64(args.warmup)).await;
        let elapsed = measured_window(args, &recorder, "etcd").await;
        for c in clients {
            let _ = c.await;
        }
        // Nothing to verify on etcd's side: a put-if-absent of one's own key cannot
        // over-grant; a failed acquire is counted as an error.
        Ok(LoadReport::new(
            args,
            &recorder,
            elapsed,
            vec![],
            vec![],
            true,
        ))
    }

    /// One bench client: its lease, then acquire and release of its own key until told to
    /// stop.
    async fn cycle(mut c: Client, n: usize, ttl_s: i64, recorder: Arc<Recorder>) {
        let mut hist = histogram();
        let lease = match c.lease_grant(ttl_s, None).await {
            Ok(l) => l.id(),
            Err(e) => {
                eprintln!("etcd bench client {n}: lease: {e}");
                recorder.errors.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let key = format!("{PREFIX}/{n}");
        while !recorder.stop.load(Ordering::Relaxed) {
            let acquire = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.clone(),
                    "held",
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            let sent = recorder.ns();
            let granted = matches!(c.txn(acquire).await, Ok(r) if r.succeeded());
            recorder.record(&mut hist, sent, granted);
            let sent = recorder.ns();
            let released = c.delete(key.clone(), None).await.is_ok();
            recorder.record(&mut hist, sent, released);
        }
        let _ = c.lease_revoke(lease).await;
        recorder.merge(&hist);
    }
}
