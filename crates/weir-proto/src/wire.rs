//! Frames on a TCP stream: the client port's (both ends) and the peer port's.
//!
//! ```text
//! offset  size  field
//! 0       4     length   u32 little-endian, payload bytes that follow
//! 4       4     crc32c   u32 little-endian, CRC-32C of the payload
//! 8       ..    payload  bincode 2 (weir_core::codec::BINCODE)
//! ```
//!
//! Invariants:
//! - The length is checked against the port's bound before a byte of payload is allocated.
//! - Memory grows with the bytes that arrive, never with the length a frame announces: the
//!   payload buffer starts at [`PAYLOAD_FIRST_BYTES`] at most and doubles as it fills, so
//!   a peer that announces 4 MiB and sends 1,000 bytes costs about 1,000 bytes
//!   (`read_payload`).
//! - A frame whose checksum or encoding is wrong is an error for that connection only: the
//!   caller logs the reason and closes it.

use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use weir_core::codec;

/// Why a frame could not be read. Each is fatal to the connection it came on, and none to
/// anything else.
#[derive(Debug)]
pub enum WireError {
    /// The peer closed the connection between frames: the normal end.
    Closed,
    Io(io::Error),
    TooLarge {
        declared: u32,
        max: u32,
    },
    Checksum {
        stored: u32,
        computed: u32,
    },
    Decode(String),
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WireError::Closed => f.write_str("connection closed"),
            WireError::Io(e) => write!(f, "i/o: {e}"),
            WireError::TooLarge { declared, max } => {
                write!(f, "frame of {declared} bytes is above the bound of {max}")
            }
            WireError::Checksum { stored, computed } => {
                write!(
                    f,
                    "frame checksum mismatch: stored {stored:08x}, payload has {computed:08x}"
                )
            }
            WireError::Decode(why) => write!(f, "undecodable frame: {why}"),
        }
    }
}

impl std::error::Error for WireError {}

impl From<io::Error> for WireError {
    fn from(e: io::Error) -> Self {
        WireError::Io(e)
    }
}

/// Appends `value` as one frame to `out` (so that several frames can go out in one write).
fn push_frame<T: serde::Serialize>(out: &mut Vec<u8>, value: &T) {
    let payload = codec::encode(value);
    out.reserve(8 + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&payload).to_le_bytes());
    out.extend_from_slice(&payload);
}

/// Writes `value` as one frame.
pub async fn write_frame<W, T>(w: &mut W, value: &T) -> Result<(), WireError>
where
    W: AsyncWrite + Unpin,
    T: serde::Serialize,
{
    let mut out = Vec::new();
    push_frame(&mut out, value);
    w.write_all(&out).await?;
    w.flush().await?;
    Ok(())
}

/// Most frames coalesced into one write by [`write_queued`].
const COALESCE_MAX: usize = 512;

/// Writes [`write_queued`] sends without yielding first, after a yield that gathered no
/// frame (when it cannot know whether more are coming).
const YIELD_BACKOFF: u32 = 64;

/// Writes frames from `queue` until it closes or a write fails, coalescing whatever is
/// queued by the time every runnable task has run into one write (one syscall for a whole
/// batch of responses). Returns after writing a frame for which `last` is true.
///
/// Whoever queues a frame wakes the writer, and tokio runs a task woken that way next: so
/// before it drains the queue the writer yields once, and every task already runnable (the
/// other answers of the same entry, the other clients of the connection) queues its frame
/// first. A yield costs a pass of the scheduler, so it is skipped when nothing else is
/// likely to come: `more_coming` says so when the writer can know (a node: whether other
/// requests of the connection are still being served); without it (a client, which cannot
/// know whether its callers will write) the writer yields until a yield gathers nothing,
/// then sends the next `YIELD_BACKOFF` writes at once.
pub async fn write_queued<W, T>(
    w: &mut W,
    queue: &mut tokio::sync::mpsc::Receiver<T>,
    last: impl Fn(&T) -> bool,
    more_coming: Option<impl Fn() -> bool>,
) -> Result<(), WireError>
where
    W: AsyncWrite + Unpin,
    T: serde::Serialize,
{
    let mut buf = Vec::new();
    // Writes left to go out without a yield, after a yield that gathered nothing.
    let mut unyielded = 0u32;
    while let Some(first) = queue.recv().await {
        buf.clear();
        let mut done = last(&first);
        push_frame(&mut buf, &first);
        let mut n = 1;
        if !done && queue.is_empty() {
            match &more_coming {
                Some(more) => {
                    if more() {
                        tokio::task::yield_now().await;
                    }
                }
                None if unyielded == 0 => {
                    tokio::task::yield_now().await;
                    if queue.is_empty() {
                        unyielded = YIELD_BACKOFF;
                    }
                }
                None => unyielded -= 1,
            }
        }
        while !done && n < COALESCE_MAX {
            match queue.try_recv() {
                Ok(next) => {
                    done = last(&next);
                    push_frame(&mut buf, &next);
                    n += 1;
                }
                Err(_) => break,
            }
        }
        w.write_all(&buf).await?;
        w.flush().await?;
        if done {
            return Ok(());
        }
    }
    Ok(())
}

