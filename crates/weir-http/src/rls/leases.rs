//! [`NodeLeases`]: the token leases this node's service holds for the descriptors it is
//! asked often, so it decides their requests locally, without a log entry (the machine's
//! essay, "Token leases", has the rules and why G1 holds in spend time; the holder's half is
//! `weir_client::Leased`, used here as a client uses it).
//!
//! - **Who holds.** One session per caller (token) of this node and group, opened through
//!   that caller's internal client of the tenant's group, so a lease is the caller's own
//!   write, authorized as its takes are, in the group that decides its tenant; each (tenant,
//!   limit, key) part the caller asks for is its own lease in it.
//! - **When.** A part asked more than [`HOT_ASKS`] times within one [`SWEEP_EVERY`] is hot:
//!   a lease is opened for it in the background (asking the limit's whole rate and burst;
//!   the machine grants at most its leasable share, shared fairly among holders, and the
//!   lease's renewals follow demand). A part of a limit that does not lease (no rate, a
//!   concurrency cap, shadow mode) is never leased.
//! - **Bounds.** At most [`LEASES_MAX`] leases per node and [`DEMAND_MAX`] parts counted per
//!   window. A lease not asked for [`COLD_AFTER`] is given back (its tokens return); one that
//!   ended (its session expired, a halt refused its renewal) is forgotten, and the part is
//!   decided by the cluster until it is hot again.
//! - **Deciding.** A request is decided locally only when every one of its parts has a lease
//!   with room: all parts take from their local buckets or none does
//!   (`Leased::try_take_all`), and every lease stops spending at its session's belief
//!   deadline; otherwise the request goes to the cluster, whole, as without leases.
//!
//! Never: a lease held past its session's deadline, a part taken locally while another part
//! of the same request is asked of the cluster, a lease opened while this node's service
//! is configured without them (`grpc_local_leases = false`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use weir_client::{Client, LeaseBucket, LeaseOptions, Leased, Session};
use weir_core::machine::{Machine, Part};
use weir_proto::task::AbortOnDrop;
use weir_server::metrics;

/// TTL of a caller's lease session: its keep-alives and its leases' renewals go every fifth
/// of it, and a holder cut off from the cluster stops spending within it.
pub const LEASE_SESSION_TTL: Duration = Duration::from_secs(5);

/// Asks of one part within one window past which it is hot and gets a lease.
pub const HOT_ASKS: u32 = 16;

/// The window of the demand count, and how often leases are looked over.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// A lease not asked for this long is given back.
pub const COLD_AFTER: Duration = Duration::from_secs(5);

/// Most leases this node holds at once (each renews about once a second: an entry).
pub const LEASES_MAX: usize = 256;

/// Most parts whose asks are counted in one window; others wait for the next.
pub const DEMAND_MAX: usize = 4_096;

/// A part of a caller's requests: (principal, tenant, limit, key).
type PartKey = (String, String, String, Option<String>);

/// The lease session of a principal in one group (`None`: the node's default group): a
/// session is one group's, so a principal leasing in two groups has one in each.
type SessionKey = (String, Option<u64>);

/// A lease held, in which group's session, and when it was last asked for.
pub struct Held {
    lease: Leased,
    group: Option<u64>,
    asked: Mutex<Instant>,
}

impl Held {
    /// The local bucket now.
    pub fn bucket(&self) -> LeaseBucket {
        self.lease.bucket()
    }

    /// Puts `units` back in the local bucket; `false` when the lease no longer decides.
    pub fn give_back(&self, units: u32) -> bool {
        self.lease.give_back(units)
    }
}

#[derive(Default)]
struct Inner {
    leases: HashMap<PartKey, Arc<Held>>,
    /// Parts whose lease is being opened, with the group of the session it opens in.
    opening: HashMap<PartKey, Option<u64>>,
    /// Asks of each part in the current window.
    demand: HashMap<PartKey, u32>,
}

