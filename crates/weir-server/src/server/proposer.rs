//! The leader's proposer: batches many clients' commands into one log entry, stamps it with
//! the log clock, and hands each command's reply back to its sender.
//!
//! openraft 0.9 pays one fsync per `client_write`, so throughput is set by how many commands
//! share an entry. The proposer takes the first waiting command, everything else already
//! queued (up to `batch_max`), waits for an in-flight slot (at most `in_flight_max` entries
//! proposed and not yet answered), takes what arrived meanwhile, and proposes: under load the
//! batch grows by itself while the previous entry fsyncs.
//!
//! Shared slots: on a node of several groups, every data group's proposer also takes one of
//! the node's [`SharedSlots`] (as many as `in_flight_max`) for each entry, so that the
//! node's leaders together keep about as many entries in flight as one group would, and
//! each group's batch grows while the others' entries commit, instead of every group
//! writing, replicating and fsyncing its own small entries (`docs/benchmarks.md`, "Several
//! groups in one process"). A shared slot paces, it bounds nothing, so neither wait is long:
//! a proposer waits at most [`SHARED_WAIT_MAX`] for one and then proposes without it, and an
//! entry keeps one at most [`SHARED_HOLD_MAX`]. A group whose entries cannot commit (its
//! quorum lost) thus holds the shared slots for a tenth of a second, not until its commit
//! waiters give up, and never stops the node's other groups. A gather the tick timer began
//! takes no shared slot. An entry made without one after the wait is counted
//! (`weir_entries_unshared_total`); a count that grows steadily says the node's disk
//! commits slower than the wait, so the groups' entries are no longer paced.
//!
//! Stamps: `clock_ms` is this process's monotonic clock (ms since the proposer started) and
//! the leadership is (current term, this node, this proposer's incarnation), read when the
//! batch is stamped. Batches are
//! submitted one at a time, in stamp order, so within one leadership the log carries
//! non-decreasing stamps at real-time rate — what the machine's log clock needs
//! (`machine` module doc).
//!
//! Ticks: while the machine has timed work (sessions, waiting rate tickets) and nothing was
//! proposed for `tick_ms`, the leader proposes a `Tick`, so leases expire and buckets serve
//! waiters without client traffic.
//!
//! Invariants:
//! - Every command handed in is answered exactly once: its reply, `NotLeader` (not
//!   proposed, or refused by openraft; see the server module's caveats), `Unavailable` (not
//!   proposed: queue full, Raft stopped), or `OutcomeUnknown` (proposed, fate unknown: not
//!   answered by openraft before this node stopped leading in its term, or within
//!   `COMMIT_TIMEOUT`; also every command still queued when the proposer stops).
//! - Only a leader waits for an in-flight slot; a follower's batch is answered `NotLeader`
//!   at once, whatever its last leadership's entries still hold.
//! - The queue is bounded; a full queue answers `Unavailable` at once.
//! - A command above its bound encoded ([`Command::bytes_max`]:
//!   [`weir_core::bounds::COMMAND_BYTES_MAX`], an `ApplyLimits`
//!   [`weir_core::bounds::APPLY_COMMAND_BYTES_MAX`]) is answered `BadRequest`, never queued.
//! - An entry's commands take at most `ENTRY_BYTES_MAX - ENTRY_HEADER_BYTES` encoded bytes
//!   and at most `batch_max` (≤ `ENTRY_COMMANDS_MAX`) commands: a batch is closed before the
//!   command that would cross either, which waits for the next batch. So every entry fits
//!   [`ENTRY_BYTES_MAX`], and `Config::validate` has proved that `max_payload_entries` of
//!   them fit a peer frame.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use openraft::ServerState;
use openraft::error::ClientWriteError;
use openraft::raft::ClientWriteResult;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};
use tokio::time::error::Elapsed;

