//! The one bincode configuration, and the framed format that wraps every file Weir writes
//! down whole: the machine's snapshot (`b"WSNP"`), the snapshot file around it (`b"WSST"`,
//! `weir_server::raft::snapshot_file`) and the data directory's identity file (`b"WNID"`,
//! `weir_server::server::data_dir`), every log entry (`b"WENT"`, `weir_server::raft::log_store`) and
//! the log's other records (vote, committed id, truncation, purge, checkpoint:
//! `weir_server::raft::wal`). Frames on the wire use [`BINCODE`] but not this frame: the
//! wire has its own lighter header (`weir_proto::wire`).
//!
//! A frame is
//!
//! ```text
//! offset  size  field
//! 0       4     magic      names what the payload is (b"WSNP" for a snapshot, ...)
//! 4       2     version    u16 little-endian, the payload's format version
//! 6       8     length     u64 little-endian, payload bytes that follow the header
//! 14      4     crc32c     u32 little-endian, CRC-32C (Castagnoli) of the payload
//! 18      ..    payload    bincode 2, standard configuration (varint, little-endian)
//! ```
//!
//! Invariants:
//! - [`BINCODE`] is the only configuration used anywhere; changing it is a format change and
//!   needs a new version number in every frame kind that uses it.
//! - [`open_frame`] checks magic, version, length and checksum before a single payload byte
//!   is decoded, and refuses trailing bytes: a frame that opens is exactly what was sealed.
//! - Decoding never panics and never allocates more than the declared length, which is
//!   checked against a caller-given maximum first; inside the payload, no length field can
//!   make [`decode`] allocate more than a fixed multiple of the bytes it was given.
//! - A frame too large to hold in memory twice (a snapshot of millions of keys) is checked
//!   and decoded from a reader the same way: [`check_frame`] streams the payload through the
//!   checksum before [`decode_from`] reads a byte of it as a value, and both name the same
//!   faults as [`open_frame`] and [`decode`]. This module takes readers; it never opens a
//!   file.

use std::fmt;
use std::io::{self, Read, Seek, SeekFrom, Write};

/// The pinned bincode configuration: standard (varint integers, little-endian), no limit
/// (frames bound sizes before bincode sees them).
pub const BINCODE: bincode::config::Configuration = bincode::config::standard();

/// Bytes in a frame header.
pub const HEADER_BYTES: usize = 18;

/// Why a frame or its payload was refused. Every variant names what was wrong so the message
/// can be shown to an operator as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// Fewer bytes than a header.
    TooShort { len: usize },
    /// The first four bytes are not the expected magic.
    BadMagic { expected: [u8; 4], found: [u8; 4] },
    /// A version this build does not read.
    UnknownVersion { found: u16, supported: u16 },
    /// The declared payload length is above the caller's bound.
    TooLarge { declared: u64, max: u64 },
    /// Fewer payload bytes than declared.
    Truncated { declared: u64, actual: u64 },
    /// More bytes than declared follow the header.
    TrailingBytes { declared: u64, actual: u64 },
    /// The payload does not match its checksum.
    Checksum { stored: u32, computed: u32 },
    /// The payload passed its checksum but is not a valid encoding of the expected type.
    Decode(String),
    /// The payload decoded but breaks an invariant of the decoded value.
    Invalid(String),
    /// Reading the frame from its reader failed (an I/O error, or the bytes ended early).
    Read(String),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::TooShort { len } => {
                write!(
                    f,
                    "truncated: {len} bytes, a header alone is {HEADER_BYTES}"
                )
            }
            FrameError::BadMagic { expected, found } => write!(
                f,
                "bad magic: expected {:?}, found {:?}",
                String::from_utf8_lossy(expected),
                String::from_utf8_lossy(found)
            ),
            FrameError::UnknownVersion { found, supported } => {
                write!(
                    f,
                    "unknown format version {found} (this build reads {supported})"
                )
            }
            FrameError::TooLarge { declared, max } => {
                write!(
                    f,
                    "declared length {declared} bytes is above the bound of {max}"
                )
            }
            FrameError::Truncated { declared, actual } => {
                write!(
                    f,
                    "truncated: header declares {declared} payload bytes, {actual} present"
                )
            }
            FrameError::TrailingBytes { declared, actual } => write!(
                f,
                "trailing bytes: header declares {declared} payload bytes, {actual} present"
            ),
            FrameError::Checksum { stored, computed } => write!(
                f,
                "checksum mismatch: stored crc32c {stored:08x}, payload has {computed:08x}"
            ),
            FrameError::Decode(why) => write!(f, "undecodable payload: {why}"),
            FrameError::Invalid(why) => write!(f, "inconsistent payload: {why}"),
            FrameError::Read(why) => write!(f, "read failed: {why}"),
        }
    }
}

