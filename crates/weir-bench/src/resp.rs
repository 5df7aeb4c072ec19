//! Redis's wire protocol (RESP2), as much as `--against redis` speaks: a command is an
//! array of bulk strings; a reply is a simple string, an error, an integer, a bulk string
//! or an array of replies.
//!
//! Written here rather than taken from a client crate: the bench sends a few commands
//! (`PING`, `SCRIPT LOAD`, `EVALSHA`, `INFO`, and `HSET` in pipelines of
//! [`PIPELINE_MAX`]), which is a page of code, where a client crate would add its
//! dependency tree to every build of `weir` for a comparison.
//!
//! A reply is read with bounds (bulk strings up to [`BULK_MAX`] bytes, arrays up to
//! [`ARRAY_MAX`] items, nested up to [`DEPTH_MAX`]); anything else is an error naming what
//! was wrong, never a panic.

use std::future::Future;
use std::pin::Pin;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

/// The longest bulk string read.
pub const BULK_MAX: usize = 1 << 20;
/// The most items of an array read.
pub const ARRAY_MAX: usize = 1024;
/// The deepest nesting of arrays read.
pub const DEPTH_MAX: usize = 4;
/// The most commands sent in one pipeline before their replies are read: bounds what is
/// buffered on both sides.
pub const PIPELINE_MAX: usize = 10_000;

/// A reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Simple(String),
    Error(String),
    Int(i64),
    /// `None`: the null bulk string.
    Bulk(Option<Vec<u8>>),
    /// `None`: the null array.
    Array(Option<Vec<Value>>),
}

/// `args` as one command, appended to `out`.
pub fn encode(args: &[&[u8]], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// One reply from `r`.
pub fn read<'a, R: AsyncBufRead + Unpin + Send>(
    r: &'a mut R,
    depth: usize,
) -> Pin<Box<dyn Future<Output = Result<Value, String>> + Send + 'a>> {
    Box::pin(async move {
        let line = line(r).await?;
        let kind = line.as_bytes()[0];
        let rest = line
            .get(1..)
            .ok_or_else(|| format!("RESP: unknown reply type in {line:?}"))?;
        let number = || {
            rest.parse::<i64>()
                .map_err(|_| format!("RESP: not a number: {rest:?}"))
        };
        match kind {
            b'+' => Ok(Value::Simple(rest.to_owned())),
            b'-' => Ok(Value::Error(rest.to_owned())),
            b':' => Ok(Value::Int(number()?)),
            b'$' if number()? < 0 => Ok(Value::Bulk(None)),
            b'$' => {
                let len = usize::try_from(number()?).unwrap_or(usize::MAX);
                if len > BULK_MAX {
                    return Err(format!("RESP: a bulk string of {len} bytes"));
                }
                let mut bytes = vec![0; len + 2];
                r.read_exact(&mut bytes)
                    .await
                    .map_err(|e| format!("RESP: {e}"))?;
                if bytes.split_off(len) != b"\r\n" {
                    return Err("RESP: a bulk string not ended by CRLF".into());
                }
                Ok(Value::Bulk(Some(bytes)))
            }
            b'*' if number()? < 0 => Ok(Value::Array(None)),
            b'*' => {
                let len = usize::try_from(number()?).unwrap_or(usize::MAX);
                if len > ARRAY_MAX || depth >= DEPTH_MAX {
                    return Err(format!("RESP: an array of {len} at depth {depth}"));
                }
                let mut items = Vec::with_capacity(len);
                for _ in 0..len {
                    items.push(read(r, depth + 1).await?);
                }
                Ok(Value::Array(Some(items)))
            }
            _ => Err(format!("RESP: unknown reply type in {line:?}")),
        }
    })
}

/// One CRLF-ended line, without the CRLF, of at least one character.
async fn line<R: AsyncBufRead + Unpin>(r: &mut R) -> Result<String, String> {
    let mut bytes = vec![];
    let n = (&mut *r)
        .take(BULK_MAX as u64)
        .read_until(b'\n', &mut bytes)
        .await
        .map_err(|e| format!("RESP: {e}"))?;
    if n == 0 {
        return Err("RESP: the connection closed".into());
    }
    if bytes.len() < 3 || !bytes.ends_with(b"\r\n") {
        return Err(format!(
            "RESP: not a reply line: {:?}",
            String::from_utf8_lossy(&bytes)
        ));
    }
    bytes.truncate(bytes.len() - 2);
    String::from_utf8(bytes).map_err(|_| "RESP: a reply line not in UTF-8".into())
}

