//! [`LocalCluster`]: node processes, their config files, logs and data directories.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::ports::loopback_addr;
use weir_client::Client;
use weir_proto::protocol::{NodeStatus, Request, Response};
use weir_proto::tls::ClientSecurity;
use weir_server::config::{Config, Peer};

/// How often the waits below ask again.
const POLL: Duration = Duration::from_millis(50);

/// How long [`LocalCluster::stop`] waits for a clean exit before it kills.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// One node: its config, where it is written, where its log goes, and its process.
pub struct Node {
    pub id: u64,
    /// Its client address.
    pub client: String,
    /// Its peer address as the other nodes reach it.
    pub peer: String,
    pub config: Config,
    /// `node{id}.toml` in the cluster's directory.
    pub config_path: PathBuf,
    /// `node{id}.log` in the cluster's directory: the node's stderr, appended across starts.
    pub log: PathBuf,
    child: Option<Child>,
    /// Sent SIGSTOP and not yet SIGCONT.
    paused: bool,
}

/// Node processes in one directory.
///
/// Invariants:
/// - node `id` is `nodes[id - 1]`: ids are 1, 2, … in the order nodes were added;
/// - a node has at most one process; a paused node is a running one;
/// - on drop every process is resumed and killed, and a directory this cluster created is
///   removed unless [`LocalCluster::keep_dir`] was called.
pub struct LocalCluster {
    weir: PathBuf,
    dir: PathBuf,
    rust_log: String,
    nodes: Vec<Node>,
    remove_dir: bool,
    /// TLS and token its own status and leader requests use ([`LocalCluster::security`]).
    security: ClientSecurity,
    /// The Raft group its status and leader requests ask about
    /// ([`LocalCluster::set_group`]); `None`: each node's default group.
    group: Option<u64>,
}

/// The leader's id as one of `servers` reports it (the first that calls itself leader),
/// asking every 50 ms for at most `within`.
pub async fn leader_among(servers: &[String], within: Duration) -> Option<u64> {
    leader_among_with(servers, within, &ClientSecurity::default()).await
}

/// [`leader_among`] over TLS and with a token (an admin's: status needs it).
pub async fn leader_among_with(
    servers: &[String],
    within: Duration,
    security: &ClientSecurity,
) -> Option<u64> {
    leader_among_in(servers, within, security, None).await
}

