//! The node: the data directory, Raft on the log and the state-machine store, the
//! proposer and the reader, and the client port. [`node`] wires them and stops them; this
//! file only maps the module and describes the request pipeline, which no single file shows.
//!
//! # The pipeline at a glance
//!
//! ```text
//!  client socket                                       every node
//!  ─────────────                                       ──────────
//!  connection task ──spawn──▶ request task ─┬─ Write ─▶ proposer queue ─▶ proposer task
//!   (reads frames)              (one per    │                               │ client_write_ff
//!                                request)   │                               ▼
//!                                           │                      openraft ─▶ log (WAL)
//!                                           │                               │ commit, apply
//!                                           │                               ▼
//!                                           │            StateStore::apply ─┬─▶ responder
//!                                           │                  (Machine)    │   (one per entry)
//!                                           │                               └─▶ event broadcast
//!                                           ├─ Read ──▶ reader queue ─▶ reader task
//!                                           │                (ensure_linearizable, then lock)
//!                                           ├─ ReadLocal: under the lock
//!                                           ├─ Status, SnapshotCost: admin (bounded lock use)
//!                                           └─ AddNode, RemoveNode: openraft membership
//!  writer task ◀── outbox ◀── Response frames (request tasks), Event frames (forwarder task)
//! ```
//!
//! # Tasks, what each owns, and the bound on every queue
//!
//! Per node (spawned by [`node::Node::start`], all ending when the node's
//! [`crate::shutdown`] signal begins, but for a stand-in's election task, which ends after
//! its rounds):
//! - **Peer accept loop** ([`crate::raft::network::serve_peers`]): one task per peer
//!   connection, each handing one RPC at a time to the local Raft.
//! - **Stand-in** ([`crate::raft::stand_in`]): at most one task at a time, started when this
//!   node refuses a candidate whose log is behind and has heard no leader for a lease; it
//!   starts at most three elections and ends. Beside it, the stand-in's **backstop** task,
//!   one per node: an election timer for a quiet follower that openraft 0.9's greater-log
//!   delay would hold back.
//! - **Client accept loop** ([`client_port::serve_clients`], via [`crate::accept::accept_loop`]):
//!   one connection task per client connection.
//! - **Proposer task** ([`proposer`]): owns the receiving end of the proposer queue
//!   (`PROPOSE_QUEUE_MAX` = 65,536 commands, `try_send`: a full queue answers `Unavailable` at once)
//!   and the in-flight semaphore (`proposer.in_flight_max` entries, default 2). It is the
//!   only writer of application entries, so batches enter the log in stamp order.
//! - **Commit waiter**, one task per proposed entry: owns that entry's openraft responder and
//!   its commands' answer channels, and holds one in-flight permit until openraft answers,
//!   this node stops leading in the entry's term, or `COMMIT_TIMEOUT` passes. At most
//!   `in_flight_max` exist at once.
//! - **Reader task** ([`reader`]): owns the receiving end of the read queue
//!   (`READ_QUEUE_MAX` = 65,536 reads, `try_send`: full answers `Unavailable`) and runs one
//!   round at a time of at most `ROUND_MAX` = 4,096 reads.
//! - **openraft's own tasks** (core, replication, state-machine worker). `StateStore::apply`
//!   runs in the state-machine worker and sends on the event broadcast (its sender lives in
//!   [`crate::raft::state_store::AppliedState`]; `APPLIED_EVENTS_BACKLOG` = 4,096 entries per
//!   subscriber; sending never waits).
//!
//! - **Front doors** ([`front`], handed in by whoever starts the node; the binary's are
//!   `weir-http`'s): the HTTP listener, if `http_listen` is set, with axum's tasks, one per
//!   HTTP connection, and the gRPC port, if `grpc_listen` is set. Their handlers do not enter the pipeline directly: they go through an
//!   internal `client::Client` to the leader's client port, so an HTTP request is one more
//!   client connection here and takes exactly the path drawn above.
//!
//! Per client connection ([`client_port`]):
//! - **Connection task**: reads frames in order, checks the hello (within `HELLO_TIMEOUT` =
//!   10 s) and takes the group it names (a node of several groups runs the pipeline above
//!   once per group; a connection's requests go to its group's proposer and reader, a
//!   request naming a tenant of another group refused before it goes anywhere:
//!   [`routing`]), and spawns a request task per request. A semaphore of `IN_FLIGHT_MAX` = 4,096
//!   slots per connection bounds the request tasks; when it is empty the connection task
//!   stops reading, and TCP pushes back on the client.
//! - **Request task**, one per request: runs `handle` and sends the response to the outbox.
//! - **Writer task**: owns the socket's write half and the outbox's receiving end
//!   (`NODE_OUTBOX_FRAMES_MAX` = 1,024 frames); coalesces up to 512 queued frames per write.
//! - **Forwarder task**: owns one broadcast subscription; sends the connection's events to the
//!   outbox, and `Resync` when it fell behind. Aborted when the connection task ends.
//! - **Heartbeat task** ([`heartbeat`]), once the client sent `Heartbeats`: a
//!   `ServerFrame::Heartbeat` (term, known leader) every `HEARTBEAT_PERIOD` = 200 ms, by
//!   `try_send` (a full outbox skips one). Aborted when the connection task ends.
//!
//! The applied state ([`crate::raft::state_store::AppliedState`]) is shared by `Arc`; its lock
//! is a std mutex held only to apply, copy, encode or answer, never across an await.
//!
//! # A write
//!
//! 1. The connection task reads `Request::Write(command)` and runs the edge's checks
//!    ([`edge`]): the command's arguments ([`weir_core::machine::Command::validate`], the same
//!    check the machine runs first in `apply`), then the session it names. A command that
//!    breaks a bound is answered `Failed(BadRequest)` naming it, is never proposed, and the
//!    connection goes on. If the command names a session (`KeepAlive`, `CloseSession`,
//!    `Release`, `Acquire`) the connection follows it from now on, whether or not the write
//!    is then served; an `OpenSession` holds a place for the session it will open. A
//!    connection follows at most `FOLLOWED_SESSIONS_MAX` sessions ([`followed`]); past that a
//!    write naming a new one is refused, and a session is unfollowed when the connection sees
//!    it closed (its `CloseSession` reply) or expired (its `SessionExpired` event).
//! 2. The request task calls [`proposer::Proposer::propose`]: a command above
//!    [`weir_core::bounds::COMMAND_BYTES_MAX`] encoded is refused `BadRequest`; otherwise the
//!    command, its size and a oneshot answer channel go into the proposer queue, and the task
//!    waits on the oneshot.
//! 3. The proposer task takes the first queued command (or wakes at the tick deadline), takes
//!    what else is queued (up to `proposer.batch_max`, default 1,024, at most
//!    [`weir_core::bounds::ENTRY_COMMANDS_MAX`], and up to [`weir_core::bounds::ENTRY_BYTES_MAX`]
//!    encoded: the command that would cross it opens the next batch), waits for an in-flight
//!    permit, and takes what arrived meanwhile. So every entry fits its bound, and
//!    `Config::validate` has proved that `raft.max_payload_entries` such entries fit one peer
//!    frame: no burst of requests can make an AppendEntries a follower must refuse. It then reads Raft's metrics: not the leader means every command of
//!    the batch is answered `NotLeader` (never proposed). As leader it stamps the batch
//!    (term from the metrics, this node, the proposer's incarnation and clock) and hands it to
//!    `client_write_ff`, which queues it to the Raft core and returns the receiving end of
//!    the entry's responder without waiting for the core.
//! 4. A commit waiter waits on the responder for at most `COMMIT_TIMEOUT` = 10 s, and no
//!    longer than this node leads in the entry's term. openraft
//!    answers it after `StateStore::apply` ran the entry through the
//!    [`weir_core::machine::Machine`]: `Some(Applied)` with one reply per command, in order.
//! 5. The waiter drops its permit and sends each command its `(index, reply)` on its oneshot.
//!    The request task wraps it as `Response::Written` and sends it to the outbox; if the reply
//!    is `SessionOpened`, the connection follows that session from then on.
//!
//! A tick is the same path with no client: when nothing was proposed for `proposer.tick_ms`
//! and the machine has timed work, the leader proposes a batch of one `Tick` whose reply no
//! one waits for.
//!
//! # A read
//!
//! `Request::Read`: the request task puts the query and a oneshot into the read queue. The
//! reader task takes the first waiting read and everything else queued (up to `ROUND_MAX`),
//! calls `ensure_linearizable` once for the round (openraft confirms leadership with a quorum
//! of heartbeats, then waits until this node has applied up to the read index), and answers
//! every read of the round from the applied state under one lock. An error answers the whole
//! round: `NotLeader` (another node leads), or `Unavailable` (no quorum answered, Raft
//! stopped).
//!
//! `Request::ReadLocal` skips the reader: the request task answers from this node's applied
//! state at once, on any node, possibly stale. `Status` and `SnapshotCost` ([`admin`]) read
//! the same way and need no quorum either, but neither encodes the state under the lock at
//! every call: the status digest is cached per applied index within a bounded share of the
//! lock ([`digest`]), and snapshot-cost measurements run one at a time, rate-limited.
//!
//! # How a reply and a push find their connection
//!
//! A reply travels back the way its request came: the proposer or reader answers on the
//! request's oneshot, the request task (which still holds its connection's outbox sender and
//! the request id) sends `ServerFrame::Response { id, .. }`, and the writer writes it. Replies
//! on one connection go out in the order they finish, not the order requests arrived; the id
//! pairs them. A reply whose connection has gone is dropped with the failed send.
//!
//! A push has no request. `StateStore::apply` publishes the `Applied` of every entry that
//! produced events on the broadcast channel, after releasing the state lock, on every node
//! (followers apply too). Each connection's forwarder receives every such entry, keeps the
//! events whose session the connection follows (the set its request tasks fill, behind a std
//! mutex), and sends them as `ServerFrame::Event` to the outbox. A session is followed by
//! every connection that opened it or named it in a write, on whichever node that was.
//!
//! # Leader change, lost leadership, unknown outcome
//!
//! What a write's command is answered, by where leadership was lost:
//! - Before the proposer stamped its batch (the metrics say this node is not the leader):
//!   `NotLeader` with the leader this node knows of ([`leader::known_leader`]); not proposed.
//! - Between the metrics read and the core taking the entry: openraft refuses it with
//!   `ForwardToLeader`, answered `NotLeader`; not appended.
//! - After the entry was appended here: when this node stops leading in the entry's term
//!   before openraft answered, `OutcomeUnknown` at once (whether a later leader commits the
//!   entry is not this node's to know; the client retries, idempotently). openraft does not
//!   always answer such an entry: a stopped and resumed leader was seen to hold both its
//!   in-flight permits for the whole `COMMIT_TIMEOUT` while every write sent to it waited
//!   for one, so clients fleeing the next stopped leader to it lost their permits. If the
//!   answer comes first: applied (a later leader committed it), the real reply; truncated,
//!   `ForwardToLeader`, turned into `NotLeader` (see the caveats). If nothing happens
//!   within `COMMIT_TIMEOUT`: `OutcomeUnknown`.
//! - A node that does not lead never waits for an in-flight permit: a batch gathered on a
//!   follower, or on a leader that steps down while the batch waits, is answered
//!   `NotLeader` at once.
//! - Raft stopped while the entry waited (the responder was dropped): `OutcomeUnknown`. Its
//!   text says "leadership lost while committing", or "this node stopped leading before the
//!   entry was applied" when the closing metrics channel is seen first; openraft drops a
//!   responder only when its core stops, and a lost leadership takes one of the paths above.
//! - This node lost and regained leadership between reading its term and handing the entry
//!   to openraft: the entry is appended in the newer term, and its waiter, watching the
//!   older one, answers `OutcomeUnknown` at once and frees its slot though the entry may
//!   commit (the client retries, idempotently).
//! - Raft stopped before taking the entry (`client_write_ff` fails): `Unavailable`, and the
//!   proposer task ends; later writes find its queue closed and are answered `Unavailable`.
//! - The proposer task stopped with the command still queued (shutdown): `OutcomeUnknown`
//!   from [`proposer::Proposer::propose`], though it was never proposed.
//!
//! # A forwarded request follows the leader
//!
//! The client port never forwards: a follower answers `NotLeader` naming the leader, and
//! the client goes there. The node's front doors do forward (HTTP and gRPC callers reach
//! the leader through an internal client per token, `weir-http`'s `forward.rs`), and hold
//! their callers to one rule: a request forwarded to a leader that dies or stalls is
//! re-sent to the next leader as soon as this node's own Raft knows it (every caller's
//! connection to any other node is given up at the change, the waiting requests retried
//! there, which the writes' idempotency makes safe), and a request that finds no leader
//! within `FORWARD_RETRY_MAX` = 2 s (one election with room, inside a 3 s TTL's budget) is
//! answered 503 `NoLeader`, "try again, or another node", rather than held for the
//! library's 10 s. A peer that stops answering is logged once when it goes (WARN) and once
//! when it is back (INFO, with the count of failed RPCs not logged): `raft::peer_health`.
//!
//! A new leader's proposer stamps with the new term (and its own node and incarnation), so the
//! machine's log clock freezes across the change (`machine` module doc). A read on a node
//! that lost leadership fails openraft's quorum check and is answered `NotLeader` or
//! `Unavailable`, never from this node's state.
//!
//! Membership changes ([`admin`]) block on openraft's `add_learner` and `change_membership`;
//! their errors are mapped by [`leader::write_failure`]: `ForwardToLeader` is `NotLeader`, a
//! refused change is `BadRequest`, a fatal error `Unavailable`.
//!
//! # Shutdown
//!
//! [`node::Node::stop`] turns the shutdown watch true and shuts Raft down. The accept loops
//! stop and drop their connection tasks (each connection's forwarder is aborted with it). The
//! proposer and reader tasks return; commands and reads still queued are answered by their
//! dropped oneshots (`OutcomeUnknown` and `Unavailable`). Commit waiters end when Raft drops
//! their responders.
//!
//! # Caveats
//!
//! - **`NotLeader` after truncation is not a proof of "not applied".** When a new leader
//!   truncates an entry on this node, openraft answers its commands `ForwardToLeader`, and the
//!   proposer answers `NotLeader`. In a cluster of five or more voters the same entry can
//!   survive on another node that later wins an election and commits it. Every machine write
//!   is idempotent by its ids, so the client's retry on the new leader is safe; but the
//!   promise in [`weir_proto::protocol::Failure::NotLeader`] is stronger than this path keeps.
//!   Membership changes map `ForwardToLeader` the same way.
//! - **A stamp's term can be older than its entry's.** The term is read from the metrics
//!   before `client_write_ff`; if this node lost and regained leadership in between, the entry
//!   is appended in the newer term but stamped with the older one. The machine sees a change
//!   of leadership and freezes its clock for that batch: leases last longer, never shorter.
//! - **The in-flight bound counts waiters, not entries.** A waiter that times out, or whose
//!   node stops leading, drops its permit while openraft may still hold the entry, so after
//!   either more than `in_flight_max` entries can be uncommitted at once.
//! - **A read round has no deadline of its own.** The quorum check is bounded by openraft's
//!   RPC deadlines, but the wait for apply is not; one slow round holds every read behind it
//!   (the queue then fills and answers `Unavailable`), and the client's own deadline ends the
//!   wait for it.
//! - **Pushes are hints, not messages.** Events applied before a connection's forwarder
//!   subscribed are never sent to it, and an event can reach the client before or after the
//!   reply of the write that caused it. A forwarder that falls `APPLIED_EVENTS_BACKLOG` entries behind
//!   (its connection reads slowly and the outbox is full) skips what it missed, and tells
//!   the client with `ServerFrame::Resync` (waiting for room in the outbox, so this frame is
//!   not lost the way the events were). The grant is state, so the client's sessions ask
//!   again about every ticket they wait for, and read the halts covering those they hold.
//! - **A slow client stalls only itself, but fully.** A full outbox blocks that connection's
//!   request tasks and forwarder; its in-flight slots then run out and its connection task
//!   stops reading. Other connections and the proposer are not held (a blocked request task
//!   has already received its answer).
//! - **Request tasks outlive their connection.** A connection that closes or is dropped at
//!   shutdown does not cancel its requests: a write already queued still goes through the log
//!   and its reply is dropped. The client, seeing its connection fail, counts the write as
//!   possibly applied (it retries it, and reports `OutcomeUnknown` if it runs out of tries).
//! - **A session's owner is checked at the edge, against the applied state.** The edge
//!   proposes every open as `OpenSessionFor` with the connection's principal (a hash of
//!   its token) and a random nonce (the session's id), so the owner is replicated with the
//!   session and every node refuses another principal's keep-alive, acquire, release and
//!   close of it ([`client_port`]), except that an admin may end any session (close it or
//!   release its tickets); the HTTP event stream checks the same record. The check
//!   reads this node's applied state: a session not applied here yet is waited for with one
//!   quorum round (the leader) or a few seconds (an HTTP stream on a follower). Sessions
//!   opened without tokens have no owner and are open to every principal.

pub mod admin;
pub mod backup_export;
pub mod backup_slot;
pub mod client_port;
pub mod ctx;
pub mod data_dir;
pub mod digest;
pub mod edge;
pub mod followed;
pub mod front;
pub mod groups_dir;
pub mod heartbeat;
pub mod leader;
pub mod local_write;
pub mod node;
pub mod proposer;
pub mod queue;
pub mod reader;
pub mod routing;
pub mod stamper;

pub use data_dir::{IDENTITY_FILE, prepare_data_dir};
pub use node::{Node, RAFT_STOPPED, serve};
