//! The peer links of `--incident partition-leader`: a TCP proxy in front of every node's peer
//! port, so that one node can be cut from the other nodes while its clients still reach it.
//!
//! Every node listens for peers on a port of its own (`peer_listen`) and is known to the
//! cluster by its proxy's front (`peer_addr`, and the voters' peer addresses); it dials its
//! peers from a source address of its own, `127.0.0.(10 + id)` (`peer_source_ip`), so the
//! front in front of node `j` knows which node opened each connection. A cut link `i → j`
//! (in either direction of who dialed) has its open connections closed and new ones closed
//! as soon as they are accepted; a healed link passes again. Client ports are never behind
//! it.
//!
//! Must never: hold a byte back on a link that passes (it copies both ways as they come),
//! or outlive its run (dropping it stops every front and every connection).

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, JoinHandle};

/// The address node `id` dials its peers from.
pub fn source_ip(id: u64) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 10 + id as u8))
}

/// The node a connection from `ip` comes from (0: none of the cluster's).
fn node_of(ip: IpAddr) -> u64 {
    match ip {
        IpAddr::V4(v4) if v4.octets()[3] > 10 => u64::from(v4.octets()[3] - 10),
        _ => 0,
    }
}

/// The links cut, as (dialer, dialed) pairs, and the open connections of every link.
#[derive(Default)]
struct Links {
    cut: HashSet<(u64, u64)>,
    open: Vec<((u64, u64), AbortHandle)>,
}

/// Every node's front.
pub struct PeerProxies {
    links: Arc<Mutex<Links>>,
    fronts: Vec<JoinHandle<()>>,
}

impl PeerProxies {
    /// Starts a front for each `(id, front, listen)`: accepting on `front`, forwarding to
    /// the node's `listen`.
    pub async fn start(nodes: &[(u64, String, String)]) -> Result<PeerProxies, String> {
        let links = Arc::new(Mutex::new(Links::default()));
        let mut fronts = vec![];
        for (id, front, listen) in nodes {
            let listener = TcpListener::bind(front)
                .await
                .map_err(|e| format!("the peer proxy's front {front}: {e}"))?;
            fronts.push(tokio::spawn(serve(
                *id,
                listener,
                listen.clone(),
                links.clone(),
            )));
        }
        Ok(PeerProxies { links, fronts })
    }

    fn links(&self) -> std::sync::MutexGuard<'_, Links> {
        self.links.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Cuts `node` from every other of the `n` nodes, both ways, its open peer connections
    /// closed.
    pub fn isolate(&self, node: u64, n: u64) {
        let mut links = self.links();
        for other in (1..=n).filter(|&o| o != node) {
            links.cut.insert((node, other));
            links.cut.insert((other, node));
        }
        let cut = links.cut.clone();
        links.open.retain(|(link, conn)| {
            let keep = !cut.contains(link);
            if !keep {
                conn.abort();
            }
            keep
        });
    }

    /// Every link passes again.
    pub fn heal(&self) {
        self.links().cut.clear();
    }
}

impl Drop for PeerProxies {
    fn drop(&mut self) {
        for f in &self.fronts {
            f.abort();
        }
        for (_, conn) in self.links().open.drain(..) {
            conn.abort();
        }
    }
}

/// Node `id`'s front: each connection accepted is closed at once if its link is cut,
/// otherwise copied both ways to `target` until either side closes.
async fn serve(id: u64, listener: TcpListener, target: String, links: Arc<Mutex<Links>>) {
    while let Ok((stream, from)) = listener.accept().await {
        let link = (node_of(from.ip()), id);
        let mut guard = links.lock().unwrap_or_else(|p| p.into_inner());
        if guard.cut.contains(&link) {
            continue;
        }
        let target = target.clone();
        let conn = tokio::spawn(async move {
            let mut inbound = stream;
            if let Ok(mut outbound) = TcpStream::connect(&target).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
        guard.open.retain(|(_, c)| !c.is_finished());
        guard.open.push((link, conn.abort_handle()));
    }
}
