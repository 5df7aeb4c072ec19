//! The state-machine store: the [`Machine`] in memory, persisted only as snapshots.
//!
//! The authoritative state is the in-memory machine plus the id of the last applied entry
//! and the last membership. It is written down only as a snapshot file, `snapshot.bin`:
//! a frame of kind `b"WSST"` whose payload is the snapshot's openraft metadata and the
//! machine's own snapshot bytes (the `b"WSNP"` frame, bit-exact across nodes). On start the
//! file, if present, is verified and loaded, and openraft re-applies the log after it.
//!
//! Invariants:
//! - The snapshot file is replaced atomically (write a temporary file, fsync, rename, fsync
//!   the directory) and only by a newer snapshot: a slow build never rolls back a newer
//!   install (openraft may purge the log up to a snapshot as soon as it is reported).
//! - `install_snapshot` persists the snapshot before it replaces the state and returns.
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
use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::RaftStateMachine;
use openraft::{
    AnyError, EntryPayload, ErrorSubject, ErrorVerb, RaftSnapshotBuilder, StorageIOError,
};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use super::activity::{self, Activities, WATCH_ENTRIES_BACKLOG};
use super::{Entry, LogId, Snapshot, SnapshotMeta, StorageError, StoredMembership, TypeConfig};
use weir_core::bounds::APPLIED_EVENTS_BACKLOG;
use weir_core::codec::{self, FrameError};
use weir_core::machine::{Applied, Machine};

/// Frame kind of the snapshot file.
const FILE_MAGIC: [u8; 4] = *b"WSST";
/// Version of the snapshot file's payload layout.
const FILE_VERSION: u16 = 1;
/// The snapshot file's name in the data directory.
pub const SNAPSHOT_FILE: &str = "snapshot.bin";

/// Logged when a snapshot was built and the file holds it (or a newer one), then its id.
pub const SNAPSHOT_BUILT: &str = "snapshot built and saved";
/// Logged when a snapshot from the leader was saved and replaced the state, then its id.
pub const SNAPSHOT_INSTALLED: &str = "snapshot installed from the leader and saved";
/// Logged at start when the snapshot file was loaded, then its id.
pub const SNAPSHOT_LOADED: &str = "snapshot loaded at start";
/// Logged at start when there is no snapshot file.
pub const SNAPSHOT_NONE: &str = "no snapshot at start";

/// What the snapshot file holds.
#[derive(Serialize, Deserialize)]
struct SnapshotFile {
    meta: SnapshotMeta,
    /// `Machine::snapshot()` bytes.
    data: Vec<u8>,
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
    /// The newest snapshot, as persisted.
    current: Mutex<Option<(SnapshotMeta, Arc<Vec<u8>>)>>,
    /// Serializes writes of the snapshot file.
    persist: tokio::sync::Mutex<()>,
    dir: PathBuf,
    events: broadcast::Sender<Arc<Applied>>,
    /// What each applied entry did, for the console's event stream (`activity.rs`):
    /// derived only while it has a subscriber.
    activity: broadcast::Sender<Arc<Activities>>,
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
        let path = dir.join(SNAPSHOT_FILE);
        let mut applier = Applier {
            machine: Machine::new(),
            last_applied: None,
            membership: StoredMembership::default(),
        };
        let mut current = None;
        match std::fs::read(&path) {
            Ok(bytes) => {
                let file = decode_file(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
                applier.machine =
                    Machine::restore(&file.data).map_err(|e| format!("{}: {e}", path.display()))?;
                applier.last_applied = file.meta.last_log_id;
                applier.membership = file.meta.last_membership.clone();
                tracing::info!("{SNAPSHOT_LOADED}: {}", file.meta.snapshot_id);
                current = Some((file.meta, Arc::new(file.data)));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::info!("{SNAPSHOT_NONE}");
            }
            Err(e) => return Err(format!("{}: {e}", path.display())),
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
            }),
        })
    }

    /// The applied state, for the server.
    pub fn state(&self) -> Arc<AppliedState> {
        self.state.clone()
    }

    /// Writes `meta` + `data` as the snapshot file if it is newer than the current one, and
    /// makes it current.
    async fn persist(&self, meta: &SnapshotMeta, data: Arc<Vec<u8>>) -> Result<(), StorageError> {
        let _one_at_a_time = self.state.persist.lock().await;
        let newer = {
            let current = crate::lock::lock(&self.state.current);
            current
                .as_ref()
                .is_none_or(|(m, _)| meta.last_log_id > m.last_log_id)
        };
        if !newer {
            return Ok(());
        }
        let bytes = encode_file(meta, &data);
        let dir = self.state.dir.clone();
        // PLANTED(unsynced-snapshot): the file replaced without a single fsync.
        let write = match weir_core::planted::is(weir_core::planted::Plant::UnsyncedSnapshot) {
            true => replace_unsynced,
            false => write_atomically,
        };
        tokio::task::spawn_blocking(move || write(&dir, SNAPSHOT_FILE, &bytes))
            .await
            .map_err(|e| sm_err(ErrorVerb::Write, e))?
            .map_err(|e| sm_err(ErrorVerb::Write, format!("{SNAPSHOT_FILE}: {e}")))?;
        *crate::lock::lock(&self.state.current) = Some((meta.clone(), data));
        Ok(())
    }
}

