//! Three `weir` processes, each with its own data directory, its client port open to the
//! harness and its peer port behind a [`crate::proxy`] — on loopback, or each in a network
//! namespace of its own ([`crate::netns`]). The fault primitives the nemesis uses (cut,
//! one-way, delay, loss, bandwidth, kill, pause, clocks, membership) are methods here, so
//! the nemesis does not care which network mode it runs in.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weir::client::Client;
use weir::protocol::{Request, Response};

use crate::netns::{self, Netns};
use crate::proxy::{self, Addressing, Link, Links};

/// Where the nodes' network lives.
#[derive(Clone, Debug)]
pub enum Net {
    /// Loopback addresses; every fault through the proxy. No root needed.
    Loopback,
    /// A namespace per node (this process runs in the clients' one); partitions, loss and
    /// bandwidth by the kernel.
    Netns(Netns),
}

impl Net {
    pub fn name(&self) -> &'static str {
        match self {
            Net::Loopback => "loopback",
            Net::Netns(_) => "netns",
        }
    }
}

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
    pub net: Net,
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
    pub async fn start(weir: &Path, dir: &Path, seed: u64, net: Net) -> Result<Cluster, String> {
        let links = Links::new(seed);
        // Per node: (client, peer as the cluster knows it = the proxy front, peer listen,
        // the source address it dials from, if one must be set).
        let mut addrs = vec![];
        for id in 1..=3u64 {
            addrs.push(match &net {
                Net::Loopback => (
                    format!("127.0.0.1:{}", free_port()?),
                    format!("127.0.0.1:{}", free_port()?),
                    format!("127.0.0.1:{}", free_port()?),
                    Some(proxy::source_ip(id)),
                ),
                Net::Netns(_) => (
                    format!("{}:{}", netns::node_ip(id), netns::CLIENT_PORT),
                    format!("{}:{}", netns::front_ip(id), netns::PEER_PORT),
                    format!("{}:{}", netns::node_ip(id), netns::PEER_PORT),
                    None,
                ),
            });
        }
        let addressing = match net {
            Net::Loopback => Addressing::Loopback,
            Net::Netns(_) => Addressing::Netns,
        };
        let peers: String = addrs
            .iter()
            .zip(1..)
            .map(|((c, p, _, _), id)| {
                format!("[[peers]]\nid = {id}\npeer = \"{p}\"\nclient = \"{c}\"\n\n")
            })
            .collect();
        let mut nodes = vec![];
        for ((c, p, listen, source), id) in addrs.iter().zip(1u64..) {
            let listener = tokio::net::TcpListener::bind(p)
                .await
                .map_err(|e| format!("proxy front {p}: {e}"))?;
            let target: SocketAddr = listen.parse().expect("an address");
            tokio::spawn(proxy::run(id, listener, target, links.clone(), addressing));
            let config = dir.join(format!("node{id}.toml"));
            let source = source
                .map(|ip| format!("peer_source_ip = \"{ip}\"\n"))
                .unwrap_or_default();
            let text = format!(
                "id = {id}\ndata_dir = \"{}\"\nclient_addr = \"{c}\"\npeer_addr = \"{p}\"\n\
                 peer_listen = \"{listen}\"\n{source}\n{peers}",
                dir.join(format!("data{id}")).display(),
            );
            std::fs::write(&config, text).map_err(|e| format!("{}: {e}", config.display()))?;
            nodes.push(Node {
                id,
                client: c.clone(),
                peer: p.clone(),
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
            net,
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
        // `ip netns exec` and `unshare` both execute in place: the child's pid is the node's.
        let offset = node.clock.map_or(0, |c| c.offset_s);
        let mut command = match (&self.net, offset) {
            (Net::Loopback, 0) => Command::new(&self.weir),
            (Net::Loopback, _) => Command::new("unshare"),
            (Net::Netns(ns), 0) => ns.command_in_node(id, &self.weir.display().to_string()),
            (Net::Netns(ns), _) => ns.command_in_node(id, "unshare"),
        };
        if offset > 0 {
            command
                .args(["--time", "--monotonic", &offset.to_string()])
                .arg(&self.weir);
        }
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
        self.heal_network()?;
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

    /// Node `to` stops hearing from node `from`: on loopback the proxy cuts (`reset`) or
    /// black-holes their connections; in namespaces `to`'s firewall drops (or resets) the
    /// packets. Either way it stops TCP in both directions between them.
    pub fn cut(&self, from: u64, to: u64, reset: bool) -> Result<(), String> {
        match &self.net {
            Net::Loopback => {
                let link = if reset { Link::Drop } else { Link::BlackHole };
                self.links.set(from, to, link);
                Ok(())
            }
            Net::Netns(ns) => ns.cut(from, to, reset),
        }
    }

    /// [`Cluster::cut`] in both directions: `a` and `b` cannot reach each other.
    pub fn cut_both(&self, a: u64, b: u64, reset: bool) -> Result<(), String> {
        self.cut(a, b, reset)?;
        self.cut(b, a, reset)
    }

    /// The connections node `from` opens to node `to` are cut; those `to` opens to `from`
    /// work. Connection-level asymmetry: the proxy's in both modes.
    pub fn one_way(&self, from: u64, to: u64) {
        self.links.set(from, to, Link::Drop);
    }

    /// Every peer link delayed (the proxy's in both modes: no netem here).
    pub fn delay(&self, ms: u64, jitter_ms: u64) {
        self.each_link(Link::Delay { ms, jitter_ms });
    }

    /// Peer packets lost at `percent`%: in namespaces by the kernel; on loopback the proxy
    /// imitates what loss does to a TCP stream (a chunk now and then waits out an RTO).
    pub fn loss(&self, percent: u64) -> Result<(), String> {
        match &self.net {
            Net::Loopback => {
                self.each_link(Link::Loss { percent });
                Ok(())
            }
            Net::Netns(ns) => ns.loss(percent),
        }
    }

    /// Peer traffic limited to `bytes_per_s`: each node's interface in namespaces (client
    /// answers share it); each direction of each peer connection on loopback.
    pub fn bandwidth(&self, bytes_per_s: u64) -> Result<(), String> {
        match &self.net {
            Net::Loopback => {
                self.each_link(Link::Bandwidth { bytes_per_s });
                Ok(())
            }
            Net::Netns(ns) => ns.bandwidth(bytes_per_s),
        }
    }

    fn each_link(&self, link: Link) {
        for a in 1..=3 {
            for b in (1..=3).filter(|b| *b != a) {
                self.links.set(a, b, link);
            }
        }
    }

    /// Every link passes again.
    pub fn heal_network(&self) -> Result<(), String> {
        self.links.heal();
        match &self.net {
            Net::Loopback => Ok(()),
            Net::Netns(ns) => ns.heal(),
        }
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