/// The node's leases (module doc).
pub struct NodeLeases {
    on: bool,
    inner: Arc<Mutex<Inner>>,
    /// Each caller's lease session, by principal and group; a tokio lock, held across an
    /// open so one caller's concurrent first leases in a group share one session.
    sessions: Arc<tokio::sync::Mutex<HashMap<SessionKey, Arc<Session>>>>,
    _sweep: Option<AbortOnDrop>,
}

/// A lease to open: for whom, on what, through which client.
pub struct Opening {
    key: PartKey,
    client: Client,
    options: LeaseOptions,
}

impl NodeLeases {
    /// Leases on (`on`) or off; the sweep runs on the current runtime when on.
    pub fn new(on: bool) -> NodeLeases {
        let inner = Arc::new(Mutex::new(Inner::default()));
        let sessions = Arc::new(tokio::sync::Mutex::new(HashMap::new()));
        let sweep = (on && tokio::runtime::Handle::try_current().is_ok()).then(|| {
            AbortOnDrop(tokio::spawn(sweep(
                Arc::downgrade(&inner),
                Arc::downgrade(&sessions),
            )))
        });
        NodeLeases {
            on,
            inner,
            sessions,
            _sweep: sweep,
        }
    }

    /// Counts the asks of `parts` by `principal` in `tenant`, read on `machine`: the lease of
    /// each part when every part has one (`None` otherwise), and the leases to open for the
    /// parts that just became hot (given `client`, the caller's).
    pub fn note(
        &self,
        principal: &str,
        client: &Client,
        tenant: &str,
        parts: &[Part],
        machine: &Machine,
    ) -> (Option<Vec<Arc<Held>>>, Vec<Opening>) {
        if !self.on {
            return (None, Vec::new());
        }
        let now = Instant::now();
        let mut inner = weir_server::lock::lock(&self.inner);
        let mut held = Vec::with_capacity(parts.len());
        let mut opens = Vec::new();
        for p in parts {
            let key: PartKey = (
                principal.to_owned(),
                tenant.to_owned(),
                p.limit.clone(),
                p.key.clone(),
            );
            if let Some(h) = inner.leases.get(&key) {
                *weir_server::lock::lock(&h.asked) = now;
                held.push(h.clone());
                continue;
            }
            let counted = inner.demand.len() < DEMAND_MAX || inner.demand.contains_key(&key);
            if !counted {
                continue;
            }
            let asks = inner.demand.entry(key.clone()).or_insert(0);
            *asks += 1;
            let hot = *asks == HOT_ASKS + 1;
            let room = inner.leases.len() + inner.opening.len() < LEASES_MAX;
            if hot
                && room
                && !inner.opening.contains_key(&key)
                && let Some(options) = lease_options(machine, tenant, p)
            {
                inner.opening.insert(key.clone(), client.group());
                opens.push(Opening {
                    key,
                    client: client.clone(),
                    options,
                });
            }
        }
        let covered = held.len() == parts.len() && !parts.is_empty();
        (covered.then_some(held), opens)
    }

    /// The lease `principal` holds on (tenant, limit, key), if any.
    pub fn held(&self, principal: &str, tenant: &str, part: &Part) -> Option<Arc<Held>> {
        if !self.on {
            return None;
        }
        let key: PartKey = (
            principal.to_owned(),
            tenant.to_owned(),
            part.limit.clone(),
            part.key.clone(),
        );
        weir_server::lock::lock(&self.inner)
            .leases
            .get(&key)
            .cloned()
    }

    /// Opens the leases of `opens` in the background.
    pub fn open(&self, opens: Vec<Opening>) {
        for o in opens {
            tokio::spawn(open(Arc::downgrade(&self.inner), self.sessions.clone(), o));
        }
    }

    /// Takes every part's units from its lease, all or none: whether they were (the
    /// request is then decided), counted in `weir_rls_local_decisions_total`.
    pub fn take(held: &[Arc<Held>], parts: &[Part]) -> bool {
        let takes: Vec<(&Leased, u32)> = held
            .iter()
            .zip(parts)
            .map(|(h, p)| (&h.lease, local_units(p)))
            .collect();
        let taken = Leased::try_take_all(&takes);
        if taken {
            metrics::get().rls_local_decisions.inc();
        }
        taken
    }
}

