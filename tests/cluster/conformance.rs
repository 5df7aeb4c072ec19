//! The conformance driver for the Rust library: every scenario of
//! `tests/conformance/scenarios.json` (described in `tests/conformance/README.md`) run with
//! `weir-client` against real clusters, one line each: `conformance rust <name>:
//! pass|fail|skip (<reason>)`; a failed scenario fails the test.
//!
//! The Rust library speaks the binary client protocol, not HTTP: a `take` step is an
//! acquire with `wait = false` on a session of the driver's (a rate-only grant holds
//! nothing), and the client without the cluster CA verifies against another CA (the binary
//! protocol has no system roots to fall back on), which the node's certificate fails the
//! same way.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use weir_client::{AcquireError, AcquireOptions, Client, ClientError, Lost, Permit, Session};
use weir_core::machine::{Definition, HaltScope, Part, Priority, Refusal, Reply};
use weir_launcher::LocalCluster;
use weir_proto::protocol::Failure;
use weir_proto::tls::ClientSecurity;
use weir_server::security::certs::{DevCa, Validity};

use crate::harness::{Cluster, start_secured, token_entries, write_certs};

/// Scenarios this library cannot run, with the reason: none today.
const SKIPS: &[(&str, &str)] = &[];

fn scenarios() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/scenarios.json");
    let file: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(file["version"], 1, "this driver reads version 1");
    file
}

/// A TCP proxy in front of one node's client port; `cut` stops relaying both ways without
/// closing anything, as a partition does.
struct Proxy {
    addr: String,
    open: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(target: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (open, rx) = watch::channel(true);
        let task = tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                let rx = rx.clone();
                let target = target.clone();
                tokio::spawn(async move {
                    let Ok(up) = TcpStream::connect(&target).await else {
                        return;
                    };
                    let (dr, dw) = down.into_split();
                    let (ur, uw) = up.into_split();
                    tokio::spawn(pump(dr, uw, rx.clone()));
                    tokio::spawn(pump(ur, dw, rx));
                });
            }
        });
        Proxy { addr, open, task }
    }

    fn cut(&self) {
        self.open.send_replace(false);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut open: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 32 << 10];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if open.wait_for(|o| *o).await.is_err() || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

struct Clusters {
    plain: Cluster,
    secure: LocalCluster,
    certs: PathBuf,
    other_ca: PathBuf,
}

struct Run<'a> {
    file: &'a Value,
    tenant: String,
    servers: Vec<String>,
    certs: PathBuf,
    other_ca: PathBuf,
    admin: Client,
    clients: HashMap<String, Client>,
    proxies: Vec<Proxy>,
    taker: Option<Arc<Session>>,
    sessions: HashMap<String, Arc<Session>>,
    owner: HashMap<String, String>,
    permits: HashMap<String, Permit>,
    fences: HashMap<String, u64>,
    pending: HashMap<String, tokio::task::JoinHandle<Result<Permit, AcquireError>>>,
}

/// What a step met, as the file names refusals.
fn kind_of_refusal(r: &Refusal) -> &'static str {
    match r {
        Refusal::Busy { .. } => "Busy",
        Refusal::TooLarge { .. } => "TooLarge",
        Refusal::UnknownLimit { .. } => "UnknownLimit",
        Refusal::Halted { .. } => "Halted",
        _ => "other refusal",
    }
}

fn kind_of_client_error(e: &ClientError) -> String {
    match e {
        ClientError::Refused(_) => "Unauthorized".into(),
        ClientError::Failed(Failure::Forbidden(_)) => "Forbidden".into(),
        ClientError::Protocol(why) if why.contains("certificate") => "TlsUntrusted".into(),
        other => format!("{other}"),
    }
}

