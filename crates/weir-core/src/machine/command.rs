//! What the log carries: an entry is one leader-stamped [`Batch`] of [`Command`]s, and the
//! identifiers the commands use.
//!
//! Everything here is plain data, serialized with the pinned codec into log entries and
//! snapshots. Field order is part of the format: append fields and variants, never reorder.
//!
//! The argument rules a command can break on its own, without the state (name lengths,
//! unit ranges, weights), are checked in `machine::validate`; this file knows no
//! refusal and no state, only the shapes. What each command names and is (its tenant,
//! session, control, size bound, effect: [`Command::describe`]) is stated once, in the
//! child module `describe`.
//!
//! Keyed limits and requests of several parts have commands of their own, [`Definition`]
//! and [`AcquireParts`]; the older [`Command::DefineLimit`] and [`Command::Acquire`] stay in
//! the log format and mean a definition that is neither keyed nor shadow
//! ([`Definition::from_legacy`]) and a request of one keyless part (`From<&Acquire>`).

mod describe;

use serde::{Deserialize, Serialize};

pub use describe::{Control, Description, Effect};

/// A session's id. Zero is never a session; no two live sessions share one.
///
/// - Opened by [`Command::OpenSessionFor`] (every session the edge opens): the entry's
///   random `nonce`, drawn by the proposing node from the OS, so knowing one session's id
///   says nothing about another's. Should the nonce be zero or a live session's id, the
///   machine steps to the next candidate with [`next_session_candidate`] (deterministic:
///   every replica picks the same id). A closed session's id could come back only by a
///   64-bit coincidence.
/// - Opened by the legacy [`Command::OpenSession`] (entries written before nonces, still in
///   old logs): the machine's counter, starting at 1, with the same collision step.
pub type SessionId = u64;

/// Who opened a session: sha256 of the opening principal's id (itself the sha256 hex of its
/// token). A fixed 32 bytes whatever the id's length, so it costs every `OpenSessionFor`
/// entry and every session record in a snapshot the same bounded size (G8). `None` in a
/// session means it was opened without authentication (no tokens configured, or before
/// owners were recorded): then any principal may act on it.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Owner(pub [u8; 32]);

impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The first 8 bytes are enough to tell owners apart in a log line.
        write!(f, "Owner(")?;
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "…)")
    }
}

/// The id tried after `candidate` when it cannot be used (zero, or a live session's): a
/// splitmix64 step, a bijection on u64 with no short cycles through the few live ids.
pub fn next_session_candidate(candidate: SessionId) -> SessionId {
    let mut z = candidate.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A ticket's id: chosen by the client, unique within its session. Any u64.
pub type TicketId = u64;

/// A permit's fence: strictly increasing across the whole cluster, never zero. The first
/// grant an entry makes takes the entry's log index when that is above every earlier fence;
/// further grants in the same batched entry take the next integers. So on an unbatched log
/// the fence is exactly the granting entry's index, and in every case a later grant has a
/// larger fence, which is what a downstream resource needs to refuse a stale holder.
pub type Fence = u64;

/// A limit's internal id: from a counter, starting at 1, never reused. Clients name limits
/// by (tenant, name); the id only links tickets to limits inside the state.
pub type LimitId = u64;

/// Who stamped an entry: the Raft leadership (term and node) and the proposer incarnation
/// that made the batch. The log clock freezes whenever this changes (see
/// [`crate::machine::clock`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Leadership {
    pub term: u64,
    pub node: u64,
    /// Drawn by the proposer when it starts (its start time, Unix ns). openraft lets a
    /// restarted leader resume its term without an election, and the restarted process's
    /// monotonic clock starts over: the incarnation makes that a new stamp source too.
    pub incarnation: u64,
}

/// One log entry's worth of commands, as the leader's proposer stamped it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Batch {
    /// The leadership that proposed this batch.
    pub leadership: Leadership,
    /// The proposer's clock at stamping, in ms: within one leadership it advances at the
    /// rate of the leader's monotonic clock and never goes back. Across leaderships its
    /// value means nothing to the machine: only differences within one leadership count.
    pub clock_ms: u64,
    /// The leader's wall clock (Unix ms) at stamping. Shown to people (admitted-at), never
    /// used to decide anything.
    pub wall_ms: u64,
    /// The commands, applied in order.
    pub commands: Vec<Command>,
}

/// A waiter's place in line: `level` first (higher first), then weighted fairness across
/// `fairness_key`s of one level, first come within a key.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Priority {
    pub level: i32,
    pub fairness_key: String,
    /// Share of service relative to other keys of the same level; at least 1.
    pub fairness_weight: u32,
}

impl Default for Priority {
    fn default() -> Self {
        Priority {
            level: 0,
            fairness_key: String::new(),
            fairness_weight: 1,
        }
    }
}

