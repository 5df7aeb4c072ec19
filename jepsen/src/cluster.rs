//! Three (or, with `--nodes 5`, five) `weir` processes, each with its own data directory, its client port open to the
//! harness (on loopback behind a [`crate::client_front`], which can fault one client's links)
//! and its peer port behind a [`crate::proxy`] — on loopback, or each in a network
//! namespace of its own ([`crate::netns`]). The fault primitives the nemesis uses (cut,
//! one-way, delay, loss, bandwidth, kill, pause, clocks, membership) are methods here, so
//! the nemesis does not care which network mode it runs in. The processes themselves are
//! [`weir_launcher::LocalCluster`]'s, which kills them on drop.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use weir_launcher::{LocalCluster, loopback_addr};
use weir_proto::protocol::{Request, Response};
use weir_server::config::{Config, Peer, RaftConfig};

use crate::addrs;
use crate::client_front::{self, ClientLink, ClientLinks};
use crate::netns::{self, Netns};
use crate::proxy::{self, Addressing, Link, Links};
use crate::secure::{self, Access, Secure};

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

    /// Each node's client front address, if it gets one: loopback with `wanted`, the node's
    /// client port behind it. Only runs that fault client links get them: with the fronts,
    /// the `pause` smoke lost permits to leader stalls that it does not lose without them
    /// (`stalls`: 8 and 9 clients against 0, seed 11; jepsen/README.md), not explained yet.
    fn client_fronts(&self, wanted: bool, nodes: u64) -> Result<Vec<Option<String>>, String> {
        (1..=nodes)
            .map(|_| match self {
                Net::Loopback if wanted => loopback_addr().map(Some),
                _ => Ok(None),
            })
            .collect()
    }

    /// What every node's config has in this mode, beside its own addresses.
    fn config(&self) -> Config {
        Config {
            // The harness speaks the binary protocol: no HTTP port unless a run asks for one.
            http_listen: String::new(),
            // Namespace addresses are not loopback ones, and the harness speaks
            // plaintext: its namespaces reach nothing outside the run.
            insecure: matches!(self, Net::Netns(_)),
            raft: RaftConfig {
                log_segment_bytes: LOG_SEGMENT_BYTES,
                ..Default::default()
            },
            ..Config::default()
        }
    }

    /// Where node `id` serves Envoy's `ShouldRateLimit` in a run with Envoy holders.
    fn grpc_listen(&self, id: u64) -> Result<String, String> {
        Ok(match self {
            Net::Loopback => loopback_addr()?,
            Net::Netns(_) => format!("{}:{}", addrs::node_ip(id), netns::GRPC_PORT),
        })
    }

    /// Where node `id` serves HTTP in a secure run, or one with Python holders.
    fn http_listen(&self, id: u64) -> Result<String, String> {
        Ok(match self {
            Net::Loopback => loopback_addr()?,
            Net::Netns(_) => format!("{}:{}", addrs::node_ip(id), netns::HTTP_PORT),
        })
    }
}

/// Every node's log segment size: the least allowed, 64 KiB, against 64 MiB by default, so
/// that a run of tens of seconds begins new segments and deletes old ones behind snapshots
/// while it kills nodes and cuts their power (a 30 s power-loss run writes about 0.5 MiB of
/// log a node: eight segments).
pub const LOG_SEGMENT_BYTES: u64 = weir_server::config::LOG_SEGMENT_BYTES_MIN;

/// What a run asks of its cluster beside its network mode.
#[derive(Clone, Copy, Debug)]
pub struct Setup {
    /// How many nodes: 3, or 5 ([`SIZES`]).
    pub nodes: u64,
    /// Each node's data directory on the lost-fsync layer, for `power-loss`.
    pub lost_fsync: bool,
    /// TLS on every port and tokens with roles (`--secure`).
    pub secure: bool,
    /// Client fronts before every node's client port (loopback, client link faults).
    pub client_fronts: bool,
    /// Every node serves HTTP (plaintext, or TLS in a secure run), for the Python holders.
    pub http: bool,
    /// Entries between snapshots, none kept behind one (0: the nodes' defaults).
    pub snapshot_every: u64,
    /// Every node serves Envoy's `ShouldRateLimit` (plaintext), for the Envoy holders.
    pub grpc: bool,
    /// Every node's `groups` (`--groups`): 1, or the metadata group and this many data
    /// groups.
    pub groups: u32,
}

