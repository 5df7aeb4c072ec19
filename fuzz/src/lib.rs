//! The glue between libFuzzer and Weir: one function per fuzz target, each a few lines that
//! hand the fuzzer's bytes to the library function that meets such bytes in production.
//!
//! Invariants:
//! - Each function returns normally for every input: a refusal is an `Err` the function
//!   drops. A panic (or an abort, or an allocation past the run's memory limit) is a bug in
//!   Weir, found.
//! - Each function calls Weir's own entry point for its input, never a copy of it, so that a
//!   change in the library is fuzzed as it is. When the library grows a new front door (the
//!   server's edge validation, a framed log entry), re-point the function here; the target
//!   files in `fuzz_targets/` stay one line each.
//! - No input can make a function do unbounded work: the client target reads at most
//!   [`CLIENT_FRAMES_MAX`] frames.
//!
//! Checksums: a frame's crc32c is a wall a mutating fuzzer rarely climbs twice in a row, so
//! every framed target reads its input in one of two modes chosen by the first byte. Odd:
//! the rest is the bytes exactly as they would arrive (headers, checksums and all). Even:
//! the rest is payload, which the glue seals with a correct header first, so that mutations
//! reach the decoder behind the checksum. Both modes end in the same library call.

#![forbid(unsafe_code)]

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use weir_core::codec;
use weir_core::machine::{Batch, Command, Leadership, Machine, SNAPSHOT_MAGIC, SNAPSHOT_VERSION};
use weir_proto::protocol::{CLIENT_FRAME_MAX, ClientFrame, Request};
use weir_proto::wire::{self, WireError};
use weir_server::raft::network::{
    PEER_FRAME_MAX, PeerAnnounce, PeerAnswer, PeerFrame, PeerHello, PeerRequest, PeerResponse,
    PeerWelcome,
};

/// Most bytes of Rust heap live at once in a fuzz process. The largest allocation Weir makes
/// on purpose from untrusted bytes is a peer frame's buffer, sized by its declared length
/// before the payload arrives and bounded by [`PEER_FRAME_MAX`] (64 MiB); four times that
/// leaves room for the decoded value. An allocation past this (a length that was believed)
/// fails, Rust aborts, and libFuzzer reports the input as a crash. libFuzzer's own
/// `-malloc_limit_mb` needs a sanitizer's malloc hooks, which the stable toolchain lacks,
/// and `-rss_limit_mb` misses a large allocation that is never touched: this is the check.
pub const HEAP_BYTES_MAX: usize = 256 << 20;

#[global_allocator]
static HEAP: cap::Cap<std::alloc::System> = cap::Cap::new(std::alloc::System, HEAP_BYTES_MAX);

/// Most client frames one input is read as: enough for a session to open, define, acquire,
/// wait and release, small enough that one execution stays well under a millisecond.
pub const CLIENT_FRAMES_MAX: usize = 64;

/// Whether `data` asks for its payloads to be sealed by the glue (see the module doc), and
/// the bytes after the mode byte.
fn mode(data: &[u8]) -> (bool, &[u8]) {
    match data.split_first() {
        Some((first, rest)) => (first & 1 == 0, rest),
        None => (false, data),
    }
}

/// `payload` in a [`wire`] frame with a correct header (`wire`'s own encoder takes a value,
/// not bytes).
fn wire_frame(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Seals each payload of `data`, which is a sequence of (u16 little-endian length, that many
/// bytes), the last one cut short by the end of the input, into one stream of wire frames.
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

/// Runs a future that never waits to completion. The wire's readers meet only byte slices
/// here, which are always ready, so one poll finishes them; a `Pending` would mean the
/// future waits on something a fuzz input cannot provide, which is a bug in this glue.
fn ready<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("a read of a byte slice waited"),
    }
}

/// Target `client_request`: the bytes are what a client sends on its connection after the
/// hello (odd mode), or a sequence of length-prefixed payloads sealed into frames for it
/// (even mode, see [`wire_frames`]). Each frame is read with the server's own reader and bound
/// ([`wire::read_frame`], [`CLIENT_FRAME_MAX`]); then what the server would do with the
/// request before and instead of proposing it is done on one machine that lives for the
/// whole input: a write is applied (today the machine is the only validation a request
/// meets; re-point this at the server's edge check when it exists), a read is answered.
/// The request id sets how far the log clock moves before the write, so the fuzzer controls
/// time too (expiry, refill, lease ends).
pub fn client_request(data: &[u8]) {
    let (seal, data) = mode(data);
    let sealed;
    let mut rest = if seal {
        sealed = wire_frames(data);
        &sealed[..]
    } else {
        data
    };
    let mut machine = Machine::new();
    let mut clock_ms: u64 = 0;
    for index in 1..=CLIENT_FRAMES_MAX as u64 {
        let frame: Result<ClientFrame, WireError> =
            ready(wire::read_frame(&mut rest, CLIENT_FRAME_MAX));
        let Ok(ClientFrame::Request { id, request }) = frame else {
            // A bad frame closes the connection; a second hello is refused.
            return;
        };
        match request {
            Request::Write(command) => {
                clock_ms = clock_ms.saturating_add(id % 60_000);
                apply(&mut machine, index, clock_ms, command);
            }
            Request::Read(query) | Request::ReadLocal(query) => {
                let _ = weir_server::server::reader::answer(&machine, &query);
            }
            // Served by the node's Raft handle, admin and routing code, not by anything a
            // frame's bytes can steer past decoding.
            Request::Status
            | Request::AddNode { .. }
            | Request::RemoveNode { .. }
            | Request::SnapshotCost
            | Request::BackupBegin
            | Request::BackupChunk { .. }
            | Request::PlaceTenant { .. } => {}
        }
    }
}