impl std::error::Error for FrameError {}

/// Seals `payload` in a frame of kind `magic` at format `version`.
pub fn seal_frame(magic: [u8; 4], version: u16, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + payload.len());
    let len = payload.len() as u64;
    out.extend_from_slice(&header(magic, version, len, crc32c::crc32c(payload)));
    out.extend_from_slice(payload);
    out
}

/// A frame's header.
fn header(magic: [u8; 4], version: u16, payload_bytes: u64, crc: u32) -> [u8; HEADER_BYTES] {
    let mut header = [0u8; HEADER_BYTES];
    header[0..4].copy_from_slice(&magic);
    header[4..6].copy_from_slice(&version.to_le_bytes());
    header[6..14].copy_from_slice(&payload_bytes.to_le_bytes());
    header[14..18].copy_from_slice(&crc.to_le_bytes());
    header
}

/// Bytes of the frame [`seal_frame_into`] writes for `value`, counted without encoding it
/// anywhere.
pub fn sealed_len<T: serde::Serialize>(value: &T) -> u64 {
    (HEADER_BYTES + encoded_len(value)) as u64
}

/// Writes at `out`'s position the bytes of `seal_frame(magic, version, &encode(value))`,
/// encoded through a buffer, never whole: the payload first, then the header, by seeking
/// back (it holds the payload's length and checksum). Leaves `out` at the frame's end.
/// Returns how many bytes it wrote and their crc32c (of the whole frame, header included).
pub fn seal_frame_into<T: serde::Serialize, W: Write + Seek>(
    out: &mut W,
    magic: [u8; 4],
    version: u16,
    value: &T,
) -> io::Result<(u64, u32)> {
    let start = out.stream_position()?;
    out.write_all(&[0u8; HEADER_BYTES])?;
    let (payload_crc, payload_bytes) = {
        let mut sink = Checksummed {
            inner: io::BufWriter::with_capacity(STREAM_BUFFER_BYTES, &mut *out),
            crc: 0,
            written: 0,
        };
        bincode::serde::encode_into_std_write(value, &mut sink, BINCODE)
            .map_err(|e| io::Error::other(e.to_string()))?;
        sink.inner.flush()?;
        (sink.crc, sink.written)
    };
    let header = header(magic, version, payload_bytes, payload_crc);
    let end = out.stream_position()?;
    out.seek(SeekFrom::Start(start))?;
    out.write_all(&header)?;
    out.seek(SeekFrom::Start(end))?;
    let crc = crc32c::crc32c_combine(crc32c::crc32c(&header), payload_crc, payload_bytes as usize);
    Ok((HEADER_BYTES as u64 + payload_bytes, crc))
}

/// A writer that checksums and counts what it passes on.
struct Checksummed<W> {
    inner: W,
    crc: u32,
    written: u64,
}