/// Entries between snapshots by default (`--snapshot-every`): a 30 s run applies a few
/// thousand, so each node builds several while the faults go on, and with no log kept
/// behind a snapshot a node that missed entries is sent one.
pub const SNAPSHOT_EVERY: u64 = 500;

/// A node's clock as the clock nemesis set it.
///
/// It has no monotonic offset (a time namespace of its own): a node reads its monotonic
/// clock only as differences from its own start (`started.elapsed()`), so an offset would
/// cancel out and test nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Clock {
    /// Offset of its proposer's WALL stamps, ms (`WEIR_TEST_WALL_SKEW_MS`): the wall clock
    /// of one node disagreeing with the others'. Wall time must never decide anything.
    pub wall_skew_ms: i64,
    /// Rate of its proposer's log-clock stamps (`WEIR_TEST_CLOCK_RATE`); 1 is true.
    pub rate: f64,
}

/// What the harness keeps per node beside the launcher's record of it.
#[derive(Clone, Copy, Debug, Default)]
struct NodeFaults {
    /// `None`: the true clock.
    clock: Option<Clock>,
    /// Removed from the membership by the nemesis, to be added back at the heal.
    removed: bool,
}

pub struct Cluster {
    /// The node processes; their directory is the run's output directory, kept.
    nodes: LocalCluster,
    /// How many: the nodes are `1..=size`.
    size: u64,
    faults: Vec<NodeFaults>,
    pub links: Arc<Links>,
    /// Loopback mode: the rules of the client fronts, per (client address, node).
    pub client_links: Arc<ClientLinks>,
    pub net: Net,
    /// Per node (index `id - 1`), how many times it was started: a restarted leader may
    /// resume its own term (its vote is durable), so the monitor tells incarnations apart
    /// by this.
    pub starts: Arc<Vec<std::sync::atomic::AtomicU64>>,
    /// Per node, the lost-fsync layer mounted on its data directory (empty unless the run
    /// asked for power losses). Declared after `nodes`, so it is unmounted after they die.
    lazyfs: Vec<crate::lazyfs::LazyFs>,
    /// Namespace mode: the kernel's grudges in force, (from, to) → answered with resets,
    /// for the connect probe to compare with what it sees. Cleared at every heal.
    grudges: std::sync::Mutex<std::collections::BTreeMap<(u64, u64), bool>>,
    /// A `--secure` run's certificates and tokens (also installed process-wide,
    /// [`crate::secure::install`]).
    pub secure: Option<Arc<Secure>>,
}

/// The cluster sizes a run may have (`--nodes`): three nodes survive one failure, five
/// survive two.
pub const SIZES: [u64; 2] = [3, 5];

/// How long a started node may take to answer a status request: it opens its store and
/// replays its log, which takes well under a second for a run's worth of entries.
const ANSWER_BOUND: Duration = Duration::from_secs(10);

/// Whether process `pid` has exited: it is gone, or a zombie not reaped yet (the launcher
/// reaps only at a kill). Linux's `/proc/PID/stat`: the state follows the `)` that ends the
/// command name.
fn exited(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_none_or(|state| state == "Z" || state == "X"),
        Err(_) => true,
    }
}

/// A node's addresses, as [`addresses`] gives them.
type NodeAddrs = (String, String, String, Option<IpAddr>);

