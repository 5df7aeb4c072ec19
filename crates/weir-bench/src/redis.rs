//! `--against redis`: the take of `rate-take` on one Redis, measured in the same run as
//! Weir's `rate-take` and `rls`, or as Weir's `leased-take` (in whichever mode its options
//! chose: the Redis side is the same plain take on one bucket), printed side by side.
//!
//! The take is the token bucket teams write for Redis: a Lua script ([`SCRIPT`]), loaded
//! once and called with `EVALSHA`, that refills a hash's tokens by the time elapsed since
//! its last call (Redis's own clock, `TIME`) and takes one if there is one. One key for
//! every client, with the rate and burst of Weir's bench limit, so no take is ever refused
//! (a refusal counts as an error). envoyproxy/ratelimit itself keeps fixed-window counters
//! (`INCRBY` and `EXPIRE` in a pipeline): a cheaper operation with weaker semantics, not
//! measured here. Each bench client has a connection of its own and one command in flight,
//! as Weir's clients have one request in flight each.
//!
//! Redis runs as Debian packages it (`/usr/bin/redis-server`, found on PATH), on a
//! loopback port of the launcher's allocator, in a temporary directory of its own, with
//! the append-only file on and RDB snapshots off, twice: `appendfsync always` (an fsync
//! per write before the reply, which is what Weir's log does) and `appendfsync everysec`
//! (a second of acknowledged takes lost on a crash). Both start empty; each is killed and
//! its directory removed when its run ends, on an error, or on ctrl-c ([`External`]).
//! Redis is one process with no replica: a crash of it loses the limit, which Weir's three
//! nodes survive.
//!
//! With `--workload keyed-scale`, [`keyed_memory`] keeps the keyed point's buckets in one
//! Redis (`appendfsync everysec`, as the take's second run) and measures what they cost:
//! every key a hash as [`SCRIPT`] leaves it after one take from a fresh bucket of one token
//! (`tokens` 0, `at` the µs of the take), named as Weir's keys are. They are written with
//! `HSET` in pipelines over [`FILL_CONNECTIONS`] connections rather than by the script
//! once a key: the same bytes in Redis, in seconds rather than minutes. `used_memory` (`INFO
//! memory`, what Redis's allocator holds) and the process's RSS (`/proc/PID/status`) are
//! read before and after, with no append-only rewrite running, and the growth divided by
//! the keys.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::args::{BenchArgs, Workload};
use super::external::{External, find_program};
use super::report::{LoadReport, Recorder, histogram, load_average, measured_window, ratio, table};
use super::resp::{Connection, Value};
use super::{load, rls};
use crate::output::{EXIT_ERROR, EXIT_OK, Exit, Output};
use weir_launcher::{LocalCluster, free_port};
use weir_proto::tls::ClientSecurity;

/// The token bucket: `KEYS[1]` is a hash of `tokens` and `at` (µs of Redis's clock);
/// `ARGV` are the rate per second, the burst and the tokens to take. Returns `{granted (1
/// or 0), tokens left (floored)}`.
pub const SCRIPT: &str = r"
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local take = tonumber(ARGV[3])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local bucket = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(bucket[1]) or burst
local at = tonumber(bucket[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate / 1000000)
local granted = 0
if tokens >= take then
  tokens = tokens - take
  granted = 1
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens), 'at', string.format('%.0f', now))
return {granted, math.floor(tokens)}
";

/// The bucket's key, rate and burst: those of Weir's `rate-take` limit.
const KEY: &str = "weir-bench:bench-rate";
const RATE: &str = "1000000000";
const BURST: &str = "1000000000";

/// How long Redis may take to answer after it starts.
const READY_WAIT: Duration = Duration::from_secs(10);
/// Connections filling the keyed point's buckets at once.
const FILL_CONNECTIONS: u64 = 4;
/// `HSET`s in one pipeline of the fill.
const FILL_PIPELINE: u64 = 1_000;
/// How long a measurement waits for an append-only rewrite to end.
const REWRITE_WAIT: Duration = Duration::from_secs(300);

/// When Redis fsyncs its append-only file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fsync {
    /// Before each write's reply.
    Always,
    /// Once a second.
    Everysec,
}

impl Fsync {
    fn name(self) -> &'static str {
        match self {
            Fsync::Always => "always",
            Fsync::Everysec => "everysec",
        }
    }
}

