//! `weir cluster add | remove`.

use clap::Subcommand;
use serde_json::json;

use super::{EXIT_OK, Exit, Output, client_error};
use weir_client::{Client, ClientError};
use weir_proto::protocol::{Request, Response};

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Add a node: as a learner until it has caught up, then as a voter.
    Add {
        /// The new node's id (its config's `id`).
        id: u64,
        /// Its peer (Raft) address.
        #[arg(long)]
        peer: String,
        /// Its client address.
        #[arg(long)]
        client: String,
    },
    /// Remove a voter.
    Remove {
        /// The voter's id.
        id: u64,
    },
}

pub async fn run(command: &ClusterCommand, client: &Client, out: &Output) -> Exit {
    let (request, done) = match command {
        ClusterCommand::Add { id, peer, client } => (
            Request::AddNode {
                id: *id,
                peer: peer.clone(),
                client: client.clone(),
            },
            format!("node {id} added as a voter"),
        ),
        ClusterCommand::Remove { id } => (
            Request::RemoveNode { id: *id },
            format!("node {id} removed"),
        ),
    };
    match client.request(request).await {
        Ok(Response::MembershipChanged) => {
            out.print(json!({"ok": true}), || done);
            EXIT_OK
        }
        Ok(Response::Failed(f)) => client_error(&ClientError::Failed(f)),
        Ok(other) => client_error(&ClientError::Protocol(format!(
            "unexpected answer {other:?}"
        ))),
        Err(e) => client_error(&e),
    }
}
