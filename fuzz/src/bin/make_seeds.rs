//! Writes the seed corpus of every fuzz target to `fuzz/corpus/<target>/`: a few valid
//! inputs each, built with Weir's own types and encoders so the fuzzer starts past the
//! decoders' first refusals. Run from the repository root:
//!
//! ```text
//! cargo run --manifest-path fuzz/Cargo.toml --features seeds --bin make_seeds
//! ```
//!
//! Seeds are small (a few KB per target) and committed; rerun this when a format changes.
//! Mode bytes (see `fuzz/src/lib.rs`): 0 = payloads for the glue to seal, 1 = raw bytes.

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
use openraft::{CommittedLeaderId, EntryPayload, Membership};
use weir_core::codec;
use weir_core::machine::{
    Acquire, Batch, Change, Command, HaltScope, Leadership, Machine, Priority, Settle,
};
use weir_proto::protocol::{ClientFrame, Query, Request};
use weir_server::raft::network::PeerRequest;
use weir_server::raft::{Entry, LogId, NodeAddr, SnapshotMeta, StoredMembership, Vote};

fn main() {
    let root = Path::new("fuzz/corpus");
    assert!(
        Path::new("fuzz/Cargo.toml").exists(),
        "run make_seeds from the repository root"
    );
    let commands = commands();

    // client_request: the connection's frames raw, and the same payloads for sealing.
    let requests: Vec<ClientFrame> = commands
        .iter()
        .cloned()
        .enumerate()
        .map(|(i, c)| ClientFrame::Request {
            id: 100 * i as u64,
            request: Request::Write(c),
        })
        .chain([
            ClientFrame::Request {
                id: 90,
                request: Request::ReadLocal(Query::Limit {
                    tenant: "default".into(),
                    name: "db".into(),
                }),
            },
            ClientFrame::Request {
                id: 91,
                request: Request::Read(Query::Tenant {
                    tenant: "acme".into(),
                }),
            },
        ])
        .collect();
    write(
        root,
        "client_request",
        "raw-session",
        &raw_frames(&requests),
    );
    write(
        root,
        "client_request",
        "sealed-session",
        &sealed_frames(&requests),
    );

    // peer_frame: one of each request kind, sealed and raw.
    let vote = Vote::new_committed(2, 1);
    let entries = vec![
        entry(5, EntryPayload::Blank),
        entry(6, EntryPayload::Membership(membership())),
        entry(7, EntryPayload::Normal(batch(commands.clone()))),
    ];
    let peers = [
        (
            "append",
            PeerRequest::AppendEntries(AppendEntriesRequest {
                vote,
                prev_log_id: Some(log_id(4)),
                entries: entries.clone(),
                leader_commit: Some(log_id(4)),
            }),
        ),
        (
            "vote",
            PeerRequest::Vote(VoteRequest::new(vote, Some(log_id(7)))),
        ),
        (
            "install",
            PeerRequest::InstallSnapshot(InstallSnapshotRequest {
                vote,
                meta: SnapshotMeta {
                    last_log_id: Some(log_id(7)),
                    last_membership: StoredMembership::new(Some(log_id(6)), membership()),
                    snapshot_id: "2-1-7".into(),
                },
                offset: 0,
                data: snapshot(&commands)[..64].to_vec(),
                done: false,
            }),
        ),
    ];
    for (name, request) in &peers {
        let payload = codec::encode(request);
        write(
            root,
            "peer_frame",
            &format!("sealed-{name}"),
            &[&[0], &payload[..]].concat(),
        );
        let framed = raw_frames(std::slice::from_ref(request));
        write(root, "peer_frame", &format!("raw-{name}"), &framed);
    }

    // snapshot_restore: a machine with sessions, permits, waiters, runs and halts.
    let snap = snapshot(&commands);
    write(
        root,
        "snapshot_restore",
        "raw-busy",
        &[&[1], &snap[..]].concat(),
    );
    let payload = &snap[codec::HEADER_BYTES..];
    write(
        root,
        "snapshot_restore",
        "sealed-busy",
        &[&[0], payload].concat(),
    );
    write(
        root,
        "snapshot_restore",
        "raw-empty",
        &[&[1], &Machine::new().snapshot()[..]].concat(),
    );

    // log_entry: one entry of each payload kind.
    for (name, e) in ["blank", "membership", "normal"].iter().zip(&entries) {
        write(root, "log_entry", name, &codec::encode(e));
    }

    // config: the shipped node configs.
    for name in ["single.toml", "node1.toml", "node2.toml", "node3.toml"] {
        let text = std::fs::read(Path::new("config").join(name)).expect("config/ is there");
        write(root, "config", name, &text);
    }
}