/// One Redis on loopback, killed and removed on drop.
pub struct RedisServer {
    _external: External,
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl RedisServer {
    /// Starts Redis with the append-only file fsynced as `fsync` says, and waits (bounded)
    /// until it answers.
    pub async fn start(fsync: Fsync) -> Result<RedisServer, String> {
        let program = find_program("redis-server", "redis-server")?;
        let mut external = External::new(&format!("redis-{}", fsync.name()))?;
        let port = free_port()?;
        let mut command = Command::new(program);
        command
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .arg("--dir")
            .arg(external.dir())
            .arg("--logfile")
            .arg(external.dir().join("redis.log"))
            .args(["--appendonly", "yes", "--appendfsync", fsync.name()])
            .args(["--save", "", "--daemonize", "no"]);
        external.spawn(command, "redis.stderr")?;
        let server = RedisServer {
            _external: external,
            addr: format!("127.0.0.1:{port}"),
        };
        server.ready().await?;
        Ok(server)
    }

    async fn ready(&self) -> Result<(), String> {
        let until = Instant::now() + READY_WAIT;
        loop {
            let ping = async { Connection::open(&self.addr).await?.call(&[b"PING"]).await };
            match tokio::time::timeout(Duration::from_secs(1), ping).await {
                Ok(Ok(Value::Simple(pong))) if pong == "PONG" => return Ok(()),
                _ if Instant::now() >= until => {
                    return Err(format!("redis-server at {} did not answer", self.addr));
                }
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// One section of `INFO` as its `field:value` lines.
    async fn info(&self, section: &str) -> Result<Vec<(String, String)>, String> {
        let mut c = Connection::open(&self.addr).await?;
        match c.call(&[b"INFO", section.as_bytes()]).await? {
            Value::Bulk(Some(text)) => Ok(String::from_utf8_lossy(&text)
                .lines()
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
                .collect()),
            other => Err(format!("INFO {section} answered {other:?}")),
        }
    }

    /// A number of `INFO section`.
    async fn info_number(&self, section: &str, field: &str) -> Result<u64, String> {
        self.info(section)
            .await?
            .into_iter()
            .find(|(k, _)| k == field)
            .and_then(|(_, v)| v.parse().ok())
            .ok_or_else(|| format!("INFO {section} has no {field}"))
    }

    /// What Redis holds now: `used_memory`, and the RSS of its process. Waits (bounded)
    /// until no append-only rewrite runs or is scheduled, so neither a rewrite's buffers
    /// nor its fork are counted.
    pub async fn memory(&self) -> Result<Memory, String> {
        let until = Instant::now() + REWRITE_WAIT;
        loop {
            let persistence = self.info("persistence").await?;
            let busy = persistence.iter().any(|(k, v)| {
                (k == "aof_rewrite_in_progress" || k == "aof_rewrite_scheduled") && v != "0"
            });
            if !busy {
                break;
            }
            if Instant::now() >= until {
                return Err("redis-server's append-only rewrite did not end".into());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let used_memory = self.info_number("memory", "used_memory").await?;
        let pid = self.info_number("server", "process_id").await?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
        let rss_kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| format!("no VmRSS in /proc/{pid}/status"))?;
        let keys = self
            .info("keyspace")
            .await?
            .into_iter()
            .find(|(k, _)| k == "db0");
        let keys = keys
            .and_then(|(_, v)| {
                v.split(',')
                    .find_map(|f| f.strip_prefix("keys=")?.parse().ok())
            })
            .unwrap_or(0);
        Ok(Memory {
            used_memory,
            rss_bytes: rss_kib * 1024,
            keys,
        })
    }

    /// Writes `keys` buckets named `name(0)`… as [`SCRIPT`] leaves a bucket of one token
    /// after one take from it fresh (`tokens` 0, `at` now in µs), in pipelines of `HSET`
    /// over [`FILL_CONNECTIONS`] connections.
    pub async fn fill_buckets(&self, keys: u64, name: fn(u64) -> String) -> Result<(), String> {
        let mut fills = tokio::task::JoinSet::new();
        for c in 0..FILL_CONNECTIONS {
            let addr = self.addr.clone();
            fills.spawn(async move {
                let mut conn = Connection::open(&addr).await?;
                // Connection c writes the batches c, c + FILL_CONNECTIONS, …
                let mut first = c * FILL_PIPELINE;
                while first < keys {
                    let at = format!("{}", now_us());
                    let batch: Vec<Vec<Vec<u8>>> = (first..(first + FILL_PIPELINE).min(keys))
                        .map(|k| {
                            [
                                b"HSET".as_slice(),
                                name(k).as_bytes(),
                                b"tokens",
                                b"0",
                                b"at",
                            ]
                            .iter()
                            .map(|a| a.to_vec())
                            .chain([at.as_bytes().to_vec()])
                            .collect()
                        })
                        .collect();
                    conn.pipeline(&batch).await?;
                    first += FILL_CONNECTIONS * FILL_PIPELINE;
                }
                Ok::<(), String>(())
            });
        }
        while let Some(r) = fills.join_next().await {
            r.map_err(|e| e.to_string())??;
        }
        Ok(())
    }

    /// Loads [`SCRIPT`]; returns its SHA1 for `EVALSHA`.
    pub async fn load_script(&self) -> Result<String, String> {
        let mut c = Connection::open(&self.addr).await?;
        match c.call(&[b"SCRIPT", b"LOAD", SCRIPT.as_bytes()]).await? {
            Value::Bulk(Some(sha)) => String::from_utf8(sha).map_err(|e| e.to_string()),
            other => Err(format!("SCRIPT LOAD answered {other:?}")),
        }
    }
}

/// Microseconds since the Unix epoch, as Redis's `TIME` gives them.
fn now_us() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

/// What one Redis holds at a moment.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Memory {
    /// `INFO memory`'s `used_memory`: the bytes its allocator holds for data and buffers.
    pub used_memory: u64,
    /// The process's resident memory (`VmRSS`).
    pub rss_bytes: u64,
    /// Keys in its database.
    pub keys: u64,
}

/// The keyed point's buckets in Redis: its memory before and after, and per key.
#[derive(Debug, Serialize)]
pub struct KeyedMemory {
    pub keys: u64,
    /// `appendfsync` of the append-only file.
    pub persistence: &'static str,
    pub before: Memory,
    pub after: Memory,
    /// The growth a key, rounded (RSS may shrink, so signed).
    pub used_memory_bytes_per_key: i64,
    pub rss_bytes_per_key: i64,
    /// Seconds the fill took.
    pub fill_s: f64,
}

/// Keeps `keys` buckets named `name(0)`… in a fresh Redis (`appendfsync everysec`) and
/// returns what they cost; the Redis is stopped and removed after.
pub async fn keyed_memory(keys: u64, name: fn(u64) -> String) -> Result<KeyedMemory, String> {
    let fsync = Fsync::Everysec;
    let server = RedisServer::start(fsync).await?;
    let before = server.memory().await?;
    let started = Instant::now();
    server.fill_buckets(keys, name).await?;
    let fill_s = started.elapsed().as_secs_f64();
    let after = server.memory().await?;
    if after.keys != keys {
        return Err(format!(
            "redis holds {} keys after writing {keys}",
            after.keys
        ));
    }
    let per_key = |a: u64, b: u64| ((a as f64 - b as f64) / keys as f64).round() as i64;
    Ok(KeyedMemory {
        keys,
        persistence: fsync.name(),
        used_memory_bytes_per_key: per_key(after.used_memory, before.used_memory),
        rss_bytes_per_key: per_key(after.rss_bytes, before.rss_bytes),
        before,
        after,
        fill_s,
    })
}

/// One take of `tokens` from the bucket at `key` with `rate` and `burst`: granted or not,
/// or the error.
pub async fn take(
    c: &mut Connection,
    sha: &str,
    key: &str,
    rate: &str,
    burst: &str,
    tokens: &str,
) -> Result<bool, String> {
    let args: [&[u8]; 7] = [
        b"EVALSHA",
        sha.as_bytes(),
        b"1",
        key.as_bytes(),
        rate.as_bytes(),
        burst.as_bytes(),
        tokens.as_bytes(),
    ];
    match c.call(&args).await? {
        Value::Array(Some(a)) if a.len() == 2 => match a[0] {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            _ => Err(format!("the script answered {a:?}")),
        },
        other => Err(format!("the script answered {other:?}")),
    }
}

/// Runs the take on a Redis with `fsync` for `args`' clients, warm-up and duration.
pub async fn measure(args: &BenchArgs, fsync: Fsync) -> Result<LoadReport, String> {
    let server = RedisServer::start(fsync).await?;
    let sha = server.load_script().await?;
    eprintln!("[bench] redis ({}) answers", fsync.name());
    let recorder = Arc::new(Recorder::new());
    let mut clients = vec![];
    for _ in 0..args.clients {
        let c = Connection::open(&server.addr).await?;
        clients.push(tokio::spawn(client(c, sha.clone(), recorder.clone())));
    }
    tokio::time::sleep(Duration::from_secs_f64(args.warmup)).await;
    let elapsed = measured_window(args, &recorder, &format!("redis {}", fsync.name())).await;
    for c in clients {
        let _ = c.await;
    }
    Ok(LoadReport::new(
        args,
        &recorder,
        elapsed,
        vec![],
        vec![],
        true,
    ))
}

/// One bench client: takes until told to stop; a refused take is an error.
async fn client(mut c: Connection, sha: String, recorder: Arc<Recorder>) {
    let mut hist = histogram();
    while !recorder.stop.load(Ordering::Relaxed) {
        let sent = recorder.ns();
        let taken = match take(&mut c, &sha, KEY, RATE, BURST, "1").await {
            Ok(true) => Ok(()),
            Ok(false) => Err("refused by a bucket that never runs short".to_owned()),
            Err(e) => Err(e),
        };
        recorder.record_result(&mut hist, sent, &taken);
    }
    recorder.merge(&hist);
}

/// Weir's takes and Redis's, same clients, same run.
#[derive(Serialize)]
pub struct Comparison {
    pub weir_rate_take: LoadReport,
    pub weir_rls: LoadReport,
    pub redis_always: LoadReport,
    pub redis_everysec: LoadReport,
    /// Weir's ops/s over Redis's: `rate-take` and `rls`, each over `always` and `everysec`.
    pub rate_take_over_always: f64,
    pub rate_take_over_everysec: f64,
    pub rls_over_always: f64,
    pub rls_over_everysec: f64,
    /// The load average when the run ended.
    pub load_average: [f64; 3],
}

impl Comparison {
    fn text(&self) -> String {
        let [l1, l5, l15] = self.load_average;
        format!(
            "a take with {} clients, {:.1} s each\n{}\n\
             weir/redis throughput: rate-take {:.2}x always, {:.2}x everysec; \
             rls {:.2}x always, {:.2}x everysec; load average {l1:.2} {l5:.2} {l15:.2}",
            self.weir_rate_take.clients,
            self.weir_rate_take.duration_s,
            table(&[
                ("weir rate-take", &self.weir_rate_take),
                ("weir rls", &self.weir_rls),
                ("redis always", &self.redis_always),
                ("redis everysec", &self.redis_everysec),
            ]),
            self.rate_take_over_always,
            self.rate_take_over_everysec,
            self.rls_over_always,
            self.rls_over_everysec,
        )
    }
}

/// Weir's `leased-take` and Redis's plain take, same clients, same run.
#[derive(Serialize)]
pub struct LeasedComparison {
    pub weir_leased_take: LoadReport,
    pub redis_always: LoadReport,
    pub redis_everysec: LoadReport,
    /// Weir's leased takes a second over Redis's, with `always` and with `everysec`.
    pub leased_over_always: f64,
    pub leased_over_everysec: f64,
    /// The load average when the run ended.
    pub load_average: [f64; 3],
}

impl LeasedComparison {
    fn text(&self) -> String {
        let [l1, l5, l15] = self.load_average;
        let lease = self
            .weir_leased_take
            .lease
            .as_ref()
            .map(|l| {
                format!(
                    "; weir {:.2} commands per 1,000 takes",
                    l.commands_per_1k_takes
                )
            })
            .unwrap_or_default();
        format!(
            "a take with {} clients, {:.1} s each\n{}\n\
             weir leased/redis throughput: {:.2}x always, {:.2}x everysec{lease}; \
             load average {l1:.2} {l5:.2} {l15:.2}",
            self.weir_leased_take.clients,
            self.weir_leased_take.duration_s,
            table(&[
                ("weir leased-take", &self.weir_leased_take),
                ("redis always", &self.redis_always),
                ("redis everysec", &self.redis_everysec),
            ]),
            self.leased_over_always,
            self.leased_over_everysec,
        )
    }
}

/// Weir first (`rate-take`, then `rls`; or `leased-take` alone; then its cluster is
/// stopped, so the systems never share the CPU), then Redis with `always`, then with
/// `everysec`; prints them side by side. A ctrl-c ends the run with everything it started
/// stopped and removed.
pub async fn against(
    args: &BenchArgs,
    servers: &[String],
    security: &ClientSecurity,
    spawned: Option<LocalCluster>,
    out: &Output,
) -> Result<Exit, String> {
    let compared = async {
        if args.workload == Workload::LeasedTake {
            let c = run_leased(args, servers, security, spawned).await?;
            let value = serde_json::to_value(&c).expect("a comparison serializes");
            return Ok::<_, String>((value, c.text(), c.weir_leased_take.verified));
        }
        let c = run(args, servers, security, spawned).await?;
        let value = serde_json::to_value(&c).expect("a comparison serializes");
        Ok((value, c.text(), c.weir_rate_take.verified))
    };
    tokio::select! {
        result = compared => {
            let (value, text, verified) = result?;
            out.print(value, move || text);
            Ok(if verified { EXIT_OK } else { EXIT_ERROR })
        }
        _ = tokio::signal::ctrl_c() => Err("interrupted; Redis and the cluster are stopped and removed".into()),
    }
}

/// Weir's `leased-take` (its cluster stopped after it), then Redis's plain take with
/// `always` and with `everysec`.
async fn run_leased(
    args: &BenchArgs,
    servers: &[String],
    security: &ClientSecurity,
    mut spawned: Option<LocalCluster>,
) -> Result<LeasedComparison, String> {
    let weir_leased_take = load::measure_load(args, servers, security, spawned.as_mut()).await?;
    drop(spawned);
    eprintln!(
        "[bench] weir: leased-take {:.0} ops/s; now redis",
        weir_leased_take.ops_per_s
    );
    let take = BenchArgs {
        workload: Workload::RateTake,
        ..args.clone()
    };
    let redis_always = measure(&take, Fsync::Always).await?;
    let redis_everysec = measure(&take, Fsync::Everysec).await?;
    Ok(LeasedComparison {
        leased_over_always: ratio(weir_leased_take.ops_per_s, redis_always.ops_per_s),
        leased_over_everysec: ratio(weir_leased_take.ops_per_s, redis_everysec.ops_per_s),
        weir_leased_take,
        redis_always,
        redis_everysec,
        load_average: load_average(),
    })
}

async fn run(
    args: &BenchArgs,
    servers: &[String],
    security: &ClientSecurity,
    mut spawned: Option<LocalCluster>,
) -> Result<Comparison, String> {
    let with = |workload| BenchArgs {
        workload,
        ..args.clone()
    };
    let weir_rate_take = load::measure_load(
        &with(Workload::RateTake),
        servers,
        security,
        spawned.as_mut(),
    )
    .await?;
    let weir_rls = rls::measure(&with(Workload::Rls), servers, security, spawned.as_ref()).await?;
    drop(spawned);
    eprintln!(
        "[bench] weir: rate-take {:.0} ops/s, rls {:.0} ops/s; now redis",
        weir_rate_take.ops_per_s, weir_rls.ops_per_s
    );
    let take = with(Workload::RateTake);
    let redis_always = measure(&take, Fsync::Always).await?;
    let redis_everysec = measure(&take, Fsync::Everysec).await?;
    Ok(Comparison {
        rate_take_over_always: ratio(weir_rate_take.ops_per_s, redis_always.ops_per_s),
        rate_take_over_everysec: ratio(weir_rate_take.ops_per_s, redis_everysec.ops_per_s),
        rls_over_always: ratio(weir_rls.ops_per_s, redis_always.ops_per_s),
        rls_over_everysec: ratio(weir_rls.ops_per_s, redis_everysec.ops_per_s),
        weir_rate_take,
        weir_rls,
        redis_always,
        redis_everysec,
        load_average: load_average(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The script on a real Redis (skipped where `redis-server` is not installed): a bucket
    /// grants while it has tokens, refuses when short, and refills with time.
    #[tokio::test]
    async fn the_lua_bucket_grants_refuses_when_short_and_refills() {
        if find_program("redis-server", "redis-server").is_err() {
            eprintln!("skipped: redis-server is not installed");
            return;
        }
        let server = RedisServer::start(Fsync::Everysec).await.unwrap();
        let sha = server.load_script().await.unwrap();
        let mut c = Connection::open(&server.addr).await.unwrap();
        // Two tokens, one per 1,000 s: two takes, then none.
        let mut takes = vec![];
        for tokens in ["1", "1", "1"] {
            takes.push(
                take(&mut c, &sha, "slow", "0.001", "2", tokens)
                    .await
                    .unwrap(),
            );
        }
        assert_eq!(takes, [true, true, false]);
        assert!(
            !take(&mut c, &sha, "fresh", "0.001", "2", "3")
                .await
                .unwrap()
        );
        // One token, 20 a second: empty after a take, full again 200 ms later.
        assert!(take(&mut c, &sha, "fast", "20", "1", "1").await.unwrap());
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(take(&mut c, &sha, "fast", "20", "1", "1").await.unwrap());
        let err = take(&mut c, "0000", "k", "1", "1", "1").await.unwrap_err();
        assert!(err.starts_with("redis: NOSCRIPT"), "{err}");
    }

    /// A hash's fields and values, sorted by field.
    async fn fields(c: &mut Connection, key: &str) -> Vec<(String, String)> {
        let Value::Array(Some(items)) = c.call(&[b"HGETALL", key.as_bytes()]).await.unwrap() else {
            panic!("HGETALL {key}");
        };
        let text = |v: &Value| match v {
            Value::Bulk(Some(b)) => String::from_utf8(b.clone()).unwrap(),
            other => panic!("{other:?}"),
        };
        let mut pairs: Vec<(String, String)> = items
            .chunks(2)
            .map(|p| (text(&p[0]), text(&p[1])))
            .collect();
        pairs.sort();
        pairs
    }

    /// The keyed point's fill on a real Redis (skipped where `redis-server` is not
    /// installed): every key written, each as the script leaves a bucket of one token after
    /// one take, which the script then reads as empty.
    #[tokio::test]
    async fn filled_buckets_hold_what_the_script_leaves_after_one_take() {
        if find_program("redis-server", "redis-server").is_err() {
            eprintln!("skipped: redis-server is not installed");
            return;
        }
        // `always`: the test beside it, in the same process, has `everysec`'s directory.
        let server = RedisServer::start(Fsync::Always).await.unwrap();
        let sha = server.load_script().await.unwrap();
        let before = server.memory().await.unwrap();
        assert_eq!(before.keys, 0);
        // Three pipelines over three connections, the last one short.
        server
            .fill_buckets(2_500, |k| format!("key-{k:07}"))
            .await
            .unwrap();
        let after = server.memory().await.unwrap();
        assert_eq!(after.keys, 2_500);
        assert!(
            after.used_memory > before.used_memory,
            "{before:?} {after:?}"
        );
        assert!(after.rss_bytes > 0, "{after:?}");
        let mut c = Connection::open(&server.addr).await.unwrap();
        assert!(
            take(&mut c, &sha, "fresh", "0.001", "1", "1")
                .await
                .unwrap()
        );
        let (script, filled) = (
            fields(&mut c, "fresh").await,
            fields(&mut c, "key-0002499").await,
        );
        assert_eq!(script.len(), 2, "{script:?}");
        assert_eq!(
            (&script[0].0, &script[1]),
            (&filled[0].0, &filled[1]),
            "the same fields, tokens 0: {script:?} {filled:?}"
        );
        let at = |f: &[(String, String)]| f[0].1.parse::<u64>().unwrap();
        assert!(
            at(&script).abs_diff(at(&filled)) < 60_000_000,
            "{script:?} {filled:?}"
        );
        let mut encoding = vec![];
        for key in ["fresh", "key-0000000"] {
            encoding.push(
                c.call(&[b"OBJECT", b"ENCODING", key.as_bytes()])
                    .await
                    .unwrap(),
            );
        }
        assert_eq!(encoding[0], encoding[1]);
        assert!(
            !take(&mut c, &sha, "key-0000000", "0.001", "1", "1")
                .await
                .unwrap()
        );
        assert_eq!(
            c.call(&[b"EXISTS", b"key-0002500"]).await.unwrap(),
            Value::Int(0),
            "no key past the fill"
        );
    }
}