/// The payload buffer's first allocation, in bytes, at most: an ordinary request or answer
/// fits it in one read; a larger frame grows the buffer as its bytes arrive.
pub const PAYLOAD_FIRST_BYTES: usize = 8 * 1024;

/// Reads the `declared` bytes of a payload into `payload` (cleared first), growing it only
/// as bytes arrive (at most twice what has arrived, or [`PAYLOAD_FIRST_BYTES`]): a sender
/// that announces a large frame and stalls holds no more memory than it has sent. An end of
/// stream before `declared` bytes is `UnexpectedEof`.
async fn read_payload<R>(r: &mut R, declared: u32, payload: &mut Vec<u8>) -> io::Result<()>
where
    R: AsyncRead + Unpin,
{
    payload.clear();
    payload.reserve_exact((declared as usize).min(PAYLOAD_FIRST_BYTES));
    // `read_to_end` reserves only as the buffer fills, doubling it (amortized growth).
    r.take(u64::from(declared)).read_to_end(payload).await?;
    if payload.len() < declared as usize {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "the frame announced {declared} bytes, the stream ended after {}",
                payload.len()
            ),
        ));
    }
    Ok(())
}

/// Reads one frame of at most `max` payload bytes and decodes it.
pub async fn read_frame<R, T>(r: &mut R, max: u32) -> Result<T, WireError>
where
    R: AsyncRead + Unpin,
    T: serde::de::DeserializeOwned,
{
    read_frame_within(r, max, None).await
}

