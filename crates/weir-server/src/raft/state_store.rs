//! The state-machine store: the [`Machine`] in memory, persisted only as snapshots.
//!
//! The authoritative state is the in-memory machine plus the id of the last applied entry
//! and the last membership. It is written down only as a snapshot file, `snapshot.bin`
//! (`snapshot_file.rs`): the snapshot's openraft metadata and the machine's own snapshot
//! bytes (the `b"WSNP"` frame, bit-exact across nodes). On start the file, if present, is
//! verified and loaded, and openraft re-applies the log after it.
//!
//! A snapshot's bytes live in files, never at rest in memory: at ten million live keys a
//! machine snapshot is some 190 MB. openraft's snapshot data is a [`SnapshotBytes`], a
//! file seen from an offset. The current snapshot is remembered as its metadata and where
//! its machine bytes start in `snapshot.bin`; `get_current_snapshot` hands openraft that
//! file from there, which it reads chunk by chunk to send. A snapshot received from the
//! leader is written, chunk by chunk as it arrives, to a file of its own
//! (`snapshot.bin.recv`, unlinked as soon as it is created: it lives as long as its handle,
//! and a crash leaves at most an empty one, removed at start); `install_snapshot` then
//! checks it (the frame's
//! checksum streamed over the file, then its bounds) and decodes the machine from the
//! file (`Machine::restore_from`), and copies it behind the metadata into the new
//! `snapshot.bin`. Memory holds the decoded machine and a copy buffer, never the bytes
//! whole. The leader's `build_snapshot` encodes the frozen state straight into the file
//! through a buffer (its length counted first: the file's header and the metadata hold
//! it), so it never holds the bytes either.
//!
//! Invariants:
//! - The snapshot file is replaced atomically (write a temporary file, fsync, rename, fsync
//!   the directory) and only by a newer snapshot: a slow build never rolls back a newer
//!   install (openraft may purge the log up to a snapshot as soon as it is reported).
//! - The rename of `snapshot.bin` and the change of the current snapshot happen under one
//!   lock, and `get_current_snapshot` opens the file under it: the offset it reads from is
//!   always the one of the file it opened.
//! - `install_snapshot` checks and decodes the received snapshot before anything else, and
//!   persists it before it replaces the state and returns. A snapshot that fails its check
//!   is an error naming it and the fault; the state and `snapshot.bin` are untouched.
//! - `build_snapshot` reads state, applied id and membership under one lock: a consistent
//!   triple. The state is frozen there (`Machine::freeze`, a clone sharing the lean keys'
//!   chunks) and encoded after the lock is let go, so applies wait for the freeze, not
//!   for the encode.
//! - Events of every applied entry are published to subscribers; a slow subscriber may miss
//!   some (it learns of them by asking again: grants are state, not messages).
//! - Each snapshot built, installed or loaded at start is logged (INFO) with its id, in the
//!   words of the `SNAPSHOT_*` constants, which the partition harness reads: a line is
//!   written only once the file holding that snapshot, or a newer one, is durable.
//! - What each entry did cluster-wide (`activity.rs`) is derived and published only while
//!   the activity feed has a subscriber (a console's event stream, the HTTP front's
//!   history of the last minutes).

