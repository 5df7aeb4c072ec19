//! A cluster of real `weir serve` processes on loopback, in a temporary directory, with
//! ports this harness owns. Everything is killed and removed on drop; every wait is bounded.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use weir::client::Client;
use weir::machine::{Command as Cmd, Reply};
use weir::protocol::{NodeStatus, Request, Response};

pub struct Node {
    pub id: u64,
    pub client: String,
    pub peer: String,
    pub config: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
}

pub struct Cluster {
    pub dir: PathBuf,
    pub nodes: Vec<Node>,
}

/// A port free now on 127.0.0.1 (bound, then released for the node to bind).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Cluster {
    /// Writes configs for `n` nodes (extra TOML appended to each) and starts them all.
    pub fn start(tag: &str, n: u64, extra: &str) -> Cluster {
        let dir = std::env::temp_dir().join(format!("weir-cluster-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let addrs: Vec<(u64, String, String)> = (1..=n)
            .map(|id| {
                (
                    id,
                    format!("127.0.0.1:{}", free_port()),
                    format!("127.0.0.1:{}", free_port()),
                )
            })
            .collect();
        let mut peers = String::new();
        for (id, client, peer) in &addrs {
            peers.push_str(&format!(
                "[[peers]]\nid = {id}\npeer = \"{peer}\"\nclient = \"{client}\"\n\n"
            ));
        }
        let mut nodes = vec![];
        for (id, client, peer) in &addrs {
            let config = dir.join(format!("node{id}.toml"));
            let text = format!(
                "id = {id}\ndata_dir = \"{}\"\nclient_addr = \"{client}\"\npeer_addr = \"{peer}\"\n\n{peers}{extra}\n",
                dir.join(format!("data{id}")).display()
            );
            std::fs::write(&config, text).unwrap();
            nodes.push(Node {
                id: *id,
                client: client.clone(),
                peer: peer.clone(),
                config,
                log: dir.join(format!("node{id}.log")),
                child: None,
            });
        }
        let mut cluster = Cluster { dir, nodes };
        for id in 1..=n {
            cluster.start_node(id);
        }
        cluster
    }

    /// Configures (does not start) one more node, `id = nodes + 1`, whose initial voters are
    /// the cluster's plus itself: it never forms a cluster of its own (it is not the lowest
    /// id) and waits to be added.
    pub fn spare(&mut self, extra: &str) -> u64 {
        let id = self.nodes.len() as u64 + 1;
        let client = format!("127.0.0.1:{}", free_port());
        let peer = format!("127.0.0.1:{}", free_port());
        let mut peers = String::new();
        for n in &self.nodes {
            peers.push_str(&format!(
                "[[peers]]\nid = {}\npeer = \"{}\"\nclient = \"{}\"\n\n",
                n.id, n.peer, n.client
            ));
        }
        peers.push_str(&format!(
            "[[peers]]\nid = {id}\npeer = \"{peer}\"\nclient = \"{client}\"\n\n"
        ));
        let config = self.dir.join(format!("node{id}.toml"));
        let text = format!(
            "id = {id}\ndata_dir = \"{}\"\nclient_addr = \"{client}\"\npeer_addr = \"{peer}\"\n\n{peers}{extra}\n",
            self.dir.join(format!("data{id}")).display()
        );
        std::fs::write(&config, text).unwrap();
        self.nodes.push(Node {
            id,
            client,
            peer,
            config,
            log: self.dir.join(format!("node{id}.log")),
            child: None,
        });
        id
    }

    /// Runs the `weir` CLI with `args` against this cluster; returns (exit code, stdout, stderr).
    pub fn cli(&self, args: &[&str]) -> (i32, String, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(args)
            .env("WEIR_SERVERS", self.servers().join(","))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    pub fn is_running(&self, id: u64) -> bool {
        self.node(id).child.is_some()
    }

    pub fn node(&self, id: u64) -> &Node {
        &self.nodes[(id - 1) as usize]
    }

    pub fn start_node(&mut self, id: u64) {
        let node = &mut self.nodes[(id - 1) as usize];
        assert!(node.child.is_none(), "node {id} already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["serve", "--config"])
            .arg(&node.config)
            .env("RUST_LOG", "info,openraft=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        node.child = Some(child);
    }

    /// kill -9.
    pub fn kill(&mut self, id: u64) {
        let node = &mut self.nodes[(id - 1) as usize];
        if let Some(mut child) = node.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, and waits (bounded) for a clean exit; returns its status code.
    pub fn stop(&mut self, id: u64) -> Option<i32> {
        let node = &mut self.nodes[(id - 1) as usize];
        let mut child = node.child.take()?;
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }

    pub fn servers(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.client.clone()).collect()
    }

    pub fn client(&self) -> Client {
        Client::new(self.servers())
    }

    /// One node's own status, if it answers.
    pub async fn status(&self, id: u64) -> Option<NodeStatus> {
        match Client::ask_node(&self.node(id).client, &Request::Status).await {
            Ok(Response::Status(s)) => Some(s),
            _ => None,
        }
    }

    /// Waits (at most `within`) for some node to report itself leader; returns its id.
    pub async fn leader(&self, within: Duration) -> u64 {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            for n in &self.nodes {
                if n.child.is_some()
                    && let Some(s) = self.status(n.id).await
                    && s.state == "Leader"
                {
                    return n.id;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "no leader within {within:?}; logs in {}",
            self.dir.display()
        );
    }

    /// Waits until every running node has applied at least `index` and all agree on the
    /// digest at their common applied index; returns the digest.
    pub async fn converged(&self, within: Duration) -> String {
        let deadline = Instant::now() + within;
        let mut last = vec![];
        while Instant::now() < deadline {
            let mut seen = vec![];
            for n in self.nodes.iter().filter(|n| n.child.is_some()) {
                seen.push(self.status(n.id).await.map(|s| (s.applied, s.digest)));
            }
            if seen.iter().all(Option::is_some) {
                let seen: Vec<(u64, String)> = seen.into_iter().flatten().collect();
                if seen.windows(2).all(|w| w[0] == w[1]) {
                    return seen[0].1.clone();
                }
                last = seen;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("nodes did not converge within {within:?}: {last:?}");
    }

    /// Writes `command` through the cluster; panics on anything but a reply.
    pub async fn write(&self, client: &Client, command: Cmd) -> Reply {
        match client.request(Request::Write(command)).await {
            Ok(Response::Written { reply, .. }) => reply,
            other => panic!("write failed: {other:?}"),
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut child) = n.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if std::thread::panicking() {
            eprintln!("cluster logs kept in {}", self.dir.display());
            for n in &self.nodes {
                if let Ok(text) = std::fs::read_to_string(&n.log) {
                    let tail: Vec<&str> = text.lines().rev().take(15).collect();
                    eprintln!("--- node {} log tail ---", n.id);
                    for line in tail.into_iter().rev() {
                        eprintln!("{line}");
                    }
                }
            }
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Logs a test phase.
pub fn phase(name: &str) {
    eprintln!("[phase] {name}");
}