/// What a request decided locally takes from `part`'s local bucket: the part's units (the
/// hits its descriptor asked). The deterministic simulator's lease holder decides its
/// requests of several hits by this rule too.
pub fn local_units(part: &Part) -> u32 {
    // PLANTED(rls-lease-one-hit): one token a part, whatever the request's hits.
    if weir_core::planted::is(weir_core::planted::Plant::RlsLeaseOneHit) {
        return 1;
    }
    part.units
}

/// What a lease on `part` asks: the limit's whole rate and burst (the machine grants its
/// leasable share); `None` for a limit that does not lease.
fn lease_options(machine: &Machine, tenant: &str, part: &Part) -> Option<LeaseOptions> {
    let bucket = machine.bucket_now(tenant, &part.limit, part.key.as_deref())?;
    let spec = &bucket.spec;
    if !spec.rates() || spec.caps_concurrency() || spec.shadow {
        return None;
    }
    let mut options = LeaseOptions::new(tenant, &part.limit, spec.per_second, spec.burst);
    options.key = part.key.clone();
    Some(options)
}

/// Opens one lease in the caller's lease session (opening that first when it has none or
/// it ended), then holds it; a failure leaves the part to the cluster until it is hot
/// again.
async fn open(
    inner: Weak<Mutex<Inner>>,
    sessions: Arc<tokio::sync::Mutex<HashMap<SessionKey, Arc<Session>>>>,
    o: Opening,
) {
    let group = o.client.group();
    let holder: SessionKey = (o.key.0.clone(), group);
    let leased = {
        let mut sessions = sessions.lock().await;
        let session = match sessions.get(&holder) {
            Some(s) => Ok(s.clone()),
            None => Session::open(&o.client, LEASE_SESSION_TTL)
                .await
                .map(Arc::new),
        };
        match session {
            Ok(session) => {
                sessions.insert(holder.clone(), session.clone());
                let leased = session.lease(o.options.clone()).await;
                if leased.is_err() {
                    // Perhaps the session is gone: the next lease opens another.
                    sessions.remove(&holder);
                }
                leased.map_err(|e| e.to_string())
            }
            Err(e) => Err(e.to_string()),
        }
    };
    let Some(inner) = inner.upgrade() else { return };
    let mut inner = weir_server::lock::lock(&inner);
    inner.opening.remove(&o.key);
    match leased {
        Ok(lease) => {
            let held = Held {
                lease,
                group,
                asked: Mutex::new(Instant::now()),
            };
            inner.leases.insert(o.key, Arc::new(held));
            metrics::get().rls_leases.set(inner.leases.len() as i64);
        }
        Err(why) => tracing::debug!(
            "no lease of {}/{} for this node's service: {why}",
            o.options.tenant,
            o.options.limit
        ),
    }
}

