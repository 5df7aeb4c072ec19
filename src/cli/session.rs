//! `weir session close ID`: ends a session, releasing every permit it holds and withdrawing
//! its queued tickets. Its owner may close it; an admin may close any session (a revoked
//! principal's, or a crashed client's whose TTL is long), so no permit waits for a TTL an
//! operator cannot shorten.

use clap::Subcommand;
use serde_json::json;

use super::{Exit, Output};
use weir_client::Client;
use weir_core::machine::{Command, SessionId};

#[derive(Subcommand, Debug)]
pub enum SessionCommand {
    /// Close a session: its permits are released and its queued tickets withdrawn (its
    /// owner's, or any session with an admin token).
    Close {
        /// The session's id.
        id: SessionId,
    },
}

pub async fn run(command: &SessionCommand, client: &Client, out: &Output) -> Exit {
    match command {
        SessionCommand::Close { id } => out.done(
            client.write(Command::CloseSession { session: *id }).await,
            json!({"session": id, "closed": true}),
            || format!("closed session {id}"),
        ),
    }
}