impl<W: Write> Write for Checksummed<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc = crc32c::crc32c_append(self.crc, &buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Opens a frame sealed by [`seal_frame`], returning its payload. Checks everything the
/// header promises before returning; `max_payload` bounds the declared length.
pub fn open_frame(
    bytes: &[u8],
    magic: [u8; 4],
    version: u16,
    max_payload: u64,
) -> Result<&[u8], FrameError> {
    if bytes.len() < HEADER_BYTES {
        return Err(FrameError::TooShort { len: bytes.len() });
    }
    let found: [u8; 4] = bytes[0..4].try_into().expect("slice of 4");
    if found != magic {
        return Err(FrameError::BadMagic {
            expected: magic,
            found,
        });
    }
    let found_version = u16::from_le_bytes(bytes[4..6].try_into().expect("slice of 2"));
    if found_version != version {
        return Err(FrameError::UnknownVersion {
            found: found_version,
            supported: version,
        });
    }
    let declared = u64::from_le_bytes(bytes[6..14].try_into().expect("slice of 8"));
    if declared > max_payload {
        return Err(FrameError::TooLarge {
            declared,
            max: max_payload,
        });
    }
    let stored = u32::from_le_bytes(bytes[14..18].try_into().expect("slice of 4"));
    let payload = &bytes[HEADER_BYTES..];
    let actual = payload.len() as u64;
    if actual < declared {
        return Err(FrameError::Truncated { declared, actual });
    }
    if actual > declared {
        return Err(FrameError::TrailingBytes { declared, actual });
    }
    let computed = crc32c::crc32c(payload);
    if computed != stored {
        return Err(FrameError::Checksum { stored, computed });
    }
    Ok(payload)
}

/// What a frame's header says, once [`check_frame`] has checked the payload against it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// The payload's format version: one of those the caller reads.
    pub version: u16,
    /// Payload bytes after the header.
    pub payload_bytes: u64,
}

/// Bytes [`check_frame`] reads at a time: large enough that the checksum, not the calls,
/// sets the pace, small enough to be nothing beside the frames it streams.
const STREAM_BUFFER_BYTES: usize = 256 << 10;

fn read_failed(e: io::Error) -> FrameError {
    FrameError::Read(e.to_string())
}

/// Checks the frame of `len` bytes at `start` in `r` as [`open_frame`] checks a slice, with
/// the payload streamed through the checksum, never held: magic, a version among
/// `versions` (the first is the one named when another is found), the declared length
/// against `max_payload` and against the `len` bytes there are, and the crc32c. Leaves
/// `r` anywhere; the caller seeks to the payload (`start + HEADER_BYTES`) to decode it.
pub fn check_frame<R: Read + Seek>(
    r: &mut R,
    start: u64,
    len: u64,
    magic: [u8; 4],
    versions: &[u16],
    max_payload: u64,
) -> Result<FrameHeader, FrameError> {
    assert!(!versions.is_empty(), "a frame check reads some version");
    if len < HEADER_BYTES as u64 {
        return Err(FrameError::TooShort { len: len as usize });
    }
    r.seek(SeekFrom::Start(start)).map_err(read_failed)?;
    let mut header = [0u8; HEADER_BYTES];
    r.read_exact(&mut header).map_err(read_failed)?;
    let found: [u8; 4] = header[0..4].try_into().expect("slice of 4");
    if found != magic {
        return Err(FrameError::BadMagic {
            expected: magic,
            found,
        });
    }
    let version = u16::from_le_bytes(header[4..6].try_into().expect("slice of 2"));
    if !versions.contains(&version) {
        return Err(FrameError::UnknownVersion {
            found: version,
            supported: versions[0],
        });
    }
    let declared = u64::from_le_bytes(header[6..14].try_into().expect("slice of 8"));
    if declared > max_payload {
        return Err(FrameError::TooLarge {
            declared,
            max: max_payload,
        });
    }
    let stored = u32::from_le_bytes(header[14..18].try_into().expect("slice of 4"));
    let actual = len - HEADER_BYTES as u64;
    if actual < declared {
        return Err(FrameError::Truncated { declared, actual });
    }
    if actual > declared {
        return Err(FrameError::TrailingBytes { declared, actual });
    }
    let mut buffer = vec![0u8; STREAM_BUFFER_BYTES];
    let mut computed = 0u32;
    let mut left = declared;
    while left > 0 {
        let want = left.min(buffer.len() as u64) as usize;
        let n = r.read(&mut buffer[..want]).map_err(read_failed)?;
        if n == 0 {
            return Err(FrameError::Read(format!(
                "the payload ends {left} bytes before its declared {declared}"
            )));
        }
        computed = crc32c::crc32c_append(computed, &buffer[..n]);
        left -= n as u64;
    }
    if computed != stored {
        return Err(FrameError::Checksum { stored, computed });
    }
    Ok(FrameHeader {
        version,
        payload_bytes: declared,
    })
}