/// Node `id`'s addresses: (client, peer as the cluster knows it = the proxy front, peer
/// listen, the source address it dials from, if one must be set).
fn addresses(net: &Net, id: u64) -> Result<NodeAddrs, String> {
    Ok(match net {
        Net::Loopback => (
            loopback_addr()?,
            loopback_addr()?,
            loopback_addr()?,
            Some(proxy::source_ip(id)),
        ),
        Net::Netns(_) => (
            format!("{}:{}", addrs::node_ip(id), netns::CLIENT_PORT),
            format!("{}:{}", addrs::front_ip(id), netns::PEER_PORT),
            format!("{}:{}", addrs::node_ip(id), netns::PEER_PORT),
            None,
        ),
    })
}

/// A `--secure` run's CA, node certificates and tokens, made in `dir/tls`. Each node's
/// certificate names the hosts it is dialed at: its client address, and its proxy front
/// (peers verify the host they dial, the front).
fn certificates(dir: &Path, addrs: &[NodeAddrs]) -> Result<Arc<Secure>, String> {
    let names: Vec<Vec<String>> = addrs
        .iter()
        .map(|(client, peer, listen, _)| {
            [client, peer, listen]
                .iter()
                .map(|a| secure::host(a).to_string())
                .collect()
        })
        .collect();
    Ok(Arc::new(Secure::generate(&dir.join("tls"), &names)?))
}

/// The voters as every node's config names them: the peer address is the proxy front, the
/// client address the client front where there is one.
fn voters(addrs: &[NodeAddrs], fronts: &[Option<String>]) -> Vec<Peer> {
    addrs
        .iter()
        .zip(1..)
        .zip(fronts)
        .map(|(((client, peer, _, _), id), front)| Peer {
            id,
            peer: peer.clone(),
            client: front.as_ref().unwrap_or(client).clone(),
        })
        .collect()
}

/// Starts node `id`'s client front on `front`, forwarding to the node's `client_listen`.
async fn start_client_front(
    id: u64,
    front: &str,
    client_listen: &str,
    links: &Arc<ClientLinks>,
) -> Result<(), String> {
    let listener = bind("client front", front).await?;
    let target: SocketAddr = client_listen.parse().expect("an address");
    tokio::spawn(client_front::run(id, listener, target, links.clone()));
    Ok(())
}

/// The lost-fsync layer on each node's data directory, over `dir/data{id}.durable`.
fn mount_lost_fsync(
    dir: &Path,
    nodes: &LocalCluster,
    size: u64,
) -> Result<Vec<crate::lazyfs::LazyFs>, String> {
    (1..=size)
        .map(|id| {
            let backing = dir.join(format!("data{id}.durable"));
            crate::lazyfs::LazyFs::mount(&backing, &nodes.data_dir(id)).map_err(|e| e.to_string())
        })
        .collect()
}

/// A listener of the harness's on `addr` (`what` it is, for the error).
async fn bind(what: &str, addr: &str) -> Result<tokio::net::TcpListener, String> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("{what} {addr}: {e}"))
}

