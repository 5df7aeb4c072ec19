//! A node's configuration: TOML, every key optional with a documented default.
//!
//! `weir serve` with no file runs [`Config::default`]: a single-node cluster on
//! `127.0.0.1:7411` with data in `./weir-data`. [`Config::validate`] refuses bad
//! combinations with a message naming both values.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::bounds::ENTRY_COMMANDS_MAX;

/// One initial voter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Peer {
    pub id: u64,
    /// Its peer (Raft) address.
    pub peer: String,
    /// Its client address.
    pub client: String,
}

/// Raft timing and snapshot knobs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RaftConfig {
    /// Leader heartbeat interval, ms; also openraft's AppendEntries timeout. Default 100.
    pub heartbeat_ms: u64,
    /// Election timeout range, ms. Defaults 300 and 450. openraft's followers refuse votes
    /// for `election_timeout_max` after they last heard the leader (its leader lease), so a
    /// dead leader is replaced after one to two timeouts: under a second here, within the
    /// 1.5 s failover target, while three missed heartbeats are needed to start one.
    /// (The TOML keys keep their first names, `election_timeout_min_ms` and `_max_ms`.)
    #[serde(rename = "election_timeout_min_ms")]
    pub election_timeout_ms_min: u64,
    #[serde(rename = "election_timeout_max_ms")]
    pub election_timeout_ms_max: u64,
    /// Build a snapshot after this many entries since the last. Default 10,000.
    pub snapshot_logs_since_last: u64,
    /// Entries kept in the log behind a snapshot, for followers slightly behind. Default 1,000.
    pub max_in_snapshot_log_to_keep: u64,
    /// Timeout of one snapshot chunk (the last includes the install), ms. Default 10,000.
    pub install_snapshot_timeout_ms: u64,
    /// Most entries in one AppendEntries. Default 64.
    pub max_payload_entries: u64,
    /// Purge the log behind a snapshot only once this many entries can go. Default 256.
    pub purge_batch_size: u64,
}

impl Default for RaftConfig {
    fn default() -> Self {
        RaftConfig {
            heartbeat_ms: 100,
            election_timeout_ms_min: 300,
            election_timeout_ms_max: 450,
            snapshot_logs_since_last: 10_000,
            max_in_snapshot_log_to_keep: 1_000,
            install_snapshot_timeout_ms: 10_000,
            max_payload_entries: 64,
            purge_batch_size: 256,
        }
    }
}

/// The leader's proposer knobs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProposerConfig {
    /// Most commands batched into one entry. Default 1,024.
    pub batch_max: usize,
    /// Entries proposed but not yet committed, at most. Default 2: one fsyncing while the
    /// next fills.
    pub in_flight_max: usize,
    /// How often the leader proposes a tick while time alone can change state, ms.
    /// Default 100: the granularity of lease expiry and of refills for waiting tickets.
    pub tick_ms: u64,
}

impl Default for ProposerConfig {
    fn default() -> Self {
        ProposerConfig {
            batch_max: 1_024,
            in_flight_max: 2,
            tick_ms: 100,
        }
    }
}

/// A node's configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// This node's id, unique in the cluster, never 0. Default 1.
    pub id: u64,
    /// Where the log and snapshots live. Default `./weir-data`.
    pub data_dir: PathBuf,
    /// Client port. Default `127.0.0.1:7411`.
    pub client_addr: String,
    /// Peer (Raft) port, as the other nodes reach it. Default `127.0.0.1:7511`.
    pub peer_addr: String,
    /// Where to listen for peers, when that differs from `peer_addr` (behind a proxy or a
    /// NAT; the partition harness puts a fault-injecting proxy there). Default: `peer_addr`.
    pub peer_listen: Option<String>,
    /// Local IP address that outgoing peer connections are bound to (a multi-homed host;
    /// the harness uses it to tell nodes apart on loopback). Default: chosen by the OS.
    pub peer_source_ip: Option<std::net::IpAddr>,
    /// The initial voters, this node among them. The lowest id forms the cluster on its
    /// first start. Default: this node alone.
    pub peers: Vec<Peer>,
    /// Tokio worker threads of the node. Default 1: the state machine applies on one thread
    /// anyway and fsyncs run on the blocking pool; measured here, one worker per node beats
    /// two by about 15% when three nodes share two cores (fewer cross-thread wake-ups).
    /// Raise it on a machine of its own with many client connections.
    pub worker_threads: usize,
    pub raft: RaftConfig,
    pub proposer: ProposerConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            id: 1,
            data_dir: PathBuf::from("./weir-data"),
            client_addr: "127.0.0.1:7411".into(),
            peer_addr: "127.0.0.1:7511".into(),
            peer_listen: None,
            peer_source_ip: None,
            peers: vec![],
            worker_threads: 1,
            raft: RaftConfig::default(),
            proposer: ProposerConfig::default(),
        }
    }
}

