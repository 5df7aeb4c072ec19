//! The node's Prometheus metrics: the counters and histograms the request path moves, and
//! the gauges read from Raft and the applied state when `/metrics` is scraped.
//!
//! Counting is one call at the place where the thing happens (`metrics::get().x.inc()`), so
//! the proposer, the log store, the state store and the client port stay free of metrics
//! plumbing. Gauges that are a view of state (role, term, indexes, sessions, held units and
//! waiters) are not kept up to date on every change: [`Metrics::scrape`] sets them from Raft's
//! metrics and the machine just before each scrape is encoded.
//!
//! Invariants:
//! - One registry per process ([`get`]): a process runs one node. (Tests that run several
//!   nodes in one process would see their sum; the cluster tests run one node per process.)
//! - Label sets are bounded: per tenant (never per limit or per session), per refusal kind
//!   (a fixed enum), per role (five values). Tenants are bounded by the state's own bounds.
//! - Counting never blocks and never fails: a counter is an atomic.

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use weir_core::machine::{Machine, Refusal, Reply};

/// A label naming one tenant.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantLabel {
    pub tenant: String,
}

/// A label naming a refusal kind (its variant name).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: String,
}

/// A label naming a tenant and a refusal kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantKindLabel {
    pub tenant: String,
    pub kind: String,
}

/// A label naming a Raft role.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RoleLabel {
    pub role: String,
}

/// The roles a node reports, as openraft names its server states.
const ROLES: [&str; 5] = ["Leader", "Follower", "Candidate", "Learner", "Shutdown"];

/// Every metric of the node.
pub struct Metrics {
    /// Log entries the proposer handed to Raft.
    pub entries_proposed: Counter,
    /// Commands per proposed entry.
    pub batch_commands: Histogram,
    /// From proposing an entry to its commands' answers (commit and apply), seconds.
    pub commit_seconds: Histogram,
    /// One fsync-backed commit of the log store, seconds.
    pub fsync_seconds: Histogram,
    /// Commands waiting in the proposer queue when it last took a batch.
    pub proposer_queue_depth: Gauge,
    /// Entries a data group's proposer made without one of the node's shared in-flight
    /// slots, having waited `SHARED_WAIT_MAX` for one in vain (`server/proposer.rs`).
    pub entries_unshared: Counter,
    /// Segment files of the node's log (every group's, on a node of several).
    pub log_segments: Gauge,
    /// Raft groups moved out of the log's oldest segment so it could be deleted.
    pub log_moves: Counter,
    /// Refusals answered to clients, by kind.
    pub refusals: Family<KindLabel, Counter>,
    /// Open client-port connections.
    pub connections: Gauge,
    /// Pushed events a connection's forwarder missed (it fell behind the broadcast).
    pub pushes_dropped: Counter,
    /// Bytes of the latest snapshot built or installed.
    pub snapshot_bytes: Gauge,
    /// Building a snapshot (freezing the state and encoding it into the snapshot file,
    /// fsync included), seconds.
    pub snapshot_build_seconds: Histogram,
    /// Of a snapshot's build, the state lock held to freeze the state (applies wait), seconds.
    pub snapshot_freeze_seconds: Histogram,
    /// Installing a snapshot (decoding and checking it), seconds.
    pub snapshot_install_seconds: Histogram,
    /// 1 for the node's current role, 0 for the others.
    pub role: Family<RoleLabel, Gauge>,
    pub term: Gauge,
    pub commit_index: Gauge,
    pub applied_index: Gauge,
    pub sessions: Gauge,
    /// Units held now, per tenant.
    pub held_units: Family<TenantLabel, Gauge>,
    /// Tickets queued now, per tenant.
    pub waiters: Family<TenantLabel, Gauge>,
    /// Would-be refusals of the tenant's shadow limits, by the refusal's kind (`Busy`,
    /// `TooLarge`, `AtCapacity`): the machine's counts, summed over the tenant's limits,
    /// each counted since it was defined (so the sum drops when a shadow limit is removed).
    pub shadow_refusals: Family<TenantKindLabel, Gauge>,
    /// HTTP requests served.
    pub http_requests: Counter,
    /// Descriptors of Envoy `ShouldRateLimit` requests answered, by outcome (`ok`,
    /// `over_limit`, `unlimited`, `unmatched`: no limit of the domain matched, answered OK).
    pub rls_descriptors: Family<KindLabel, Counter>,
    /// Envoy `ShouldRateLimit` requests this node decided from its own token leases,
    /// without a log entry.
    pub rls_local_decisions: Counter,
    /// Token leases this node's Envoy service holds now.
    pub rls_leases: Gauge,
    registry: Registry,
    /// Serializes scrapes: a refresh clears the per-tenant families and sets them again.
    scrape: Mutex<()>,
}

/// The process's metrics.
pub fn get() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