use super::leader::not_leader;
use super::queue::enqueue;
use super::stamper::Stamper;
use crate::config::ProposerConfig;
use crate::raft::state_store::AppliedState;
use crate::raft::{NodeId, Raft, TypeConfig};
use crate::shutdown::Shutdown;
use weir_core::bounds::{ENTRY_BYTES_MAX, ENTRY_HEADER_BYTES, PROPOSE_QUEUE_MAX};
use weir_core::codec;
use weir_core::machine::{Command, Reply};
use weir_proto::protocol::Failure;

/// How long a proposed entry may take to commit and apply before its commands are answered
/// `OutcomeUnknown`. Far above any healthy commit (milliseconds); an election takes about 1 s.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(10);

/// A command's answer: its reply and the index of its entry, or why it has none.
pub type Outcome = Result<(u64, Reply), Failure>;

/// A command waiting in the proposer's queue, with where its answer goes.
struct QueuedWrite {
    command: Command,
    /// `command`'s encoded size, at most [`Command::bytes_max`].
    bytes: usize,
    answer: oneshot::Sender<Outcome>,
}

/// How long a proposer waits for one of its node's [`SharedSlots`] before it proposes
/// without one. Above a loaded commit (a few ms, `docs/benchmarks.md`), so that under load
/// the shared slots, not this bound, pace the groups; far below an election, so that a group
/// stuck without its quorum slows the others' entries only by this much each.
pub const SHARED_WAIT_MAX: Duration = Duration::from_millis(20);

/// How long an entry keeps one of its node's [`SharedSlots`] at most: far above a loaded
/// commit, so under load every entry keeps its slot to the end; an entry slower than this
/// (its group's quorum lost, a stalled disk) gives it back, so that the node's other groups
/// stop waiting for it, and keeps its own group's slot to the end.
pub const SHARED_HOLD_MAX: Duration = Duration::from_millis(100);

/// The in-flight slots the proposers of one node's data groups share (module doc); clones
/// share them.
#[derive(Clone)]
pub struct SharedSlots {
    slots: Arc<Semaphore>,
    /// How long a proposer waits for one at most: [`SHARED_WAIT_MAX`] but in tests.
    wait: Duration,
    /// How long an entry keeps one at most: [`SHARED_HOLD_MAX`] but in tests.
    hold: Duration,
}

impl SharedSlots {
    /// `slots` shared slots: the node's `in_flight_max`.
    pub fn new(slots: usize) -> SharedSlots {
        SharedSlots {
            slots: Arc::new(Semaphore::new(slots)),
            wait: SHARED_WAIT_MAX,
            hold: SHARED_HOLD_MAX,
        }
    }
}

/// An entry's hold on the in-flight slots: its group's own, given back when the entry is
/// answered, and one of the node's shared slots unless it waited [`SHARED_WAIT_MAX`] in vain
/// (or the node has one group, or the gather was a tick's), given back when the entry is
/// answered or after [`SHARED_HOLD_MAX`], whichever comes first.
struct Slots {
    own: OwnedSemaphorePermit,
    /// The shared slot, and how long the entry may keep it.
    shared: Option<(OwnedSemaphorePermit, Duration)>,
}

/// Encoded bytes of commands one entry may carry: the entry bound less its header.
const BATCH_BYTES_MAX: usize = ENTRY_BYTES_MAX - ENTRY_HEADER_BYTES;

/// The handle writers use.
#[derive(Clone)]
pub struct Proposer {
    tx: mpsc::Sender<QueuedWrite>,
}

impl Proposer {
    /// Starts the proposer task for `raft` (node `id`), taking one of `shared` for each
    /// entry too when given (a data group's proposer on a node of several groups).
    pub fn start(
        id: NodeId,
        raft: Raft,
        state: Arc<AppliedState>,
        config: ProposerConfig,
        shared: Option<SharedSlots>,
        shutdown: Shutdown,
    ) -> Proposer {
        let (tx, rx) = mpsc::channel(PROPOSE_QUEUE_MAX);
        tokio::spawn(run(id, raft, state, config, shared, rx, shutdown));
        Proposer { tx }
    }

