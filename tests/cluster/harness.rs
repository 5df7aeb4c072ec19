//! A cluster of real `weir serve` processes on loopback, in a temporary directory, with
//! ports this harness owns: [`weir_launcher::LocalCluster`] plus what the tests add (the
//! CLI against the cluster, panicking waits, a spare node, log tails on failure), and for
//! the security tests a secured start: certificates from a CA, tokens with roles.
//! Everything is killed on drop, and the directory removed unless a test failed; every wait
//! is bounded.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use weir_client::Client;
use weir_core::machine::{Command as Cmd, Reply};
use weir_launcher::{LocalCluster, Node, loopback_addr};
use weir_proto::protocol::{NodeStatus, Request, Response};
use weir_server::config::{Config, Peer, TlsFiles, TokenEntry};
use weir_server::security::certs::{DevCa, Validity};
use weir_server::security::hash_token;

pub struct Cluster {
    nodes: LocalCluster,
}

/// `config` with the keys of the TOML fragment `extra` laid over it (tables merged key by
/// key), read back through [`Config`]'s own deserializer, so a misspelt key fails here.
fn overlay(config: &Config, extra: &str) -> Config {
    fn merge(base: &mut toml::Table, over: toml::Table) {
        for (key, value) in over {
            match (base.get_mut(&key), value) {
                (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
                (_, value) => {
                    base.insert(key, value);
                }
            }
        }
    }
    let mut table = toml::Table::try_from(config).expect("a config is a table");
    merge(&mut table, toml::from_str(extra).expect("extra is TOML"));
    table.try_into().expect("extra names config keys")
}

impl Cluster {
    /// Writes configs for `n` nodes (the TOML fragment `extra` laid over each) and starts
    /// them all.
    pub fn start(tag: &str, n: u64, extra: &str) -> Cluster {
        let mut nodes =
            LocalCluster::in_temp_dir(env!("CARGO_BIN_EXE_weir"), &format!("weir-cluster-{tag}"))
                .unwrap();
        let configs = nodes.loopback_configs(n).unwrap();
        nodes
            .add_and_start(configs.iter().map(|c| overlay(c, extra)).collect())
            .unwrap();
        Cluster { nodes }
    }

    /// Three nodes started as [`Cluster::start`] does with no extra keys, a leader elected,
    /// and `limit` (one permit) defined through a client: the cluster, its leader and that
    /// client.
    pub async fn three_with_limit(tag: &str, limit: &str) -> (Cluster, u64, Client) {
        let cluster = Cluster::start(tag, 3, "");
        let leader = cluster.leader(crate::ELECTION).await;
        let client = cluster.client();
        client.write(crate::define(limit, 1)).await.unwrap();
        (cluster, leader, client)
    }

    /// Configures (does not start) one more node, `id = nodes + 1`, whose initial voters are
    /// the cluster's plus itself: it never forms a cluster of its own (it is not the lowest
    /// id) and waits to be added.
    pub fn spare(&mut self, extra: &str) -> u64 {
        let id = self.nodes.nodes().len() as u64 + 1;
        let me = Peer {
            id,
            client: loopback_addr().unwrap(),
            peer: loopback_addr().unwrap(),
        };
        let mut peers = self.nodes.voters();
        peers.push(me.clone());
        let config = Config {
            id,
            data_dir: self.nodes.data_dir(id),
            client_addr: me.client,
            peer_addr: me.peer,
            peers,
            http_listen: loopback_addr().unwrap(),
            ..Config::default()
        };
        self.nodes.add(overlay(&config, extra)).unwrap()
    }

    /// Starts the `weir` CLI with `args` against this cluster, without waiting (stdout and
    /// stderr piped).
    pub fn spawn_cli(&self, args: &[&str]) -> std::process::Child {
        Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(args)
            .env("WEIR_SERVERS", self.servers().join(","))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
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

    /// Runs `weir args` against the cluster, which must exit 0; returns its stdout.
    pub fn cli_ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.cli(args);
        assert_eq!(code, 0, "weir {args:?}: {err}");
        out
    }

    pub fn is_running(&self, id: u64) -> bool {
        self.nodes.is_running(id)
    }

    pub fn node(&self, id: u64) -> &Node {
        self.nodes.node(id)
    }

    pub fn start_node(&mut self, id: u64) {
        self.nodes.start(id).unwrap();
    }

    /// kill -9.
    pub fn kill(&mut self, id: u64) {
        self.nodes.kill(id);
    }

    /// SIGSTOP: the process lives on and sends nothing. Resumed by [`Cluster::resume`], and
    /// in every case when the cluster is dropped (its nodes are resumed before the kill).
    pub fn pause(&mut self, id: u64) {
        self.nodes.pause(id);
    }

    /// SIGCONT.
    pub fn resume(&mut self, id: u64) {
        self.nodes.resume(id);
    }

    /// SIGTERM, and waits (bounded) for a clean exit; returns its status code.
    pub fn stop(&mut self, id: u64) -> Option<i32> {
        self.nodes.stop(id)
    }

    pub fn servers(&self) -> Vec<String> {
        self.nodes.servers()
    }

    pub fn client(&self) -> Client {
        Client::new(self.servers())
    }

    /// One node's own status, if it answers.
    pub async fn status(&self, id: u64) -> Option<NodeStatus> {
        self.nodes.status(id).await
    }

    /// Waits (at most `within`) for some running node to report itself leader; returns its
    /// id.
    pub async fn leader(&self, within: Duration) -> u64 {
        match self.nodes.leader(within).await {
            Some(id) => id,
            None => panic!(
                "no leader within {within:?}; logs in {}",
                self.nodes.dir().display()
            ),
        }
    }

    /// Waits until every running node answers and all agree on (applied index, digest), each
    /// digest being of that applied index; returns the digest.
    pub async fn converged(&self, within: Duration) -> String {
        let deadline = Instant::now() + within;
        let mut last = vec![];
        while Instant::now() < deadline {
            let mut seen = vec![];
            for n in self.nodes.nodes().iter().filter(|n| self.is_running(n.id)) {
                seen.push(
                    self.status(n.id)
                        .await
                        .map(|s| (s.applied, s.digest_applied, s.digest)),
                );
            }
            if seen.iter().all(Option::is_some) {
                let seen: Vec<(u64, u64, String)> = seen.into_iter().flatten().collect();
                // The digest must be of the applied index itself, not an older cached one.
                if seen.windows(2).all(|w| w[0] == w[1]) && seen[0].0 == seen[0].1 {
                    return seen[0].2.clone();
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
        self.nodes.kill_all();
        if std::thread::panicking() {
            self.nodes.keep_dir();
            eprintln!("cluster logs kept in {}", self.nodes.dir().display());
            for n in self.nodes.nodes() {
                eprintln!("--- node {} log tail ---", n.id);
                for line in self.nodes.log_tail(n.id, 15) {
                    eprintln!("{line}");
                }
            }
        }
    }
}

/// Logs a test phase.
pub fn phase(name: &str) {
    eprintln!("[phase] {name}");
}

/// Writes `ca.pem` of `ca` and a certificate (`NAME.pem`, `NAME.key`) for each name into
/// `dir`.
pub fn write_certs(dir: &Path, ca: &DevCa, names: &[(&str, Validity)]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.cert_pem()).unwrap();
    for (name, validity) in names {
        let issued = ca.issue(name, *validity).unwrap();
        std::fs::write(dir.join(format!("{name}.pem")), issued.cert_pem).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), issued.key_pem).unwrap();
    }
}

/// The TLS files [`write_certs`] wrote into `dir` for `name`.
pub fn tls_files(dir: &Path, name: &str) -> TlsFiles {
    TlsFiles {
        cert: dir.join(format!("{name}.pem")),
        key: dir.join(format!("{name}.key")),
        ca: dir.join("ca.pem"),
    }
}

/// Each (secret, role) as a config's `[[tokens]]` entry: the secret's hash and the role.
pub fn token_entries(roles: &[(&str, &str)]) -> Vec<TokenEntry> {
    roles
        .iter()
        .map(|(secret, role)| TokenEntry {
            sha256: hash_token(secret),
            role: role.to_string(),
        })
        .collect()
}

/// Starts three loopback nodes of `cluster`, each with `tokens` and, given `certs`, TLS on
/// every port from the files [`write_certs`] wrote there (`node1` .. `node3`); answers the
/// leader they elect.
pub async fn start_secured(
    cluster: &mut LocalCluster,
    certs: Option<&Path>,
    tokens: &[TokenEntry],
) -> u64 {
    let mut configs = cluster.loopback_configs(3).unwrap();
    for c in &mut configs {
        c.tls = certs.map(|dir| tls_files(dir, &format!("node{}", c.id)));
        c.tokens = tokens.to_vec();
    }
    cluster.add_and_start(configs).unwrap();
    cluster
        .leader(Duration::from_secs(30))
        .await
        .expect("a leader")
}