/// Every [`SWEEP_EVERY`]: a new demand window; leases cold or over are dropped (a dropped
/// lease gives its tokens back), and so are the sessions left with none.
async fn sweep(
    inner: Weak<Mutex<Inner>>,
    sessions: Weak<tokio::sync::Mutex<HashMap<SessionKey, Arc<Session>>>>,
) {
    loop {
        tokio::time::sleep(SWEEP_EVERY).await;
        let (Some(inner), Some(sessions)) = (inner.upgrade(), sessions.upgrade()) else {
            return;
        };
        let now = Instant::now();
        let (dropped, holders) = {
            let mut inner = weir_server::lock::lock(&inner);
            inner.demand.clear();
            let gone: Vec<PartKey> = inner
                .leases
                .iter()
                .filter(|(_, h)| {
                    h.lease.is_over()
                        || now.duration_since(*weir_server::lock::lock(&h.asked)) > COLD_AFTER
                })
                .map(|(k, _)| k.clone())
                .collect();
            let dropped: Vec<Arc<Held>> =
                gone.iter().filter_map(|k| inner.leases.remove(k)).collect();
            metrics::get().rls_leases.set(inner.leases.len() as i64);
            let holders: HashSet<SessionKey> = inner
                .leases
                .iter()
                .map(|(k, h)| (k.0.clone(), h.group))
                .chain(inner.opening.iter().map(|(k, g)| (k.0.clone(), *g)))
                .collect();
            (dropped, holders)
        };
        // Dropped outside the lock: each gives its lease back in the background.
        drop(dropped);
        let mut sessions = sessions.lock().await;
        sessions.retain(|holder, _| holders.contains(holder));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::machine::{Batch, Definition, Leadership};

    /// A machine with `leased` (10 a second, burst 20), `held` (a concurrency cap too) and
    /// `tried` (shadow) in tenant `t`, and keyed `keys` (5 a second per key).
    fn machine() -> Machine {
        let def = |name: &str, concurrent, shadow, keyed| Definition {
            tenant: "t".into(),
            name: name.into(),
            concurrent,
            per_second: if keyed { 5.0 } else { 10.0 },
            burst: Some(if keyed { 5 } else { 20 }),
            keyed,
            keys_max: keyed.then_some(100),
            shadow,
        };
        let batch = Batch {
            leadership: Leadership::default(),
            clock_ms: 0,
            wall_ms: 0,
            commands: vec![
                def("leased", 0, false, false).into_command(),
                def("held", 2, false, false).into_command(),
                def("tried", 0, true, false).into_command(),
                def("keys", 0, false, true).into_command(),
            ],
        };
        let mut machine = Machine::new();
        machine.apply(1, &batch);
        machine
    }

    fn part(limit: &str, key: Option<&str>) -> Part {
        Part {
            limit: limit.into(),
            key: key.map(str::to_owned),
            units: 1,
        }
    }

    #[test]
    fn a_part_asked_past_the_hot_mark_is_leased_once_at_the_limits_rate_and_burst() {
        let (m, client, leases) = (machine(), Client::new(vec![]), NodeLeases::new(true));
        let parts = [part("leased", None), part("keys", Some("k1"))];
        for _ in 0..HOT_ASKS {
            let (held, opens) = leases.note("p", &client, "t", &parts, &m);
            assert!(held.is_none() && opens.is_empty());
        }
        let (held, opens) = leases.note("p", &client, "t", &parts, &m);
        assert!(held.is_none());
        let asked: Vec<(String, Option<String>, f64, u64)> = opens
            .iter()
            .map(|o| {
                let x = &o.options;
                (x.limit.clone(), x.key.clone(), x.rate_per_s, x.cap)
            })
            .collect();
        assert_eq!(
            asked,
            [
                ("leased".into(), None, 10.0, 20),
                ("keys".into(), Some("k1".into()), 5.0, 5)
            ]
        );
        // Being opened: not opened twice; another caller's asks are its own.
        assert!(leases.note("p", &client, "t", &parts, &m).1.is_empty());
        assert!(leases.note("q", &client, "t", &parts, &m).1.is_empty());
    }

    #[test]
    fn a_limit_that_does_not_lease_is_never_leased_and_leases_off_lease_nothing() {
        let (m, client) = (machine(), Client::new(vec![]));
        let on = NodeLeases::new(true);
        let off = NodeLeases::new(false);
        let parts = [part("held", None), part("tried", None), part("gone", None)];
        for _ in 0..3 * HOT_ASKS {
            assert!(on.note("p", &client, "t", &parts, &m).1.is_empty());
            let (held, opens) = off.note("p", &client, "t", &[part("leased", None)], &m);
            assert!(held.is_none() && opens.is_empty());
        }
        assert!(off.held("p", "t", &part("leased", None)).is_none());
    }

    #[test]
    fn leases_being_opened_and_held_stay_within_the_nodes_bound() {
        let (m, client, leases) = (machine(), Client::new(vec![]), NodeLeases::new(true));
        let mut opened = 0;
        for k in 0..LEASES_MAX + 10 {
            let parts = [part("keys", Some(&format!("k{k}")))];
            for _ in 0..=HOT_ASKS {
                opened += leases.note("p", &client, "t", &parts, &m).1.len();
            }
        }
        assert_eq!(opened, LEASES_MAX);
    }
}