    /// Proposes `command` and waits for its outcome. A command above its bound encoded
    /// ([`Command::bytes_max`]) is refused `BadRequest` at once.
    pub async fn propose(&self, command: Command) -> Outcome {
        let bytes = codec::encoded_len(&command);
        let bound = command.bytes_max();
        if bytes > bound {
            return Err(Failure::BadRequest(format!(
                "command is {bytes} bytes encoded, the bound is {bound}"
            )));
        }
        let (answer, rx) = oneshot::channel();
        let write = QueuedWrite {
            command,
            bytes,
            answer,
        };
        enqueue(&self.tx, write, "proposer queue")?;
        rx.await
            .unwrap_or_else(|_| Err(Failure::OutcomeUnknown("proposer stopped".into())))
    }
}

/// The proposer task: gathers a batch, stamps it, proposes it, and hands the wait for its
/// outcome to a task of its own (so the next batch forms while this one commits).
async fn run(
    id: NodeId,
    raft: Raft,
    state: Arc<AppliedState>,
    config: ProposerConfig,
    shared: Option<SharedSlots>,
    mut rx: mpsc::Receiver<QueuedWrite>,
    mut shutdown: Shutdown,
) {
    let stamper = Stamper::new(id);
    let in_flight = Arc::new(Semaphore::new(config.in_flight_max));
    let tick = Duration::from_millis(config.tick_ms);
    let mut last_proposed = Instant::now();
    // The command that closed the last batch by its size: it opens the next one.
    let mut held_over = None;
    loop {
        let gathered = gather(
            &mut rx,
            &mut held_over,
            &mut shutdown,
            (&in_flight, shared.as_ref()),
            last_proposed + tick,
            config.batch_max,
            &raft,
        )
        .await;
        let (leading, term) = {
            let m = raft.server_metrics();
            let m = m.borrow();
            (m.state == ServerState::Leader, m.vote.leader_id.term)
        };
        let (batch, slots) = match gathered {
            None => return,
            Some(Gathered::Ready(batch, slots)) if leading => (batch, slots),
            Some(Gathered::Ready(batch, _) | Gathered::NotLeading(batch)) => {
                if !batch.is_empty() {
                    let answers = batch.into_iter().map(|p| p.answer).collect();
                    answer_all(answers, Err(not_leader(&raft)));
                }
                last_proposed = Instant::now();
                continue;
            }
        };
        let Some((commands, answers)) = to_propose(batch, &state) else {
            last_proposed = Instant::now();
            continue;
        };
        let entry = stamper.stamp(term, commands);
        crate::metrics::get().proposed(entry.commands.len(), rx.len());
        last_proposed = Instant::now();
        let receiver = match raft.client_write_ff(entry).await {
            Ok(r) => r,
            Err(fatal) => {
                let failure = Failure::Unavailable(format!("raft stopped: {fatal}"));
                answer_all(answers, Err(failure));
                return;
            }
        };
        tokio::spawn(wait_for_commit(
            raft.clone(),
            term,
            receiver,
            slots,
            answers,
            last_proposed,
        ));
    }
}

/// What a gathered batch of a leader becomes: its commands, each with its answer; a `Tick`
/// when the tick timer fired with nothing to send while the machine has timed work
/// (sessions to expire, rate tickets to serve); `None` when it has none.
fn to_propose(
    batch: Vec<QueuedWrite>,
    state: &AppliedState,
) -> Option<(Vec<Command>, Vec<oneshot::Sender<Outcome>>)> {
    if !batch.is_empty() {
        return Some(batch.into_iter().map(|p| (p.command, p.answer)).unzip());
    }
    state
        .lock()
        .machine
        .has_timed_work()
        .then(|| (vec![Command::Tick], vec![]))
}

