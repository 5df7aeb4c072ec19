//! `weir snapshot save | inspect | restore`: backups of a cluster and the seeding of a new
//! cluster from one. The file and the restore are `weir_server::backup`'s; this file talks
//! to the leader and prints.

use std::path::{Path, PathBuf};

use clap::Subcommand;
use serde_json::json;

use super::{EXIT_ERROR, EXIT_OK, Exit, Output, client_error};
use weir_client::{Client, ClientError};
use weir_proto::protocol::{BackupHeader, Failure, Request, Response};
use weir_server::backup::{BackupWriter, read_backup};
use weir_server::config::Config;
use weir_server::raft::cluster_identity::ClusterId;

#[derive(Subcommand, Debug)]
pub enum SnapshotCommand {
    /// Save a consistent snapshot of the cluster, taken by the leader at a committed index,
    /// to FILE (admin).
    Save {
        /// The backup file to write (replaced atomically once whole and verified).
        file: PathBuf,
    },
    /// Show what a backup file holds and whether it verifies (offline).
    Inspect {
        /// The backup file.
        file: PathBuf,
    },
    /// Seed the data directory of one node of a new cluster from a backup file (offline).
    Restore {
        /// The backup file.
        file: PathBuf,
        /// The data directory to create (it must not exist, or be empty).
        #[arg(long)]
        data_dir: PathBuf,
        /// The node's id in the new cluster.
        #[arg(long)]
        id: u64,
        /// The node's configuration: its peers are the new cluster's voters.
        #[arg(long)]
        config: PathBuf,
    },
}

/// Runs the commands that need no cluster: inspect and restore.
pub fn offline(command: &SnapshotCommand, out: &Output) -> Option<Exit> {
    match command {
        SnapshotCommand::Save { .. } => None,
        SnapshotCommand::Inspect { file } => Some(inspect(file, out)),
        SnapshotCommand::Restore {
            file,
            data_dir,
            id,
            config,
        } => Some(restore(file, data_dir, *id, config, out)),
    }
}

/// How many times `save` begins a backup: a chunk refused because the leader changed (or
/// another save replaced the held backup) begins it once more, at the new leader.
const SAVE_ATTEMPTS: u32 = 2;

/// `weir snapshot save FILE`.
pub async fn save(command: &SnapshotCommand, client: &Client, out: &Output) -> Exit {
    let SnapshotCommand::Save { file } = command else {
        unreachable!("inspect and restore run offline");
    };
    for attempt in 1..=SAVE_ATTEMPTS {
        match save_once(file, client).await {
            Ok(header) => {
                print_saved(file, &header, out);
                return EXIT_OK;
            }
            Err(Attempt::Again(why)) if attempt < SAVE_ATTEMPTS => {
                eprintln!("weir: {why}; beginning the backup again");
            }
            Err(Attempt::Again(why)) => return fail(&why),
            Err(Attempt::Failed(exit)) => return exit,
        }
    }
    unreachable!("the last attempt returns")
}

/// Why one attempt at a backup ended without a file.
enum Attempt {
    /// The held backup went away (leader change, another save): worth beginning again.
    Again(String),
    /// Reported already; the exit status.
    Failed(Exit),
}

/// Begins a backup and streams it into `file`.
async fn save_once(file: &Path, client: &Client) -> Result<BackupHeader, Attempt> {
    let header = match client.request(Request::BackupBegin).await {
        Ok(Response::BackupBegun(h)) => h,
        other => return Err(Attempt::Failed(unexpected(other))),
    };
    let index = header.index;
    let mut writer =
        BackupWriter::create(file, header.clone()).map_err(|e| Attempt::Failed(fail(&e)))?;
    while writer.written() < header.snapshot_bytes {
        let offset = writer.written();
        let chunk = match client.request(Request::BackupChunk { index, offset }).await {
            Ok(Response::BackupChunk(bytes)) if !bytes.is_empty() => bytes,
            // The client retried it (bounded) before giving up.
            Err(ClientError::Failed(Failure::Unavailable(why))) => {
                return Err(Attempt::Again(why));
            }
            other => return Err(Attempt::Failed(unexpected(other))),
        };
        writer
            .write(&chunk)
            .map_err(|e| Attempt::Failed(fail(&e)))?;
    }
    writer.finish().map_err(|e| Attempt::Failed(fail(&e)))?;
    Ok(header)
}

