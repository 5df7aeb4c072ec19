//! A node's configuration: TOML, every key optional with a documented default.
//!
//! `weir serve` with no file runs [`Config::default`]: a single-node cluster on
//! `127.0.0.1:7411` with data in `./weir-data`. [`Config::validate`] refuses bad
//! combinations with a message naming both values.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use crate::security::{TlsFiles, TokenEntry};

use weir_core::bounds::ENTRY_COMMANDS_MAX;
use weir_core::bounds::{APPEND_OVERHEAD_BYTES, ENTRY_BYTES_MAX, PEER_FRAME_MAX};

/// One initial voter.
/// Most data groups a node hosts (`groups`): each costs its own Raft, log writer, proposer
/// and reader.
pub const GROUPS_MAX: u32 = 16;

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
    /// Most entries in one AppendEntries. Default 64. `validate` refuses a value whose
    /// AppendEntries could exceed the peer frame bound (at most 127 entries of 512 KiB).
    pub max_payload_entries: u64,
    /// Purge the log behind a snapshot only once this many entries can go. Default 256.
    pub purge_batch_size: u64,
    /// A log segment is closed and the next begun before a write would take it past this
    /// many bytes. Default (and most) 64 MiB; at least 64 KiB. Smaller segments are begun
    /// and deleted more often (the partition harness uses them so that a power loss meets
    /// both).
    pub log_segment_bytes: u64,
}