/// A commit waiter (server module doc): waits for openraft's answer to the entry proposed
/// in `term` at `proposed`, at most `COMMIT_TIMEOUT` and only while this node still leads in
/// that term, gives its in-flight slots back (a shared one after [`SHARED_HOLD_MAX`] at
/// most), and answers each of its commands.
async fn wait_for_commit(
    raft: Raft,
    term: u64,
    receiver: oneshot::Receiver<ClientWriteResult<TypeConfig>>,
    slots: Slots,
    answers: Vec<oneshot::Sender<Outcome>>,
    proposed: Instant,
) {
    let mut leadership = raft.server_metrics();
    let answered = async {
        tokio::select! {
            biased;
            result = tokio::time::timeout(COMMIT_TIMEOUT, receiver) => Some(result),
            () = stopped_leading(&mut leadership, Some(term)) => None,
        }
    };
    let Slots { own, shared } = slots;
    let result = match shared {
        None => answered.await,
        Some((shared, hold)) => {
            tokio::pin!(answered);
            tokio::select! {
                biased;
                result = &mut answered => result,
                () = tokio::time::sleep(hold) => {
                    drop(shared);
                    answered.await
                }
            }
        }
    };
    crate::metrics::observe(&crate::metrics::get().commit_seconds, proposed.elapsed());
    // The entry is applied, refused or given up on: it no longer counts in flight.
    drop(own);
    let outcome = match result {
        Some(result) => entry_outcome(&raft, result),
        // openraft may never answer an entry its deposed leader proposed (the stall runs of
        // `docs/benchmarks.md` saw it wait out COMMIT_TIMEOUT): whether a new leader commits
        // it is not this node's to know.
        None => Err(Failure::OutcomeUnknown(
            "this node stopped leading before the entry was applied".into(),
        )),
    };
    answer_all(answers, outcome);
}

/// A gathered batch: ready to propose with its in-flight slots, or to be answered
/// `NotLeader` because this node does not lead.
enum Gathered {
    Ready(Vec<QueuedWrite>, Slots),
    NotLeading(Vec<QueuedWrite>),
}

/// Waits for the first command (`held_over` from the last batch, else the queue's) or the
/// tick deadline `tick_at`, then, while this node leads, for an in-flight slot of its own
/// and, with shared slots, for one of them (at most [`SHARED_WAIT_MAX`]), taking
/// everything queued meanwhile (up to `batch_max` commands and [`BATCH_BYTES_MAX`] bytes;
/// the command that would cross the byte bound is left in `held_over`). The batch is empty
/// only when the tick fired and nothing arrived. A node that does not lead, or stops
/// leading while it waits, does not wait for a slot: the slots may be held by entries of
/// its last leadership, and a follower's answer is `NotLeader`, at once. `None`: shutdown,
/// or every handle is gone.
async fn gather(
    rx: &mut mpsc::Receiver<QueuedWrite>,
    held_over: &mut Option<QueuedWrite>,
    shutdown: &mut Shutdown,
    (in_flight, shared): (&Arc<Semaphore>, Option<&SharedSlots>),
    tick_at: Instant,
    batch_max: usize,
    raft: &Raft,
) -> Option<Gathered> {
    let mut batch = Batching::default();
    if let Some(first) = held_over.take() {
        batch.push(first);
    } else {
        // Biased (in this order): a simulation replays only if the choice between ready
        // branches is the same every run (`crate::simulated`).
        tokio::select! {
            biased;
            () = shutdown.begun() => return None,
            first = rx.recv() => batch.push(first?),
            _ = tokio::time::sleep_until(tick_at) => {}
        }
    }
    batch.drain(rx, held_over, batch_max);
    let mut leadership = raft.server_metrics();
    let own = tokio::select! {
        biased;
        permit = in_flight.clone().acquire_owned() => permit.expect("never closed"),
        () = stopped_leading(&mut leadership, None) => {
            return Some(Gathered::NotLeading(batch.writes));
        }
    };
    // A gather the tick timer began (nothing queued then) takes no shared slot, even if
    // writes arrive while it waits for its own: a tick is rare and small, and waiting for a
    // shared slot would only hold its own.
    let shared = match shared {
        Some(shared) if !batch.writes.is_empty() => {
            let slot = shared.slots.clone().acquire_owned();
            let slot = tokio::time::timeout(shared.wait, slot);
            tokio::select! {
                biased;
                slot = slot => match slot {
                    Ok(p) => Some((p.expect("never closed"), shared.hold)),
                    Err(_) => {
                        crate::metrics::get().entries_unshared.inc();
                        None
                    }
                },
                () = stopped_leading(&mut leadership, None) => {
                    return Some(Gathered::NotLeading(batch.writes));
                }
            }
        }
        _ => None,
    };
    batch.drain(rx, held_over, batch_max);
    Some(Gathered::Ready(batch.writes, Slots { own, shared }))
}

