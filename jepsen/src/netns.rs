//! Namespace mode: the cluster on a network of its own, faults by the kernel.
//!
//! One network namespace per node (`<prefix>-n1` … `-n3`, or `-n5` with `--nodes 5`), one for the harness and its
//! clients (`-c`), and a switch namespace (`-sw`) holding a bridge that every other one is
//! joined to by a veth pair. Addresses come from `10.213.0.0/24` and exist only inside
//! these namespaces: no route, NAT or forwarding reaches the host, so concurrent runs (each
//! with its own prefix, `wj<pid>`) cannot see each other.
//!
//! The addresses (`addrs.rs`):
//!
//! | address | where | what |
//! |---|---|---|
//! | `10.213.0.i` | `-ni` | node `i`: client port 7411, peer port 7511; it dials peers from here |
//! | `10.213.0.(20 + i)` | `-c` | the proxy front of node `i`: the peer address the cluster knows it by |
//! | `10.213.0.(30 + i)` | `-c` | where the proxy connects from when it carries node `i`'s connections |
//! | `10.213.0.254` | `-c` | the clients |
//!
//! Every peer link passes through the harness's proxy ([`crate::proxy`]) for delay and
//! one-way cuts; partitions, packet loss and bandwidth are the kernel's. A partition is an
//! nftables grudge in the snubbing node's namespace: packets from the other node's three
//! addresses are dropped on input (silently, or answered with a TCP reset). Loss is an
//! nftables `numgen random` drop of peer packets on every node's input; bandwidth is a tbf
//! qdisc on every node's interface. Client traffic (from `.254`) is never in a grudge, so
//! clients reach both sides of a partition, as in Jepsen.
//!
//! The harness process runs inside `-c` (it re-executes itself there through
//! `ip netns exec`), and starts each node through `ip netns exec <prefix>-ni`, which
//! executes in place: the child's pid is the node's, for kill -9 and SIGSTOP. The process
//! that created the namespaces deletes them when the run ends (killing anything left inside
//! first), and a new run deletes those of runs whose process is gone. Needs root, `ip`,
//! `nft` and `tc` (`.ci/run` installs `iproute2`, `nftables`, `iptables`).

use std::io::Write;
use std::net::IpAddr;
use std::process::{Command, Stdio};

use crate::addrs::{MAX_NODES, client_ip, front_ip, leg_ip, node_ip};

/// The client port of every node (namespaces isolate, so every node can use the same).
pub const CLIENT_PORT: u16 = 7411;
/// The peer port of every node and of every proxy front.
pub const PEER_PORT: u16 = 7511;
/// The HTTP port of every node (bound in `--secure` runs only).
pub const HTTP_PORT: u16 = 7611;
/// The gRPC port (Envoy's `ShouldRateLimit`) of every node (bound in `--rls-holders` runs
/// only).
pub const GRPC_PORT: u16 = 7711;
/// The environment variable that tells a re-executed harness its namespaces' prefix.
pub const PREFIX_ENV: &str = "WEIR_JEPSEN_NETNS";

/// The namespaces of one run.
#[derive(Clone, Debug)]
pub struct Netns {
    pub prefix: String,
    /// How many node namespaces: `-n1` to `-n{nodes}`.
    pub nodes: u64,
}

/// Runs a command to completion; an error names it and carries its stderr.
fn run(cmd: &mut Command, stdin: Option<&str>) -> Result<(), String> {
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{shown}: {e}"))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .map_err(|e| format!("{shown}: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{shown}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{shown}: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// A command that runs `program` inside the namespace `ns`.
fn in_ns(ns: &str, program: &str) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, program]);
    c
}

fn ipcmd(args: &[&str]) -> Result<(), String> {
    run(Command::new("ip").args(args), None)
}

/// Whether this machine can run namespace mode; the error says what is missing.
pub fn available() -> Result<(), String> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
    let root = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(2))
        == Some("0");
    if !root {
        return Err("namespace mode needs root (use --net loopback)".into());
    }
    for (tool, arg) in [("ip", "-V"), ("nft", "--version"), ("tc", "-V")] {
        run(Command::new(tool).arg(arg), None)
            .map_err(|e| format!("namespace mode needs `{tool}` (iproute2, nftables): {e}"))?;
    }
    Ok(())
}

impl Netns {
    /// The namespace named `who` (`n1`, `c`, `sw`).
    pub fn ns(&self, who: &str) -> String {
        format!("{}-{who}", self.prefix)
    }

    /// Node `id`'s namespace.
    fn node_ns(&self, id: u64) -> String {
        self.ns(&format!("n{id}"))
    }

    /// Every namespace of the run.
    fn all(&self) -> Vec<String> {
        (1..=self.nodes)
            .map(|id| format!("n{id}"))
            .chain(["c".to_string(), "sw".to_string()])
            .map(|w| self.ns(&w))
            .collect()
    }

    /// Creates the namespaces, the bridge, the veths, the addresses and the firewall tables.
    /// On an error, whatever was made is deleted again.
    pub fn create(prefix: &str, nodes: u64) -> Result<Netns, String> {
        let netns = Netns {
            prefix: prefix.to_owned(),
            nodes,
        };
        netns.build().inspect_err(|_| netns.destroy())?;
        Ok(netns)
    }