impl Cluster {
    /// Writes configs in `dir`, starts the proxies and the nodes (`setup.nodes` of them). With
    /// `setup.lost_fsync`, each node's data directory is a [`crate::lazyfs::LazyFs`] mount
    /// over `data{id}.durable` (root and `/dev/fuse` needed), for [`Cluster::power_loss`].
    ///
    /// With `setup.secure`, certificates and tokens are made in `dir/tls`
    /// ([`Secure::generate`]) and installed for every client of this process
    /// ([`secure::install`]); every node serves TLS on its client, peer and HTTP ports and
    /// requires a token. Without it the security in force is cleared, and no node binds an
    /// HTTP port (the harness speaks the binary protocol) unless `setup.http` asks for one
    /// (the Python holders speak HTTP).
    pub async fn start(
        weir: &Path,
        dir: &Path,
        seed: u64,
        net: Net,
        setup: Setup,
    ) -> Result<Cluster, String> {
        let Setup {
            nodes: size,
            lost_fsync,
            secure,
            client_fronts,
            http,
            snapshot_every,
            grpc,
            groups,
        } = setup;
        let links = Links::new();
        let client_links = ClientLinks::new();
        if !SIZES.contains(&size) {
            return Err(format!(
                "a cluster of {size} nodes: the harness runs {SIZES:?}"
            ));
        }
        let fronts = net.client_fronts(client_fronts, size)?;
        let addrs = (1..=size)
            .map(|id| addresses(&net, id))
            .collect::<Result<Vec<_>, String>>()?;
        let addressing = match net {
            Net::Loopback => Addressing::Loopback,
            Net::Netns(_) => Addressing::Netns,
        };
        let secure = match secure {
            true => Some(certificates(dir, &addrs)?),
            false => None,
        };
        secure::install(secure.clone());
        let voters = voters(&addrs, &fronts);
        let mut nodes = LocalCluster::in_dir(weir, dir)?.security(secure::security(Access::Admin));
        for (((client, peer, listen, source), id), front) in
            addrs.into_iter().zip(1u64..).zip(fronts.iter().cloned())
        {
            // Loopback: the node's client port is `client_listen`, and its advertised
            // `client_addr` the front's.
            let (client, client_listen) = match front {
                Some(front) => {
                    start_client_front(id, &front, &client, &client_links).await?;
                    (front, Some(client))
                }
                None => (client, None),
            };
            let listener = bind("proxy front", &peer).await?;
            let target: SocketAddr = listen.parse().expect("an address");
            let links = links.clone();
            tokio::spawn(proxy::run(id, listener, target, links, addressing, seed));
            let mut config = Config {
                id,
                data_dir: nodes.data_dir(id),
                client_addr: client,
                peer_addr: peer,
                peer_listen: Some(listen),
                peer_source_ip: source,
                client_listen,
                peers: voters.clone(),
                ..net.config()
            };
            config.groups = groups;
            if snapshot_every > 0 {
                config.raft.snapshot_logs_since_last = snapshot_every;
                config.raft.max_in_snapshot_log_to_keep = 0;
                config.raft.purge_batch_size = 1;
            }
            if secure.is_some() || http {
                // A secure node serves HTTP too, over TLS, for the security check to probe.
                config.http_listen = net.http_listen(id)?;
            }
            if grpc {
                config.grpc_listen = net.grpc_listen(id)?;
            }
            if let Some(secure) = &secure {
                secure.apply(&mut config)?;
            }
            nodes.add(config)?;
        }
        let lazyfs = match lost_fsync {
            true => mount_lost_fsync(dir, &nodes, size)?,
            false => vec![],
        };
        let mut cluster = Cluster {
            nodes,
            size,
            faults: vec![NodeFaults::default(); size as usize],
            links,
            client_links,
            net,
            starts: Arc::new((0..size).map(|_| Default::default()).collect()),
            lazyfs,
            grudges: Default::default(),
            secure,
        };
        for id in cluster.ids() {
            cluster.start_node(id)?;
        }
        Ok(cluster)
    }

    /// The nodes' ids, `1..=size`.
    pub fn ids(&self) -> std::ops::RangeInclusive<u64> {
        1..=self.size
    }

    /// How many nodes the cluster has.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Every directed peer link, (from, to), in order.
    fn directed(&self) -> Vec<(u64, u64)> {
        self.ids()
            .flat_map(|from| {
                self.ids()
                    .filter(move |to| *to != from)
                    .map(move |to| (from, to))
            })
            .collect()
    }

    pub fn servers(&self) -> Vec<String> {
        self.nodes.servers()
    }

    /// Every node's (id, client address, HTTP address; empty when it serves no HTTP).
    pub fn ports(&self) -> Vec<(u64, String, String)> {
        self.nodes
            .nodes()
            .iter()
            .map(|n| (n.id, n.client.clone(), n.config.http_listen.clone()))
            .collect()
    }

    /// Every node's gRPC address (`ShouldRateLimit`; empty when it serves none).
    pub fn grpc_ports(&self) -> Vec<String> {
        self.nodes
            .nodes()
            .iter()
            .map(|n| n.config.grpc_listen.clone())
            .collect()
    }

