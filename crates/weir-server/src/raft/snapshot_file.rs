//! The snapshot file, `snapshot.bin`: its format, written and loaded without holding the
//! machine snapshot's bytes in memory.
//!
//! The file (docs/design.md, "`snapshot.bin` and the machine snapshot") is a sealed frame
//! of kind `b"WSST"`, version 1, whose payload is bincode's `{meta, data}`: the snapshot's
//! openraft metadata, then the machine snapshot (a `b"WSNP"` frame) as a length and its
//! bytes. The machine's bytes are the payload's last field, so they run from
//! [`Written::data_start`] to the file's end: a reader of the file from there is the
//! snapshot as openraft sends it (`snapshot_bytes.rs`), with no copy.
//!
//! Why this layout is kept rather than one built for streaming: every release reads it
//! (an upgrade starts on the file, a downgrade too), and it streams as it is. Writing it
//! needs the payload's length and checksum, which the header holds in front: the length is
//! known before (the metadata's encoding plus the machine's length), the checksum is
//! computed as the bytes pass and written last, by seeking back. The machine's bytes are
//! copied from a reader through a buffer: a received snapshot, kept in a file of its own
//! as it arrived, is copied behind the metadata (one sequential pass on disk, not a copy
//! in memory).
//!
//! Invariants:
//! - The bytes written are exactly [`encode_file`]'s, which the format fixtures pin.
//! - The file is replaced atomically: written as `snapshot.bin.tmp`, fsynced, renamed
//!   ([`rename_temporary`]), and the directory fsynced ([`sync_dir`]). A leftover
//!   temporary file is never read and is overwritten by the next snapshot.
//! - Loading checks the frame (magic, version, length, checksum streamed over the
//!   payload) before it decodes a byte, then restores the machine from the file with its
//!   own frame's checks (`Machine::restore_from`): damage is an error naming the file.
//! - Each durable step (the temporary file's fsync, the rename, the directory's fsync) is
//!   told to a simulation ([`simulated::file_event`]), which keeps what a power loss would
//!   leave; outside one the call does nothing. In a simulation that keeps it
//!   ([`simulated::models_files`]) the fsyncs themselves are skipped: the model, not the
//!   disk, decides what a crash takes back.
//! - Nothing here holds a snapshot's bytes: memory is a buffer of
//!   [`COPY_BUFFER_BYTES`], whatever the snapshot's size.

use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::SnapshotMeta;
use crate::simulated::{self, FileEvent};
use weir_core::bounds::SNAPSHOT_BYTES_MAX;
use weir_core::codec::{self, FrameError};
use weir_core::machine::{Frozen, Machine};

/// Frame kind of the snapshot file.
const FILE_MAGIC: [u8; 4] = *b"WSST";
/// Version of the snapshot file's payload layout.
const FILE_VERSION: u16 = 1;
/// The snapshot file's name in the data directory.
pub const SNAPSHOT_FILE: &str = "snapshot.bin";
/// The file a snapshot is written to before it replaces [`SNAPSHOT_FILE`].
const TEMPORARY_FILE: &str = "snapshot.bin.tmp";

/// Bytes copied at a time: large enough that the disk, not the calls, sets the pace.
const COPY_BUFFER_BYTES: usize = 256 << 10;

/// Where a snapshot file written or loaded keeps the machine's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    /// The offset of the machine snapshot's first byte; it runs to the file's end.
    pub data_start: u64,
    /// The machine snapshot's bytes.
    pub data_len: u64,
}

/// The machine snapshot a file is written with.
pub enum Data<'a> {
    /// `len` bytes read from a reader (a snapshot received, or bytes at hand), copied
    /// through a buffer.
    Copied(&'a mut dyn Read, u64),
    /// A frozen state, encoded straight into the file through a buffer (a snapshot built).
    Encoded(&'a Frozen),
}

impl Data<'_> {
    /// The machine snapshot's bytes (a frozen state's counted without encoding it).
    fn len(&self) -> u64 {
        match self {
            Data::Copied(_, len) => *len,
            Data::Encoded(frozen) => frozen.encoded_len(),
        }
    }
}

/// A snapshot file loaded at start.
pub struct Loaded {
    pub meta: SnapshotMeta,
    pub machine: Machine,
    pub written: Written,
}

/// The bytes of a snapshot file holding `meta` and the machine snapshot `data`.
pub fn encode_file(meta: &SnapshotMeta, data: &[u8]) -> Vec<u8> {
    let mut out = io::Cursor::new(Vec::new());
    let len = data.len() as u64;
    write_frame(&mut out, meta, Data::Copied(&mut &data[..], len))
        // Writing to memory fails on nothing.
        .expect("a snapshot file encodes in memory");
    out.into_inner()
}