/// Encodes `value` with [`BINCODE`].
pub fn encode<T: serde::Serialize>(value: &T) -> Vec<u8> {
    // Encoding into a Vec fails only for types serde cannot describe to bincode (maps of
    // unknown length and the like), which none of Weir's types are: a failure is a bug.
    bincode::serde::encode_to_vec(value, BINCODE).expect("weir types always encode")
}

/// How many bytes [`encode`] would produce for `value`, without building them: the
/// proposer's measure of a command against the entry bound.
pub fn encoded_len<T: serde::Serialize>(value: &T) -> usize {
    let mut size = bincode::enc::write::SizeWriter::default();
    bincode::serde::encode_into_writer(value, &mut size, BINCODE)
        .expect("weir types always encode");
    size.bytes_written
}

/// Most bytes bincode may claim, per byte of input, while decoding it. bincode claims each
/// primitive's in-memory size (at most 16 bytes, a u128, from at least one encoded byte) and
/// each string's or byte vector's declared length (one byte per encoded byte) before it
/// allocates, so an honest input never claims more than 16 times its length. A length
/// field that claims more is a lie, refused before the allocation it asks for.
const CLAIM_BYTES_PER_INPUT_BYTE: usize = 16;

/// Largest input [`decode`] accepts: 4 GiB, above every bound that feeds it
/// (`SNAPSHOT_BYTES_MAX`, the frame bounds, a log entry).
const DECODE_INPUT_BYTES_MAX: usize = 1 << 32;

/// A payload to decode: a slice ([`decode`]) or the next bytes of a reader
/// ([`decode_from`]), so that one decoding (a format's versions, say) serves both.
pub trait Payload {
    /// Decodes a `T` from exactly this payload with [`BINCODE`]; leftover bytes are an error.
    fn decode<T: serde::de::DeserializeOwned>(self) -> Result<T, FrameError>;
}

impl Payload for &[u8] {
    fn decode<T: serde::de::DeserializeOwned>(self) -> Result<T, FrameError> {
        decode(self)
    }
}

/// The next `len` bytes of `reader`, as a [`Payload`].
pub struct ReadPayload<R> {
    pub reader: R,
    pub len: u64,
}

impl<R: Read> Payload for ReadPayload<R> {
    fn decode<T: serde::de::DeserializeOwned>(self) -> Result<T, FrameError> {
        decode_from(self.reader, self.len)
    }
}

/// Decodes a `T` from exactly `bytes` with [`BINCODE`]; leftover bytes are an error.
///
/// bincode allocates a string's declared length before reading its bytes, and its only
/// guard is the configuration's limit on claimed bytes, a constant. So the input's length
/// picks the smallest of a few limits that still covers `CLAIM_BYTES_PER_INPUT_BYTE` × its
/// tier: a frame of a few hundred bytes that declares a 116 PB string is refused instead of
/// aborting the process (found by the `client_request` fuzz target, docs/fuzzing.md), and
/// every allocation decoding makes from a declared length stays within 16 × 16 times the
/// input (the tiers are 16 apart).
pub fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, FrameError> {
    let len = bytes.len() as u64;
    let (value, used) = decode_tiered::<T, io::Empty>(Input::Slice(bytes))?;
    all_used(value, used, len)
}