/// An optional setting in `SetTenant`: leave it, set it, or clear it (no ceiling).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Change<T> {
    #[default]
    Keep,
    Set(T),
    Clear,
}

impl<T: Copy> Change<T> {
    /// The setting after this change is applied to `current`.
    pub fn applied_to(self, current: Option<T>) -> Option<T> {
        match self {
            Change::Keep => current,
            Change::Set(v) => Some(v),
            Change::Clear => None,
        }
    }
}

/// The scope of a halt inside its tenant.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum HaltScope {
    /// The whole tenant.
    Tenant,
    /// One agent of the tenant.
    Agent(String),
}

impl HaltScope {
    /// Whether a waiter or holder of `agent` is inside this scope.
    pub fn covers(&self, agent: Option<&str>) -> bool {
        match self {
            HaltScope::Tenant => true,
            HaltScope::Agent(a) => agent == Some(a.as_str()),
        }
    }
}

impl std::fmt::Display for HaltScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HaltScope::Tenant => f.write_str("tenant"),
            HaltScope::Agent(a) => write!(f, "agent {a}"),
        }
    }
}

/// A request for a permit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Acquire {
    pub session: SessionId,
    pub ticket: TicketId,
    pub tenant: String,
    pub limit: String,
    /// Units wanted, at least 1.
    pub units: u32,
    pub priority: Priority,
    /// The agent acting, for agent-scoped halts.
    pub agent: Option<String>,
    /// Queue when the limit has no room; `false` answers `Busy` instead.
    pub wait: bool,
}

/// A settlement of one pass of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settle {
    pub tenant: String,
    pub run: String,
    pub epoch: u64,
    /// The period charged; `None` charges no period (the receipt is still kept).
    pub period: Option<String>,
    pub tokens: u64,
    pub minor_units: u64,
    /// Also free the run's slot.
    pub release_slot: bool,
}