/// Writes the snapshot file's frame at `out`'s position: `meta`, then the machine snapshot
/// `data`. Fails if a reader holds fewer bytes than it was given as its length.
fn write_frame<W: Write + Seek>(
    out: &mut W,
    meta: &SnapshotMeta,
    data: Data<'_>,
) -> io::Result<Written> {
    let start = out.stream_position()?;
    let data_len = data.len();
    // `{meta, data}` as bincode writes it: the metadata, the data's length, its bytes.
    let head = codec::encode(&(meta, data_len));
    let payload_len = head.len() as u64 + data_len;
    let mut header = [0u8; codec::HEADER_BYTES];
    header[0..4].copy_from_slice(&FILE_MAGIC);
    header[4..6].copy_from_slice(&FILE_VERSION.to_le_bytes());
    header[6..14].copy_from_slice(&payload_len.to_le_bytes());
    out.write_all(&header)?;
    out.write_all(&head)?;
    let data_crc = match data {
        Data::Copied(reader, _) => copy(reader, out, data_len)?,
        Data::Encoded(frozen) => {
            let (written, crc) = frozen.encode_into(out)?;
            assert_eq!(
                written, data_len,
                "a frozen state encodes to the length counted for it"
            );
            crc
        }
    };
    let crc = crc32c::crc32c_combine(crc32c::crc32c(&head), data_crc, data_len as usize);
    let end = out.stream_position()?;
    out.seek(SeekFrom::Start(start + 14))?;
    out.write_all(&crc.to_le_bytes())?;
    out.seek(SeekFrom::Start(end))?;
    Ok(Written {
        data_start: start + (codec::HEADER_BYTES + head.len()) as u64,
        data_len,
    })
}

/// Copies `len` bytes from `reader` to `out` through a buffer: their crc32c.
fn copy(reader: &mut dyn Read, out: &mut impl Write, len: u64) -> io::Result<u32> {
    let mut buffer = vec![0u8; COPY_BUFFER_BYTES.min(len as usize)];
    let mut crc = 0;
    let mut left = len;
    while left > 0 {
        let want = left.min(buffer.len() as u64) as usize;
        let n = reader.read(&mut buffer[..want])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the machine snapshot ended {left} bytes before its {len}"),
            ));
        }
        crc = crc32c::crc32c_append(crc, &buffer[..n]);
        out.write_all(&buffer[..n])?;
        left -= n as u64;
    }
    Ok(crc)
}

/// Writes `dir/snapshot.bin.tmp` holding `meta` and the machine snapshot `data`, and
/// fsyncs it unless `synced` is false (the `unsynced-snapshot` plant's).
/// [`rename_temporary`] makes it the snapshot file.
pub fn write_temporary(
    dir: &Path,
    meta: &SnapshotMeta,
    data: Data<'_>,
    synced: bool,
) -> io::Result<Written> {
    let path = dir.join(TEMPORARY_FILE);
    let mut f = crate::private_files::create(&path)?;
    let written = write_frame(&mut f, meta, data)?;
    if synced {
        if !simulated::models_files() {
            f.sync_all()?;
        }
        simulated::file_event(FileEvent::Synced(path));
    }
    Ok(written)
}

/// Renames the file [`write_temporary`] wrote over `dir/snapshot.bin`.
pub fn rename_temporary(dir: &Path) -> io::Result<()> {
    let (from, to) = (dir.join(TEMPORARY_FILE), dir.join(SNAPSHOT_FILE));
    std::fs::rename(&from, &to)?;
    simulated::file_event(FileEvent::Renamed { from, to });
    Ok(())
}

/// Fsyncs `dir`, so that a rename in it is durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    let opened = std::fs::File::open(dir)?;
    if !simulated::models_files() {
        opened.sync_all()?;
    }
    simulated::file_event(FileEvent::DirSynced(dir.to_owned()));
    Ok(())
}

/// The snapshot file's path in `dir`.
pub fn path(dir: &Path) -> PathBuf {
    dir.join(SNAPSHOT_FILE)
}

/// Loads `dir/snapshot.bin`: `None` when there is none; a damaged or foreign file is an
/// error naming it and what is wrong.
pub fn load(dir: &Path) -> Result<Option<Loaded>, String> {
    let path = path(dir);
    let named = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let mut file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(named(&e)),
    };
    let len = file.metadata().map_err(|e| named(&e))?.len();
    load_from(&mut file, len).map(Some).map_err(|e| named(&e))
}

