//! `weir status`: every member's id, address, role, term, applied index, lag behind the
//! leader's log, and digest.
//!
//! Any node's status names every member, so the first server that answers will do (no
//! leader needed, no retries: an unreachable cluster is reported at once); each member is
//! then asked once, and one that does not answer is shown as unreachable.

use serde_json::json;

use super::{EXIT_OK, Exit, Output, client_error};
use weir_client::{Client, ClientError};
use weir_proto::protocol::{NodeStatus, Request, Response};
use weir_proto::tls::ClientSecurity;

/// One row of `status`.
struct Row {
    id: u64,
    addr: String,
    status: Option<NodeStatus>,
}

/// The rows, and the cluster-wide figures drawn from them.
struct Table {
    rows: Vec<Row>,
    /// The highest leader id any node reports.
    leader: Option<u64>,
    term: u64,
    /// The leader's last log index, from which each node's lag is counted.
    leader_log: Option<u64>,
}

/// Prints the table once, or with `watch` every second until interrupted (an unreachable
/// cluster is shown as such and asked again). On a terminal each table replaces the last;
/// into a pipe or a file nothing but text is written: each table follows the last under a
/// line with the time it was taken (GMT), so a quiet cluster does not look frozen in a log.
pub async fn run(servers: &[String], security: &ClientSecurity, watch: bool, out: &Output) -> Exit {
    if !watch {
        return once(servers, security, out).await;
    }
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        tick.tick().await;
        if !out.json {
            match terminal {
                // Clear the screen and home the cursor, then draw.
                true => print!("\x1b[2J\x1b[H"),
                false => println!("-- {}", utc_now()),
            }
        }
        once(servers, security, out).await;
    }
}

/// The wall clock now, as HTTP writes dates (`Sun, 06 Dec 2026 04:01:09 GMT`).
fn utc_now() -> String {
    httpdate::fmt_http_date(std::time::SystemTime::now())
}

async fn once(servers: &[String], security: &ClientSecurity, out: &Output) -> Exit {
    let first = match first_answer(servers, security).await {
        Ok(s) => s,
        Err(e) => return client_error(&e),
    };
    let table = Table::new(members(&first, security).await);
    out.print(table.json(), || table.text());
    EXIT_OK
}

/// The status of the first of `servers` that answers.
async fn first_answer(
    servers: &[String],
    security: &ClientSecurity,
) -> Result<NodeStatus, ClientError> {
    let mut why = Vec::new();
    for addr in servers {
        match Client::ask_node_with(addr, &Request::Status, security).await {
            Ok(Response::Status(s)) => return Ok(s),
            // Not this token's to ask (every node answers the same): say so, as it is.
            Ok(Response::Failed(f)) => return Err(ClientError::Failed(f)),
            Err(e @ ClientError::Refused(_)) => return Err(e),
            Ok(other) => why.push(format!("{addr}: unexpected answer {other:?}")),
            Err(e) => why.push(e.to_string()),
        }
    }
    Err(ClientError::Unreachable(format!(
        "no server answered ({})",
        why.join("; ")
    )))
}

/// A row per member `first` names (itself alone if it names none), each asked once.
async fn members(first: &NodeStatus, security: &ClientSecurity) -> Vec<Row> {
    let mut rows = Vec::new();
    for m in &first.members {
        let status = if m.id == first.id {
            Some(first.clone())
        } else {
            match Client::ask_node_with(&m.client, &Request::Status, security).await {
                Ok(Response::Status(s)) => Some(s),
                _ => None,
            }
        };
        rows.push(Row {
            id: m.id,
            addr: m.client.clone(),
            status,
        });
    }
    if rows.is_empty() {
        rows.push(Row {
            id: first.id,
            addr: first.addr.clone(),
            status: Some(first.clone()),
        });
    }
    rows
}

impl Table {
    fn new(rows: Vec<Row>) -> Table {
        let answered = || rows.iter().filter_map(|r| r.status.as_ref());
        let leader = answered().filter_map(|s| s.leader).max();
        let term = answered().map(|s| s.term).max().unwrap_or(0);
        let leader_log = answered()
            .find(|s| Some(s.id) == leader)
            .map(|s| s.last_log_index);
        Table {
            rows,
            leader,
            term,
            leader_log,
        }
    }

    fn lag(&self, s: &NodeStatus) -> Option<u64> {
        self.leader_log.map(|l| l.saturating_sub(s.applied))
    }

    fn json(&self) -> serde_json::Value {
        let nodes: Vec<serde_json::Value> = self
            .rows
            .iter()
            .map(|r| match &r.status {
                Some(s) => json!({
                    "id": r.id, "addr": r.addr, "state": s.state, "term": s.term,
                    "applied": s.applied, "lag": self.lag(s), "digest": s.digest,
                    "digest_applied": s.digest_applied,
                }),
                None => json!({"id": r.id, "addr": r.addr, "state": "Unreachable"}),
            })
            .collect();
        json!({"leader": self.leader, "term": self.term, "nodes": nodes})
    }

    fn text(&self) -> String {
        let mut text = format!(
            "leader {} term {}\n{:<4} {:<22} {:<12} {:>6} {:>10} {:>8}  digest",
            self.leader.map_or("none".to_string(), |l| l.to_string()),
            self.term,
            "id",
            "address",
            "role",
            "term",
            "applied",
            "lag"
        );
        for r in &self.rows {
            match &r.status {
                Some(s) => text.push_str(&format!(
                    "\n{:<4} {:<22} {:<12} {:>6} {:>10} {:>8}  {}",
                    r.id,
                    r.addr,
                    s.state,
                    s.term,
                    s.applied,
                    self.lag(s).map_or("-".to_string(), |l| l.to_string()),
                    s.digest
                )),
                None => text.push_str(&format!(
                    "\n{:<4} {:<22} {:<12}",
                    r.id, r.addr, "unreachable"
                )),
            }
        }
        text
    }
}