// openraft's traits fix the error type to its `StorageError`, which is large; boxing it
// is not ours to choose.
#![allow(clippy::result_large_err)]
use std::io::{Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::RaftStateMachine;
use openraft::{
    AnyError, EntryPayload, ErrorSubject, ErrorVerb, RaftSnapshotBuilder, StorageIOError,
};
use tokio::sync::broadcast;

use super::activity::{self, Activities, WATCH_ENTRIES_BACKLOG};
use super::snapshot_bytes::SnapshotBytes;
use super::snapshot_file::{self, Written};
use super::{
    Entry, GroupId, LogId, Snapshot, SnapshotMeta, StorageError, StoredMembership, TypeConfig,
};
use weir_core::bounds::APPLIED_EVENTS_BACKLOG;
use weir_core::machine::{Applied, Frozen, Machine};

/// The file a snapshot from the leader is received in, unlinked once created.
const RECEIVING_FILE: &str = "snapshot.bin.recv";

/// Logged when a snapshot was built and the file holds it (or a newer one), then its id.
pub const SNAPSHOT_BUILT: &str = "snapshot built and saved";
/// Logged when a snapshot from the leader was saved and replaced the state, then its id.
pub const SNAPSHOT_INSTALLED: &str = "snapshot installed from the leader and saved";
/// Logged at start when the snapshot file was loaded, then its id.
pub const SNAPSHOT_LOADED: &str = "snapshot loaded at start";
/// Logged at start when there is no snapshot file.
pub const SNAPSHOT_NONE: &str = "no snapshot at start";

/// The newest snapshot, as persisted: its metadata, and where its machine bytes start in
/// `snapshot.bin` (they run to the file's end).
#[derive(Clone)]
struct Current {
    meta: SnapshotMeta,
    written: Written,
}

/// The machine snapshot to persist.
enum Source {
    /// A state frozen by `build_snapshot`, encoded straight into the file.
    Built(Box<Frozen>),
    /// Received from the leader: a file from an offset (the start of the file it was
    /// received in), and the bytes' length.
    Received(std::fs::File, u64, u64),
}

/// The state behind the lock.
pub struct Applier {
    pub machine: Machine,
    pub last_applied: Option<LogId>,
    pub membership: StoredMembership,
}

/// The applied state and what hangs off it: the newest snapshot and the feed of applied
/// entries' events. One per node, shared (behind an `Arc`) by the state-machine store, its
/// snapshot builders and the server, which reads the machine and subscribes to the events.
pub struct AppliedState {
    /// A std mutex, not a tokio one: every holder copies, encodes or applies and lets go,
    /// never across an await.
    applier: Mutex<Applier>,
    /// The newest snapshot, as persisted. Held across the rename that replaces the file,
    /// and across the open of the file that reads it.
    current: Mutex<Option<Current>>,
    /// Serializes writes of the snapshot file.
    persist: tokio::sync::Mutex<()>,
    dir: PathBuf,
    events: broadcast::Sender<Arc<Applied>>,
    /// What each applied entry did, for the console's event stream (`activity.rs`):
    /// derived only while it has a subscriber.
    activity: broadcast::Sender<Arc<Activities>>,
    /// Ends every snapshot line it logs: empty on a node of one group, ` (group G)` on a
    /// node of several, so that a reader of the log tells the groups' snapshots apart.
    group_tag: String,
}

/// The state-machine store handed to openraft. Clones share everything.
#[derive(Clone)]
pub struct StateStore {
    state: Arc<AppliedState>,
}

fn sm_err(verb: ErrorVerb, why: impl std::fmt::Display) -> StorageError {
    StorageIOError::new(
        ErrorSubject::StateMachine,
        verb,
        AnyError::error(why.to_string()),
    )
    .into()
}

impl AppliedState {
    /// The state, for reads. Hold it briefly: apply waits on it.
    pub fn lock(&self) -> MutexGuard<'_, Applier> {
        // A panic while holding the lock is a bug that already stopped the Raft core; the
        // state it guarded is still the last consistent one, since apply mutates in place
        // only through the machine, which asserts before it changes anything it cannot undo.
        crate::lock::lock(&self.applier)
    }

    /// Subscribes to the applied entries' outputs.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Applied>> {
        self.events.subscribe()
    }

    /// Subscribes to what the applied entries did, cluster-wide (`activity.rs`). A
    /// subscriber more than `WATCH_ENTRIES_BACKLOG` entries behind misses some, and is told.
    pub fn watch(&self) -> broadcast::Receiver<Arc<Activities>> {
        self.activity.subscribe()
    }
}

impl StateStore {
    /// Opens the store in `dir`, loading `snapshot.bin` when present. A damaged or foreign
    /// file is refused with a message naming it.
    pub fn open(dir: &Path) -> Result<StateStore, String> {
        StateStore::open_in(dir, None)
    }