/// [`read_frame`], with the frame's bytes after its first bounded by `rest_within`: the
/// wait for a frame to begin is the caller's, but a frame begun must end within it, so a
/// sender cannot hold a half-sent frame's bytes on the reader for ever. Past it:
/// `WireError::Io` of kind `TimedOut`, naming the bound.
pub async fn read_frame_within<R, T>(
    r: &mut R,
    max: u32,
    rest_within: Option<std::time::Duration>,
) -> Result<T, WireError>
where
    R: AsyncRead + Unpin,
    T: serde::de::DeserializeOwned,
{
    let mut header = [0u8; 8];
    match r.read_exact(&mut header[..1]).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(WireError::Closed),
        Err(e) => return Err(e.into()),
    }
    let rest = async {
        r.read_exact(&mut header[1..]).await?;
        let declared = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes"));
        let stored = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
        if declared > max {
            return Err(WireError::TooLarge { declared, max });
        }
        let mut payload = Vec::new();
        read_payload(r, declared, &mut payload).await?;
        Ok((stored, payload))
    };
    let (stored, payload) = match rest_within {
        None => rest.await?,
        Some(within) => tokio::time::timeout(within, rest).await.map_err(|_| {
            WireError::Io(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("a frame begun was not complete within {within:?}"),
            ))
        })??,
    };
    let computed = crc32c::crc32c(&payload);
    if computed != stored {
        return Err(WireError::Checksum { stored, computed });
    }
    codec::decode(&payload).map_err(|e| WireError::Decode(e.to_string()))
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll};

    use super::*;

    const NONE: Option<fn() -> bool> = None;

    /// A sink that keeps every write's bytes apart.
    #[derive(Clone, Default)]
    struct Writes(Arc<Mutex<Vec<Vec<u8>>>>);

    impl AsyncWrite for Writes {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            self.0.lock().unwrap().push(buf.to_vec());
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// A reader that yields `bytes`, then never anything more (a sender that stalls).
    struct Stalls(Vec<u8>);

    impl AsyncRead for Stalls {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            if self.0.is_empty() {
                return Poll::Pending;
            }
            let n = self.0.len().min(buf.remaining()).min(100);
            buf.put_slice(&self.0[..n]);
            self.0.drain(..n);
            Poll::Ready(Ok(()))
        }
    }

    /// A frame that announces 4,194,000 bytes and sends 1,000 of them holds a buffer of
    /// about what arrived, not of what it announced.
    #[tokio::test]
    async fn a_frame_announced_large_costs_only_the_bytes_received() {
        let mut r = Stalls(vec![7u8; 1_000]);
        let mut payload = Vec::new();
        let read = read_payload(&mut r, 4_194_000, &mut payload);
        let stalled = tokio::time::timeout(std::time::Duration::from_millis(100), read).await;
        assert!(stalled.is_err(), "the sender stalled: the read must wait");
        assert_eq!(payload.len(), 1_000);
        assert!(
            payload.capacity() <= PAYLOAD_FIRST_BYTES,
            "{} bytes held for 1,000 received",
            payload.capacity()
        );
    }

    /// A payload larger than the first allocation is read whole, as its bytes arrive; a
    /// stream that ends early is an error naming both counts.
    #[tokio::test]
    async fn a_large_payload_is_read_whole_and_a_short_one_is_an_error() {
        let bytes: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        let mut payload = Vec::new();
        read_payload(&mut &bytes[..], 100_000, &mut payload)
            .await
            .unwrap();
        assert_eq!(payload, bytes);
        let e = read_payload(&mut &bytes[..10], 20, &mut payload)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(e.to_string().contains("announced 20 bytes"), "{e}");
    }

    /// Decodes every frame of `bytes`, in order.
    fn frames(mut bytes: &[u8]) -> Vec<u64> {
        let mut out = vec![];
        while !bytes.is_empty() {
            let len = u32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize;
            out.push(codec::decode(&bytes[8..8 + len]).unwrap());
            bytes = &bytes[8 + len..];
        }
        out
    }

    /// Eight frames queued by tasks runnable together, on the node's kind of runtime (one
    /// worker, where a woken task runs next), then a lone frame and the last one. Returns
    /// how many writes the eight took; checks every frame arrived, and the writer returned.
    fn burst_writes(more_coming: Option<fn() -> bool>) -> usize {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            let writes = Writes::default();
            let (tx, mut rx) = tokio::sync::mpsc::channel::<u64>(64);
            let mut sink = writes.clone();
            let writer = tokio::spawn(async move {
                write_queued(&mut sink, &mut rx, |&v| v == 99, more_coming).await
            });
            // Eight answers made runnable at once, as the answers of one applied entry are.
            let (go, _) = tokio::sync::broadcast::channel::<()>(1);
            let senders: Vec<_> = (0..8u64)
                .map(|i| {
                    let tx = tx.clone();
                    let mut go = go.subscribe();
                    tokio::spawn(async move {
                        let _ = go.recv().await;
                        tx.send(i).await.unwrap();
                    })
                })
                .collect();
            tokio::task::yield_now().await;
            go.send(()).unwrap();
            for s in senders {
                s.await.unwrap();
            }
            let written = |w: &Writes| {
                w.0.lock()
                    .unwrap()
                    .iter()
                    .map(|b| frames(b).len())
                    .sum::<usize>()
            };
            // The writer runs on the worker thread, which a loaded machine may not schedule
            // for a while: wait for the eight by the clock (bounded), not by a count of
            // this thread's yields.
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
            while written(&writes) < 8 && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            let burst = writes.0.lock().unwrap().len();
            // A lone frame, then the last one: each is written, and the writer returns.
            tx.send(42).await.unwrap();
            tx.send(99).await.unwrap();
            writer.await.unwrap().unwrap();
            let all: Vec<u64> = writes
                .0
                .lock()
                .unwrap()
                .iter()
                .flat_map(|b| frames(b))
                .collect();
            let (mut eight, rest) = (all[..8].to_vec(), &all[8..]);
            eight.sort();
            assert_eq!(eight, (0..8).collect::<Vec<_>>());
            assert_eq!(rest, [42, 99]);
            burst
        })
    }

    /// Frames queued together share one write: without the writer's yield each went out in
    /// a write of its own. A writer told nothing more is coming does not wait for them.
    #[test]
    fn frames_queued_together_share_one_write() {
        assert_eq!(
            burst_writes(NONE),
            1,
            "a client's writer, which cannot know"
        );
        assert_eq!(
            burst_writes(Some(|| true)),
            1,
            "more answers are being served"
        );
        assert_eq!(
            burst_writes(Some(|| false)),
            8,
            "nothing else is being served"
        );
    }
}