/// Every write a client or operator can make. Each is applied by [`crate::machine::Machine::apply`] and answered
/// by one [`crate::machine::Reply`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Command {
    /// Define a limit, or change an existing one's spec (holders keep their permits).
    DefineLimit {
        tenant: String,
        name: String,
        /// Most units held at once; 0 = no cap (the limit only rates).
        concurrent: u32,
        /// Token refill per second; 0 = no rate.
        per_second: f64,
        /// Bucket size in tokens; `None` = `max(ceil(per_second), 1)`.
        burst: Option<u64>,
    },
    /// Remove a limit: waiters are refused `LimitRemoved`, new acquires see `UnknownLimit`,
    /// and the limit disappears when its last holder releases.
    RemoveLimit {
        tenant: String,
        name: String,
    },
    /// Open a session with a TTL (ms). What a client sends; the edge proposes it as
    /// [`Command::OpenSessionFor`] (owner and nonce filled in). Applied as such it is the
    /// legacy form of old logs: no owner, the id from the machine's counter.
    OpenSession {
        ttl_ms: u64,
    },
    /// Extend a session's lease by its TTL from now.
    KeepAlive {
        session: SessionId,
    },
    /// Close a session: release its permits and withdraw its tickets.
    CloseSession {
        session: SessionId,
    },
    Acquire(Acquire),
    /// Free a permit, or withdraw a queued ticket. Idempotent.
    Release {
        session: SessionId,
        ticket: TicketId,
    },
    /// Set a tenant's ceilings.
    SetTenant {
        tenant: String,
        max_running: Change<u32>,
        budget_tokens: Change<u64>,
        budget_minor: Change<u64>,
    },
    /// Admit a run into its tenant's running set.
    Reserve {
        tenant: String,
        run: String,
        agent: Option<String>,
        period: Option<String>,
        /// A budget hold, in tokens: the most this run may spend in `period` (G6). With a
        /// hold the reserve is admitted only while settled + standing holds + this hold fit
        /// the budget; without one, only while the spend has not reached it.
        hold_tokens: Option<u64>,
        /// A budget hold in minor currency units; as `hold_tokens`.
        hold_minor: Option<u64>,
    },
    /// Free a run's slot. Idempotent.
    ReleaseRun {
        tenant: String,
        run: String,
    },
    Settle(Settle),
    SetHalt {
        tenant: String,
        scope: HaltScope,
        reason: String,
    },
    ClearHalt {
        tenant: String,
        scope: HaltScope,
    },
    /// Nothing but the passage of time: the proposer sends it while sessions or waiting rate
    /// tickets exist, so expiries and refills happen without client traffic.
    Tick,
    /// Open a session with a TTL (ms) for `owner`, its id taken from `nonce` (see
    /// [`SessionId`]). Only the edge writes the owner and the nonce: whatever a client puts
    /// in them is replaced by the connection's principal and a fresh random draw before
    /// the command is proposed, so they come from the entry and the machine stays
    /// deterministic.
    OpenSessionFor {
        ttl_ms: u64,
        owner: Option<Owner>,
        nonce: u64,
    },
    /// Define a limit, or change an existing one's spec: [`Command::DefineLimit`] with
    /// keys and shadow mode (see [`Definition`]). Whether a limit is keyed is fixed when it
    /// is first defined.
    Define(Definition),
    /// An acquire or take of one or more parts, each (limit, key, units): granted on every
    /// part in one entry under one fence, or on none (see [`AcquireParts`]).
    AcquireParts(AcquireParts),
    /// Settles a take granted with `estimate`: `cost` tokens replace the estimate on every
    /// rate part. Below the estimate the difference returns to the bucket (never above its
    /// burst); above it the difference is charged (the bucket floors at empty) and recorded
    /// as an overrun. Idempotent by ticket.
    SettleTake {
        session: SessionId,
        ticket: TicketId,
        cost: u64,
    },
    /// Set a tenant's definitions in one entry: create and change those given (as `Define`
    /// does; one equal to the limit's spec is left alone), and with `prune` remove the
    /// tenant's other limits (as `RemoveLimit` does). All or nothing: a definition that
    /// cannot apply refuses the whole command, naming it. Answered
    /// [`crate::machine::Reply::LimitsApplied`]. Bounded by
    /// [`crate::bounds::APPLY_DEFINITIONS_MAX`] and [`crate::bounds::APPLY_COMMAND_BYTES_MAX`].
    ApplyLimits {
        tenant: String,
        /// Each names a distinct limit of `tenant` (its own `tenant` field is `tenant`).
        definitions: Vec<Definition>,
        prune: bool,
    },
    /// Extend a session's lease as `KeepAlive` does, and raise its acknowledged mark to
    /// `acked_below`: the client will never ask about a ticket below it again, so its
    /// finished tickets there are forgotten (`machine::session`, "the acknowledged mark").
    /// A mark at or below the session's changes nothing.
    KeepAliveAcked {
        session: SessionId,
        acked_below: TicketId,
    },
    /// Returns tokens to rate buckets, linked to no take (Envoy's `is_negative_hits`): each
    /// part's `units` go back to its limit's bucket (its key's, on a keyed limit), never
    /// above the burst. A key with no state is full already and stays without one; a key
    /// the return fills is dropped as any fresh key is. All or nothing: a part naming an
    /// unknown limit, a key that does not fit its limit, or a limit without a rate refuses
    /// the command, naming the part, and nothing returns. Answered
    /// [`crate::machine::Reply::Done`].
    ReturnTokens {
        tenant: String,
        parts: Vec<Part>,
    },
    /// Makes sure `tenant` has the keyed limit that decides Envoy descriptors overriding
    /// their limit with `requests` per `unit_s` seconds (`crate::rls::path::override_name`):
    /// a rate-only bucket per key of `burst = requests` refilling `requests` per `unit_s`,
    /// with [`crate::bounds::RLS_KEYS_MAX_DEFAULT`] live keys at most. A limit of that name
    /// is left as it is. A tenant's own work, not an operator's control: the limit lifts no
    /// cap the operator set, it is one more bucket of the gateway's asking, and a tenant
    /// holds at most [`crate::bounds::RLS_OVERRIDES_MAX`] of them. Answered
    /// [`crate::machine::Reply::Done`].
    DefineOverride {
        tenant: String,
        requests: u32,
        unit_s: u64,
    },
    /// Sets the session's token leases on one or more rate limits (or keys) of one tenant to
    /// the shares asked, as far as the limits have room, in one entry (see [`LeaseTokens`]
    /// and the machine's essay, "Token leases"). Answered [`crate::machine::Reply::Leased`].
    LeaseTokens(LeaseTokens),
    /// Takes tenant `tenant`'s whole state out of this group as one value, to move it to
    /// group `to` (`machine::frozen_tenant`); from here its requests are answered `Moved`.
    FreezeTenant {
        tenant: String,
        to: u64,
    },
    /// Installs tenant `tenant`, frozen in another group: `frozen` is its freeze's value
    /// (`machine::frozen_tenant`) encoded with the machine's codec, at most
    /// [`crate::bounds::MOVE_BYTES_MAX`] bytes.
    AdoptTenant {
        tenant: String,
        frozen: Vec<u8>,
    },
    /// Forgets tenant `tenant`'s frozen state once its move is placed.
    DropFrozen {
        tenant: String,
    },
    /// Places tenant `tenant` in data group `group`, in the metadata group's machine: once,
    /// for good (a placed tenant keeps its group until a move). Answered
    /// [`crate::machine::Reply::Placed`] with the group it lives in, the one asked or, when
    /// it was already placed there, the same; a tenant placed in another group is refused
    /// [`crate::machine::Refusal::Placed`] naming it.
    PlaceTenant {
        tenant: String,
        group: u64,
    },
}

