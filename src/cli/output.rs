//! How a command ends: what it prints (human text or one JSON value) and its exit status
//! (0 done, 1 error, 2 usage, 3 refused: by the machine, or the token or its role). Errors and refusals are reported on stderr here,
//! once, by the function that turns them into a status.

use weir_client::ClientError;
use weir_core::machine::{Refusal, Reply};
use weir_proto::protocol::Failure;

/// Exit status: done.
pub const EXIT_OK: i32 = 0;
/// Exit status: an error (unreachable, internal).
pub const EXIT_ERROR: i32 = 1;
/// Exit status: bad usage.
pub const EXIT_USAGE: i32 = 2;
/// Exit status: refused (halted, over a ceiling or budget, conflict, timed out waiting; a
/// token missing, unknown or revoked; a role that may not).
pub const EXIT_REFUSED: i32 = 3;

/// What a command ends with: the exit status, and what was printed is already printed.
pub type Exit = i32;

/// Where results go: human text or one JSON value.
pub struct Output {
    pub json: bool,
}

impl Output {
    /// Prints `value` as JSON, or `text` for people.
    pub fn print(&self, value: serde_json::Value, text: impl FnOnce() -> String) {
        if self.json {
            // JSON escapes control characters itself; a program reads it, not a terminal.
            write_line(&value.to_string());
        } else {
            say(&text());
        }
    }

    /// Ends a write whose reply is not shown: prints `value`, or `text` for people, when it
    /// is done; reports its refusal or failure otherwise.
    pub fn done(
        &self,
        result: Result<Reply, ClientError>,
        value: serde_json::Value,
        text: impl FnOnce() -> String,
    ) -> Exit {
        match replied(result) {
            Ok(_) => {
                self.print(value, text);
                EXIT_OK
            }
            Err(code) => code,
        }
    }
}

/// Prints `text` and a newline on stdout for a person: every character that could hide
/// text or drive the terminal (control characters but the line breaks and tabs of the
/// text itself, bidirectional and zero-width ones: `weir_core::machine::hidden_char`) is
/// printed escaped (`\u{1b}`), so a name from the cluster cannot paint on the operator's
/// screen.
pub fn say(text: &str) {
    write_line(&escaped(text));
}

/// `text` with every hidden character but `\n` and `\t` written as its escape.
pub fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c != '\n' && c != '\t' && weir_core::machine::hidden_char(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// Writes `line` and a newline on stdout. A reader that went away (`weir limit list | head
/// -1`) ends the command quietly, with status 0: what it asked for was done, and no one
/// reads the rest.
fn write_line(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let written = writeln!(out, "{line}").and_then(|()| out.flush());
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(EXIT_OK),
        Err(e) => {
            eprintln!("weir: writing to stdout: {e}");
            std::process::exit(EXIT_ERROR);
        }
    }
}

/// Reports a client error; returns the exit status for it. A request the node's edge
/// refused as malformed (a name above its bound, say) is bad usage, as the machine's own
/// `Invalid` refusal is; a token refused (missing, unknown, revoked) or a role that may not
/// make the request is a refusal, as a halt is.
pub fn client_error(e: &ClientError) -> Exit {
    eprintln!("weir: {}", escaped(&e.to_string()));
    match e {
        ClientError::Failed(Failure::BadRequest(_)) => EXIT_USAGE,
        ClientError::Refused(_) | ClientError::Failed(Failure::Forbidden(_)) => EXIT_REFUSED,
        _ => EXIT_ERROR,
    }
}

/// Reports a refusal; returns the exit status for it.
pub fn refused(r: &Refusal) -> Exit {
    eprintln!("weir: refused: {}", escaped(&r.to_string()));
    match r {
        Refusal::Invalid(_) => EXIT_USAGE,
        _ => EXIT_REFUSED,
    }
}

/// A write's reply, or the exit status of its refusal or failure (reported).
pub fn replied(result: Result<Reply, ClientError>) -> Result<Reply, Exit> {
    match result {
        Ok(Reply::Refused(r)) => Err(refused(&r)),
        Ok(reply) => Ok(reply),
        Err(e) => Err(client_error(&e)),
    }
}

/// A read's answer, or the exit status of its failure (reported).
pub fn answered<T>(result: Result<T, ClientError>) -> Result<T, Exit> {
    result.map_err(|e| client_error(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_cluster_is_a_refusal_and_bad_input_a_usage_error() {
        let full = Refusal::AtCapacity {
            what: "open sessions".into(),
            limit: 1,
        };
        assert_eq!(refused(&full), EXIT_REFUSED);
        assert_eq!(
            refused(&Refusal::Invalid("run is empty".into())),
            EXIT_USAGE
        );
    }

    #[test]
    fn an_unauthenticated_or_forbidden_request_is_a_refusal_and_unreachable_an_error() {
        let why = || "why".to_string();
        assert_eq!(client_error(&ClientError::Refused(why())), EXIT_REFUSED);
        assert_eq!(
            client_error(&ClientError::Failed(Failure::Forbidden(why()))),
            EXIT_REFUSED
        );
        assert_eq!(client_error(&ClientError::Unreachable(why())), EXIT_ERROR);
        assert_eq!(
            client_error(&ClientError::Failed(Failure::BadRequest(why()))),
            EXIT_USAGE
        );
    }

    #[test]
    fn text_for_a_terminal_shows_control_bidi_and_zero_width_characters_escaped() {
        assert_eq!(
            escaped("r\u{1b}[31mX\u{0}\nnext\tcol \u{202e}txt\u{200b}."),
            "r\\u{1b}[31mX\\u{0}\nnext\tcol \\u{202e}txt\\u{200b}."
        );
        assert_eq!(
            escaped("plain names, ünïcode ok"),
            "plain names, ünïcode ok"
        );
    }
}