fn print_saved(file: &Path, header: &BackupHeader, out: &Output) {
    let cluster = ClusterId(header.cluster).to_string();
    out.print(
        json!({"file": file, "index": header.index, "term": header.term,
               "cluster": cluster, "snapshot_bytes": header.snapshot_bytes}),
        || {
            format!(
                "saved {}: index {}, term {}, cluster {cluster}, {} bytes of snapshot",
                file.display(),
                header.index,
                header.term,
                header.snapshot_bytes
            )
        },
    );
}

fn unexpected(answer: Result<Response, ClientError>) -> Exit {
    match answer {
        Ok(Response::Failed(f)) => client_error(&ClientError::Failed(f)),
        Ok(other) => client_error(&ClientError::Protocol(format!(
            "unexpected answer {other:?}"
        ))),
        Err(e) => client_error(&e),
    }
}

fn fail(why: &str) -> Exit {
    eprintln!("weir: {why}");
    EXIT_ERROR
}

/// `weir snapshot inspect FILE`.
fn inspect(file: &Path, out: &Output) -> Exit {
    let backup = match read_backup(file) {
        Ok(b) => b,
        Err(e) => return fail(&e),
    };
    let file_bytes = std::fs::metadata(file).map_or(0, |m| m.len());
    let seen = backup.inspect(file_bytes);
    let value = serde_json::to_value(&seen).expect("an inspection is JSON");
    out.print(json!({"verified": true, "backup": value}), || {
        let c = &seen.contents;
        let members: Vec<String> = seen
            .members
            .iter()
            .map(|m| {
                format!(
                    "{}{} {}",
                    m.id,
                    if m.voter { "" } else { " (learner)" },
                    m.peer
                )
            })
            .collect();
        format!(
            "{}: verified\ncluster {} (restores as {})\nindex {}, term {}, proposed by node \
             {}\nmembers: {}\nfile {} bytes, snapshot {} bytes, crc32c {}, digest {}\n\
             tenants {}, limits {}, keys {}, sessions {}, holders {}, queued {}, runs {}, \
             settlements {}, halts {}, last fence {}",
            file.display(),
            seen.cluster,
            seen.restored_cluster,
            seen.index,
            seen.term,
            seen.leader,
            members.join(", "),
            seen.file_bytes,
            seen.snapshot_bytes,
            seen.snapshot_crc32c,
            seen.digest,
            c.tenants,
            c.limits,
            c.keys,
            c.sessions,
            c.holders,
            c.queued,
            c.runs,
            c.settlements,
            c.halts,
            c.last_fence
        )
    });
    EXIT_OK
}

/// `weir snapshot restore FILE --data-dir DIR --id N --config FILE`.
fn restore(file: &Path, data_dir: &Path, id: u64, config: &Path, out: &Output) -> Exit {
    let mut config = match Config::load(config) {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    config.id = id;
    config.data_dir = data_dir.to_owned();
    if let Err(e) = config.validate() {
        return fail(&e);
    }
    let backup = match read_backup(file) {
        Ok(b) => b,
        Err(e) => return fail(&e),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(&format!("cannot start a runtime: {e}")),
    };
    match runtime.block_on(backup.restore(&config)) {
        Ok(cluster) => {
            let index = backup.header.index;
            out.print(
                json!({"data_dir": data_dir, "id": id, "index": index,
                       "cluster": cluster.to_string()}),
                || {
                    format!(
                        "restored node {id} into {} at index {index}: new cluster {cluster}",
                        data_dir.display()
                    )
                },
            );
            EXIT_OK
        }
        Err(e) => fail(&e),
    }
}
