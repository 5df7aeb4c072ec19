//! openraft's snapshot data ([`super::TypeConfig`]'s `SnapshotData`): the machine snapshot's
//! bytes in a file, from an offset to the file's end, never in memory.
//!
//! openraft reads a snapshot to send it (seek to the end for its length, then seek to each
//! chunk's offset and read) and writes one it receives (seek to each chunk's offset, write).
//! A [`SnapshotBytes`] is a file seen from `start`: offset 0 is the file's byte `start`, and
//! the end is the file's end. So the current snapshot is sent straight from `snapshot.bin`
//! (its machine bytes end the file, `snapshot_file.rs`), and a received one is written to a
//! file of its own, chunk by chunk, as it arrives.
//!
//! Invariants:
//! - Offsets count from `start`; a seek that lands before it is an I/O error (openraft
//!   seeks only from the start and from the end).
//! - It imports nothing of this crate: it is a view of a file, and knows no format.

use std::io::{self, SeekFrom};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

/// A file from byte `start` to its end, as openraft's snapshot data.
#[derive(Debug)]
pub struct SnapshotBytes {
    file: tokio::fs::File,
    /// Where offset 0 is in the file.
    start: u64,
    /// A seek of ours is under way: its completion is checked against `start`. (A
    /// completion polled with none under way, as tokio's `seek` does first to wait for
    /// earlier operations, reports tokio's own idea of the position, unchecked.)
    seeking: bool,
}

impl SnapshotBytes {
    /// The bytes of `file` from `start` on. The file is read and written from its current
    /// position until the first seek: open it at `start`.
    pub fn new(file: tokio::fs::File, start: u64) -> SnapshotBytes {
        SnapshotBytes {
            file,
            start,
            seeking: false,
        }
    }

    /// Where offset 0 is in the file.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// The file, once every write handed to it is done.
    pub async fn into_std(self) -> std::fs::File {
        self.file.into_std().await
    }
}

fn before_start(start: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("a seek before the snapshot's start (byte {start} of its file)"),
    )
}

impl AsyncRead for SnapshotBytes {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.file).poll_read(cx, buf)
    }
}

impl AsyncWrite for SnapshotBytes {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.file).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.file).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.file).poll_shutdown(cx)
    }
}

impl AsyncSeek for SnapshotBytes {
    fn start_seek(mut self: Pin<&mut Self>, position: SeekFrom) -> io::Result<()> {
        let start = self.start;
        let in_file = match position {
            SeekFrom::Start(n) => SeekFrom::Start(start.checked_add(n).ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "a seek past 2^64 bytes")
            })?),
            from_end_or_here => from_end_or_here,
        };
        Pin::new(&mut self.file).start_seek(in_file)?;
        self.seeking = true;
        Ok(())
    }

    fn poll_complete(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        let start = self.start;
        let completed = ready!(Pin::new(&mut self.file).poll_complete(cx));
        let ours = std::mem::take(&mut self.seeking);
        let in_file = completed?;
        Poll::Ready(match ours {
            true => in_file
                .checked_sub(start)
                .ok_or_else(|| before_start(start)),
            false => Ok(in_file.saturating_sub(start)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

    #[tokio::test]
    async fn offsets_count_from_the_start_and_the_end_is_the_files() {
        let dir = super::super::test_cluster::TempDir::new("snapshot-bytes");
        std::fs::create_dir_all(&dir.0).unwrap();
        let path = dir.0.join("f");
        std::fs::write(&path, b"headerPAYLOAD").unwrap();
        let mut file = tokio::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .await
            .unwrap();
        file.seek(SeekFrom::Start(6)).await.unwrap();
        let mut bytes = SnapshotBytes::new(file, 6);
        assert_eq!(bytes.seek(SeekFrom::End(0)).await.unwrap(), 7);
        assert_eq!(bytes.seek(SeekFrom::Start(3)).await.unwrap(), 3);
        let mut read = String::new();
        bytes.read_to_string(&mut read).await.unwrap();
        assert_eq!(read, "LOAD");
        bytes.seek(SeekFrom::Start(0)).await.unwrap();
        bytes.write_all(b"pay").await.unwrap();
        bytes.flush().await.unwrap();
        let err = bytes.seek(SeekFrom::Current(-4)).await.unwrap_err();
        assert!(
            err.to_string().contains("before the snapshot's start"),
            "{err}"
        );
        drop(bytes);
        assert_eq!(std::fs::read(&path).unwrap(), b"headerpayLOAD");
    }
}
