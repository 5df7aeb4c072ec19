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

pub struct Node {
    pub id: u64,
    pub client: String,
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
        let child = Command::new(&self.weir)
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

    /// Everything back: links pass, paused nodes resume, killed nodes restart.
    pub fn heal(&mut self) -> Result<(), String> {
        self.links.heal();
        for id in 1..=3 {
            if self.nodes[(id - 1) as usize].paused {
                self.resume(id);
            }
            self.start_node(id)?;
        }
        Ok(())
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