/// Checks an outcome (`Ok(())` or the kind met) against the step's expectation.
fn check(expect: &Value, got: Result<(), String>, success: &str) -> Result<(), String> {
    let want = expect["outcome"].as_str().unwrap_or(success);
    match (want, got) {
        ("refused", Ok(())) => Err(format!("want refused {}, got {success}", expect["error"])),
        ("refused", Err(kind)) if expect["error"].as_str() == Some(kind.as_str()) => Ok(()),
        ("refused", Err(kind)) => Err(format!("want refused {}, got {kind}", expect["error"])),
        (_, Ok(())) => Ok(()),
        (want, Err(kind)) => Err(format!("want {want}, got {kind}")),
    }
}

fn acquire_kind(e: &AcquireError) -> String {
    match e {
        AcquireError::Refused(r) => kind_of_refusal(r).into(),
        AcquireError::TimedOut => "TimedOut".into(),
        AcquireError::SessionLost => "SessionLost".into(),
        AcquireError::Client(c) => kind_of_client_error(c),
    }
}

fn reply_kind(r: Result<Reply, ClientError>) -> Result<(), String> {
    match r {
        Ok(Reply::Refused(refusal)) => Err(kind_of_refusal(&refusal).into()),
        Ok(_) => Ok(()),
        Err(e) => Err(kind_of_client_error(&e)),
    }
}

fn ms(v: &Value) -> Duration {
    Duration::from_millis(v.as_u64().unwrap_or(0))
}

