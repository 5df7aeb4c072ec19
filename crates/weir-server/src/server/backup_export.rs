//! Backups read from the leader: [`Request::BackupBegin`] and [`Request::BackupChunk`]
//! (`weir snapshot save`). [`super::client_port`] dispatches them here.
//!
//! A backup is the machine's snapshot bytes (the `WSNP` frame every follower installs) at
//! the index this node has applied after a quorum round, with the membership, the log id and
//! the cluster identity at that index, read under the state lock as one consistent
//! triple (the state frozen there, encoded apart after), as the snapshot builder does. Every write acknowledged before the begin is in
//! it: the quorum round (`ensure_linearizable`) waits until this node, still the leader,
//! has applied every committed entry.
//!
//! Invariants:
//! - One backup is held at a time, as one shared copy of its bytes: a new begin replaces it,
//!   and the chunk that reaches its end drops it, so a node holds at most one backup beside
//!   its state however many are asked for.
//! - A chunk names the backup's index; a chunk of a backup no longer held is refused
//!   (`Unavailable`), never answered from another one.
//! - Changes nothing in the state or the log.

use std::sync::Arc;

use super::ctx::Ctx;
use super::leader::read_failure;
use weir_proto::protocol::{BACKUP_CHUNK_BYTES, BackupHeader, BackupMember, Failure, Response};

/// Begins a backup: leadership confirmed by a quorum round, then the state encoded.
pub async fn begin(ctx: &Ctx) -> Response {
    if let Err(e) = ctx.raft.ensure_linearizable().await {
        return Response::Failed(read_failure(&ctx.raft, e));
    }
    let Some(cluster) = ctx.identity.get() else {
        return Response::Failed(Failure::Unavailable(
            "this node has no cluster identity yet".into(),
        ));
    };
    let (last, frozen, membership) = {
        let state = ctx.state.lock();
        let Some(last) = state.last_applied else {
            return Response::Failed(Failure::Unavailable(
                "nothing applied yet: no state to back up".into(),
            ));
        };
        (last, state.machine.freeze(), state.membership.clone())
    };
    let Ok(bytes) = tokio::task::spawn_blocking(move || frozen.encode()).await else {
        return Response::Failed(Failure::Unavailable("encoding the backup failed".into()));
    };
    let header = {
        let membership = membership.membership();
        let voters: std::collections::BTreeSet<u64> = membership.voter_ids().collect();
        let members = membership
            .nodes()
            .map(|(id, n)| BackupMember {
                id: *id,
                peer: n.peer.clone(),
                client: n.client.clone(),
                voter: voters.contains(id),
            })
            .collect();
        BackupHeader {
            cluster: cluster.0,
            index: last.index,
            term: last.leader_id.term,
            leader: last.leader_id.node_id,
            members,
            snapshot_bytes: bytes.len() as u64,
            snapshot_crc32c: crc32c::crc32c(&bytes),
            wall_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        }
    };
    *crate::lock::lock(&ctx.backup.0) = Some((header.index, Arc::new(bytes)));
    Response::BackupBegun(header)
}

/// The held backup's bytes at `index` from `offset`; the last chunk lets the backup go.
pub fn chunk(ctx: &Ctx, index: u64, offset: u64) -> Response {
    let mut slot = crate::lock::lock(&ctx.backup.0);
    let bytes = match slot.as_ref() {
        Some((held, bytes)) if *held == index => bytes.clone(),
        _ => {
            return Response::Failed(Failure::Unavailable(format!(
                "no backup at index {index} is held here (another backup replaced it, or \
                 the leader changed): begin again"
            )));
        }
    };
    let len = bytes.len() as u64;
    if offset > len {
        return Response::Failed(Failure::BadRequest(format!(
            "offset {offset} is past the backup's {len} bytes"
        )));
    }
    let end = (offset + BACKUP_CHUNK_BYTES).min(len);
    if end == len {
        *slot = None;
    }
    drop(slot);
    Response::BackupChunk(bytes[offset as usize..end as usize].to_vec())
}