/// Latency buckets: 100 µs to about 3 s, doubling (a commit is one fsync plus a round trip;
/// an election stalls commits for about a second).
fn latency_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.000_1, 2.0, 16)
}

impl Metrics {
    fn new() -> Metrics {
        let mut m = Metrics {
            entries_proposed: Counter::default(),
            // 1 to 2,048 commands: the proposer's batch_max is at most ENTRY_COMMANDS_MAX.
            batch_commands: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            commit_seconds: Histogram::new(latency_buckets()),
            fsync_seconds: Histogram::new(latency_buckets()),
            proposer_queue_depth: Gauge::default(),
            entries_unshared: Counter::default(),
            log_segments: Gauge::default(),
            log_moves: Counter::default(),
            refusals: Family::default(),
            connections: Gauge::default(),
            pushes_dropped: Counter::default(),
            snapshot_bytes: Gauge::default(),
            snapshot_build_seconds: Histogram::new(latency_buckets()),
            snapshot_freeze_seconds: Histogram::new(latency_buckets()),
            snapshot_install_seconds: Histogram::new(latency_buckets()),
            role: Family::default(),
            term: Gauge::default(),
            commit_index: Gauge::default(),
            applied_index: Gauge::default(),
            sessions: Gauge::default(),
            held_units: Family::default(),
            waiters: Family::default(),
            shadow_refusals: Family::default(),
            http_requests: Counter::default(),
            rls_descriptors: Family::default(),
            rls_local_decisions: Counter::default(),
            rls_leases: Gauge::default(),
            registry: Registry::default(),
            scrape: Mutex::new(()),
        };
        let mut r = Registry::with_prefix("weir");
        // Registers each listed field of `m` under its own name, in this order.
        macro_rules! register {
            ($($field:ident: $help:literal,)*) => {
                $(r.register(stringify!($field), $help, m.$field.clone());)*
            };
        }
        register! {
            entries_proposed: "Log entries proposed by this node's proposer",
            batch_commands: "Commands per proposed log entry",
            commit_seconds: "Time from proposing an entry to its commands' answers",
            fsync_seconds: "Time of one durable commit of the log store",
            proposer_queue_depth: "Commands waiting in the proposer queue",
            entries_unshared: "Entries a data group's proposer made without a shared \
                               in-flight slot, after waiting its bound for one",
            log_segments: "Segment files of the node's log (shared by its groups on a \
                           node of several)",
            log_moves: "Raft groups whose few live entries were written again so the \
                        log's oldest segment could be deleted",
            refusals: "Refusals answered to clients, by kind",
            connections: "Open client-port connections",
            pushes_dropped: "Pushed events missed by slow client connections",
            snapshot_bytes: "Size of the latest snapshot built or installed",
            snapshot_build_seconds: "Time to build a snapshot",
            snapshot_freeze_seconds: "Time the state lock was held to build a snapshot (applies waited)",
            snapshot_install_seconds: "Time to install a snapshot",
            role: "1 for this node's Raft role",
            term: "Current Raft term",
            commit_index: "Highest log index known committed",
            applied_index: "Highest log index applied to the state machine",
            sessions: "Open sessions",
            held_units: "Permit units held, per tenant",
            waiters: "Queued tickets, per tenant",
            shadow_refusals: "Requests the tenant's shadow limits would have refused, by kind, \
                              since each was defined",
            http_requests: "HTTP requests served",
            rls_descriptors: "Descriptors of Envoy ShouldRateLimit requests, by outcome",
            rls_local_decisions: "Envoy ShouldRateLimit requests decided from this node's \
                                  token leases, without a log entry",
            rls_leases: "Token leases this node's Envoy service holds",
        }
        m.registry = r;
        m
    }

    /// Counts `reply` if it is a refusal.
    pub fn replied(&self, reply: &Reply) {
        if let Reply::Refused(r) = reply {
            self.refusals
                .get_or_create(&KindLabel {
                    kind: refusal_kind(r).into(),
                })
                .inc();
        }
    }

    /// Counts one proposed entry of `commands`, and the `queued` commands left behind it.
    pub fn proposed(&self, commands: usize, queued: usize) {
        self.entries_proposed.inc();
        self.batch_commands.observe(commands as f64);
        self.proposer_queue_depth.set(queued as i64);
    }

    /// Records a snapshot of `bytes` built in `elapsed`, of which the state lock was held
    /// for `frozen` (applies waited that long).
    pub fn snapshot_built(&self, bytes: usize, frozen: Duration, elapsed: Duration) {
        self.snapshot_bytes.set(bytes as i64);
        observe(&self.snapshot_freeze_seconds, frozen);
        observe(&self.snapshot_build_seconds, elapsed);
    }

    /// Records a snapshot of `bytes` installed (decoded and checked) in `elapsed`.
    pub fn snapshot_installed(&self, bytes: usize, elapsed: Duration) {
        self.snapshot_bytes.set(bytes as i64);
        observe(&self.snapshot_install_seconds, elapsed);
    }

