//! Three `weir` processes in loopback mode: each with its own data directory, its client port
//! open to the harness, its peer port behind a [`crate::proxy`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir::client::Client;
use weir::protocol::{Request, Response};

use crate::proxy::{self, Links};

/// A node's clock as the clock nemesis set it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Clock {
    /// Monotonic offset, seconds (a time namespace of its own, `unshare --time`).
    pub offset_s: u64,
    /// Rate of its proposer's stamps (`WEIR_TEST_CLOCK_RATE`); 1 is true.
    pub rate: f64,
}

pub struct Node {
    pub id: u64,
    pub client: String,
    /// The address the cluster reaches its peer port at (its proxy).
    pub peer: String,
    /// `None`: the true clock.
    pub clock: Option<Clock>,
    /// Removed from the membership by the nemesis, to be added back at the heal.
    pub removed: bool,
    pub config: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
    pub paused: bool,
}

pub struct Cluster {
    pub weir: PathBuf,
    pub nodes: Vec<Node>,
    pub links: Arc<Links>,
}

fn free_port() -> Result<u16, String> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| e.to_string())?
        .local_addr()
        .map_err(|e| e.to_string())?
        .port())
}

impl Cluster {
    /// Writes configs in `dir`, starts the proxies and the three nodes.
    pub async fn start(weir: &Path, dir: &Path, seed: u64) -> Result<Cluster, String> {
        let links = Links::new(seed);
        let mut addrs = vec![];
        for id in 1..=3u64 {
            addrs.push((id, free_port()?, free_port()?, free_port()?));
        }
        let peers: String = addrs
            .iter()
            .map(|(id, c, p, _)| {
                format!(
                    "[[peers]]\nid = {id}\npeer = \"127.0.0.1:{p}\"\nclient = \"127.0.0.1:{c}\"\n\n"
                )
            })
            .collect();
        let mut nodes = vec![];
        for (id, c, p, listen) in &addrs {
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", *p))
                .await
                .map_err(|e| e.to_string())?;
            let target: SocketAddr = format!("127.0.0.1:{listen}").parse().expect("an address");
            tokio::spawn(proxy::run(*id, listener, target, links.clone()));
            let config = dir.join(format!("node{id}.toml"));
            let text = format!(
                "id = {id}\ndata_dir = \"{}\"\nclient_addr = \"127.0.0.1:{c}\"\npeer_addr = \"127.0.0.1:{p}\"\n\
                 peer_listen = \"127.0.0.1:{listen}\"\npeer_source_ip = \"{}\"\n\n{peers}",
                dir.join(format!("data{id}")).display(),
                proxy::source_ip(*id)
            );
            std::fs::write(&config, text).map_err(|e| format!("{}: {e}", config.display()))?;
            nodes.push(Node {
                id: *id,
                client: format!("127.0.0.1:{c}"),
                peer: format!("127.0.0.1:{p}"),
                clock: None,
                removed: false,
                config,
                log: dir.join(format!("node{id}.log")),
                child: None,
                paused: false,
            });
        }
        let mut cluster = Cluster {
            weir: weir.to_owned(),
            nodes,
            links,
        };
        for id in 1..=3 {
            cluster.start_node(id)?;
        }
        Ok(cluster)
    }

