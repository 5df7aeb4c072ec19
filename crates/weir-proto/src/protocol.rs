//! The client protocol: what travels on the client port, in [`crate::wire`] frames.
//!
//! A connection opens with [`ClientFrame::Hello`] carrying [`PROTOCOL_VERSION`]; the server
//! answers [`ServerFrame::Welcome`] or [`ServerFrame::Error`] and closes. Then the client
//! sends requests, each with an id of its choosing; the server answers each with a
//! [`ServerFrame::Response`] carrying the same id, possibly out of order (requests are
//! served concurrently), and may push [`ServerFrame::Event`]s at any time. A client that sends
//! [`ClientFrame::Heartbeats`] also gets a [`ServerFrame::Heartbeat`] every
//! [`HEARTBEAT_PERIOD`] (the library's failure detector listens for their absence), and a
//! node that had to skip pushes for the connection says so with [`ServerFrame::Resync`].
//!
//! Bad input — an oversized length, a bad checksum, undecodable bytes, a wrong version — is
//! answered with `ServerFrame::Error` naming the problem where a frame can still be written,
//! and the connection is closed. Nothing else is affected.

use serde::{Deserialize, Serialize};

use weir_core::bounds::LIMITS_PAGE_MAX;
use weir_core::machine::{
    Command, Definition, Event, Fence, HaltScope, HolderView, KeyPage, LimitStatus, LimitsChange,
    LimitsPage, QueuePage, Refusal, Reply, RunSlot, Spend, TenantStatus, WaiterView,
};

/// The protocol version this build speaks. A client of a version from
/// [`PROTOCOL_VERSION_MIN`] up to this one is served in its own version; another is refused at
/// hello, naming both.
/// Version 2: the hello carries a token. Version 3: writes may carry the commands of keyed
/// limits and requests of several parts (`Command::Define`, `Command::AcquireParts`), which
/// a node of version 2 could not decode. Version 4: a list of limits is read by pages
/// (`Query::Limits` names a prefix, a name to start after and a page size), reads of a keyed
/// limit's keys (`Query::Key`, `Query::Keys`), and a limit's status carries its live keys,
/// shadow refusals and overruns, and reads of a limit's holders and waiters
/// (`Query::Holders`, `Query::Waiters`), which a node or client of version 3 could not decode.
/// Version 5: a page of holders or waiters carries the log clock it was read at, each holder
/// its grant's log time and each waiter its fairness weight; writes may carry
/// `Command::KeepAliveAcked` (a keep-alive with the session's acknowledged mark).
/// Version 6: writes may carry `Command::LeaseTokens`, answered `Reply::Leased`, and
/// `Command::ReturnTokens` and `Command::DefineOverride`; a connection of 5 or 4 never
/// sends them, so it is answered exactly as before.
/// Version 7: a connection may name the data group it speaks to
/// ([`ClientFrame::HelloInGroup`]), a tenant is placed with [`Request::PlaceTenant`]
/// (answered [`Response::Placed`]), and a request for a tenant another group holds, or for
/// one not placed yet, is answered [`Failure::WrongGroup`] or [`Failure::Unplaced`]. A
/// connection of 6 or below, which cannot decode those two, is told the same in a
/// [`Failure::BadRequest`] ([`group_failure_for`]).
pub const PROTOCOL_VERSION: u32 = 7;

/// The oldest version a node still serves, so that clients of the release before keep
/// their sessions while the nodes are upgraded under them. A connection of version 4 is
/// answered exactly as version 4 answered, except for the one read whose answer changed
/// shape in version 5: a read of a limit's holders or waiters is refused on it
/// ([`refused_before_5`]). Version 4 cannot name `Command::KeepAliveAcked`, the only
/// other change.
pub const PROTOCOL_VERSION_MIN: u32 = 4;

/// Why `request` cannot be served on a connection of `version` (at least
/// [`PROTOCOL_VERSION_MIN`]): `Some` for a read of holders or waiters below version 5,
/// whose pages that version decodes in another shape.
pub fn refused_before_5(version: u32, request: &Request) -> Option<String> {
    let (Request::Read(query) | Request::ReadLocal(query)) = request else {
        return None;
    };
    let what = match query {
        Query::Holders { .. } => "holders",
        Query::Waiters { .. } => "waiters",
        _ => return None,
    };
    (version < 5).then(|| {
        format!(
            "a read of a limit's {what} needs client protocol 5 (its page changed shape); \
             this connection speaks {version}: upgrade the client"
        )
    })
}

