//! The connect probe: confirms a partition took effect by opening a connection over each
//! directed peer link, as the dialing node would (from its own loopback source address, to
//! the proxy front of the other), and seeing what the link does to it:
//!
//! - **cut**: the connection is closed at once, before anything is sent;
//! - **held** (black hole): it stays open, and garbage sent on it gets no answer;
//! - **passes**: garbage sent on it reaches the node, which closes the connection (a bad
//!   frame closes its connection, G8).
//!
//! In namespace mode the partitions are the kernel's (nftables in the snubbed node's
//! namespace, matching the other node's addresses, its proxy leg among them), so
//! [`kernel_link`] probes them as the proxy's leg dials: from the dialing node's leg address
//! (which lives in the harness's namespace) straight to the other node's peer port. There a
//! cut answers the connect with a reset, and a silent drop leaves it unanswered.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::proxy::{self, Link};

/// How long an open connection must stay silent to count as not cut.
const QUIET: Duration = Duration::from_millis(300);

/// How long a node may take to close a connection that sent it garbage.
const ANSWER: Duration = Duration::from_millis(1_500);

/// What a link did to a probe connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    Cut,
    Held,
    Passes,
    /// The probe could not even connect (the front is gone).
    Unreachable,
}

/// What a link with `rule` should do to a probe.
pub fn expected(rule: Link) -> Seen {
    match rule {
        Link::Drop => Seen::Cut,
        Link::BlackHole => Seen::Held,
        _ => Seen::Passes,
    }
}

/// Probes the link from node `from` to the proxy front at `front`.
pub async fn link(from: u64, front: SocketAddr) -> Seen {
    let Ok(socket) = TcpSocket::new_v4() else {
        return Seen::Unreachable;
    };
    if socket
        .bind(SocketAddr::new(proxy::source_ip(from), 0))
        .is_err()
    {
        return Seen::Unreachable;
    }
    let Ok(Ok(mut stream)) = tokio::time::timeout(ANSWER, socket.connect(front)).await else {
        return Seen::Unreachable;
    };
    let mut buf = [0u8; 64];
    match tokio::time::timeout(QUIET, stream.read(&mut buf)).await {
        Ok(Ok(0) | Err(_)) => return Seen::Cut,
        Ok(Ok(_)) => return Seen::Passes,
        Err(_) => {}
    }
    garbage_closes(&mut stream).await
}

/// Sends garbage on an open connection: a node closes it (`Passes`), a black hole answers
/// nothing (`Held`), a cut fails the write (`Cut`).
async fn garbage_closes(stream: &mut TcpStream) -> Seen {
    let mut buf = [0u8; 64];
    // Not a valid frame header: the node closes the connection.
    if stream.write_all(&[0xff; 32]).await.is_err() {
        return Seen::Cut;
    }
    loop {
        match tokio::time::timeout(ANSWER, stream.read(&mut buf)).await {
            Err(_) => return Seen::Held,
            Ok(Ok(0) | Err(_)) => return Seen::Passes,
            // An error frame first, then the close.
            Ok(Ok(_)) => continue,
        }
    }
}

/// Probes, in namespace mode, the kernel's rule for node `from`'s packets at `target`
/// (the other node's own peer address), dialing from `from`'s proxy leg.
pub async fn kernel_link(from: u64, target: SocketAddr) -> Seen {
    let Ok(socket) = TcpSocket::new_v4() else {
        return Seen::Unreachable;
    };
    if socket
        .bind(SocketAddr::new(crate::addrs::leg_ip(from), 0))
        .is_err()
    {
        return Seen::Unreachable;
    }
    let mut stream = match tokio::time::timeout(ANSWER, socket.connect(target)).await {
        // A silent drop: the handshake is never answered.
        Err(_) => return Seen::Held,
        // A reset (the grudge's `reject with tcp reset`, or no node listening).
        Ok(Err(_)) => return Seen::Cut,
        Ok(Ok(stream)) => stream,
    };
    // Connected: the node must close a connection that sends it garbage.
    garbage_closes(&mut stream).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::{Addressing, Links};
    use tokio::net::TcpListener;

    /// A stand-in node that closes any connection that sends it something.
    async fn node() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    let _ = s.read(&mut buf).await;
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn the_probe_tells_a_passing_link_from_a_cut_and_a_black_hole() {
        let links = Links::new();
        let front = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let front_addr = front.local_addr().unwrap();
        tokio::spawn(proxy::run(
            2,
            front,
            node().await,
            links.clone(),
            Addressing::Loopback,
            1,
        ));
        assert_eq!(link(1, front_addr).await, Seen::Passes);
        links.set((1, 2), Link::Drop);
        assert_eq!(link(1, front_addr).await, Seen::Cut);
        links.set((1, 2), Link::BlackHole);
        assert_eq!(link(1, front_addr).await, Seen::Held);
        // The rule of another link does not touch this one.
        links.heal();
        links.set((3, 2), Link::Drop);
        assert_eq!(link(1, front_addr).await, Seen::Passes);
    }
}