/// Commands that reach most of the machine: sessions, limits with both kinds of bound, a
/// grant, a waiter, a release, tenant ceilings, runs, a settlement and a halt.
fn commands() -> Vec<Command> {
    let acquire = |ticket, limit: &str, wait| {
        Command::Acquire(Acquire {
            session: 1,
            ticket,
            tenant: "default".into(),
            limit: limit.into(),
            units: 1,
            priority: Priority {
                level: 0,
                fairness_key: "k".into(),
                fairness_weight: 1,
            },
            agent: Some("bot".into()),
            wait,
        })
    };
    vec![
        Command::OpenSession { ttl_ms: 3_000 },
        Command::DefineLimit {
            tenant: "default".into(),
            name: "db".into(),
            concurrent: 1,
            per_second: 0.0,
            burst: None,
        },
        Command::DefineLimit {
            tenant: "default".into(),
            name: "api".into(),
            concurrent: 0,
            per_second: 2.5,
            burst: Some(3),
        },
        acquire(1, "db", true),
        acquire(2, "db", true),
        acquire(3, "api", false),
        Command::KeepAlive { session: 1 },
        Command::Release {
            session: 1,
            ticket: 1,
        },
        Command::SetTenant {
            tenant: "acme".into(),
            max_running: Change::Set(2),
            budget_tokens: Change::Set(1_000),
            budget_minor: Change::Keep,
        },
        Command::Reserve {
            tenant: "acme".into(),
            run: "r1".into(),
            agent: Some("bot".into()),
            period: Some("2026-12".into()),
            hold_tokens: Some(100),
            hold_minor: None,
        },
        Command::Settle(Settle {
            tenant: "acme".into(),
            run: "r1".into(),
            epoch: 1,
            period: Some("2026-12".into()),
            tokens: 10,
            minor_units: 5,
            release_slot: false,
        }),
        Command::SetHalt {
            tenant: "acme".into(),
            scope: HaltScope::Agent("bot".into()),
            reason: "drill".into(),
        },
        Command::Tick,
    ]
}

fn batch(commands: Vec<Command>) -> Batch {
    Batch {
        leadership: Leadership {
            term: 2,
            node: 1,
            incarnation: 7,
        },
        clock_ms: 1_000,
        wall_ms: 1_700_000_000_000,
        commands,
    }
}

/// The snapshot of a machine that applied `commands`, one entry each.
fn snapshot(commands: &[Command]) -> Vec<u8> {
    let mut machine = Machine::new();
    for (i, c) in commands.iter().enumerate() {
        let mut b = batch(vec![c.clone()]);
        b.clock_ms += 100 * i as u64;
        machine.apply(i as u64 + 1, &b);
    }
    machine.snapshot()
}

fn log_id(index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(2, 1), index)
}

fn entry(index: u64, payload: EntryPayload<weir_server::raft::TypeConfig>) -> Entry {
    Entry {
        log_id: log_id(index),
        payload,
    }
}

fn membership() -> Membership<u64, NodeAddr> {
    let nodes: BTreeMap<u64, NodeAddr> = (1..=3)
        .map(|id| {
            let addr = NodeAddr {
                peer: format!("127.0.0.1:751{id}"),
                client: format!("127.0.0.1:741{id}"),
            };
            (id, addr)
        })
        .collect();
    Membership::new(vec![BTreeSet::from([1, 2, 3])], nodes)
}

/// Mode 1: `values` as the wire carries them.
fn raw_frames<T: serde::Serialize>(values: &[T]) -> Vec<u8> {
    let mut out = vec![1];
    for v in values {
        let payload = codec::encode(v);
        out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
        out.extend_from_slice(&payload);
    }
    out
}

/// Mode 0: `values` as length-prefixed payloads for the glue to seal.
fn sealed_frames<T: serde::Serialize>(values: &[T]) -> Vec<u8> {
    let mut out = vec![0];
    for v in values {
        let payload = codec::encode(v);
        let len = u16::try_from(payload.len()).expect("a seed frame fits a u16 length");
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&payload);
    }
    out
}

fn write(root: &Path, target: &str, name: &str, bytes: &[u8]) {
    let dir = root.join(target);
    std::fs::create_dir_all(&dir).expect("corpus directory");
    std::fs::write(dir.join(format!("seed-{name}")), bytes).expect("seed written");
}
