//! Regression tests for what the fuzz targets (`fuzz/`, README "Fuzzing") found: every
//! input in `tests/fuzz/inputs/TARGET/` is replayed through the library calls that target
//! makes, in the normal test suite. To add one, copy the crashing input from
//! `fuzz/artifacts/TARGET/` into that directory.
//!
//! The inputs are in the fuzz targets' own form, so this file reads them the way
//! `fuzz/src/lib.rs` does: for the framed targets, the first byte picks the mode (odd: raw
//! bytes; even: payloads the reader seals with a correct header). Each test asserts only
//! that the call returns (a refusal is fine): the bugs found aborted or panicked.

use std::path::Path;

use weir_core::codec;
use weir_core::machine::{Batch, Command, Leadership, Machine, SNAPSHOT_MAGIC, SNAPSHOT_VERSION};
use weir_proto::protocol::{CLIENT_FRAME_MAX, ClientFrame, Request};
use weir_proto::wire::{self, WireError};
use weir_server::raft::network::{
    PEER_FRAME_MAX, PeerAnswer, PeerFrame, PeerRequest, PeerResponse,
};

/// The inputs recorded for `target`, in file-name order, each name printed as its input is
/// taken (so a crash names it). At least one exists for every target named here, so a
/// moved directory fails the test instead of passing it empty.
fn inputs(target: &str) -> impl Iterator<Item = Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz/inputs")
        .join(target);
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|f| {
            let path = f.expect("directory entry").path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).expect("input readable"))
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no inputs in {}", dir.display());
    let target = target.to_owned();
    out.into_iter().map(move |(name, data)| {
        eprintln!("{target}: {name}");
        data
    })
}

/// A framed target's input as the reader sees it: the mode byte split off, then the rest
/// sealed by `seal` (even mode) or as it is (odd mode, or no mode byte).
fn framed(data: &[u8], seal: impl FnOnce(&[u8]) -> Vec<u8>) -> Vec<u8> {
    match data.split_first() {
        Some((first, rest)) if first & 1 == 0 => seal(rest),
        Some((_, rest)) => rest.to_vec(),
        None => data.to_vec(),
    }
}

/// `payload` in a wire frame with a correct header.
fn wire_frame(payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Even mode's stream: (u16 little-endian length, payload) pairs, each sealed.
fn wire_frames(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while data.len() >= 2 {
        let len = u16::from_le_bytes([data[0], data[1]]) as usize;
        let payload = &data[2..(2 + len).min(data.len())];
        out.extend_from_slice(&wire_frame(payload));
        data = &data[2 + payload.len()..];
    }
    out
}

#[tokio::test]
async fn client_request_inputs_are_refused_or_served() {
    for data in inputs("client_request") {
        let stream = framed(&data, wire_frames);
        let mut reader = &stream[..];
        let mut machine = Machine::new();
        let mut clock_ms: u64 = 0;
        for index in 1..=64 {
            let frame: Result<ClientFrame, WireError> =
                wire::read_frame(&mut reader, CLIENT_FRAME_MAX).await;
            let Ok(ClientFrame::Request { id, request }) = frame else {
                break;
            };
            match request {
                Request::Write(command) => {
                    clock_ms = clock_ms.saturating_add(id % 60_000);
                    machine.apply(index, &batch(clock_ms, command));
                }
                Request::Read(q) | Request::ReadLocal(q) => {
                    weir_server::server::reader::answer(&machine, &q);
                }
                _ => {}
            }
        }
    }
}

#[tokio::test]
async fn peer_frame_inputs_are_refused_or_read() {
    for data in inputs("peer_frame") {
        let bytes = framed(&data, wire_frame);
        let _: Result<PeerRequest, WireError> =
            wire::read_frame(&mut &bytes[..], PEER_FRAME_MAX).await;
        let _: Result<PeerResponse, WireError> =
            wire::read_frame(&mut &bytes[..], PEER_FRAME_MAX).await;
        let _: Result<PeerFrame, WireError> =
            wire::read_frame(&mut &bytes[..], PEER_FRAME_MAX).await;
        let _: Result<PeerAnswer, WireError> =
            wire::read_frame(&mut &bytes[..], PEER_FRAME_MAX).await;
    }
}

#[test]
fn snapshot_restore_inputs_are_refused_or_restored() {
    for data in inputs("snapshot_restore") {
        let bytes = framed(&data, |rest| {
            codec::seal_frame(SNAPSHOT_MAGIC, SNAPSHOT_VERSION, rest)
        });
        if let Ok(mut machine) = Machine::restore(&bytes) {
            let next = machine.applied_index().saturating_add(1);
            if next > machine.applied_index() {
                let clock_ms = machine.now_ms().saturating_add(1_000);
                machine.apply(next, &batch(clock_ms, Command::Tick));
            }
        }
    }
}

#[test]
fn log_entry_inputs_are_refused_or_decoded() {
    for data in inputs("log_entry") {
        let _ = weir_server::raft::log_entry::decode_entry(1, &data);
    }
}

/// `command` as the only command of an entry stamped at `clock_ms`.
fn batch(clock_ms: u64, command: Command) -> Batch {
    Batch {
        leadership: Leadership {
            term: 1,
            node: 1,
            incarnation: 1,
        },
        clock_ms,
        wall_ms: clock_ms,
        commands: vec![command],
    }
}