/// The least `raft.log_segment_bytes`.
pub const LOG_SEGMENT_BYTES_MIN: u64 = 64 << 10;

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
            log_segment_bytes: crate::raft::wal::SEGMENT_BYTES,
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
    /// next fills. On a node of several groups, each data group's own bound, and the bound
    /// the node's data groups share (a group that waits 20 ms for a shared slot proposes
    /// without one: `server::proposer`).
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
    /// Where to listen for clients, when that differs from `client_addr` (behind a proxy or
    /// a NAT: `client_addr` is what the cluster tells clients, in `NotLeader` redirects and
    /// the membership; the partition harness puts a client-link fault front there).
    /// Default: `client_addr`.
    pub client_listen: Option<String>,
    /// The initial voters, this node among them. The lowest id forms the cluster on its
    /// first start. Default: this node alone.
    pub peers: Vec<Peer>,
    /// Tokio worker threads of the node. Default 1: the state machine applies on one thread
    /// anyway and fsyncs run on the blocking pool; measured here, one worker per node beats
    /// two by about 15% when three nodes share two cores (fewer cross-thread wake-ups).
    /// Raise it on a machine of its own with many client connections.
    pub worker_threads: usize,
    /// Data groups this node hosts, each its own Raft group. Default 1: one group, the
    /// data directory laid out as it always was (`log/` and `snapshot.bin` at its top).
    /// From 2 to [`GROUPS_MAX`]: the metadata group 0 and data groups 1 to `groups`, each
    /// in `groups/<id>/`, every configured voter a voter of each ([`crate::server::groups_dir`]).
    /// Every node of a cluster is configured alike, and a data directory keeps the count it
    /// was created with: a changed count is refused at start.
    pub groups: u32,
    /// HTTP/JSON port (the `/v1` API, `/metrics`, `/healthz`, `/readyz`). Default
    /// `127.0.0.1:7611`; the empty string serves no HTTP.
    pub http_listen: String,
    /// gRPC port of Envoy's rate-limit service (`ShouldRateLimit`, `weir_http::rls`). Default
    /// the empty string: no gRPC port, so a config that does not name it serves none.
    pub grpc_listen: String,
    /// Whether `ShouldRateLimit` answers carry `RateLimit-Limit`, `RateLimit-Remaining` and
    /// `RateLimit-Reset` in `response_headers_to_add`. Default false, as envoyproxy/ratelimit.
    pub grpc_ratelimit_headers: bool,
    /// How `ShouldRateLimit` answers a descriptor whose keyed limit has no room for a new
    /// key (its `keys_max` live keys): `OVER_LIMIT` when true, else `OK` (the default: fail
    /// open, as Envoy's `failure_mode_deny: false` does). Either way counted in
    /// `weir_rls_descriptors_total{kind="keys_full"}` and logged once per limit.
    pub grpc_keys_full_over_limit: bool,
    /// Whether `ShouldRateLimit` decides the descriptors it is asked often from token
    /// leases this node holds (`weir_http::rls`, node leases): no log entry for most
    /// requests. Default true; false asks the cluster for every request.
    pub grpc_local_leases: bool,
    pub raft: RaftConfig,
    pub proposer: ProposerConfig,
    /// TLS on the client, peer and HTTP ports. Default: none, which is allowed on loopback
    /// addresses only (unless `insecure`).
    pub tls: Option<TlsFiles>,
    /// Allow plaintext on non-loopback addresses. Default false.
    pub insecure: bool,
    /// Whether a reload (SIGHUP) that finds no tokens, on a node that has some, may turn
    /// authentication off. Default false: such a reload is refused and the old tokens kept
    /// (logged at ERROR), so deleting the last `[[tokens]]` entry by mistake never opens
    /// the node to every tokenless client. Read from the reloaded file.
    pub reload_may_turn_auth_off: bool,
    /// Tokens accepted on the client port; re-read on SIGHUP. Default: none, and then
    /// every connection may do everything.
    pub tokens: Vec<TokenEntry>,
    /// Client-port connections one principal (one token, or everyone when no tokens are
    /// configured) may hold open to this node at once; one more is refused at its hello.
    /// Default 1,024 (`weir_core::bounds::CLIENT_CONNECTIONS_PER_PRINCIPAL_DEFAULT`).
    pub client_connections_max: usize,
    /// Whether `/metrics` is served without a token to a scraper on a loopback address.
    /// Default true. `/metrics` names every tenant: where other users share the host, set
    /// it false and scrape with a `read` token (it needs one from elsewhere anyway).
    pub metrics_loopback_open: bool,
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
            client_listen: None,
            peers: vec![],
            worker_threads: 1,
            groups: 1,
            http_listen: "127.0.0.1:7611".into(),
            grpc_listen: String::new(),
            grpc_ratelimit_headers: false,
            grpc_keys_full_over_limit: false,
            grpc_local_leases: true,
            raft: RaftConfig::default(),
            proposer: ProposerConfig::default(),
            tls: None,
            insecure: false,
            reload_may_turn_auth_off: false,
            tokens: vec![],
            client_connections_max: weir_core::bounds::CLIENT_CONNECTIONS_PER_PRINCIPAL_DEFAULT,
            metrics_loopback_open: true,
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
        if self.client_connections_max == 0 {
            return Err("client_connections_max = 0: no client could connect".into());
        }
        let r = &self.raft;
        if !(1..=256).contains(&self.worker_threads) {
            return Err(format!(
                "worker_threads = {} is not in 1..=256",
                self.worker_threads
            ));
        }
        if !(1..=GROUPS_MAX).contains(&self.groups) {
            return Err(format!(
                "groups = {} is not in 1..={GROUPS_MAX}",
                self.groups
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
        check_append_fits(r.max_payload_entries)?;
        if !(LOG_SEGMENT_BYTES_MIN..=crate::raft::wal::SEGMENT_BYTES).contains(&r.log_segment_bytes)
        {
            return Err(format!(
                "raft.log_segment_bytes = {} must be between {} (64 KiB) and {} (64 MiB)",
                r.log_segment_bytes,
                LOG_SEGMENT_BYTES_MIN,
                crate::raft::wal::SEGMENT_BYTES
            ));
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
        self.validate_security()
    }

    /// Refuses plaintext on a non-loopback address (unless `insecure`) and malformed
    /// tokens.
    fn validate_security(&self) -> Result<(), String> {
        crate::security::TokenTable::new(&self.tokens).map_err(|e| format!("tokens: {e}"))?;
        if self.tls.is_some() || self.insecure {
            return Ok(());
        }
        let listens = [
            ("client_addr", Some(&self.client_addr)),
            ("peer_addr", Some(&self.peer_addr)),
            ("peer_listen", self.peer_listen.as_ref()),
            ("client_listen", self.client_listen.as_ref()),
            // Empty: no HTTP port.
            (
                "http_listen",
                Some(&self.http_listen).filter(|a| !a.is_empty()),
            ),
            (
                "grpc_listen",
                Some(&self.grpc_listen).filter(|a| !a.is_empty()),
            ),
        ];
        for (key, addr) in listens {
            if let Some(addr) = addr
                && !is_loopback(addr)
            {
                return Err(format!(
                    "{key} = {addr} is not a loopback address and there is no [tls]: \
                     configure tls (cert, key, ca), or set insecure = true to serve plaintext"
                ));
            }
        }
        Ok(())
    }

    /// openraft's config from these knobs.
    pub fn openraft(&self) -> Result<openraft::Config, String> {
        let r = &self.raft;
        check_snapshot_chunk_fits(openraft::Config::default().snapshot_max_chunk_size)?;
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

/// Whether `addr` (`host:port`) is on a loopback interface (`localhost`, 127.0.0.0/8, ::1).
pub fn is_loopback(addr: &str) -> bool {
    let host = match addr.rsplit_once(':') {
        Some((h, _)) => h.trim_start_matches('[').trim_end_matches(']'),
        None => addr,
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Proves the largest AppendEntries fits a peer frame: `max_payload_entries` entries of at
/// most [`ENTRY_BYTES_MAX`] each, plus [`APPEND_OVERHEAD_BYTES`], at most [`PEER_FRAME_MAX`].
/// A frame above the bound is closed by the follower and resent by openraft forever.
fn check_append_fits(max_payload_entries: u64) -> Result<(), String> {
    let largest = max_payload_entries
        .saturating_mul(ENTRY_BYTES_MAX as u64)
        .saturating_add(APPEND_OVERHEAD_BYTES as u64);
    if largest > PEER_FRAME_MAX as u64 {
        return Err(format!(
            "raft.max_payload_entries = {max_payload_entries}: an AppendEntries of that many \
             entries of up to {ENTRY_BYTES_MAX} bytes is {largest} bytes, above the peer \
             frame bound of {PEER_FRAME_MAX}; at most {} entries fit",
            (PEER_FRAME_MAX as u64 - APPEND_OVERHEAD_BYTES as u64) / ENTRY_BYTES_MAX as u64
        ));
    }
    Ok(())
}

/// Proves openraft's snapshot chunks fit a peer frame, with the same overhead allowance.
fn check_snapshot_chunk_fits(chunk_bytes: u64) -> Result<(), String> {
    if chunk_bytes.saturating_add(APPEND_OVERHEAD_BYTES as u64) > PEER_FRAME_MAX as u64 {
        return Err(format!(
            "openraft's snapshot_max_chunk_size = {chunk_bytes} does not fit the peer frame \
             bound of {PEER_FRAME_MAX}"
        ));
    }
    Ok(())
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
    fn groups_are_one_by_default_and_refused_outside_one_to_sixteen() {
        assert_eq!(Config::default().groups, 1);
        let two: Config = toml::from_str("groups = 2").unwrap();
        assert_eq!(two.groups, 2);
        two.validate().unwrap();
        for groups in [0, GROUPS_MAX + 1] {
            let c = Config {
                groups,
                ..Config::default()
            };
            assert_eq!(
                c.validate().unwrap_err(),
                format!("groups = {groups} is not in 1..=16")
            );
        }
    }

    #[test]
    fn a_log_segment_size_outside_64_kib_to_64_mib_is_refused() {
        let mut c = Config::default();
        for bytes in [
            LOG_SEGMENT_BYTES_MIN - 1,
            crate::raft::wal::SEGMENT_BYTES + 1,
        ] {
            c.raft.log_segment_bytes = bytes;
            assert_eq!(
                c.validate().unwrap_err(),
                format!(
                    "raft.log_segment_bytes = {bytes} must be between 65536 (64 KiB) and 67108864 (64 MiB)"
                )
            );
        }
        for bytes in [LOG_SEGMENT_BYTES_MIN, 1 << 20] {
            c.raft.log_segment_bytes = bytes;
            c.validate().unwrap();
        }
        let single: Config = toml::from_str("[raft]\nlog_segment_bytes = 1048576").unwrap();
        assert_eq!(single.raft.log_segment_bytes, 1 << 20);
    }

    #[test]
    fn plaintext_off_loopback_is_refused_unless_insecure() {
        let mut c = Config {
            client_addr: "0.0.0.0:7411".into(),
            ..Config::default()
        };
        assert!(c.validate().unwrap_err().contains("not a loopback address"));
        c.insecure = true;
        c.validate().unwrap();
        assert!(is_loopback("[::1]:1") && is_loopback("localhost:1"));
        assert!(!is_loopback("10.0.0.1:1"));
    }

    #[test]
    fn a_client_listen_address_off_loopback_is_refused_like_the_client_addr() {
        let mut c = Config {
            client_listen: Some("0.0.0.0:7711".into()),
            ..Config::default()
        };
        let err = c.validate().unwrap_err();
        assert!(err.starts_with("client_listen = 0.0.0.0:7711"), "{err}");
        c.client_listen = Some("127.0.0.1:7711".into());
        c.validate().unwrap();
    }

    #[test]
    fn a_grpc_port_off_loopback_is_refused_without_tls_and_none_is_served_by_default() {
        assert_eq!(Config::default().grpc_listen, "");
        let mut c = Config {
            grpc_listen: "0.0.0.0:8081".into(),
            ..Config::default()
        };
        let err = c.validate().unwrap_err();
        assert!(err.starts_with("grpc_listen = 0.0.0.0:8081"), "{err}");
        c.grpc_listen = "127.0.0.1:8081".into();
        c.validate().unwrap();
    }

    #[test]
    fn the_largest_append_entries_must_fit_a_peer_frame() {
        let fits = (PEER_FRAME_MAX as u64 - APPEND_OVERHEAD_BYTES as u64) / ENTRY_BYTES_MAX as u64;
        let mut c = Config::default();
        c.raft.max_payload_entries = fits;
        c.validate().unwrap();
        c.raft.max_payload_entries = fits + 1;
        let err = c.validate().unwrap_err();
        assert!(
            err.starts_with(&format!("raft.max_payload_entries = {}", fits + 1))
                && err.contains(&format!("peer frame bound of {PEER_FRAME_MAX}")),
            "{err}"
        );
        assert!(check_snapshot_chunk_fits(PEER_FRAME_MAX as u64).is_err());
    }

    #[test]
    fn shipped_configs_parse_and_validate() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config");
        for name in ["single.toml", "node1.toml", "node2.toml", "node3.toml"] {
            let c = Config::load(&dir.join(name)).unwrap();
            assert_eq!(
                c.voters().len(),
                if name == "single.toml" { 1 } else { 3 },
                "{name}"
            );
        }
        // The five-node configs: each lists the voters of the cluster it joins and itself.
        for id in [4u64, 5] {
            let c = Config::load(&dir.join(format!("node{id}.toml"))).unwrap();
            let ids: Vec<u64> = c.voters().iter().map(|p| p.id).collect();
            assert_eq!(ids, (1..=id).collect::<Vec<_>>(), "node{id}.toml");
        }
    }
}