impl Config {
    /// Reads and validates a TOML file.
    pub fn load(path: &Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Config::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses and validates TOML text: [`Config::load`] without the file (the fuzz target
    /// `config` calls this).
    pub fn parse(text: &str) -> Result<Config, String> {
        let config: Config = toml::from_str(text).map_err(|e| e.to_string())?;
        config.validate()?;
        Ok(config)
    }

    /// The initial voters, this node alone when `peers` is empty.
    pub fn voters(&self) -> Vec<Peer> {
        if self.peers.is_empty() {
            vec![Peer {
                id: self.id,
                peer: self.peer_addr.clone(),
                client: self.client_addr.clone(),
            }]
        } else {
            self.peers.clone()
        }
    }

    /// Refuses bad values and combinations, naming them.
    pub fn validate(&self) -> Result<(), String> {
        if self.id == 0 {
            return Err("id = 0: node ids start at 1".into());
        }
        let r = &self.raft;
        if !(1..=256).contains(&self.worker_threads) {
            return Err(format!(
                "worker_threads = {} is not in 1..=256",
                self.worker_threads
            ));
        }
        if r.heartbeat_ms == 0 {
            return Err("raft.heartbeat_ms = 0: must be positive".into());
        }
        if r.election_timeout_ms_min <= r.heartbeat_ms {
            return Err(format!(
                "raft.election_timeout_min_ms = {} must be above raft.heartbeat_ms = {}",
                r.election_timeout_ms_min, r.heartbeat_ms
            ));
        }
        if r.election_timeout_ms_max <= r.election_timeout_ms_min {
            return Err(format!(
                "raft.election_timeout_max_ms = {} must be above raft.election_timeout_min_ms = {}",
                r.election_timeout_ms_max, r.election_timeout_ms_min
            ));
        }
        if r.snapshot_logs_since_last == 0 || r.max_payload_entries == 0 {
            return Err(
                "raft.snapshot_logs_since_last and raft.max_payload_entries must be positive"
                    .into(),
            );
        }
        let p = &self.proposer;
        if p.batch_max == 0 || p.batch_max > ENTRY_COMMANDS_MAX {
            return Err(format!(
                "proposer.batch_max = {} is not in 1..={ENTRY_COMMANDS_MAX}",
                p.batch_max
            ));
        }
        if p.in_flight_max == 0 || p.tick_ms == 0 {
            return Err("proposer.in_flight_max and proposer.tick_ms must be positive".into());
        }
        let voters = self.voters();
        let mut ids: Vec<u64> = voters.iter().map(|v| v.id).collect();
        ids.sort();
        ids.dedup();
        if ids.len() != voters.len() || ids.contains(&0) {
            return Err(format!(
                "peers: ids must be unique and non-zero, got {:?}",
                voters.iter().map(|v| v.id).collect::<Vec<_>>()
            ));
        }
        match voters.iter().find(|v| v.id == self.id) {
            None => {
                return Err(format!(
                    "peers: this node (id = {}) is not among them",
                    self.id
                ));
            }
            Some(me) if me.peer != self.peer_addr || me.client != self.client_addr => {
                return Err(format!(
                    "peers: node {} is listed at peer {} / client {}, but peer_addr = {} and client_addr = {}",
                    self.id, me.peer, me.client, self.peer_addr, self.client_addr
                ));
            }
            Some(_) => {}
        }
        Ok(())
    }

    /// openraft's config from these knobs.
    pub fn openraft(&self) -> Result<openraft::Config, String> {
        let r = &self.raft;
        let config = openraft::Config {
            cluster_name: "weir".into(),
            heartbeat_interval: r.heartbeat_ms,
            election_timeout_min: r.election_timeout_ms_min,
            election_timeout_max: r.election_timeout_ms_max,
            install_snapshot_timeout: r.install_snapshot_timeout_ms,
            max_payload_entries: r.max_payload_entries,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(r.snapshot_logs_since_last),
            max_in_snapshot_log_to_keep: r.max_in_snapshot_log_to_keep,
            purge_batch_size: r.purge_batch_size,
            ..openraft::Config::default()
        };
        config.validate().map_err(|e| format!("raft: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_a_valid_single_node() {
        let c = Config::default();
        c.validate().unwrap();
        assert_eq!(c.voters().len(), 1);
        c.openraft().unwrap();
    }

    #[test]
    fn bad_combinations_name_both_values() {
        let mut c = Config::default();
        c.raft.election_timeout_ms_min = 50;
        assert_eq!(
            c.validate().unwrap_err(),
            "raft.election_timeout_min_ms = 50 must be above raft.heartbeat_ms = 100"
        );
        let c: Result<Config, _> = toml::from_str("idd = 3");
        assert!(c.unwrap_err().to_string().contains("unknown field `idd`"));
    }

    #[test]
    fn shipped_configs_parse_and_validate() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
        for name in ["single.toml", "node1.toml", "node2.toml", "node3.toml"] {
            let c = Config::load(&dir.join(name)).unwrap();
            assert_eq!(
                c.voters().len(),
                if name == "single.toml" { 1 } else { 3 },
                "{name}"
            );
        }
    }
}