/// Applies one command as the entry at `index`, stamped as the proposer would.
fn apply(machine: &mut Machine, index: u64, clock_ms: u64, command: Command) {
    let batch = Batch {
        leadership: Leadership {
            term: 1,
            node: 1,
            incarnation: 1,
        },
        clock_ms,
        wall_ms: clock_ms,
        commands: vec![command],
    };
    let _ = machine.apply(index, &batch);
}

/// Target `peer_frame`: the bytes are one frame on the peer port, read with the peer
/// bound ([`PEER_FRAME_MAX`]) as a request and a hello (what the server side reads) and as
/// a response and a welcome (what the client side reads). Even mode: the rest is the payload (see the module doc).
pub fn peer_frame(data: &[u8]) {
    let (seal, data) = mode(data);
    let sealed;
    let bytes = if seal {
        sealed = wire_frame(data);
        &sealed[..]
    } else {
        data
    };
    let _: Result<PeerRequest, WireError> =
        ready(wire::read_frame(&mut &bytes[..], PEER_FRAME_MAX));
    let _: Result<PeerResponse, WireError> =
        ready(wire::read_frame(&mut &bytes[..], PEER_FRAME_MAX));
    let _: Result<PeerFrame, WireError> = ready(wire::read_frame(&mut &bytes[..], PEER_FRAME_MAX));
    let _: Result<PeerAnswer, WireError> = ready(wire::read_frame(&mut &bytes[..], PEER_FRAME_MAX));
    let _: Result<PeerHello, WireError> = ready(wire::read_frame(&mut &bytes[..], PEER_FRAME_MAX));
    let _: Result<PeerAnnounce, WireError> =
        ready(wire::read_frame(&mut &bytes[..], PEER_FRAME_MAX));
    let _: Result<PeerWelcome, WireError> =
        ready(wire::read_frame(&mut &bytes[..], PEER_FRAME_MAX));
}

/// Target `snapshot_restore`: the bytes are a snapshot, as installed from a leader or read
/// back from disk ([`Machine::restore`]: frame, decode, every invariant). A snapshot that
/// restores must also take the next entry, as a follower's machine would after install.
/// Even mode: the rest is the payload, sealed with the snapshot's magic and version.
pub fn snapshot_restore(data: &[u8]) {
    let (seal, data) = mode(data);
    let sealed;
    let bytes = if seal {
        sealed = codec::seal_frame(SNAPSHOT_MAGIC, SNAPSHOT_VERSION, data);
        &sealed[..]
    } else {
        data
    };
    if let Ok(mut machine) = Machine::restore(bytes) {
        let next = machine.applied_index().saturating_add(1);
        if next > machine.applied_index() {
            let clock_ms = machine.now_ms().saturating_add(1_000);
            apply(&mut machine, next, clock_ms, Command::Tick);
        }
    }
}

/// Target `log_entry`: the bytes are one value of the log's `entries` table, stored under
/// index 1 ([`weir_server::raft::log_entry::decode_entry`]). Odd mode: the rest is the stored value
/// as is. Even mode: the rest is the payload, sealed in the entry's checksummed frame first.
pub fn log_entry(data: &[u8]) {
    let (seal, data) = mode(data);
    let sealed;
    let bytes = if seal {
        sealed = weir_server::raft::log_entry::seal_entry_payload(data);
        &sealed[..]
    } else {
        data
    };
    let _ = weir_server::raft::log_entry::decode_entry(1, bytes);
}

/// Target `config`: the bytes are a node's TOML config file, parsed and validated as
/// `weir serve` does ([`weir_server::config::Config::parse`]) and turned into openraft's config.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        // `Config::load` reads a String: a file that is not UTF-8 never reaches the parser.
        return;
    };
    if let Ok(config) = weir_server::config::Config::parse(text) {
        let _ = config.openraft();
    }
}