/// Checks and decodes the snapshot file of `len` bytes that `file` holds.
fn load_from<R: Read + Seek>(file: &mut R, len: u64) -> Result<Loaded, FrameError> {
    let header = codec::check_frame(
        file,
        0,
        len,
        FILE_MAGIC,
        &[FILE_VERSION],
        SNAPSHOT_BYTES_MAX,
    )?;
    let read_failed = |e: io::Error| FrameError::Read(e.to_string());
    file.seek(SeekFrom::Start(codec::HEADER_BYTES as u64))
        .map_err(read_failed)?;
    let ((meta, data_len), head_len): ((SnapshotMeta, u64), u64) =
        codec::decode_prefix_from(&mut *file, header.payload_bytes)?;
    if data_len != header.payload_bytes - head_len {
        return Err(FrameError::Decode(format!(
            "the machine snapshot's length {data_len} is not the {} bytes after the metadata",
            header.payload_bytes - head_len
        )));
    }
    let data_start = codec::HEADER_BYTES as u64 + head_len;
    let machine = Machine::restore_from(file, data_start, data_len)?;
    Ok(Loaded {
        meta,
        machine,
        written: Written {
            data_start,
            data_len,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::{NodeAddr, StoredMembership};
    use openraft::{CommittedLeaderId, LogId, Membership};

    fn meta() -> SnapshotMeta {
        let log_id = LogId::new(CommittedLeaderId::new(2, 1), 9);
        let members = [(1, NodeAddr::default()), (2, NodeAddr::default())];
        SnapshotMeta {
            last_log_id: Some(log_id),
            last_membership: StoredMembership::new(
                Some(log_id),
                Membership::new(
                    vec![[1, 2].into()],
                    members
                        .into_iter()
                        .collect::<std::collections::BTreeMap<_, _>>(),
                ),
            ),
            snapshot_id: "2-1-9".into(),
        }
    }

    /// The layout `encode_file` had as one `seal_frame` of one `encode`: the bytes every
    /// release writes and reads.
    fn sealed_whole(meta: &SnapshotMeta, data: &[u8]) -> Vec<u8> {
        #[derive(serde::Serialize)]
        struct File<'a> {
            meta: &'a SnapshotMeta,
            data: &'a [u8],
        }
        codec::seal_frame(
            FILE_MAGIC,
            FILE_VERSION,
            &codec::encode(&File { meta, data }),
        )
    }

    #[test]
    fn a_file_streamed_is_the_file_sealed_whole_and_loads_back() {
        let machine = Machine::new();
        let data = machine.snapshot();
        let file = encode_file(&meta(), &data);
        assert_eq!(file, sealed_whole(&meta(), &data));
        let loaded = load_from(&mut io::Cursor::new(&file), file.len() as u64).unwrap();
        assert_eq!(loaded.meta, meta());
        assert_eq!(&file[loaded.written.data_start as usize..], &data[..]);
        assert_eq!(loaded.machine.digest(), machine.digest());
        // A frozen state encoded into the file gives the same bytes.
        let mut out = io::Cursor::new(Vec::new());
        write_frame(&mut out, &meta(), Data::Encoded(&machine.freeze())).unwrap();
        assert_eq!(out.into_inner(), file);
        // Too few machine bytes is an error, not a short file.
        let mut out = io::Cursor::new(Vec::new());
        let short = Data::Copied(&mut &data[1..], data.len() as u64);
        let err = write_frame(&mut out, &meta(), short);
        assert_eq!(err.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn a_damaged_file_is_refused_with_what_is_wrong() {
        let file = encode_file(&meta(), &Machine::new().snapshot());
        let load = |bytes: &[u8]| {
            load_from(&mut io::Cursor::new(bytes), bytes.len() as u64)
                .err()
                .expect("refused")
                .to_string()
        };
        let mut flipped = file.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(load(&flipped).starts_with("checksum mismatch"));
        assert!(load(&file[..file.len() - 1]).starts_with("truncated"));
        // A payload whose inner length lies, resealed so that its checksum holds.
        let data = Machine::new().snapshot();
        let mut head = codec::encode(&(&meta(), data.len() as u64 + 1));
        head.extend_from_slice(&data);
        let lying = codec::seal_frame(FILE_MAGIC, FILE_VERSION, &head);
        assert!(load(&lying).contains("is not the"), "{}", load(&lying));
    }
}