/// `failure` as a connection of `version` can decode it: the placement failures of version
/// 7 ([`Failure::WrongGroup`], [`Failure::Unplaced`]) become a [`Failure::BadRequest`] with
/// the same words below it; every other failure is itself.
pub fn group_failure_for(version: u32, failure: Failure) -> Failure {
    match failure {
        Failure::WrongGroup { .. } | Failure::Unplaced { .. } if version < 7 => {
            Failure::BadRequest(format!("{failure} (with client protocol 7 or later)"))
        }
        failure => failure,
    }
}

/// Largest client frame, in bytes: a command is at most a few KiB (names are bounded by
/// `bounds::NAME_BYTES_MAX`, reasons by `REASON_BYTES_MAX`); answers listing a tenant's
/// limits or runs are the largest. Checked before allocation.
pub const CLIENT_FRAME_MAX: u32 = 4 << 20;

/// From client to server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ClientFrame {
    /// `token`: the secret whose hash the node's config lists (`None` where the node needs
    /// no token).
    Hello {
        version: u32,
        token: Option<String>,
    },
    Request {
        id: u64,
        request: Request,
    },
    /// Asks the node to send [`ServerFrame::Heartbeat`] on this connection every
    /// [`HEARTBEAT_PERIOD`] from now on, so the client can tell a silent node (stopped,
    /// frozen) from a busy one. The library sends it right after the welcome; a client that
    /// never sends it gets no heartbeats.
    Heartbeats,
    /// A hello (version 7 on) that names the group the connection speaks to: its writes,
    /// reads, status and heartbeats are that group's, and its `NotLeader` names that
    /// group's leader. Group 0 is the metadata group of a node of several groups (and the
    /// one group of a node of one); a plain [`ClientFrame::Hello`] speaks to the node's
    /// default group (data group 1 of a node of several).
    HelloInGroup {
        version: u32,
        token: Option<String>,
        group: u64,
    },
}

/// How often a node sends [`ServerFrame::Heartbeat`] on a connection that asked for them: a
/// fifth of the client's silence bound (`client::SILENCE_MAX`, 1 s), so a few heartbeats
/// may be late on a busy node before the client calls the node silent.
pub const HEARTBEAT_PERIOD: std::time::Duration = std::time::Duration::from_millis(200);

/// What a client asks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Request {
    /// A write, through the log (leader only).
    Write(Command),
    /// A linearizable read (leader only).
    Read(Query),
    /// A read of this node's applied state, possibly stale.
    ReadLocal(Query),
    /// This node's view of itself and the cluster.
    Status,
    /// Add a node: as a learner, then as a voter once it has caught up (leader only).
    AddNode {
        id: u64,
        peer: String,
        client: String,
    },
    /// Remove a voter (leader only).
    RemoveNode { id: u64 },
    /// Measure what a snapshot of this node's state costs: encode it, decode and check it
    /// (what a follower's install does), and report sizes and times. Changes nothing.
    SnapshotCost,
    /// Begin a backup (leader only, admin): after a quorum round, the node encodes its state
    /// at the index it has applied (committed, and every write acknowledged before the
    /// request) and holds the bytes for [`Request::BackupChunk`]. Changes nothing.
    BackupBegin,
    /// Up to [`BACKUP_CHUNK_BYTES`] of the held backup at log index `index`, from `offset`.
    BackupChunk { index: u64, offset: u64 },
    /// Place tenant `tenant` in data group `group` (admin; version 7 on), or, with `None`,
    /// find where it lives and place it in the default group (1) if it lives nowhere yet.
    /// Decided in the metadata group, whose leader alone proposes it: `NotLeader` names
    /// that group's leader. Answered [`Response::Placed`]; a tenant already placed in
    /// another group is answered [`Failure::WrongGroup`] naming it. On a node of one group
    /// every tenant lives in that group: `Placed` with group 0.
    PlaceTenant { tenant: String, group: Option<u64> },
}

/// Largest [`Response::BackupChunk`], in bytes: a quarter of [`CLIENT_FRAME_MAX`], so a
/// chunk and its frame always fit.
pub const BACKUP_CHUNK_BYTES: u64 = 1 << 20;