/// The bytes of a snapshot file holding `meta` and the machine snapshot `data`.
pub fn encode_file(meta: &SnapshotMeta, data: &[u8]) -> Vec<u8> {
    /// [`SnapshotFile`] borrowed: the same encoding (a byte slice and a `Vec<u8>` are both a
    /// length and the bytes), without copying the machine's bytes first.
    #[derive(Serialize)]
    struct Borrowed<'a> {
        meta: &'a SnapshotMeta,
        data: &'a [u8],
    }
    codec::seal_frame(
        FILE_MAGIC,
        FILE_VERSION,
        &codec::encode(&Borrowed { meta, data }),
    )
}

/// Verifies and decodes the snapshot file.
fn decode_file(bytes: &[u8]) -> Result<SnapshotFile, FrameError> {
    let payload = codec::open_frame(
        bytes,
        FILE_MAGIC,
        FILE_VERSION,
        weir_core::bounds::SNAPSHOT_BYTES_MAX,
    )?;
    codec::decode(payload)
}

/// Replaces `dir/name` with `bytes`: temporary file, fsync, rename, fsync of the directory.
pub fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = crate::private_files::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join(name))?;
    std::fs::File::open(dir)?.sync_all()
}

/// `write_atomically` without its fsyncs: the `unsynced-snapshot` plant's.
fn replace_unsynced(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    crate::private_files::create(&tmp)?.write_all(bytes)?;
    std::fs::rename(&tmp, dir.join(name))
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
        // go on. The bytes are those of the state at `last_applied`.
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
        let data = tokio::task::spawn_blocking(move || frozen.encode())
            .await
            .map_err(|e| sm_err(ErrorVerb::Write, format!("encoding the snapshot: {e}")))?;
        let data = Arc::new(data);
        crate::metrics::get().snapshot_built(data.len(), frozen_in, started.elapsed());
        self.persist(&meta, data.clone()).await?;
        tracing::info!(
            "{SNAPSHOT_BUILT}: {}, {} bytes",
            meta.snapshot_id,
            data.len()
        );
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data.to_vec())),
        })
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

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = Arc::new(snapshot.into_inner());
        // Decoding and checking a large snapshot takes seconds (a million live keys); on a
        // blocking thread it does not stall the node's heartbeats, votes and client ports,
        // which share the runtime's workers. The state is untouched until it succeeds.
        let decoding = data.clone();
        let restored = tokio::task::spawn_blocking(move || {
            let started = std::time::Instant::now();
            let restored = Machine::restore(&decoding);
            crate::metrics::get().snapshot_installed(decoding.len(), started.elapsed());
            restored
        })
        .await
        .map_err(|e| sm_err(ErrorVerb::Read, format!("snapshot decoding stopped: {e}")))?;
        let machine = restored.map_err(|e| {
            sm_err(
                ErrorVerb::Read,
                format!("snapshot {} from the leader: {e}", meta.snapshot_id),
            )
        })?;
        self.persist(meta, data).await?;
        let mut state = self.state.lock();
        state.machine = machine;
        state.last_applied = meta.last_log_id;
        state.membership = meta.last_membership.clone();
        tracing::info!("{SNAPSHOT_INSTALLED}: {}", meta.snapshot_id);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, StorageError> {
        let current = crate::lock::lock(&self.state.current).clone();
        Ok(current.map(|(meta, data)| Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data.to_vec())),
        }))
    }
}