    pub fn servers(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.client.clone()).collect()
    }

    pub fn is_running(&self, id: u64) -> bool {
        self.nodes[(id - 1) as usize].child.is_some()
    }

    pub fn start_node(&mut self, id: u64) -> Result<(), String> {
        let node = &mut self.nodes[(id - 1) as usize];
        if node.child.is_some() {
            return Ok(());
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .map_err(|e| e.to_string())?;
        let mut command = match node.clock {
            Some(clock) if clock.offset_s > 0 => {
                let mut c = Command::new("unshare");
                c.args(["--time", "--monotonic", &clock.offset_s.to_string()])
                    .arg(&self.weir);
                c
            }
            _ => Command::new(&self.weir),
        };
        if let Some(clock) = node.clock {
            command.env("WEIR_TEST_CLOCK_RATE", clock.rate.to_string());
        }
        let child = command
            .args(["serve", "--config"])
            .arg(&node.config)
            .env("RUST_LOG", "info,openraft=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.weir.display()))?;
        node.child = Some(child);
        node.paused = false;
        Ok(())
    }

    /// kill -9.
    pub fn kill(&mut self, id: u64) {
        let node = &mut self.nodes[(id - 1) as usize];
        if let Some(mut c) = node.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        node.paused = false;
    }

    fn signal(&self, id: u64, sig: &str) {
        if let Some(c) = &self.nodes[(id - 1) as usize].child {
            let _ = Command::new("kill")
                .arg(sig)
                .arg(c.id().to_string())
                .status();
        }
    }

    pub fn pause(&mut self, id: u64) {
        self.signal(id, "-STOP");
        self.nodes[(id - 1) as usize].paused = true;
    }

    pub fn resume(&mut self, id: u64) {
        self.signal(id, "-CONT");
        self.nodes[(id - 1) as usize].paused = false;
    }

    /// The leader as a running, unpaused node reports it, waiting at most `within`.
    pub async fn leader(&self, within: Duration) -> Option<u64> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            for n in self.nodes.iter().filter(|n| n.child.is_some() && !n.paused) {
                if let Ok(Response::Status(s)) = Client::ask_node(&n.client, &Request::Status).await
                    && s.state == "Leader"
                {
                    return Some(s.id);
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    /// Restarts node `id` with `clock` (`None`: the true clock) and waits (bounded) until it
    /// answers again.
    pub async fn restart_with_clock(
        &mut self,
        id: u64,
        clock: Option<Clock>,
    ) -> Result<(), String> {
        self.kill(id);
        self.nodes[(id - 1) as usize].clock = clock;
        self.start_node(id)?;
        let addr = self.nodes[(id - 1) as usize].client.clone();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Client::ask_node(&addr, &Request::Status).await.is_err() {
            if Instant::now() > deadline {
                return Err(format!("node {id} did not come back"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// Everything back: links pass, paused nodes resume, killed nodes restart, skewed clocks
    /// are restarted true (one node at a time), removed nodes are added back.
    pub async fn heal(&mut self) -> Result<(), String> {
        self.links.heal();
        for id in 1..=3 {
            if self.nodes[(id - 1) as usize].paused {
                self.resume(id);
            }
            self.start_node(id)?;
        }
        for id in 1..=3 {
            if self.nodes[(id - 1) as usize].clock.is_some() {
                self.restart_with_clock(id, None).await?;
            }
        }
        let client = Client::new(self.servers());
        for id in 1..=3 {
            let node = &self.nodes[(id - 1) as usize];
            if node.removed {
                let request = Request::AddNode {
                    id,
                    peer: node.peer.clone(),
                    client: node.client.clone(),
                };
                match client.request(request).await {
                    Ok(Response::MembershipChanged) => {
                        self.nodes[(id - 1) as usize].removed = false
                    }
                    other => return Err(format!("adding node {id} back: {other:?}")),
                }
            }
        }
        Ok(())
    }

    /// Removes node `id` from the membership (it keeps running).
    pub async fn remove(&mut self, id: u64) -> Result<(), String> {
        let client = Client::new(self.servers());
        match client.request(Request::RemoveNode { id }).await {
            Ok(Response::MembershipChanged) => {
                self.nodes[(id - 1) as usize].removed = true;
                Ok(())
            }
            other => Err(format!("removing node {id}: {other:?}")),
        }
    }

    /// Every node's log text.
    pub fn logs(&self) -> Vec<(String, String)> {
        self.nodes
            .iter()
            .map(|n| {
                (
                    format!("node{}", n.id),
                    std::fs::read_to_string(&n.log).unwrap_or_default(),
                )
            })
            .collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for id in 1..=3 {
            self.resume(id);
            self.kill(id);
        }
    }
}