/// [`decode`] from the next `len` bytes of `reader`, read through a buffer: the same
/// limits (by `len`) and the same refusals, and exactly `len` bytes must make the value.
/// The reader is read no further than `len` bytes.
pub fn decode_from<T: serde::de::DeserializeOwned, R: Read>(
    reader: R,
    len: u64,
) -> Result<T, FrameError> {
    let (value, used) = decode_prefix_from(reader, len)?;
    all_used(value, used, len)
}

/// Decodes a `T` from the first bytes of the next `len` bytes of `reader` (the limits of
/// [`decode`] by `len`), and how many bytes it took: for a value that a frame's payload
/// holds in front of others. The reader is read no further than `len` bytes, and through a
/// buffer: its position afterwards is anywhere up to there.
pub fn decode_prefix_from<T: serde::de::DeserializeOwned, R: Read>(
    reader: R,
    len: u64,
) -> Result<(T, u64), FrameError> {
    let mut counted = Counted {
        inner: io::BufReader::with_capacity(STREAM_BUFFER_BYTES, reader.take(len)),
        read: 0,
    };
    decode_tiered(Input::Reader(&mut counted, len))
}

/// `value` if it took all `len` bytes of its input.
fn all_used<T>(value: T, used: u64, len: u64) -> Result<T, FrameError> {
    if used != len {
        return Err(FrameError::Decode(format!(
            "{} bytes left over after the value",
            len - used
        )));
    }
    Ok(value)
}

/// What [`decode_tiered`] reads: a slice, or a counted reader and its length.
enum Input<'a, R> {
    Slice(&'a [u8]),
    Reader(&'a mut Counted<R>, u64),
}

impl<R> Input<'_, R> {
    fn len(&self) -> u64 {
        match self {
            Input::Slice(bytes) => bytes.len() as u64,
            Input::Reader(_, len) => *len,
        }
    }
}