/// [`leader_among_with`], the leader of Raft group `group` of the nodes (`None`: each
/// node's default group).
pub async fn leader_among_in(
    servers: &[String],
    within: Duration,
    security: &ClientSecurity,
    group: Option<u64>,
) -> Option<u64> {
    let deadline = Instant::now() + within;
    loop {
        for s in servers {
            if let Ok(Response::Status(st)) =
                Client::ask_node_in(s, &Request::Status, security, group).await
                && st.state == "Leader"
            {
                return Some(st.id);
            }
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(POLL).await;
    }
}

impl LocalCluster {
    /// A cluster of the `weir` binary at `weir` in `dir` (created if missing), which is kept
    /// afterwards.
    pub fn in_dir(weir: impl Into<PathBuf>, dir: impl Into<PathBuf>) -> Result<Self, String> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(LocalCluster {
            weir: weir.into(),
            dir,
            rust_log: "info,openraft=warn".into(),
            nodes: vec![],
            remove_dir: false,
            security: ClientSecurity::default(),
            group: None,
        })
    }

    /// A cluster in a fresh `{name}-{pid}` directory under the system's temporary one,
    /// removed on drop.
    pub fn in_temp_dir(weir: impl Into<PathBuf>, name: &str) -> Result<Self, String> {
        let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut cluster = Self::in_dir(weir, dir)?;
        cluster.remove_dir = true;
        Ok(cluster)
    }

    /// The nodes' `RUST_LOG`. Default `info,openraft=warn`.
    pub fn rust_log(mut self, filter: &str) -> Self {
        self.rust_log = filter.into();
        self
    }

    /// The TLS and token the cluster's own status and leader requests use (a cluster with
    /// TLS or tokens on needs its CA and an admin token here).
    pub fn security(mut self, security: ClientSecurity) -> Self {
        self.security = security;
        self
    }

    /// Has its status and leader requests ask about Raft group `group` of each node (a
    /// node of several groups elects a leader in each).
    pub fn set_group(&mut self, group: u64) {
        self.group = Some(group);
    }

    /// The TLS and token set by [`LocalCluster::security`].
    pub fn client_security(&self) -> &ClientSecurity {
        &self.security
    }

    /// Keeps the directory on drop (to read the logs of a failed run).
    pub fn keep_dir(&mut self) {
        self.remove_dir = false;
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn weir(&self) -> &Path {
        &self.weir
    }

    /// Where node `id` keeps its data: `data{id}` in the cluster's directory.
    pub fn data_dir(&self, id: u64) -> PathBuf {
        self.dir.join(format!("data{id}"))
    }

    /// Configs for `n` nodes on loopback with fresh ports ([`crate::free_port`]; HTTP too), each
    /// listing all `n` as initial voters; data in [`LocalCluster::data_dir`].
    pub fn loopback_configs(&self, n: u64) -> Result<Vec<Config>, String> {
        let voters = (1..=n)
            .map(|id| {
                Ok(Peer {
                    id,
                    client: loopback_addr()?,
                    peer: loopback_addr()?,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        voters
            .iter()
            .map(|v| {
                Ok(Config {
                    id: v.id,
                    data_dir: self.data_dir(v.id),
                    client_addr: v.client.clone(),
                    peer_addr: v.peer.clone(),
                    peers: voters.clone(),
                    http_listen: loopback_addr()?,
                    ..Config::default()
                })
            })
            .collect()
    }

    /// The initial voters the nodes so far were configured with, as a new node would list
    /// them.
    pub fn voters(&self) -> Vec<Peer> {
        self.nodes
            .iter()
            .map(|n| Peer {
                id: n.id,
                peer: n.peer.clone(),
                client: n.client.clone(),
            })
            .collect()
    }

    /// Validates `config` (its id must be the next one), writes it to `node{id}.toml` and
    /// adds the node, not started.
    pub fn add(&mut self, config: Config) -> Result<u64, String> {
        let id = self.nodes.len() as u64 + 1;
        if config.id != id {
            return Err(format!(
                "node ids are 1, 2, …: expected {id}, got {}",
                config.id
            ));
        }
        config.validate()?;
        let path = self.dir.join(format!("node{id}.toml"));
        let text = toml::to_string(&config).map_err(|e| format!("node {id} config: {e}"))?;
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        self.nodes.push(Node {
            id,
            client: config.client_addr.clone(),
            peer: config.peer_addr.clone(),
            config,
            config_path: path,
            log: self.dir.join(format!("node{id}.log")),
            child: None,
            paused: false,
        });
        Ok(id)
    }

    /// Adds every config in order and starts them all.
    pub fn add_and_start(&mut self, configs: Vec<Config>) -> Result<(), String> {
        let ids = configs
            .into_iter()
            .map(|c| self.add(c))
            .collect::<Result<Vec<_>, String>>()?;
        for id in ids {
            self.start(id)?;
        }
        Ok(())
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn node(&self, id: u64) -> &Node {
        &self.nodes[Self::index(id)]
    }

    fn index(id: u64) -> usize {
        assert!(id >= 1, "node ids start at 1");
        (id - 1) as usize
    }

    /// Every node's client address, in id order.
    pub fn servers(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.client.clone()).collect()
    }

    pub fn is_running(&self, id: u64) -> bool {
        self.node(id).child.is_some()
    }

    pub fn is_paused(&self, id: u64) -> bool {
        self.node(id).paused
    }

    /// The process id of node `id`, if it runs.
    pub fn pid(&self, id: u64) -> Option<u32> {
        self.node(id).child.as_ref().map(Child::id)
    }

    /// Starts node `id` as `weir serve --config FILE`.
    pub fn start(&mut self, id: u64) -> Result<(), String> {
        let command = Command::new(&self.weir);
        self.start_with(id, command)
    }

    /// Starts node `id` with `command`, a command that executes the `weir` binary in place
    /// (a wrapper such as `unshare … weir` or `ip netns exec … weir`; its pid must be the
    /// node's, for signals). `serve --config FILE`, `RUST_LOG` and the standard streams are
    /// added here. Errs if the node already runs.
    pub fn start_with(&mut self, id: u64, mut command: Command) -> Result<(), String> {
        let rust_log = self.rust_log.clone();
        let node = &mut self.nodes[Self::index(id)];
        if node.child.is_some() {
            return Err(format!("node {id} already runs"));
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .map_err(|e| format!("{}: {e}", node.log.display()))?;
        let child = command
            .args(["serve", "--config"])
            .arg(&node.config_path)
            .env("RUST_LOG", rust_log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start node {id} ({command:?}): {e}"))?;
        node.child = Some(child);
        node.paused = false;
        Ok(())
    }

    /// SIGKILL, and reaps the process.
    pub fn kill(&mut self, id: u64) {
        let node = &mut self.nodes[Self::index(id)];
        if let Some(mut child) = node.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        node.paused = false;
    }

    /// Sends `signal` (as `kill` takes it: `-STOP`, `-TERM`, …) to node `id`, if it runs.
    pub fn signal(&self, id: u64, signal: &str) {
        if let Some(pid) = self.pid(id) {
            let _ = Command::new("kill")
                .arg(signal)
                .arg(pid.to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }

    /// SIGSTOP.
    pub fn pause(&mut self, id: u64) {
        if self.is_running(id) {
            self.signal(id, "-STOP");
            self.nodes[Self::index(id)].paused = true;
        }
    }

    /// SIGCONT.
    pub fn resume(&mut self, id: u64) {
        self.signal(id, "-CONT");
        self.nodes[Self::index(id)].paused = false;
    }

    /// Waits at most `within` for node `id` to exit on its own (no signal sent); returns its
    /// status code (`None` for a death by signal), or `Err` if it still runs or never ran.
    pub fn exited_within(&mut self, id: u64, within: Duration) -> Result<Option<i32>, String> {
        let deadline = Instant::now() + within;
        let node = &mut self.nodes[Self::index(id)];
        let child = node
            .child
            .as_mut()
            .ok_or_else(|| format!("node {id} is not running"))?;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                node.child = None;
                return Ok(status.code());
            }
            if Instant::now() >= deadline {
                return Err(format!("node {id} still runs after {within:?}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then waits (at most 10 s, then SIGKILL) for the exit; returns its status
    /// code, `None` if it did not exit cleanly in time or was not running.
    pub fn stop(&mut self, id: u64) -> Option<i32> {
        self.resume(id);
        self.signal(id, "-TERM");
        let mut child = self.nodes[Self::index(id)].child.take()?;
        let deadline = Instant::now() + STOP_WAIT;
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

    /// Kills every node.
    pub fn kill_all(&mut self) {
        for id in 1..=self.nodes.len() as u64 {
            self.resume(id);
            self.kill(id);
        }
    }

    /// Node `id`'s own status, if it answers.
    pub async fn status(&self, id: u64) -> Option<NodeStatus> {
        let (addr, security) = (&self.node(id).client, &self.security);
        match Client::ask_node_in(addr, &Request::Status, security, self.group).await {
            Ok(Response::Status(s)) => Some(s),
            _ => None,
        }
    }

    /// The leader as a running, unpaused node reports it, waiting at most `within`.
    pub async fn leader(&self, within: Duration) -> Option<u64> {
        let asked: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| n.child.is_some() && !n.paused)
            .map(|n| n.client.clone())
            .collect();
        leader_among_in(&asked, within, &self.security, self.group).await
    }

    /// Waits (at most `within`) until node `id` answers a status request.
    pub async fn answering(&self, id: u64, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if self.status(id).await.is_some() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The last `lines` lines of node `id`'s log.
    pub fn log_tail(&self, id: u64, lines: usize) -> Vec<String> {
        let text = std::fs::read_to_string(&self.node(id).log).unwrap_or_default();
        let mut tail: Vec<String> = text.lines().rev().take(lines).map(String::from).collect();
        tail.reverse();
        tail
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.kill_all();
        if self.remove_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_are_written_as_toml_of_the_config_and_read_back_equal() {
        let mut cluster = LocalCluster::in_temp_dir("weir", "weir-launcher-test").unwrap();
        let mut configs = cluster.loopback_configs(3).unwrap();
        configs[0].raft.snapshot_logs_since_last = 40;
        configs[0].peer_listen = Some("127.0.0.1:1".into());
        for c in configs.clone() {
            cluster.add(c).unwrap();
        }
        for (c, n) in configs.iter().zip(cluster.nodes()) {
            assert_eq!(&Config::load(&n.config_path).unwrap(), c);
            assert_eq!(c.voters().len(), 3);
        }
        let dir = cluster.dir().to_owned();
        assert!(dir.exists());
        drop(cluster);
        assert!(!dir.exists(), "a temporary directory is removed on drop");
    }

    #[test]
    fn a_config_out_of_order_or_invalid_is_refused() {
        let mut cluster = LocalCluster::in_temp_dir("weir", "weir-launcher-refuse").unwrap();
        let configs = cluster.loopback_configs(2).unwrap();
        assert!(cluster.add(configs[1].clone()).is_err());
        let mut bad = configs[0].clone();
        bad.client_addr = "127.0.0.1:1".into();
        assert!(cluster.add(bad).unwrap_err().contains("client_addr"));
    }
}