impl Run<'_> {
    fn client(&self, step: &Value) -> Result<&Client, String> {
        let name = step["client"].as_str().unwrap_or("default");
        self.clients.get(name).ok_or(format!("no client {name}"))
    }

    fn fence(&self, name: &Value) -> Result<u64, String> {
        let name = name.as_str().unwrap_or_default();
        self.fences
            .get(name)
            .copied()
            .ok_or(format!("no permit {name}"))
    }

    fn granted(&mut self, step: &Value, name: Option<&str>, permit: Permit) -> Result<(), String> {
        let expect = &step["expect"];
        let fence = permit.fence();
        if !expect["fence_gt"].is_null() && fence <= self.fence(&expect["fence_gt"])? {
            return Err(format!("fence {fence} not above {}'s", expect["fence_gt"]));
        }
        if !expect["same_fence_as"].is_null() && fence != self.fence(&expect["same_fence_as"])? {
            return Err(format!("fence {fence}, not {}'s", expect["same_fence_as"]));
        }
        if let Some(name) = name {
            self.fences.insert(name.into(), fence);
            self.permits.insert(name.into(), permit);
        }
        Ok(())
    }

    fn options(&self, step: &Value) -> AcquireOptions {
        let mut o = AcquireOptions::new(&self.tenant, step["limit"].as_str().unwrap_or_default());
        o.key = step["key"].as_str().map(String::from);
        o.units = step["units"].as_u64().unwrap_or(1) as u32;
        o.parts = step["parts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| Part {
                limit: p["limit"].as_str().unwrap_or_default().into(),
                key: p["key"].as_str().map(String::from),
                units: p["units"].as_u64().unwrap_or(1) as u32,
            })
            .collect();
        o.estimate = step["estimate"].as_bool().unwrap_or(false);
        o.priority = Priority {
            level: step["priority"].as_i64().unwrap_or(0) as i32,
            fairness_key: String::new(),
            fairness_weight: 1,
        };
        o.wait = step["wait"].as_bool().unwrap_or(true);
        o.timeout = Some(if step["timeout_ms"].is_null() {
            Duration::from_secs(10)
        } else {
            ms(&step["timeout_ms"])
        });
        o.ticket = step["ticket"].as_u64();
        o
    }

    async fn limit(&self, step: &Value) -> Result<weir_core::machine::LimitStatus, String> {
        let name = step["limit"].as_str().unwrap_or_default();
        let got = match step["key"].as_str() {
            Some(key) => self.admin.key_status(&self.tenant, name, key).await,
            None => self.admin.limit_status(&self.tenant, name).await,
        };
        got.map_err(|e| e.to_string())?
            .ok_or(format!("no limit {name}"))
    }

    async fn step(&mut self, step: &Value) -> Result<(), String> {
        let expect = &step["expect"];
        let name = step["as"].as_str();
        match step["do"].as_str().unwrap_or_default() {
            "connect" => {
                let token = step["token"].as_str().map(|t| {
                    self.file["tokens"][t]["secret"]
                        .as_str()
                        .unwrap()
                        .to_string()
                });
                let ca = if step["ca"].as_bool() == Some(true) {
                    self.certs.join("ca.pem")
                } else {
                    self.other_ca.clone()
                };
                let security = ClientSecurity::new(Some(&ca), token).map_err(|e| e.to_string())?;
                let client = Client::with_security(self.servers.clone(), security);
                self.clients.insert(name.unwrap().into(), client);
            }
            "open_session" => {
                let client = self.client(step)?;
                let ttl = ms(&step["ttl_ms"]);
                match Session::open(client, ttl).await {
                    Ok(s) => {
                        check(expect, Ok(()), "opened")?;
                        if let Some(name) = name {
                            self.sessions.insert(name.into(), Arc::new(s));
                            let owner = step["client"].as_str().unwrap_or("default");
                            self.owner.insert(name.into(), owner.into());
                        }
                    }
                    Err(e) => check(expect, Err(kind_of_client_error(&e)), "opened")?,
                }
            }
            "acquire" => {
                let session = self
                    .sessions
                    .get(step["session"].as_str().unwrap_or_default());
                let session = session.ok_or("no session")?.clone();
                let mut options = self.options(step);
                if step["background"].as_bool() == Some(true) {
                    options.timeout = Some(Duration::from_secs(30));
                    let task = tokio::spawn(async move { session.acquire(options).await });
                    self.pending.insert(name.unwrap().into(), task);
                    return Ok(());
                }
                match session.acquire(options).await {
                    Ok(p) => {
                        check(expect, Ok(()), "granted")?;
                        self.granted(step, name, p)?;
                    }
                    Err(e) => check(expect, Err(acquire_kind(&e)), "granted")?,
                }
            }
            "await" => {
                let permit = step["permit"].as_str().unwrap_or_default();
                let task = self.pending.remove(permit).ok_or("no background acquire")?;
                let got = tokio::time::timeout(ms(&step["within_ms"]), task)
                    .await
                    .map_err(|_| format!("{permit}: no outcome within {}", step["within_ms"]))?
                    .map_err(|e| e.to_string())?;
                match got {
                    Ok(p) => {
                        check(expect, Ok(()), "granted")?;
                        self.granted(step, Some(permit), p)?;
                    }
                    Err(e) => check(expect, Err(acquire_kind(&e)), "granted")?,
                }
            }
            "release" => {
                let permit = step["permit"].as_str().unwrap_or_default();
                let p = self.permits.remove(permit).ok_or("no permit")?;
                p.release().await.map_err(|e| e.to_string())?;
            }
            "settle" => {
                let permit = step["permit"].as_str().unwrap_or_default();
                let p = self.permits.get(permit).ok_or("no permit")?;
                let got = match p.settle(step["cost"].as_u64().unwrap_or(0)).await {
                    Ok(Reply::Settled { .. }) => "settled",
                    Ok(Reply::Overrun { .. }) => "overrun",
                    other => return Err(format!("settle answered {other:?}")),
                };
                if let Some(want) = expect["status"].as_str()
                    && want != got
                {
                    return Err(format!("{got}, want {want}"));
                }
            }
            "take" => {
                let client = self.client(step)?.clone();
                let taker = match Session::open(&client, Duration::from_secs(3)).await {
                    Ok(s) => Arc::new(s),
                    Err(e) => return check(expect, Err(kind_of_client_error(&e)), "taken"),
                };
                let mut options = self.options(step);
                options.wait = false;
                let got = match taker.acquire(options).await {
                    Ok(p) => {
                        p.consume();
                        Ok(())
                    }
                    Err(e) => Err(acquire_kind(&e)),
                };
                self.taker = Some(taker);
                check(expect, got, "taken")?;
            }
            "set_halt" | "clear_halt" => {
                let client = match step["client"].as_str() {
                    Some(_) => self.client(step)?,
                    None => &self.admin,
                };
                let got = if step["do"] == "set_halt" {
                    let reason = step["reason"].as_str().unwrap_or_default();
                    client
                        .set_halt(&self.tenant, HaltScope::Tenant, reason)
                        .await
                } else {
                    client.clear_halt(&self.tenant, HaltScope::Tenant).await
                };
                check(expect, reply_kind(got), "ok")?;
            }
            "freeze_keepalives" => {
                let session = step["session"].as_str().unwrap_or_default();
                if self.owner.get(session).map(String::as_str) != Some("default")
                    || self.proxies.is_empty()
                {
                    return Err("the session's client is not behind proxies".into());
                }
                for p in &self.proxies {
                    p.cut();
                }
            }
            "expect_held" => {
                let permit = step["permit"].as_str().unwrap_or_default();
                let p = self.permits.get(permit).ok_or("no permit")?;
                if let Some(lost) = p.lost_reason() {
                    return Err(format!("{permit} believed lost: {lost}"));
                }
            }
            "expect_lost" => {
                let permit = step["permit"].as_str().unwrap_or_default();
                let p = self.permits.get(permit).ok_or("no permit")?;
                let lost = tokio::time::timeout(ms(&step["within_ms"]), p.lost())
                    .await
                    .map_err(|_| {
                        format!(
                            "{permit} still believed held {} ms after the step began",
                            step["within_ms"]
                        )
                    })?;
                let kind = match lost {
                    Lost::Deadline => "deadline",
                    Lost::Halted { .. } => "halted",
                    Lost::Expired => "expired",
                    Lost::Closed => "closed",
                    Lost::Released => "released",
                    Lost::Refused(_) => "refused",
                };
                if let Some(want) = step["reason"].as_str()
                    && want != kind
                {
                    return Err(format!("{permit} lost ({kind}), want {want}"));
                }
            }
            "expect_limit" => {
                let deadline = Instant::now() + ms(&step["within_ms"]);
                loop {
                    let got = self.limit(step).await?;
                    let mut miss = vec![];
                    for (field, have) in [
                        ("in_use", got.in_use),
                        ("waiting", got.waiting),
                        ("tokens", got.tokens),
                    ] {
                        if let Some(want) = expect[field].as_u64()
                            && want != have
                        {
                            miss.push(format!("{field} {have}, want {want}"));
                        }
                    }
                    if miss.is_empty() {
                        break;
                    }
                    if Instant::now() >= deadline {
                        return Err(miss.join(", "));
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            "sleep" => tokio::time::sleep(ms(&step["ms"])).await,
            "close" => {
                let session = step["session"].as_str().unwrap_or_default();
                let s = self.sessions.remove(session).ok_or("no session")?;
                // Permits of the session are dropped first: their guards share its state.
                let permits: Vec<String> = self.permits.keys().cloned().collect();
                for p in permits {
                    if let Some(permit) = self.permits.remove(&p) {
                        permit.consume();
                    }
                }
                match Arc::try_unwrap(s) {
                    Ok(s) => s.close().await.map_err(|e| e.to_string())?,
                    Err(_) => return Err("the session is still shared".into()),
                }
            }
            other => return Err(format!("unknown step {other}")),
        }
        Ok(())
    }
}

async fn run_scenario(file: &Value, clusters: &Clusters, scenario: &Value) -> Result<(), String> {
    let tenant = scenario["name"].as_str().unwrap().to_string();
    let secure = scenario["cluster"] == "secure";
    let (servers, admin_security) = if secure {
        let token = file["tokens"]["admin"]["secret"]
            .as_str()
            .unwrap()
            .to_string();
        let security =
            ClientSecurity::new(Some(&clusters.certs.join("ca.pem")), Some(token)).unwrap();
        (clusters.secure.servers(), Some(security))
    } else {
        (clusters.plain.servers(), None)
    };
    let make = |servers: Vec<String>| match &admin_security {
        Some(s) => Client::with_security(servers, s.clone()),
        None => Client::new(servers),
    };
    let admin = make(servers.clone());
    let mut proxies = vec![];
    let mut default_servers = servers.clone();
    if scenario["proxied"].as_bool() == Some(true) {
        for s in &servers {
            proxies.push(Proxy::start(s.clone()).await);
        }
        default_servers = proxies.iter().map(|p| p.addr.clone()).collect();
    }
    for l in scenario["limits"].as_array().unwrap() {
        let definition = Definition {
            tenant: tenant.clone(),
            name: l["name"].as_str().unwrap().into(),
            concurrent: l["concurrent"].as_u64().unwrap() as u32,
            per_second: l["per_second"].as_f64().unwrap(),
            burst: l["burst"].as_u64().filter(|b| *b > 0),
            keyed: l["keyed"].as_bool().unwrap(),
            keys_max: None,
            shadow: false,
        };
        match admin.define(definition).await {
            Ok(Reply::Done) => {}
            other => return Err(format!("defining {}: {other:?}", l["name"])),
        }
    }
    let mut run = Run {
        file,
        tenant,
        servers,
        certs: clusters.certs.clone(),
        other_ca: clusters.other_ca.clone(),
        clients: HashMap::from([("default".to_string(), make(default_servers))]),
        admin,
        proxies,
        taker: None,
        sessions: HashMap::new(),
        owner: HashMap::new(),
        permits: HashMap::new(),
        fences: HashMap::new(),
        pending: HashMap::new(),
    };
    for (i, step) in scenario["steps"].as_array().unwrap().iter().enumerate() {
        let done = tokio::time::timeout(Duration::from_secs(30), run.step(step)).await;
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("step {} ({}): {e}", i + 1, step["do"])),
            Err(_) => {
                return Err(format!(
                    "step {} ({}): no end within 30 s",
                    i + 1,
                    step["do"]
                ));
            }
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_scenarios_pass_with_the_rust_library() {
    let file = scenarios();
    let plain = Cluster::start("conformance", 3, "");
    let mut secure =
        LocalCluster::in_temp_dir(env!("CARGO_BIN_EXE_weir"), "weir-conformance-secure").unwrap();
    let certs = secure.dir().join("certs");
    let other = secure.dir().join("other");
    let ca = DevCa::new("conformance CA").unwrap();
    write_certs(
        &certs,
        &ca,
        &[
            ("node1", Validity::Current),
            ("node2", Validity::Current),
            ("node3", Validity::Current),
        ],
    );
    write_certs(&other, &DevCa::new("another CA").unwrap(), &[]);
    let roles: Vec<(&str, &str)> = file["tokens"]
        .as_object()
        .unwrap()
        .values()
        .filter_map(|t| Some((t["secret"].as_str()?, t["role"].as_str()?)))
        .collect();
    let admin_secret = file["tokens"]["admin"]["secret"].as_str().unwrap();
    secure = secure.security(
        ClientSecurity::new(Some(&certs.join("ca.pem")), Some(admin_secret.into())).unwrap(),
    );
    start_secured(&mut secure, Some(&certs), &token_entries(&roles)).await;
    plain.leader(crate::ELECTION).await;
    let clusters = Clusters {
        plain,
        secure,
        certs,
        other_ca: other.join("ca.pem"),
    };
    let mut failed = vec![];
    for scenario in file["scenarios"].as_array().unwrap() {
        let name = scenario["name"].as_str().unwrap();
        if let Some((_, why)) = SKIPS.iter().find(|(n, _)| *n == name) {
            println!("conformance rust {name}: skip ({why})");
            continue;
        }
        match run_scenario(&file, &clusters, scenario).await {
            Ok(()) => println!("conformance rust {name}: pass"),
            Err(e) => {
                println!("conformance rust {name}: fail ({e})");
                failed.push(format!("{name}: {e}"));
            }
        }
    }
    assert!(failed.is_empty(), "scenarios failed: {failed:#?}");
}