/// A limit's definition, as `DefineLimit` with two more settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Definition {
    pub tenant: String,
    pub name: String,
    /// Most units held at once (per key, when keyed); 0 = no cap.
    pub concurrent: u32,
    /// Token refill per second (per key, when keyed); 0 = no rate.
    pub per_second: f64,
    /// Bucket size in tokens; `None` = `max(ceil(per_second), 1)`.
    pub burst: Option<u64>,
    /// One bucket or semaphore per key: every request on it names a key.
    pub keyed: bool,
    /// Most live keys of a keyed limit; `None` = [`crate::bounds::KEYS_MAX_DEFAULT`]. Only with `keyed`.
    pub keys_max: Option<u32>,
    /// Evaluated and counted, never refuses (see [`crate::machine::limit::LimitSpec::shadow`]).
    pub shadow: bool,
}

impl Definition {
    /// The definition a `DefineLimit` makes: not keyed, not shadow.
    pub fn from_legacy(
        tenant: &str,
        name: &str,
        concurrent: u32,
        per_second: f64,
        burst: Option<u64>,
    ) -> Definition {
        Definition {
            tenant: tenant.to_owned(),
            name: name.to_owned(),
            concurrent,
            per_second,
            burst,
            keyed: false,
            keys_max: None,
            shadow: false,
        }
    }

    /// The command that writes this definition: `DefineLimit` when it is neither keyed nor
    /// shadow (one `from_legacy` makes), `Define` otherwise.
    pub fn into_command(self) -> Command {
        if self.keyed || self.keys_max.is_some() || self.shadow {
            return Command::Define(self);
        }
        Command::DefineLimit {
            tenant: self.tenant,
            name: self.name,
            concurrent: self.concurrent,
            per_second: self.per_second,
            burst: self.burst,
        }
    }
}

/// One limit of a request: which limit, which key of it (keyed limits only), how many units.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Part {
    pub limit: String,
    /// The key of a keyed limit; `None` on an unkeyed one.
    pub key: Option<String>,
    /// Units wanted, at least 1.
    pub units: u32,
}

/// A request for a permit (or a take) on one or more limits of one tenant, decided in one
/// entry for all its parts: granted on every part under one fence, or on none.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AcquireParts {
    pub session: SessionId,
    pub ticket: TicketId,
    pub tenant: String,
    /// In the order the client gave; replies name the first part's units.
    pub parts: Vec<Part>,
    pub priority: Priority,
    /// The agent acting, for agent-scoped halts.
    pub agent: Option<String>,
    /// Queue when a part has no room; `false` answers `Busy` instead.
    pub wait: bool,
    /// The units of the rate parts are an estimate: the ticket stays live after its grant,
    /// holding the estimate taken, until [`Command::SettleTake`] names the actual cost (or
    /// it is released, or its session ends: then the estimate stands).
    pub estimate: bool,
}

impl From<&Acquire> for AcquireParts {
    fn from(a: &Acquire) -> AcquireParts {
        AcquireParts {
            session: a.session,
            ticket: a.ticket,
            tenant: a.tenant.clone(),
            parts: vec![Part {
                limit: a.limit.clone(),
                key: None,
                units: a.units,
            }],
            priority: a.priority.clone(),
            agent: a.agent.clone(),
            wait: a.wait,
            estimate: false,
        }
    }
}

/// A session's request to set its token leases: for each part, the share of the limit's
/// refill and the size of the local bucket the holder wants from now on, and the tokens it
/// gives back. One lease per (session, limit or key); a part that asks 0 and 0 ends it.
///
/// The holder applies its own decreases when it sends (it lowers its rate, drops its level
/// to the new cap and stops spending what it gives back), and the machine's increases only
/// once it has the reply; so the cluster never counts a share as free while the holder may
/// still spend it. `seq` makes a retry harmless: a request whose `seq` is not above the
/// lease's last is answered with the lease as it stands and changes nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseTokens {
    pub session: SessionId,
    pub tenant: String,
    /// The holder's counter for this session's lease requests, increasing.
    pub seq: u64,
    /// 1..=`PARTS_MAX` parts, each limit (each key of a keyed one) once.
    pub parts: Vec<LeasePart>,
}

/// One limit (or key) of a [`LeaseTokens`] request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeasePart {
    pub limit: String,
    /// The key of a keyed limit; `None` on an unkeyed one.
    pub key: Option<String>,
    /// The share of the refill wanted from now on, micro-tokens a second.
    pub rate_micro_per_s: u64,
    /// The size of the holder's local bucket wanted from now on, in tokens.
    pub cap: u64,
    /// Micro-tokens the holder gives back: it stopped spending them when it sent this.
    pub returned_micro: u64,
}