    /// Probes every directed peer link and compares what each did with what its rule should
    /// do: `Ok(Some(report))` when all match, `Err` naming those that do not. On loopback the
    /// rules are the proxy's; in namespace mode the kernel's grudges ([`Cluster::verify_grudges`]).
    pub async fn verify_links(&self) -> Result<Option<serde_json::Value>, String> {
        if matches!(self.net, Net::Netns(_)) {
            return self.verify_grudges().await.map(Some);
        }
        let mut seen = vec![];
        let mut wrong = vec![];
        let mut probes = vec![];
        for (from, to) in self.directed() {
            let front: SocketAddr = self
                .nodes
                .node(to)
                .peer
                .parse()
                .map_err(|e| format!("node {to}'s peer address: {e}"))?;
            // Behind a passing rule, a killed node refuses (the proxy closes at once) and
            // a stopped one answers nothing (the kernel still accepts): composed faults.
            let expected = match crate::probe::expected(self.links.get((from, to))) {
                crate::probe::Seen::Passes if !self.is_running(to) => crate::probe::Seen::Cut,
                crate::probe::Seen::Passes if self.nodes.is_paused(to) => crate::probe::Seen::Held,
                e => e,
            };
            probes.push((from, to, expected, crate::probe::link(from, front)));
        }
        for (from, to, expected, got) in self.probed(probes).await {
            if got != expected {
                wrong.push(format!("{from}->{to}: expected {expected:?}, saw {got:?}"));
            }
            seen.push(format!("{from}->{to} {got:?}"));
        }
        if wrong.is_empty() {
            Ok(Some(serde_json::json!(seen)))
        } else {
            Err(format!(
                "the partition did not take effect: {}",
                wrong.join("; ")
            ))
        }
    }

    /// Namespace mode: probes every directed peer link at the kernel's level
    /// ([`crate::probe::kernel_link`]) against the grudges in force. The proxy's own rules in
    /// this mode (the one-way cut, delay) are not what this probes: they are the loopback
    /// probe's and the proxy tests'.
    async fn verify_grudges(&self) -> Result<serde_json::Value, String> {
        use crate::probe::Seen;
        let grudges = self
            .grudges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut seen = vec![];
        let mut wrong = vec![];
        let mut probes = vec![];
        for (from, to) in self.directed() {
            let target = SocketAddr::new(addrs::node_ip(to), netns::PEER_PORT);
            let expected = match grudges.get(&(from, to)) {
                Some(true) => Seen::Cut,
                Some(false) => Seen::Held,
                // No grudge: a killed node's kernel resets, a stopped one's accepts and
                // answers nothing, as behind the proxy.
                None if !self.is_running(to) => Seen::Cut,
                None if self.nodes.is_paused(to) => Seen::Held,
                None => Seen::Passes,
            };
            probes.push((from, to, expected, crate::probe::kernel_link(from, target)));
        }
        for (from, to, expected, got) in self.probed(probes).await {
            if got != expected {
                wrong.push(format!("{from}->{to}: expected {expected:?}, saw {got:?}"));
            }
            seen.push(format!("{from}->{to} {got:?}"));
        }
        if wrong.is_empty() {
            Ok(serde_json::json!(seen))
        } else {
            Err(format!(
                "the partition did not take effect (kernel): {}",
                wrong.join("; ")
            ))
        }
    }

    /// Runs the probes of [`Cluster::verify_links`]: (from, to, expected, probe) → (from, to,
    /// expected, seen), in order. Three nodes' six links are probed one after another; five
    /// nodes' twenty all at once, since a held link takes up to 1.8 s to tell
    /// ([`crate::probe`]) and a partition of two of five holds up to fourteen.
    async fn probed<F>(
        &self,
        probes: Vec<(u64, u64, crate::probe::Seen, F)>,
    ) -> Vec<(u64, u64, crate::probe::Seen, crate::probe::Seen)>
    where
        F: Future<Output = crate::probe::Seen> + Send + 'static,
    {
        let mut out = vec![];
        if self.size <= 3 {
            for (from, to, expected, probe) in probes {
                out.push((from, to, expected, probe.await));
            }
            return out;
        }
        let tasks: Vec<_> = probes
            .into_iter()
            .map(|(from, to, expected, probe)| (from, to, expected, tokio::spawn(probe)))
            .collect();
        for (from, to, expected, task) in tasks {
            let got = task.await.unwrap_or(crate::probe::Seen::Unreachable);
            out.push((from, to, expected, got));
        }
        out
    }