/// A reader that counts what it returns: what bincode consumed of it, since bincode asks
/// for exactly the bytes it decodes.
struct Counted<R> {
    inner: R,
    read: u64,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

/// Decodes a `T` from `input` with bincode's claim limit picked by the input's length (see
/// [`decode`]): the value and the bytes it took.
fn decode_tiered<T: serde::de::DeserializeOwned, R: Read>(
    input: Input<'_, R>,
) -> Result<(T, u64), FrameError> {
    const C: usize = CLAIM_BYTES_PER_INPUT_BYTE;
    match input.len() {
        n if n <= 1 << 12 => decode_within::<T, R, { C << 12 }>(input),
        n if n <= 1 << 16 => decode_within::<T, R, { C << 16 }>(input),
        n if n <= 1 << 20 => decode_within::<T, R, { C << 20 }>(input),
        n if n <= 1 << 24 => decode_within::<T, R, { C << 24 }>(input),
        n if n <= 1 << 28 => decode_within::<T, R, { C << 28 }>(input),
        n if n <= DECODE_INPUT_BYTES_MAX as u64 => {
            decode_within::<T, R, { C * DECODE_INPUT_BYTES_MAX }>(input)
        }
        n => Err(FrameError::Decode(format!(
            "{n} bytes is above the largest decodable input of {DECODE_INPUT_BYTES_MAX}"
        ))),
    }
}

/// [`decode_tiered`] with bincode's claim limit at `LIMIT` bytes.
fn decode_within<T: serde::de::DeserializeOwned, R: Read, const LIMIT: usize>(
    input: Input<'_, R>,
) -> Result<(T, u64), FrameError> {
    let config = BINCODE.with_limit::<LIMIT>();
    match input {
        Input::Slice(bytes) => bincode::serde::decode_from_slice(bytes, config)
            .map(|(value, used)| (value, used as u64))
            .map_err(|e| FrameError::Decode(e.to_string())),
        Input::Reader(counted, _) => bincode::serde::decode_from_std_read(counted, config)
            .map(|value| (value, counted.read))
            .map_err(|e| FrameError::Decode(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAGIC: [u8; 4] = *b"TEST";

    #[test]
    fn a_sealed_frame_opens_to_its_payload() {
        let sealed = seal_frame(MAGIC, 3, b"hello");
        assert_eq!(sealed.len(), HEADER_BYTES + 5);
        assert_eq!(&sealed[0..4], b"TEST");
        assert_eq!(open_frame(&sealed, MAGIC, 3, 100).unwrap(), b"hello");
    }

    #[test]
    fn every_damage_is_named() {
        let sealed = seal_frame(MAGIC, 3, b"hello");
        assert_eq!(
            open_frame(&sealed[..10], MAGIC, 3, 100),
            Err(FrameError::TooShort { len: 10 })
        );
        assert!(matches!(
            open_frame(&sealed, *b"ELSE", 3, 100),
            Err(FrameError::BadMagic { .. })
        ));
        assert_eq!(
            open_frame(&sealed, MAGIC, 4, 100),
            Err(FrameError::UnknownVersion {
                found: 3,
                supported: 4
            })
        );
        assert_eq!(
            open_frame(&sealed, MAGIC, 3, 4),
            Err(FrameError::TooLarge {
                declared: 5,
                max: 4
            })
        );
        assert_eq!(
            open_frame(&sealed[..sealed.len() - 1], MAGIC, 3, 100),
            Err(FrameError::Truncated {
                declared: 5,
                actual: 4
            })
        );
        let mut longer = sealed.clone();
        longer.push(0);
        assert_eq!(
            open_frame(&longer, MAGIC, 3, 100),
            Err(FrameError::TrailingBytes {
                declared: 5,
                actual: 6
            })
        );
        let mut flipped = sealed.clone();
        flipped[HEADER_BYTES] ^= 1;
        let err = open_frame(&flipped, MAGIC, 3, 100).unwrap_err();
        assert!(matches!(err, FrameError::Checksum { .. }));
        assert!(err.to_string().starts_with("checksum mismatch"));
    }

    #[test]
    fn encoded_len_is_the_encoding_length() {
        let value = (7u64, String::from("hello"), vec![1u32 << 30; 9]);
        assert_eq!(encoded_len(&value), encode(&value).len());
    }

    #[test]
    fn decode_refuses_a_length_the_input_cannot_hold() {
        // A string that declares 2^60 bytes, in nine bytes: bincode would allocate it
        // before noticing the input ends (the process aborts, or panics on capacity).
        let mut bytes = vec![0xfd];
        bytes.extend_from_slice(&(1u64 << 60).to_le_bytes());
        let err = decode::<String>(&bytes).unwrap_err();
        assert!(matches!(err, FrameError::Decode(_)), "{err}");
        // The found case: a terabyte-long name inside a value.
        let mut bytes = vec![7];
        bytes.push(0xfd);
        bytes.extend_from_slice(&1_700_000_000_000u64.to_le_bytes());
        bytes.extend_from_slice(b"short");
        assert!(decode::<(u32, String)>(&bytes).is_err());
    }

    #[test]
    fn decode_takes_every_honest_size() {
        // Tier edges: values whose claim is largest for their length still decode.
        for len in [0usize, 1, 4_000, 4_096, 70_000, 1 << 20] {
            let value = (u128::MAX, "x".repeat(len), vec![u128::MAX; len / 64]);
            let bytes = encode(&value);
            assert_eq!(decode::<(u128, String, Vec<u128>)>(&bytes).unwrap(), value);
        }
        let many_units = vec![(); 10_000];
        assert_eq!(decode::<Vec<()>>(&encode(&many_units)).unwrap(), many_units);
    }

    #[test]
    fn decode_refuses_leftover_bytes() {
        let mut bytes = encode(&(7u32, String::from("x")));
        assert_eq!(
            decode::<(u32, String)>(&bytes).unwrap(),
            (7, "x".to_string())
        );
        bytes.push(1);
        let err = decode::<(u32, String)>(&bytes).unwrap_err();
        assert_eq!(
            err.to_string(),
            "undecodable payload: 1 bytes left over after the value"
        );
    }

    #[test]
    fn decode_from_a_reader_decodes_and_refuses_as_decode_does() {
        let value = (7u64, "x".repeat(5_000), vec![3u32; 100]);
        let mut bytes = encode(&value);
        let len = bytes.len() as u64;
        bytes.extend_from_slice(b"next");
        let mut r = io::Cursor::new(&bytes);
        let back: (u64, String, Vec<u32>) = decode_from(&mut r, len).unwrap();
        assert_eq!(back, value);
        // No further than its length.
        assert_eq!(r.position(), len);
        // Leftover, and too few bytes, named as `decode` names them.
        let err = decode_from::<(u64, String), _>(io::Cursor::new(&bytes), len).unwrap_err();
        assert_eq!(
            err,
            decode::<(u64, String)>(&bytes[..len as usize]).unwrap_err()
        );
        assert!(matches!(
            decode_from::<(u64, String, Vec<u32>), _>(io::Cursor::new(&bytes), len - 1),
            Err(FrameError::Decode(_))
        ));
        // A length claim the input cannot hold is refused before it is allocated.
        let mut lie = vec![0xfd];
        lie.extend_from_slice(&(1u64 << 60).to_le_bytes());
        assert!(matches!(
            decode_from::<String, _>(io::Cursor::new(&lie), lie.len() as u64),
            Err(FrameError::Decode(_))
        ));
    }

    #[test]
    fn a_frame_checked_from_a_reader_is_checked_as_open_frame_checks_it() {
        let sealed = seal_frame(MAGIC, 3, b"hello");
        let check = |bytes: &[u8], versions: &[u16], max: u64| {
            let mut r = io::Cursor::new(bytes);
            check_frame(&mut r, 0, bytes.len() as u64, MAGIC, versions, max)
        };
        assert_eq!(
            check(&sealed, &[4, 3], 100),
            Ok(FrameHeader {
                version: 3,
                payload_bytes: 5
            })
        );
        let mut flipped = sealed.clone();
        flipped[HEADER_BYTES + 1] ^= 1;
        let mut longer = sealed.clone();
        longer.push(0);
        for (bytes, versions, max) in [
            (&sealed[..10], &[3][..], 100),
            (&sealed[..], &[4][..], 100),
            (&sealed[..], &[3][..], 4),
            (&sealed[..sealed.len() - 1], &[3][..], 100),
            (&longer[..], &[3][..], 100),
            (&flipped[..], &[3][..], 100),
        ] {
            assert_eq!(
                check(bytes, versions, max).unwrap_err(),
                open_frame(bytes, MAGIC, versions[0], max).unwrap_err()
            );
        }
    }

    #[test]
    fn a_frame_sealed_into_a_writer_is_the_frame_sealed_whole() {
        let value = (7u64, "x".repeat(300_000), vec![u128::MAX; 1_000]);
        let whole = seal_frame(MAGIC, 3, &encode(&value));
        let mut out = io::Cursor::new(b"before".to_vec());
        out.set_position(6);
        let (len, crc) = seal_frame_into(&mut out, MAGIC, 3, &value).unwrap();
        assert_eq!(&out.get_ref()[6..], &whole[..]);
        assert_eq!(out.position(), 6 + whole.len() as u64);
        assert_eq!((len, crc), (whole.len() as u64, crc32c::crc32c(&whole)));
        assert_eq!(sealed_len(&value), len);
    }
}