/// What a backup holds besides the machine's snapshot: where it was taken and how to
/// verify the bytes that follow. The header of a backup file (`weir_server::backup`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupHeader {
    /// The identity of the cluster it was taken from.
    pub cluster: [u8; 16],
    /// The log index of the last entry the snapshot includes.
    pub index: u64,
    /// That entry's term and the node that proposed it.
    pub term: u64,
    pub leader: u64,
    /// The cluster's members at that index.
    pub members: Vec<BackupMember>,
    /// The machine snapshot (a `WSNP` frame): its length and CRC-32C.
    pub snapshot_bytes: u64,
    pub snapshot_crc32c: u32,
    /// When it was taken, Unix ms (shown to people only).
    pub wall_ms: u64,
}

/// One member of the cluster a backup was taken from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupMember {
    pub id: u64,
    pub peer: String,
    pub client: String,
    pub voter: bool,
}

/// A read of the state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Query {
    Limit {
        tenant: String,
        name: String,
    },
    /// One page of the tenant's limits, by name: those starting with `prefix` (empty: all)
    /// and strictly after `after`, at most `max` (clamped to `1..=bounds::LIMITS_PAGE_MAX`).
    /// Answered [`Answer::Limits`], whose `next` is the `after` of the following page.
    Limits {
        tenant: String,
        prefix: String,
        after: Option<String>,
        max: u32,
    },
    ValidateFence {
        tenant: String,
        limit: String,
        fence: Fence,
    },
    Spent {
        tenant: String,
        period: String,
    },
    Running {
        tenant: String,
    },
    Halts {
        tenant: String,
    },
    Tenant {
        tenant: String,
    },
    /// The dry run of an `ApplyLimits`: what it would change, read linearizably from the
    /// applied state (no log entry). Answered [`Answer::LimitsChange`].
    LimitsChange {
        tenant: String,
        definitions: Vec<Definition>,
        prune: bool,
    },
    /// The status of one key of a keyed limit: its own state while it is live, a fresh
    /// key's (a full bucket, an idle semaphore) otherwise.
    Key {
        tenant: String,
        name: String,
        key: String,
    },
    /// At most `limit` (up to `bounds::KEYS_PAGE_MAX`) live keys of a keyed limit after
    /// `after`, in key order.
    Keys {
        tenant: String,
        name: String,
        after: Option<String>,
        limit: u32,
    },
    /// A limit's permits held now, skipping the first `after`, at most `max` (capped at
    /// `bounds::QUEUE_PAGE_MAX`): `Machine::holders`.
    Holders {
        tenant: String,
        name: String,
        after: u64,
        max: u32,
    },
    /// A limit's waiting tickets in serving order, paged like `Holders`: `Machine::waiters`.
    Waiters {
        tenant: String,
        name: String,
        after: u64,
        max: u32,
    },
}

impl Query {
    /// The tenant the query reads in.
    pub fn tenant(&self) -> &str {
        match self {
            Query::Limit { tenant, .. }
            | Query::Limits { tenant, .. }
            | Query::ValidateFence { tenant, .. }
            | Query::Spent { tenant, .. }
            | Query::Running { tenant }
            | Query::Halts { tenant }
            | Query::Tenant { tenant }
            | Query::LimitsChange { tenant, .. }
            | Query::Key { tenant, .. }
            | Query::Keys { tenant, .. }
            | Query::Holders { tenant, .. }
            | Query::Waiters { tenant, .. } => tenant,
        }
    }

    /// Every name the query carries held to the name rule of writes
    /// ([`weir_core::machine::name_rule`]): a read names nothing a write could not have
    /// made (an empty `prefix` or `after` is a read's own and allowed).
    pub fn check_names(&self) -> Result<(), String> {
        use weir_core::bounds::{KEY_BYTES_MAX, NAME_BYTES_MAX};
        use weir_core::machine::name_rule;
        let name = |what, n: &str| name_rule(what, n, NAME_BYTES_MAX);
        let (tenant, limit) = match self {
            Query::Limit { tenant, name } | Query::Holders { tenant, name, .. } => {
                (tenant, Some(name))
            }
            Query::Waiters { tenant, name, .. } => (tenant, Some(name)),
            Query::ValidateFence { tenant, limit, .. } => (tenant, Some(limit)),
            Query::Limits {
                tenant,
                prefix,
                after,
                ..
            } => {
                name("prefix", prefix)?;
                if let Some(after) = after {
                    name("after", after)?;
                }
                (tenant, None)
            }
            Query::Spent { tenant, period } => {
                name("period", period)?;
                (tenant, None)
            }
            Query::Running { tenant }
            | Query::Halts { tenant }
            | Query::Tenant { tenant }
            | Query::LimitsChange { tenant, .. } => (tenant, None),
            Query::Key { tenant, name, key } => {
                name_rule("key", key, KEY_BYTES_MAX)?;
                (tenant, Some(name))
            }
            Query::Keys {
                tenant,
                name,
                after,
                ..
            } => {
                if let Some(after) = after {
                    name_rule("after", after, KEY_BYTES_MAX)?;
                }
                (tenant, Some(name))
            }
        };
        name("tenant", tenant)?;
        if let Some(limit) = limit {
            name("limit name", limit)?;
        }
        Ok(())
    }