    /// The `weir` binary the nodes run (also the CLI client the client-kill fault spawns).
    pub fn weir(&self) -> &Path {
        self.nodes.weir()
    }

    /// Node `id`'s process id, if the harness has it running.
    pub fn pid(&self, id: u64) -> Option<u32> {
        self.nodes.pid(id)
    }

    pub fn is_running(&self, id: u64) -> bool {
        self.nodes.is_running(id)
    }

    /// Nodes the harness started and has not killed whose process has exited on its own (a
    /// crash, a refusal to start): they must never pass for running ones.
    pub fn dead(&self) -> Vec<u64> {
        self.ids()
            .filter(|id| self.nodes.pid(*id).is_some_and(exited))
            .collect()
    }

    fn faults(&mut self, id: u64) -> &mut NodeFaults {
        &mut self.faults[(id - 1) as usize]
    }

    /// Starts node `id` (nothing if it runs) under its clock, in its namespace.
    pub fn start_node(&mut self, id: u64) -> Result<(), String> {
        if self.nodes.is_running(id) {
            return Ok(());
        }
        let weir = self.nodes.weir().to_owned();
        let clock = self.faults(id).clock;
        // `ip netns exec` executes in place: the child's pid is the node's.
        let mut command = match &self.net {
            Net::Loopback => Command::new(&weir),
            Net::Netns(ns) => ns.command_in_node(id, &weir.display().to_string()),
        };
        if let Some(clock) = clock {
            command.env("WEIR_TEST_CLOCK_RATE", clock.rate.to_string());
            command.env("WEIR_TEST_WALL_SKEW_MS", clock.wall_skew_ms.to_string());
        }
        self.starts[(id - 1) as usize].fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.nodes.start_with(id, command)
    }

    /// kill -9.
    pub fn kill(&mut self, id: u64) {
        self.nodes.kill(id);
    }

    /// Power loss of node `id`: kill -9 (reaped, so nothing of it is still writing), then
    /// every write its data directory had not fsynced is dropped; the heal restarts it on
    /// what it had made durable. Needs the run started with `lost_fsync`.
    pub fn power_loss(&mut self, id: u64) -> Result<crate::lazyfs::Loss, String> {
        let Some(fs) = self.lazyfs.get((id - 1) as usize) else {
            return Err("power loss without the lost-fsync layer mounted".into());
        };
        self.nodes.kill(id);
        fs.power_loss()
            .map_err(|e| format!("node {id}'s power loss: {e}"))
    }

    pub fn pause(&mut self, id: u64) {
        self.nodes.pause(id);
    }

    pub fn resume(&mut self, id: u64) {
        self.nodes.resume(id);
    }

    /// The leader as a running, unpaused node reports it, waiting at most `within`.
    pub async fn leader(&self, within: Duration) -> Option<u64> {
        self.nodes.leader(within).await
    }

    /// Has [`Cluster::leader`] and every status ask about data group `group` from now on
    /// (a run of several groups, `--groups`).
    pub fn set_group(&mut self, group: u64) {
        self.nodes.set_group(group);
    }

    /// Restarts node `id` with `clock` (`None`: the true clock) and waits (bounded) until it
    /// answers again.
    pub async fn restart_with_clock(
        &mut self,
        id: u64,
        clock: Option<Clock>,
    ) -> Result<(), String> {
        self.kill(id);
        self.faults(id).clock = clock;
        self.start_node(id)?;
        if !self.nodes.answering(id, ANSWER_BOUND).await {
            return Err(format!(
                "node {id} did not come back: {}",
                self.nodes.log_tail(id, 3).join(" | ")
            ));
        }
        Ok(())
    }