/// A connection: one command, then its reply.
pub struct Connection {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    out: Vec<u8>,
}

impl Connection {
    pub async fn open(addr: &str) -> Result<Connection, String> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("redis {addr}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let (read, writer) = stream.into_split();
        Ok(Connection {
            reader: BufReader::new(read),
            writer,
            out: vec![],
        })
    }

    /// Sends `args` and reads the reply; an error reply is an error.
    pub async fn call(&mut self, args: &[&[u8]]) -> Result<Value, String> {
        self.out.clear();
        encode(args, &mut self.out);
        self.writer
            .write_all(&self.out)
            .await
            .map_err(|e| format!("redis: {e}"))?;
        match read(&mut self.reader, 0).await? {
            Value::Error(e) => Err(format!("redis: {e}")),
            v => Ok(v),
        }
    }

    /// Sends `commands` (at most [`PIPELINE_MAX`]) in one write, then reads their replies
    /// in order; an error reply is an error (after every reply is read, so the connection
    /// stays in step).
    pub async fn pipeline(&mut self, commands: &[Vec<Vec<u8>>]) -> Result<Vec<Value>, String> {
        if commands.len() > PIPELINE_MAX {
            return Err(format!("a pipeline of {} commands", commands.len()));
        }
        self.out.clear();
        for c in commands {
            let args: Vec<&[u8]> = c.iter().map(Vec::as_slice).collect();
            encode(&args, &mut self.out);
        }
        self.writer
            .write_all(&self.out)
            .await
            .map_err(|e| format!("redis: {e}"))?;
        let mut replies = Vec::with_capacity(commands.len());
        let mut first_error = None;
        for _ in commands {
            match read(&mut self.reader, 0).await? {
                Value::Error(e) => {
                    first_error.get_or_insert(e);
                }
                v => replies.push(v),
            }
        }
        match first_error {
            Some(e) => Err(format!("redis: {e}")),
            None => Ok(replies),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Result<Value, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut r = bytes;
        runtime.block_on(read(&mut r, 0))
    }

    #[test]
    fn a_command_is_an_array_of_bulk_strings() {
        let mut out = vec![];
        encode(&[b"EVALSHA", b"ab", b"1", b""], &mut out);
        assert_eq!(
            out,
            b"*4\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n1\r\n$0\r\n\r\n".to_vec()
        );
    }

    #[test]
    fn replies_of_every_type_are_read() {
        assert_eq!(parse(b"+PONG\r\n"), Ok(Value::Simple("PONG".into())));
        assert_eq!(
            parse(b"-NOSCRIPT no\r\n"),
            Ok(Value::Error("NOSCRIPT no".into()))
        );
        assert_eq!(parse(b":-7\r\n"), Ok(Value::Int(-7)));
        assert_eq!(parse(b"$-1\r\n"), Ok(Value::Bulk(None)));
        assert_eq!(
            parse(b"$3\r\na\r\n\r\n"),
            Ok(Value::Bulk(Some(b"a\r\n".to_vec())))
        );
        assert_eq!(
            parse(b"*2\r\n:1\r\n*1\r\n$2\r\nok\r\n"),
            Ok(Value::Array(Some(vec![
                Value::Int(1),
                Value::Array(Some(vec![Value::Bulk(Some(b"ok".to_vec()))]))
            ])))
        );
    }

    #[test]
    fn bad_replies_are_errors() {
        assert_eq!(parse(b""), Err("RESP: the connection closed".into()));
        assert_eq!(parse(b":x\r\n"), Err("RESP: not a number: \"x\"".into()));
        assert_eq!(
            parse(b"?1\r\n"),
            Err("RESP: unknown reply type in \"?1\"".into())
        );
        assert_eq!(
            parse("é1\r\n".as_bytes()),
            Err("RESP: unknown reply type in \"é1\"".into())
        );
        assert_eq!(
            parse(b"+OK\n"),
            Err("RESP: not a reply line: \"+OK\\n\"".into())
        );
        assert_eq!(
            parse(b"$2\r\nabc\r\n"),
            Err("RESP: a bulk string not ended by CRLF".into())
        );
        assert_eq!(
            parse(b"$1048577\r\n"),
            Err("RESP: a bulk string of 1048577 bytes".into())
        );
        assert_eq!(
            parse(b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n"),
            Err("RESP: an array of 1 at depth 4".into())
        );
        assert!(parse(b"*3\r\n:1\r\n").is_err(), "a truncated array");
    }
}