    fn build(&self) -> Result<(), String> {
        let sw = self.ns("sw");
        ipcmd(&["netns", "add", &sw])?;
        ipcmd(&["-n", &sw, "link", "set", "lo", "up"])?;
        ipcmd(&["-n", &sw, "link", "add", "br0", "type", "bridge"])?;
        ipcmd(&["-n", &sw, "link", "set", "br0", "up"])?;
        let ids = 1..=self.nodes;
        let harness: Vec<IpAddr> = std::iter::once(client_ip())
            .chain(ids.clone().map(front_ip))
            .chain(ids.clone().map(leg_ip))
            .collect();
        let spaces = ids
            .map(|id| (format!("n{id}"), vec![node_ip(id)]))
            .chain([("c".to_string(), harness)]);
        for (who, addrs) in spaces {
            let who = who.as_str();
            let ns = self.ns(who);
            ipcmd(&["netns", "add", &ns])?;
            ipcmd(&["-n", &ns, "link", "set", "lo", "up"])?;
            // Both ends are born inside their namespaces: the host's never sees them.
            let port = format!("{}{who}", self.prefix);
            ipcmd(&[
                "link", "add", "eth0", "netns", &ns, "type", "veth", "peer", "name", &port,
                "netns", &sw,
            ])?;
            ipcmd(&["-n", &sw, "link", "set", &port, "master", "br0"])?;
            ipcmd(&["-n", &sw, "link", "set", &port, "up"])?;
            for a in addrs {
                ipcmd(&["-n", &ns, "addr", "add", &format!("{a}/24"), "dev", "eth0"])?;
            }
            ipcmd(&["-n", &ns, "link", "set", "eth0", "up"])?;
            if who != "c" {
                self.nft(
                    &ns,
                    "table inet weir {\n  chain input {\n    type filter hook input priority 0; policy accept;\n  }\n}\n",
                )?;
            }
        }
        Ok(())
    }

    fn nft(&self, ns: &str, script: &str) -> Result<(), String> {
        run(in_ns(ns, "nft").args(["-f", "-"]), Some(script))
    }

    /// A command that runs `program` inside node `id`'s namespace.
    pub fn command_in_node(&self, id: u64, program: &str) -> Command {
        in_ns(&self.node_ns(id), program)
    }

    /// Node `to` drops every packet from node `from` (its own address, its proxy front and
    /// its proxy leg); `reset`: answers TCP with a reset instead of silence.
    pub fn cut(&self, from: u64, to: u64, reset: bool) -> Result<(), String> {
        let verdict = if reset {
            "meta l4proto tcp reject with tcp reset"
        } else {
            "drop"
        };
        self.nft(
            &self.node_ns(to),
            &format!(
                "add rule inet weir input ip saddr {{ {}, {}, {} }} {verdict}\n",
                node_ip(from),
                front_ip(from),
                leg_ip(from)
            ),
        )
    }

    /// Every node drops `percent`% of the peer packets it receives.
    pub fn loss(&self, percent: u64) -> Result<(), String> {
        let peers: Vec<String> = (1..=self.nodes)
            .flat_map(|i| [front_ip(i).to_string(), leg_ip(i).to_string()])
            .collect();
        for id in 1..=self.nodes {
            self.nft(
                &self.node_ns(id),
                &format!(
                    "add rule inet weir input ip saddr {{ {} }} numgen random mod 100 < {percent} drop\n",
                    peers.join(", ")
                ),
            )?;
        }
        Ok(())
    }

    /// Every node's interface sends at most `bytes_per_s` (a token bucket filter).
    pub fn bandwidth(&self, bytes_per_s: u64) -> Result<(), String> {
        for id in 1..=self.nodes {
            run(
                in_ns(&self.node_ns(id), "tc").args([
                    "qdisc",
                    "replace",
                    "dev",
                    "eth0",
                    "root",
                    "tbf",
                    "rate",
                    &format!("{}bit", bytes_per_s * 8),
                    "burst",
                    "16kb",
                    "latency",
                    "100ms",
                ]),
                None,
            )?;
        }
        Ok(())
    }

    /// Every grudge, loss rule and bandwidth limit removed.
    pub fn heal(&self) -> Result<(), String> {
        for id in 1..=self.nodes {
            let ns = self.node_ns(id);
            self.nft(&ns, "flush chain inet weir input\n")?;
            // No qdisc to delete is not an error worth reporting.
            let _ = run(
                in_ns(&ns, "tc").args(["qdisc", "del", "dev", "eth0", "root"]),
                None,
            );
        }
        Ok(())
    }

    /// Kills whatever still runs inside the namespaces and deletes them (the veths and the
    /// bridge go with them). Errors are ignored: this is cleanup.
    pub fn destroy(&self) {
        for ns in self.all() {
            if let Ok(out) = Command::new("ip").args(["netns", "pids", &ns]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            }
            let _ = Command::new("ip")
                .args(["netns", "del", &ns])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Deletes the namespaces of earlier runs whose process is gone (a run killed by SIGKILL
/// cannot clean up after itself).
pub fn reap_stale() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut prefixes: Vec<String> = text
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|name| name.split_once('-').map(|(p, _)| p.to_owned()))
        .filter(|p| {
            p.len() > 2 && p.starts_with("wj") && p[2..].chars().all(|c| c.is_ascii_digit())
        })
        .collect();
    prefixes.sort();
    prefixes.dedup();
    for prefix in prefixes {
        if !std::path::Path::new(&format!("/proc/{}", &prefix[2..])).exists() {
            // However many nodes it had: deleting a namespace that is not there is a no-op.
            let nodes = MAX_NODES;
            Netns { prefix, nodes }.destroy();
        }
    }
}