    /// A guard that counts one open connection while it lives.
    pub fn connection(&self) -> ConnectionGuard {
        self.connections.inc();
        ConnectionGuard
    }

    /// Sets the view gauges from Raft's metrics and the machine, then encodes every metric
    /// in Prometheus' text format.
    pub fn scrape(&self, raft: &RaftView, machine: &Machine) -> String {
        let _one_at_a_time = crate::lock::lock(&self.scrape);
        for role in ROLES {
            self.role
                .get_or_create(&RoleLabel { role: role.into() })
                .set(i64::from(raft.role == role));
        }
        self.term.set(raft.term as i64);
        self.commit_index.set(raft.commit_index as i64);
        self.applied_index.set(machine.applied_index() as i64);
        self.sessions.set(machine.session_count() as i64);
        self.held_units.clear();
        self.waiters.clear();
        self.shadow_refusals.clear();
        for tenant in machine.tenant_names() {
            let (held, waiting) = machine
                .limits(&tenant)
                .iter()
                .fold((0u64, 0u64), |(h, w), l| (h + l.in_use, w + l.waiting));
            let shadow = machine.tenant_shadow_refusals(&tenant);
            if shadow.total() > 0 {
                let kinds = [
                    ("Busy", shadow.busy),
                    ("TooLarge", shadow.too_large),
                    ("AtCapacity", shadow.at_capacity),
                ];
                for (kind, n) in kinds {
                    let label = TenantKindLabel {
                        tenant: tenant.clone(),
                        kind: kind.into(),
                    };
                    self.shadow_refusals.get_or_create(&label).set(n as i64);
                }
            }
            let label = TenantLabel { tenant };
            self.held_units.get_or_create(&label).set(held as i64);
            self.waiters.get_or_create(&label).set(waiting as i64);
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        classic_text(&text)
    }
}

/// Prometheus' classic text format (0.0.4) from the crate's OpenMetrics text: a counter's
/// `# HELP` and `# TYPE` name its `_total` samples, and there is no `# EOF`. The classic
/// format is what `promtool check metrics` and every Prometheus version read.
fn classic_text(open_metrics: &str) -> String {
    let counters: std::collections::BTreeSet<&str> = open_metrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(open_metrics.len());
    for line in open_metrics.lines() {
        if line == "# EOF" {
            continue;
        }
        let comment = ["# HELP ", "# TYPE "]
            .into_iter()
            .find(|p| line.starts_with(p));
        match comment {
            Some(prefix) => {
                let rest = &line[prefix.len()..];
                let name = rest.split(' ').next().unwrap_or("");
                if counters.contains(name) {
                    out.push_str(&format!("{prefix}{name}_total{}", &rest[name.len()..]));
                } else {
                    out.push_str(line);
                }
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// What a scrape needs of Raft's metrics.
pub struct RaftView {
    /// openraft's server state, as its `Debug` names it (`Leader`, `Follower`, …).
    pub role: String,
    pub term: u64,
    pub commit_index: u64,
}

/// Decrements the open-connection gauge when dropped.
pub struct ConnectionGuard;

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        get().connections.dec();
    }
}

/// Observes `elapsed` in `histogram`, in seconds.
pub fn observe(histogram: &Histogram, elapsed: Duration) {
    histogram.observe(elapsed.as_secs_f64());
}

/// A refusal's kind: its variant name, as the HTTP errors name it too.
pub fn refusal_kind(r: &Refusal) -> &'static str {
    match r {
        Refusal::UnknownLimit { .. } => "UnknownLimit",
        Refusal::UnknownSession { .. } => "UnknownSession",
        Refusal::Halted { .. } => "Halted",
        Refusal::TooLarge { .. } => "TooLarge",
        Refusal::Busy { .. } => "Busy",
        Refusal::LimitRemoved { .. } => "LimitRemoved",
        Refusal::QueueFull { .. } => "QueueFull",
        Refusal::TicketReleased { .. } => "TicketReleased",
        Refusal::TooManyRuns { .. } => "TooManyRuns",
        Refusal::BudgetExhausted { .. } => "BudgetExhausted",
        Refusal::Conflict { .. } => "Conflict",
        Refusal::Invalid(_) => "Invalid",
        Refusal::AtCapacity { .. } => "AtCapacity",
        Refusal::Moved { .. } => "Moved",
        Refusal::Placed { .. } => "Placed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classic_text_names_counters_by_their_samples_and_drops_eof() {
        let om = "# HELP x_ops Ops.\n# TYPE x_ops counter\nx_ops_total 3\n# HELP x_g G.\n# TYPE x_g gauge\nx_g 1\n# EOF\n";
        assert_eq!(
            classic_text(om),
            "# HELP x_ops_total Ops.\n# TYPE x_ops_total counter\nx_ops_total 3\n# HELP x_g G.\n# TYPE x_g gauge\nx_g 1\n"
        );
    }
}