    /// Everything back: links pass, paused nodes resume, killed nodes restart, skewed clocks
    /// are restarted true (one node at a time), removed nodes are added back.
    ///
    /// A node whose process exited on its own (not killed by the nemesis) fails the heal, as
    /// does one that does not answer within `ANSWER_BOUND` of its restart: the error names
    /// it and quotes its log's last lines. The exited process is reaped and started again so
    /// the run goes on, but the heal's error stays in the history, and the convergence
    /// checker judges it.
    pub async fn heal(&mut self) -> Result<(), String> {
        self.heal_network()?;
        let mut failures = vec![];
        for id in self.dead() {
            failures.push(format!(
                "node {id} exited on its own: {}",
                self.nodes.log_tail(id, 3).join(" | ")
            ));
            self.kill(id);
        }
        for id in self.ids() {
            if self.nodes.is_paused(id) {
                self.resume(id);
            }
            self.start_node(id)?;
        }
        for id in self.ids() {
            if !self.nodes.answering(id, ANSWER_BOUND).await {
                failures.push(format!(
                    "node {id} did not answer within {ANSWER_BOUND:?} of the heal: {}",
                    self.nodes.log_tail(id, 3).join(" | ")
                ));
            }
        }
        if !failures.is_empty() {
            return Err(failures.join("; "));
        }
        for id in self.ids() {
            if self.faults(id).clock.is_some() {
                self.restart_with_clock(id, None).await?;
            }
        }
        let client = secure::client(self.servers(), Access::Admin);
        for id in self.ids() {
            if self.faults(id).removed {
                let node = self.nodes.node(id);
                let request = Request::AddNode {
                    id,
                    peer: node.peer.clone(),
                    client: node.client.clone(),
                };
                match client.request(request).await {
                    Ok(Response::MembershipChanged) => self.faults(id).removed = false,
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
                self.links.set((from, to), link);
                Ok(())
            }
            Net::Netns(ns) => {
                ns.cut(from, to, reset)?;
                self.grudges
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert((from, to), reset);
                Ok(())
            }
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
        self.links.set((from, to), Link::Drop);
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
        for pair in self.directed() {
            self.links.set(pair, link);
        }
    }

    /// Loopback mode: the links of the client at `client` (its connections' source address)
    /// to `node` follow `link` (the client fronts, [`crate::client_front`], which the run
    /// must have started with). Namespace mode has no client fronts: an error.
    pub fn client_link(&self, client: IpAddr, node: u64, link: ClientLink) -> Result<(), String> {
        match &self.net {
            Net::Loopback => {
                self.client_links.set((client, node), link);
                Ok(())
            }
            Net::Netns(_) => {
                Err("client link faults need the client fronts of loopback mode".into())
            }
        }
    }

    /// Every link passes again.
    pub fn heal_network(&self) -> Result<(), String> {
        self.links.heal();
        self.client_links.heal();
        self.grudges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        match &self.net {
            Net::Loopback => Ok(()),
            Net::Netns(ns) => ns.heal(),
        }
    }

    /// Removes node `id` from the membership (it keeps running).
    pub async fn remove(&mut self, id: u64) -> Result<(), String> {
        let client = secure::client(self.servers(), Access::Admin);
        match client.request(Request::RemoveNode { id }).await {
            Ok(Response::MembershipChanged) => {
                self.faults(id).removed = true;
                Ok(())
            }
            other => Err(format!("removing node {id}: {other:?}")),
        }
    }

    /// Every node's log text.
    pub fn logs(&self) -> Vec<(String, String)> {
        self.nodes
            .nodes()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exited_child_not_yet_reaped_counts_as_exited_a_running_one_does_not() {
        let mut done = Command::new("true").spawn().expect("true runs");
        let mut running = Command::new("sleep").arg("30").spawn().expect("sleep runs");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !exited(done.id()) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(exited(done.id()), "a zombie is an exited process");
        assert!(!exited(running.id()), "a sleeping process runs");
        let _ = running.kill();
        let _ = running.wait();
        let _ = done.wait();
    }
}