    /// The first page of the tenant's limits, as large as a page may be.
    pub fn limits(tenant: &str) -> Query {
        Query::Limits {
            tenant: tenant.into(),
            prefix: String::new(),
            after: None,
            max: LIMITS_PAGE_MAX as u32,
        }
    }
}

/// The answer to a [`Query`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Answer {
    Limit(Option<LimitStatus>),
    Limits(LimitsPage),
    FenceHeld(bool),
    Spent(Spend),
    Running(Vec<(String, RunSlot)>),
    Halts(Vec<(HaltScope, String)>),
    Tenant(TenantStatus),
    /// The change an apply would make, or why it would be refused.
    LimitsChange(Result<LimitsChange, Refusal>),
    /// `None`: no keyed limit of that name.
    Key(Option<LimitStatus>),
    /// `None`: no keyed limit of that name.
    Keys(Option<KeyPage>),
    /// `None`: no such limit.
    Holders(Option<QueuePage<HolderView>>),
    /// `None`: no such limit.
    Waiters(Option<QueuePage<WaiterView>>),
}

/// One cluster member as a node sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub id: u64,
    pub peer: String,
    pub client: String,
    pub voter: bool,
    /// On the leader: the last log index known replicated to this member.
    pub matched: Option<u64>,
}

/// A node's status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    pub id: u64,
    /// Its client address.
    pub addr: String,
    /// `Leader`, `Follower`, `Candidate`, `Learner` or `Shutdown`.
    pub state: String,
    pub term: u64,
    pub leader: Option<u64>,
    pub last_log_index: u64,
    /// Index of the latest snapshot, and of the last entry purged from the log.
    pub snapshot_index: Option<u64>,
    pub purged_index: Option<u64>,
    pub applied: u64,
    /// Digest of the applied state; equal on replicas at the same `applied`.
    pub digest: String,
    /// Log-clock time of the applied state, ms.
    pub log_ms: u64,
    pub sessions: u64,
    /// Resident memory of the node process, KiB (Linux; `None` elsewhere).
    pub rss_kib: Option<u64>,
    pub members: Vec<Member>,
    /// The applied index `digest` is of: equal to `applied` whenever the digest is current
    /// (always on a quiet node); older on a busy node whose state is large, since the digest
    /// is recomputed at most once per index and within a bounded share of the apply lock
    /// (`server::digest`).
    pub digest_applied: u64,
}

/// What [`Request::SnapshotCost`] measured.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotCost {
    pub applied: u64,
    pub bytes: u64,
    /// Freezing and encoding the state (what building a snapshot costs; applies wait only
    /// for the freeze), µs.
    pub build_us: u64,
    /// Decoding and checking every invariant (what installing one costs), µs.
    pub install_us: u64,
}