    /// [`StateStore::open`] for group `group` of a node of several groups (`None`: a node of
    /// one), which its snapshot lines name.
    pub fn open_in(dir: &Path, group: Option<GroupId>) -> Result<StateStore, String> {
        let group_tag = group.map_or_else(String::new, |g| format!(" (group {g})"));
        let mut applier = Applier {
            machine: Machine::new(),
            last_applied: None,
            membership: StoredMembership::default(),
        };
        // A receiving file is unlinked as soon as it is created: one left here was created
        // by a node that stopped in between, and holds nothing of use.
        let receiving = dir.join(RECEIVING_FILE);
        match std::fs::remove_file(&receiving) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("{}: {e}", receiving.display())),
        }
        let mut current = None;
        match snapshot_file::load(dir)? {
            Some(loaded) => {
                applier.machine = loaded.machine;
                applier.last_applied = loaded.meta.last_log_id;
                applier.membership = loaded.meta.last_membership.clone();
                tracing::info!("{SNAPSHOT_LOADED}: {}{group_tag}", loaded.meta.snapshot_id);
                current = Some(Current {
                    meta: loaded.meta,
                    written: loaded.written,
                });
            }
            None => tracing::info!("{SNAPSHOT_NONE}{group_tag}"),
        }
        let (events, _) = broadcast::channel(APPLIED_EVENTS_BACKLOG);
        let (activity, _) = broadcast::channel(WATCH_ENTRIES_BACKLOG);
        Ok(StateStore {
            state: Arc::new(AppliedState {
                applier: Mutex::new(applier),
                current: Mutex::new(current),
                persist: tokio::sync::Mutex::new(()),
                dir: dir.to_owned(),
                events,
                activity,
                group_tag,
            }),
        })
    }

    /// The applied state, for the server.
    pub fn state(&self) -> Arc<AppliedState> {
        self.state.clone()
    }

    /// Writes `meta` and the machine snapshot `data` as the snapshot file if it is newer
    /// than the current one, and makes it current: the machine snapshot's bytes written,
    /// through a buffer, or `None` when the current one is as new.
    async fn persist(
        &self,
        meta: &SnapshotMeta,
        data: Source,
    ) -> Result<Option<u64>, StorageError> {
        let _one_at_a_time = self.state.persist.lock().await;
        let newer = {
            let current = crate::lock::lock(&self.state.current);
            current
                .as_ref()
                .is_none_or(|c| meta.last_log_id > c.meta.last_log_id)
        };
        if !newer {
            return Ok(None);
        }
        // PLANTED(unsynced-snapshot): the file replaced without a single fsync.
        let synced = !weir_core::planted::is(weir_core::planted::Plant::UnsyncedSnapshot);
        let state = self.state.clone();
        let meta = meta.clone();
        crate::simulated::blocking(move || -> std::io::Result<Option<u64>> {
            let written = match data {
                Source::Built(frozen) => {
                    let data = snapshot_file::Data::Encoded(&frozen);
                    snapshot_file::write_temporary(&state.dir, &meta, data, synced)?
                }
                Source::Received(mut file, start, len) => {
                    file.seek(SeekFrom::Start(start))?;
                    let data = snapshot_file::Data::Copied(&mut file, len);
                    snapshot_file::write_temporary(&state.dir, &meta, data, synced)?
                }
            };
            {
                let mut current = crate::lock::lock(&state.current);
                snapshot_file::rename_temporary(&state.dir)?;
                *current = Some(Current { meta, written });
            }
            if synced {
                snapshot_file::sync_dir(&state.dir)?;
            }
            Ok(Some(written.data_len))
        })
        .await
        .map_err(|e| sm_err(ErrorVerb::Write, e))?
        .map_err(|e| {
            let file = snapshot_file::SNAPSHOT_FILE;
            sm_err(ErrorVerb::Write, format!("{file}: {e}"))
        })
    }

    /// The current snapshot, as openraft reads it: its metadata and `snapshot.bin` from
    /// where the machine bytes start.
    async fn current_snapshot(&self) -> Result<Option<Snapshot>, StorageError> {
        let state = self.state.clone();
        let opened = crate::simulated::blocking(move || -> std::io::Result<_> {
            let current = crate::lock::lock(&state.current);
            let Some(current) = current.as_ref() else {
                return Ok(None);
            };
            let mut file = std::fs::File::open(snapshot_file::path(&state.dir))?;
            let start = current.written.data_start;
            file.seek(SeekFrom::Start(start))?;
            Ok(Some((current.meta.clone(), file, start)))
        })
        .await
        .map_err(|e| sm_err(ErrorVerb::Read, e))?
        .map_err(|e| {
            let file = snapshot_file::SNAPSHOT_FILE;
            sm_err(ErrorVerb::Read, format!("{file}: {e}"))
        })?;
        Ok(opened.map(|(meta, file, start)| Snapshot {
            meta,
            snapshot: Box::new(SnapshotBytes::new(tokio::fs::File::from_std(file), start)),
        }))
    }
}