/// Returns once this node does not lead (in `term`, if given): at once if it does not now.
/// Also returns when Raft has stopped. It watches openraft's server metrics, which change
/// only with the vote, the state, the leader or the membership (the full metrics change
/// with every append and apply, and would wake every waiter on each).
async fn stopped_leading(
    metrics: &mut watch::Receiver<
        openraft::metrics::RaftServerMetrics<NodeId, crate::raft::NodeAddr>,
    >,
    term: Option<u64>,
) {
    loop {
        {
            let m = metrics.borrow_and_update();
            if m.state != ServerState::Leader || term.is_some_and(|t| m.vote.leader_id.term != t) {
                return;
            }
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// A batch being gathered, with its commands' encoded bytes.
#[derive(Default)]
struct Batching {
    writes: Vec<QueuedWrite>,
    bytes: usize,
}

impl Batching {
    fn push(&mut self, write: QueuedWrite) {
        self.bytes += write.bytes;
        self.writes.push(write);
        debug_assert!(
            self.bytes <= BATCH_BYTES_MAX,
            "entry bytes {} above {BATCH_BYTES_MAX}",
            self.bytes
        );
    }

    /// Moves already-queued commands in, up to `max` commands and [`BATCH_BYTES_MAX`] bytes;
    /// a command that would cross the byte bound (or is already held over) stops it.
    fn drain(
        &mut self,
        rx: &mut mpsc::Receiver<QueuedWrite>,
        held_over: &mut Option<QueuedWrite>,
        max: usize,
    ) {
        while held_over.is_none() && self.writes.len() < max {
            match rx.try_recv() {
                Ok(w) if self.bytes + w.bytes > BATCH_BYTES_MAX => *held_over = Some(w),
                Ok(w) => self.push(w),
                Err(_) => break,
            }
        }
    }
}

/// What became of a proposed entry, from what its openraft receiver gave within
/// [`COMMIT_TIMEOUT`]: its index and replies, or the failure every command in it shares.
fn entry_outcome<E>(
    raft: &Raft,
    result: Result<Result<ClientWriteResult<TypeConfig>, E>, Elapsed>,
) -> Result<(u64, Vec<Reply>), Failure> {
    match result {
        Ok(Ok(Ok(written))) => match written.data {
            Some(applied) => Ok((written.log_id.index, applied.replies)),
            None => Err(Failure::OutcomeUnknown(
                "entry applied without replies".into(),
            )),
        },
        Ok(Ok(Err(ClientWriteError::ForwardToLeader(_)))) => Err(not_leader(raft)),
        Ok(Ok(Err(e))) => Err(Failure::OutcomeUnknown(e.to_string())),
        Ok(Err(_)) => Err(Failure::OutcomeUnknown(
            "leadership lost while committing".into(),
        )),
        Err(_) => Err(Failure::OutcomeUnknown(format!(
            "not committed within {COMMIT_TIMEOUT:?}"
        ))),
    }
}

/// Hands each command of an entry its reply, or every one the entry's failure. A tick entry
/// has no answers and one reply.
fn answer_all(answers: Vec<oneshot::Sender<Outcome>>, outcome: Result<(u64, Vec<Reply>), Failure>) {
    match outcome {
        Ok((index, replies)) => {
            assert_eq!(replies.len(), answers.len().max(1), "one reply per command");
            for (answer, reply) in answers.into_iter().zip(replies) {
                let _ = answer.send(Ok((index, reply)));
            }
        }
        Err(failure) => {
            for a in answers {
                let _ = a.send(Err(failure.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::test_cluster::{Net, PATIENCE, TempDir, found};
    use weir_core::bounds::COMMAND_BYTES_MAX;

    /// Node 1 leads, then is cut off: it cannot commit, and its entries hold both in-flight
    /// slots while a third command waits for one. Nodes 2 and 3 elect a leader, and node 1
    /// learns of it from the follower alone: its link to the new leader stays cut, so
    /// nothing truncates its entries and openraft never answers them. The deposed node
    /// answers all three within half of [`COMMIT_TIMEOUT`] (before the fix they waited it
    /// out, and every write sent to that node meanwhile waited for a slot).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_deposed_leader_answers_its_writes_instead_of_holding_its_slots() {
        let dir = TempDir::new("proposer-deposed");
        let net = Net::default();
        let nodes = found(&net, &dir.0, 3).await;
        let (raft, state) = nodes[&1].clone();
        let (_stop, shutdown) = crate::shutdown::shutdown_channel();
        let config = ProposerConfig {
            in_flight_max: 2,
            ..ProposerConfig::default()
        };
        let proposer = Proposer::start(1, raft.clone(), state, config, None, shutdown);
        assert!(
            proposer.propose(Command::Tick).await.is_ok(),
            "node 1 commits"
        );

        net.cut(1, 2);
        net.cut(1, 3);
        let mut answers = vec![];
        for _ in 0..3 {
            let p = proposer.clone();
            answers.push(tokio::spawn(async move { p.propose(Command::Tick).await }));
            // Each its own entry: the proposer takes a command as soon as it is queued.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        net.elect(2, true);
        net.elect(3, true);
        let elected = nodes[&2]
            .0
            .wait(Some(PATIENCE))
            .metrics(
                |m| matches!(m.current_leader, Some(2 | 3)) && m.current_term > 1,
                "nodes 2 and 3 elect a leader",
            )
            .await
            .unwrap();
        let follower = if elected.current_leader == Some(2) {
            3
        } else {
            2
        };
        net.heal(1, follower);
        raft.wait(Some(PATIENCE))
            .metrics(|m| m.state != ServerState::Leader, "node 1 steps down")
            .await
            .unwrap();

        let mut kinds = vec![];
        for answer in answers {
            let outcome = tokio::time::timeout(COMMIT_TIMEOUT / 2, answer)
                .await
                .expect("answered long before COMMIT_TIMEOUT")
                .unwrap();
            kinds.push(match outcome {
                Err(Failure::OutcomeUnknown(why)) => {
                    assert!(why.contains("stopped leading"), "{why}");
                    "unknown"
                }
                Err(Failure::NotLeader { .. }) => "not leader",
                other => panic!("a write of a deposed leader: {other:?}"),
            });
        }
        assert!(
            kinds[..2].contains(&"unknown"),
            "the entries in flight are answered outcome unknown (or not leader, when openraft's \
             truncation answered first): {kinds:?}"
        );
        assert_eq!(
            kinds[2], "not leader",
            "the write that waited for a slot is answered as a follower's, never proposed"
        );
        // A write now is answered at once: no slot is held.
        let now = tokio::time::timeout(COMMIT_TIMEOUT / 2, proposer.propose(Command::Tick))
            .await
            .expect("answered at once");
        assert!(
            matches!(now, Err(Failure::NotLeader { .. })),
            "a follower's answer: {now:?}"
        );
        for (raft, _) in nodes.values() {
            raft.shutdown().await.unwrap();
        }
    }

    /// Node 1 of a founded cluster, cut from its peers so that nothing it proposes commits,
    /// and two proposers of its group sharing one set of slots.
    struct CutOff {
        _dir: TempDir,
        _net: Net,
        _stop: crate::shutdown::ShutdownSender,
        raft: Raft,
        rafts: Vec<Raft>,
        proposers: [Proposer; 2],
    }

    impl CutOff {
        async fn shut_down(&self) {
            for raft in &self.rafts {
                raft.shutdown().await.unwrap();
            }
        }
    }

    /// [`CutOff`], its proposers sharing `shared` (no ticks: only the test's writes are
    /// proposed).
    async fn cut_off_with_two_proposers(name: &str, shared: &SharedSlots) -> CutOff {
        let dir = TempDir::new(name);
        let net = Net::default();
        let nodes = found(&net, &dir.0, 3).await;
        let (raft, state) = nodes[&1].clone();
        let (stop, shutdown) = crate::shutdown::shutdown_channel();
        let start = || {
            let config = ProposerConfig {
                tick_ms: 3_600_000,
                ..ProposerConfig::default()
            };
            let shared = Some(shared.clone());
            Proposer::start(
                1,
                raft.clone(),
                state.clone(),
                config,
                shared,
                shutdown.clone(),
            )
        };
        let proposers = [start(), start()];
        assert!(
            proposers[0].propose(Command::Tick).await.is_ok(),
            "node 1 commits"
        );
        net.cut(1, 2);
        net.cut(1, 3);
        CutOff {
            _dir: dir,
            _net: net,
            _stop: stop,
            rafts: nodes.values().map(|(r, _)| r.clone()).collect(),
            raft,
            proposers,
        }
    }

    /// Waits for node 1's log to reach `index`, for less than an entry's own give-up
    /// (`COMMIT_TIMEOUT`), which would free a shared slot anyway.
    async fn appended(raft: &Raft, index: u64) -> bool {
        let wait = raft.wait(Some(COMMIT_TIMEOUT / 2));
        let appended = |m: &openraft::RaftMetrics<NodeId, crate::raft::NodeAddr>| {
            m.last_log_index >= Some(index)
        };
        wait.metrics(appended, "appended").await.is_ok()
    }

    /// The stuck entry of a [`CutOff`] whose proposers share `shared`: appended, holding the
    /// shared slot, and its proposer's write still waiting.
    async fn stuck_entry(
        name: &str,
        shared: &SharedSlots,
    ) -> (CutOff, u64, tokio::task::JoinHandle<Outcome>) {
        let cut = cut_off_with_two_proposers(name, shared).await;
        let before = cut.raft.metrics().borrow().last_log_index.unwrap_or(0);
        let stuck = cut.proposers[0].clone();
        let held = tokio::spawn(async move { stuck.propose(Command::Tick).await });
        assert!(
            appended(&cut.raft, before + 1).await,
            "the stuck entry is appended"
        );
        (cut, before + 1, held)
    }

    /// Two proposers of one node share one slot, and the first one's entry cannot commit
    /// and holds it (for an hour, here): the second proposer's entry waits for the shared
    /// slot (an hour too, here), and nothing more is appended meanwhile.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_proposer_waits_for_a_shared_slot_another_entry_holds() {
        let mut shared = SharedSlots::new(1);
        shared.wait = Duration::from_secs(3_600);
        shared.hold = Duration::from_secs(3_600);
        let (cut, stuck_at, _held) = stuck_entry("proposer-shared-wait", &shared).await;
        assert_eq!(
            shared.slots.available_permits(),
            0,
            "the stuck entry holds it"
        );
        let other = cut.proposers[1].clone();
        let _waiting = tokio::spawn(async move { other.propose(Command::Tick).await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let last = cut.raft.metrics().borrow().last_log_index;
        assert_eq!(
            last,
            Some(stuck_at),
            "the second entry waits for the shared slot"
        );
        cut.shut_down().await;
    }

    /// As above, with the proposer's wait bounded by [`SHARED_WAIT_MAX`]: the second entry
    /// goes into the log without a shared slot while the stuck entry still holds it (its
    /// commit waiter gives up only after `COMMIT_TIMEOUT`). A group that lost its quorum
    /// slows the node's other groups, and stops none.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_proposer_waits_at_most_the_bound_then_proposes_without_a_shared_slot() {
        let mut shared = SharedSlots::new(1);
        shared.hold = Duration::from_secs(3_600);
        let (cut, stuck_at, held) = stuck_entry("proposer-shared-bound", &shared).await;
        let unshared = || crate::metrics::get().entries_unshared.get();
        let unshared_before = unshared();
        let sent = std::time::Instant::now();
        let other = cut.proposers[1].clone();
        let _waiting = tokio::spawn(async move { other.propose(Command::Tick).await });
        assert!(
            appended(&cut.raft, stuck_at + 1).await,
            "the second entry is appended without a shared slot"
        );
        assert!(sent.elapsed() >= SHARED_WAIT_MAX);
        // Counted (another test's escapes may count too: the registry is the process's).
        assert!(
            unshared() > unshared_before,
            "the entry without a slot is counted"
        );
        assert_eq!(
            shared.slots.available_permits(),
            0,
            "still held by the stuck entry"
        );
        assert!(!held.is_finished(), "the stuck entry's write still waits");
        cut.shut_down().await;
    }

    /// An entry that cannot commit and holds a shared slot gives it back after its hold
    /// bound ([`SHARED_HOLD_MAX`]; 2 s here, so that the test sees it held first), long
    /// before its commit waiter gives up (`COMMIT_TIMEOUT`).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_entry_that_cannot_commit_gives_its_shared_slot_back_after_the_bound() {
        let mut shared = SharedSlots::new(1);
        shared.hold = Duration::from_secs(2);
        let (cut, _, held) = stuck_entry("proposer-shared-hold", &shared).await;
        assert_eq!(
            shared.slots.available_permits(),
            0,
            "the stuck entry holds it"
        );
        let mut given_back = false;
        for _ in 0..(COMMIT_TIMEOUT / 2).as_millis() / 10 {
            if shared.slots.available_permits() == 1 {
                given_back = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            given_back,
            "the shared slot is back before the waiter gives up"
        );
        assert!(!held.is_finished(), "the entry itself is still waiting");
        cut.shut_down().await;
    }

    fn write(bytes: usize) -> QueuedWrite {
        QueuedWrite {
            command: Command::Tick,
            bytes,
            answer: oneshot::channel().0,
        }
    }

    #[test]
    fn a_batch_closes_before_the_command_that_would_cross_the_entry_bound() {
        let (tx, mut rx) = mpsc::channel(1_000);
        let big = COMMAND_BYTES_MAX;
        let fit = BATCH_BYTES_MAX / big;
        for _ in 0..fit + 10 {
            tx.try_send(write(big)).unwrap();
        }
        let mut held_over = None;
        let mut batch = Batching::default();
        batch.drain(&mut rx, &mut held_over, 100_000);
        assert_eq!(batch.writes.len(), fit);
        assert!(batch.bytes <= BATCH_BYTES_MAX);
        assert!(
            held_over.is_some(),
            "the crossing command waits for the next batch"
        );
        // The held-over command is not overtaken: nothing more is drained while it waits.
        batch.drain(&mut rx, &mut held_over, 100_000);
        assert_eq!(batch.writes.len(), fit);
        // The command count bound still applies below the byte bound.
        let mut small = Batching::default();
        let mut none = None;
        for _ in 0..10 {
            tx.try_send(write(1)).unwrap();
        }
        small.push(held_over.take().unwrap());
        small.drain(&mut rx, &mut none, 5);
        assert_eq!(small.writes.len(), 5);
    }
}