/// Why a request was not served by this node. Says whether it may have taken effect.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Failure {
    /// This node is not the leader; `leader` is the one it knows of (id, client address).
    /// The request was not applied.
    NotLeader { leader: Option<(u64, String)> },
    /// The node could not serve it now (shutting down, overloaded). Not applied.
    Unavailable(String),
    /// The write was proposed but its outcome is not known (leadership was lost, a timeout):
    /// it may or may not have been applied. Retrying an idempotent request is safe.
    OutcomeUnknown(String),
    /// The request was malformed; the text names the problem. Not applied.
    BadRequest(String),
    /// The connection's token does not allow this request (its role, or a session another
    /// principal opened). Not applied.
    Forbidden(String),
    /// Tenant `tenant` lives in data group `group`, not the one this connection speaks to
    /// (or, answering a `PlaceTenant` for another group, it is placed there already). Not
    /// applied: asked in that group it is decided (version 7 on).
    WrongGroup { tenant: String, group: u64 },
    /// Tenant `tenant` is placed in no group yet, as far as this node has applied: not
    /// applied. [`Request::PlaceTenant`] places it; the library does so itself (version 7
    /// on).
    Unplaced { tenant: String },
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::NotLeader {
                leader: Some((id, addr)),
            } => {
                write!(f, "not the leader; the leader is node {id} at {addr}")
            }
            Failure::NotLeader { leader: None } => f.write_str("not the leader; no leader known"),
            Failure::Unavailable(why) => write!(f, "unavailable: {why}"),
            Failure::OutcomeUnknown(why) => write!(f, "outcome unknown: {why}"),
            Failure::BadRequest(why) => write!(f, "bad request: {why}"),
            Failure::Forbidden(why) => write!(f, "forbidden: {why}"),
            Failure::WrongGroup { tenant, group } => {
                write!(f, "tenant {tenant} lives in group {group}: ask that group")
            }
            Failure::Unplaced { tenant } => write!(
                f,
                "tenant {tenant} is not placed in any group yet: place it (weir tenant place)"
            ),
        }
    }
}

/// What a node answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Response {
    /// A write's reply, with the log index of its entry.
    Written {
        index: u64,
        reply: Reply,
    },
    Read(Answer),
    Status(NodeStatus),
    /// A membership change was committed.
    MembershipChanged,
    SnapshotCost(SnapshotCost),
    Failed(Failure),
    /// A backup was begun: its header.
    BackupBegun(BackupHeader),
    /// Bytes of the held backup.
    BackupChunk(Vec<u8>),
    /// `PlaceTenant`: tenant `tenant` lives in data group `group` (0 on a node of one
    /// group).
    Placed {
        tenant: String,
        group: u64,
    },
}

/// From server to client.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ServerFrame {
    Welcome {
        version: u32,
        node: u64,
    },
    Response {
        id: u64,
        response: Response,
    },
    Event(Event),
    /// The connection is being closed for this reason.
    Error {
        reason: String,
    },
    /// The node is alive (sent every [`HEARTBEAT_PERIOD`] after [`ClientFrame::Heartbeats`]),
    /// with the Raft term it is in and the leader it knows of (id, client address). A
    /// connection whose node led and now names another leader has been deposed: the client
    /// moves there.
    Heartbeat {
        term: u64,
        leader: Option<(u64, String)>,
    },
    /// The node skipped `missed_entries` entries' events for this connection (it fell
    /// behind): pushes may have been lost, so the client asks again about every ticket it
    /// waits for or holds.
    Resync {
        missed_entries: u64,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use weir_core::codec;

    fn round_trips<T: Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug>(
        value: T,
    ) {
        let bytes = codec::encode(&value);
        assert_eq!(codec::decode::<T>(&bytes).unwrap(), value);
    }

    #[test]
    fn key_reads_and_their_answers_round_trip() {
        round_trips(ClientFrame::Request {
            id: 7,
            request: Request::Read(Query::Key {
                tenant: "t".into(),
                name: "api".into(),
                key: "alice".into(),
            }),
        });
        round_trips(Request::ReadLocal(Query::Keys {
            tenant: "t".into(),
            name: "api".into(),
            after: Some("alice".into()),
            limit: 100,
        }));
        round_trips(Response::Read(Answer::Keys(Some(KeyPage {
            keys: vec!["bob".into(), "carol".into()],
            next: Some("carol".into()),
        }))));
        round_trips(Response::Read(Answer::Keys(None)));
        round_trips(Response::Read(Answer::Key(None)));
    }

    #[test]
    fn a_key_query_is_encoded_as_its_variant_index_then_its_fields() {
        // `Query::Key` is variant 8: appended after the queries of version 3 and the
        // apply's dry run.
        let bytes = codec::encode(&Query::Key {
            tenant: "t".into(),
            name: "n".into(),
            key: "k".into(),
        });
        assert_eq!(bytes, [8, 1, b't', 1, b'n', 1, b'k']);
        assert_eq!(
            codec::encode(&Query::Limits {
                tenant: "t".into(),
                prefix: String::new(),
                after: None,
                max: 5,
            }),
            [1, 1, b't', 0, 0, 5]
        );
    }
}