/// The snapshot id: derived from the last log id, so every node names the same snapshot alike.
fn snapshot_id(last: Option<LogId>) -> String {
    match last {
        Some(l) => format!("{}-{}-{}", l.leader_id.term, l.leader_id.node_id, l.index),
        None => "empty".to_string(),
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateStore {
    async fn build_snapshot(&mut self) -> Result<Snapshot, StorageError> {
        // The state lock is held only to freeze the state (a clone whose lean keys are
        // shared chunk by chunk); the encode runs apart, on a blocking thread, while applies
        // go on, straight into the file. The bytes are those of the state at
        // `last_applied`; openraft is handed the file.
        let started = std::time::Instant::now();
        let (meta, frozen) = {
            let state = self.state.lock();
            let meta = SnapshotMeta {
                last_log_id: state.last_applied,
                last_membership: state.membership.clone(),
                snapshot_id: snapshot_id(state.last_applied),
            };
            (meta, state.machine.freeze())
        };
        let frozen_in = started.elapsed();
        match self.persist(&meta, Source::Built(Box::new(frozen))).await? {
            Some(bytes) => {
                crate::metrics::get().snapshot_built(bytes as usize, frozen_in, started.elapsed());
                let tag = &self.state.group_tag;
                tracing::info!("{SNAPSHOT_BUILT}: {}, {bytes} bytes{tag}", meta.snapshot_id);
            }
            // The file holds a newer snapshot (installed meanwhile): this one is not
            // encoded, and the newer one stands for it.
            None => tracing::info!(
                "{SNAPSHOT_BUILT}: {}{}",
                meta.snapshot_id,
                self.state.group_tag
            ),
        }
        // The file holds this snapshot, or a newer one that replaced it since: either is
        // what the node has, and what openraft may send.
        let current = self.current_snapshot().await?;
        Ok(current.expect("the snapshot just saved, or a newer one, is current"))
    }
}

impl RaftStateMachine<TypeConfig> for StateStore {
    type SnapshotBuilder = StateStore;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let state = self.state.lock();
        Ok((state.last_applied, state.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Option<Applied>>, StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut out = vec![];
        let mut published = vec![];
        let mut watched = vec![];
        let watching = activity::wanted(&self.state.activity);
        {
            let mut state = self.state.lock();
            for entry in entries {
                let index = entry.log_id.index;
                state.last_applied = Some(entry.log_id);
                let response = match entry.payload {
                    EntryPayload::Blank => {
                        state.machine.skip(index);
                        None
                    }
                    EntryPayload::Normal(batch) => {
                        let released =
                            watching.then(|| activity::released_limits(&state.machine, &batch));
                        let applied = state.machine.apply(index, &batch);
                        if let Some(released) = released {
                            let did = activity::of_entry(
                                &state.machine,
                                &batch,
                                &applied.replies,
                                &applied.events,
                                released,
                            );
                            if !did.is_empty() {
                                watched.push(Arc::new(did));
                            }
                        }
                        if !applied.events.is_empty() {
                            published.push(Arc::new(applied.clone()));
                        }
                        Some(applied)
                    }
                    EntryPayload::Membership(m) => {
                        state.machine.skip(index);
                        state.membership = StoredMembership::new(Some(entry.log_id), m);
                        None
                    }
                };
                out.push(response);
            }
        }
        for applied in published {
            // No subscriber is fine: nobody is connected to push to.
            let _ = self.state.events.send(applied);
        }
        for did in watched {
            // The last viewer may have left since: nobody to tell is fine.
            let _ = self.state.activity.send(did);
        }
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<SnapshotBytes>, StorageError> {
        let path = self.state.dir.join(RECEIVING_FILE);
        let file = crate::simulated::blocking(move || -> std::io::Result<std::fs::File> {
            // One left by a receive that was given up is unlinked already; one whose unlink
            // failed is removed here, and one left by a node that stopped between the
            // create and the unlink, at start.
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            let file = crate::private_files::options()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)?;
            std::fs::remove_file(&path)?;
            Ok(file)
        })
        .await
        .map_err(|e| sm_err(ErrorVerb::Write, e))?
        .map_err(|e| sm_err(ErrorVerb::Write, format!("{RECEIVING_FILE}: {e}")))?;
        Ok(Box::new(SnapshotBytes::new(
            tokio::fs::File::from_std(file),
            0,
        )))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<SnapshotBytes>,
    ) -> Result<(), StorageError> {
        // Received from the leader, the bytes are a file of their own from its start; a
        // snapshot handed to openraft otherwise may be another from an offset.
        let start = snapshot.start();
        let file = snapshot.into_std().await;
        // Checking and decoding a large snapshot takes seconds (a million live keys); on a
        // blocking thread it does not stall the node's heartbeats, votes and client ports,
        // which share the runtime's workers. It reads the file, twice (the checksum, then
        // the decode), and holds a buffer of it. The state is untouched until it succeeds.
        let restored = crate::simulated::blocking(move || {
            let mut file = file;
            let started = std::time::Instant::now();
            let end = file
                .metadata()
                .map_err(|e| format!("{RECEIVING_FILE}: {e}"))?
                .len();
            let len = end.saturating_sub(start);
            let machine =
                Machine::restore_from(&mut file, start, len).map_err(|e| e.to_string())?;
            crate::metrics::get().snapshot_installed(len as usize, started.elapsed());
            Ok::<_, String>((machine, file, len))
        })
        .await
        .map_err(|e| sm_err(ErrorVerb::Read, format!("snapshot decoding stopped: {e}")))?;
        let (machine, file, len) = restored.map_err(|e| {
            sm_err(
                ErrorVerb::Read,
                format!("snapshot {} from the leader: {e}", meta.snapshot_id),
            )
        })?;
        self.persist(meta, Source::Received(file, start, len))
            .await?;
        let mut state = self.state.lock();
        state.machine = machine;
        state.last_applied = meta.last_log_id;
        state.membership = meta.last_membership.clone();
        tracing::info!(
            "{SNAPSHOT_INSTALLED}: {}{}",
            meta.snapshot_id,
            self.state.group_tag
        );
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        self.current_snapshot().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::test_cluster::TempDir;
    use openraft::{CommittedLeaderId, Membership};
    use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
    use weir_core::machine::{Batch, Command, Leadership};

    /// A store in `dir/name` that applied `limits` limit definitions, one an entry from 1.
    async fn store_with(dir: &TempDir, name: &str, limits: u64) -> StateStore {
        let dir = dir.0.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let mut store = StateStore::open(&dir).unwrap();
        let entries = (1..=limits).map(|index| Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(Batch {
                leadership: Leadership {
                    term: 1,
                    node: 1,
                    incarnation: 1,
                },
                clock_ms: index * 10,
                wall_ms: 0,
                commands: vec![Command::DefineLimit {
                    tenant: "t".into(),
                    name: format!("limit-{index}"),
                    concurrent: index as u32,
                    per_second: 0.0,
                    burst: None,
                }],
            }),
        });
        store.apply(entries.collect::<Vec<_>>()).await.unwrap();
        store
    }

    fn with_members(mut meta: SnapshotMeta) -> SnapshotMeta {
        let members = [(1, super::super::NodeAddr::default())];
        meta.last_membership = StoredMembership::new(
            None,
            Membership::new(
                vec![[1].into()],
                members
                    .into_iter()
                    .collect::<std::collections::BTreeMap<_, _>>(),
            ),
        );
        meta
    }

    async fn read_all(snapshot: &mut SnapshotBytes) -> Vec<u8> {
        snapshot.seek(SeekFrom::Start(0)).await.unwrap();
        let mut bytes = vec![];
        snapshot.read_to_end(&mut bytes).await.unwrap();
        bytes
    }

    /// Sends `data` to `to` as openraft's chunked transport writes it: chunks of 500
    /// bytes, each at its offset, the last one twice (a resend).
    async fn receive(to: &mut StateStore, data: &[u8]) -> Box<SnapshotBytes> {
        let mut receiving = to.begin_receiving_snapshot().await.unwrap();
        let mut offset = 0;
        for chunk in data.chunks(500) {
            receiving.seek(SeekFrom::Start(offset)).await.unwrap();
            receiving.write_all(chunk).await.unwrap();
            offset += chunk.len() as u64;
        }
        let last = data.len().saturating_sub(500);
        receiving.seek(SeekFrom::Start(last as u64)).await.unwrap();
        receiving.write_all(&data[last..]).await.unwrap();
        receiving.shutdown().await.unwrap();
        receiving
    }

    fn file_of(store: &StateStore) -> Vec<u8> {
        std::fs::read(snapshot_file::path(&store.state.dir)).unwrap()
    }

    /// The files of the store's directory, by name.
    fn names(store: &StateStore) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(&store.state.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[tokio::test]
    async fn a_snapshot_received_in_chunks_installs_the_leaders_state_from_its_file() {
        let dir = TempDir::new("install-chunks");
        let mut leader = store_with(&dir, "leader", 40).await;
        let mut follower = store_with(&dir, "follower", 2).await;
        let mut built = leader.build_snapshot().await.unwrap();
        let meta = with_members(built.meta.clone());
        // What the leader sends is the machine snapshot, as the peer protocol carries it.
        let sent = read_all(&mut built.snapshot).await;
        let machine_bytes = leader.state.lock().machine.snapshot();
        assert_eq!(sent, machine_bytes);
        assert!(sent.len() > 1_500, "several chunks: {}", sent.len());

        let received = receive(&mut follower, &sent).await;
        follower.install_snapshot(&meta, received).await.unwrap();
        assert_eq!(
            follower.state.lock().machine.digest(),
            leader.state.lock().machine.digest()
        );
        assert_eq!(follower.state.lock().last_applied, meta.last_log_id);
        // Persisted as the file every release reads, and sent on from it.
        assert_eq!(
            file_of(&follower),
            snapshot_file::encode_file(&meta, &machine_bytes)
        );
        let mut current = follower.get_current_snapshot().await.unwrap().unwrap();
        assert_eq!(current.meta, meta);
        assert_eq!(read_all(&mut current.snapshot).await, machine_bytes);
        assert_eq!(names(&follower), ["snapshot.bin".to_string()]);
        // And loaded at the next start.
        let dir_of = follower.state.dir.clone();
        drop(follower);
        let again = StateStore::open(&dir_of).unwrap();
        assert_eq!(
            again.state.lock().machine.digest(),
            leader.state.lock().machine.digest()
        );
    }

    #[tokio::test]
    async fn a_damaged_received_snapshot_is_refused_and_leaves_state_and_file() {
        let dir = TempDir::new("install-damaged");
        let mut leader = store_with(&dir, "leader", 40).await;
        let mut follower = store_with(&dir, "follower", 2).await;
        let before = follower.build_snapshot().await.unwrap().meta;
        let file_before = file_of(&follower);
        let digest_before = follower.state.lock().machine.digest();

        let mut built = leader.build_snapshot().await.unwrap();
        let mut sent = read_all(&mut built.snapshot).await;
        let middle = sent.len() / 2;
        sent[middle] ^= 0x01;
        let received = receive(&mut follower, &sent).await;
        let err = follower
            .install_snapshot(&built.meta, received)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("snapshot 1-1-40 from the leader: checksum mismatch"),
            "{err}"
        );
        assert_eq!(follower.state.lock().machine.digest(), digest_before);
        assert_eq!(follower.state.lock().last_applied, before.last_log_id);
        assert_eq!(file_of(&follower), file_before);
        let current = follower.get_current_snapshot().await.unwrap().unwrap();
        assert_eq!(current.meta, before);
        assert_eq!(names(&follower), ["snapshot.bin".to_string()]);
    }

    #[tokio::test]
    async fn a_receive_given_up_or_cut_short_leaves_no_file() {
        let dir = TempDir::new("install-leftover");
        let mut follower = store_with(&dir, "follower", 2).await;
        let dir_of = follower.state.dir.clone();
        // A node stopped between the create and the unlink left one.
        std::fs::write(dir_of.join(RECEIVING_FILE), b"left over").unwrap();
        drop(follower);
        follower = StateStore::open(&dir_of).unwrap();
        assert!(names(&follower).is_empty(), "{:?}", names(&follower));
        // A receive given up for another: both files already gone from the directory.
        let given_up = receive(&mut follower, b"the start of a snapshot").await;
        std::fs::write(dir_of.join(RECEIVING_FILE), b"an unlink that failed").unwrap();
        let next = receive(&mut follower, b"another").await;
        assert!(names(&follower).is_empty(), "{:?}", names(&follower));
        drop((given_up, next));
    }
}
