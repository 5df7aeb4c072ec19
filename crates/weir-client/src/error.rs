//! The client's errors: [`ClientError`] for any request, [`AcquireError`] for an acquire.
//!
//! Each error says whether the request may have taken effect, because a caller that
//! retries or records history (the partition checker) must tell "definitely failed" from
//! "outcome unknown": [`ClientError::definitely_failed`] is `false` exactly when the
//! request may have been applied. [`ClientError::is_retryable`] says whether trying again
//! later may succeed. Refusals by the machine (halted, busy, over budget) are not errors
//! here: they are typed replies (`Reply::Refused`), or [`AcquireError::Refused`].

use weir_core::machine::Refusal;
use weir_proto::protocol::Failure;

/// Why a request has no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientError {
    /// No node could be reached, or none served it in time; it was not applied.
    Unreachable(String),
    /// It was sent, and may or may not have been applied.
    OutcomeUnknown(String),
    /// A node broke the protocol, or the connection failed in a way a retry would repeat
    /// (a certificate the client does not trust).
    Protocol(String),
    /// A node refused this client at its hello: no token, an unknown or revoked one, or a
    /// protocol version it does not speak. Not applied; every try would be refused the same
    /// way.
    Refused(String),
    /// A node answered that it cannot serve it; see the failure for whether it applied.
    Failed(Failure),
}

impl ClientError {
    /// Whether trying again later may succeed: everything but a protocol break, a
    /// malformed or forbidden request, and a tenant another group decides, which would fail
    /// the same way again on this client.
    pub fn is_retryable(&self) -> bool {
        match self {
            ClientError::Unreachable(_) | ClientError::OutcomeUnknown(_) => true,
            ClientError::Protocol(_) | ClientError::Refused(_) => false,
            ClientError::Failed(f) => !matches!(
                f,
                Failure::BadRequest(_) | Failure::Forbidden(_) | Failure::WrongGroup { .. }
            ),
        }
    }

    /// Whether the request certainly did not take effect. `false` means its outcome is
    /// unknown: it may have been applied.
    pub fn definitely_failed(&self) -> bool {
        match self {
            ClientError::Unreachable(_) | ClientError::Protocol(_) | ClientError::Refused(_) => {
                true
            }
            ClientError::OutcomeUnknown(_) => false,
            ClientError::Failed(f) => !matches!(f, Failure::OutcomeUnknown(_)),
        }
    }
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Unreachable(why) => write!(f, "unreachable: {why}"),
            ClientError::OutcomeUnknown(why) => write!(f, "outcome unknown: {why}"),
            ClientError::Protocol(why) => write!(f, "protocol error: {why}"),
            ClientError::Refused(why) => write!(f, "refused by the node: {why}"),
            ClientError::Failed(failure) => write!(f, "{failure}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// How an acquire went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AcquireError {
    /// The cluster refused it (halted, unknown limit, too large, busy, ...).
    Refused(Refusal),
    /// It waited longer than the timeout; the ticket was withdrawn.
    TimedOut,
    /// The session ended (expired or closed) while it waited.
    SessionLost,
    /// The acquire itself could not be sent or answered.
    Client(ClientError),
}

impl std::fmt::Display for AcquireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AcquireError::Refused(r) => write!(f, "refused: {r}"),
            AcquireError::TimedOut => f.write_str("timed out waiting"),
            AcquireError::SessionLost => f.write_str("session lost"),
            AcquireError::Client(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for AcquireError {}

#[cfg(test)]
mod tests {
    use super::*;

    /// One of every error the client returns, with (retryable, definitely failed).
    fn table() -> Vec<(ClientError, bool, bool)> {
        let why = || "why".to_string();
        vec![
            (ClientError::Unreachable(why()), true, true),
            (ClientError::OutcomeUnknown(why()), true, false),
            (ClientError::Protocol(why()), false, true),
            (ClientError::Refused(why()), false, true),
            (
                ClientError::Failed(Failure::NotLeader { leader: None }),
                true,
                true,
            ),
            (
                ClientError::Failed(Failure::NotLeader {
                    leader: Some((2, "127.0.0.1:7412".into())),
                }),
                true,
                true,
            ),
            (ClientError::Failed(Failure::Unavailable(why())), true, true),
            (
                ClientError::Failed(Failure::OutcomeUnknown(why())),
                true,
                false,
            ),
            (ClientError::Failed(Failure::BadRequest(why())), false, true),
        ]
    }

    #[test]
    fn only_protocol_breaks_and_bad_requests_are_not_retryable() {
        for (error, retryable, _) in table() {
            assert_eq!(error.is_retryable(), retryable, "is_retryable of {error:?}");
        }
    }

    #[test]
    fn only_outcome_unknown_errors_may_have_applied() {
        for (error, _, definitely_failed) in table() {
            assert_eq!(
                error.definitely_failed(),
                definitely_failed,
                "definitely_failed of {error:?}"
            );
        }
    }

    #[test]
    fn an_error_that_may_have_applied_is_always_retryable() {
        // Every write is idempotent by its ids, so an unknown outcome may be retried.
        for (error, _, _) in table() {
            if !error.definitely_failed() {
                assert!(error.is_retryable(), "{error:?} may have applied");
            }
        }
    }
}
