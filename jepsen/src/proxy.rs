//! The fault-injecting TCP proxy every peer link passes through, in both network modes.
//!
//! Each node listens for peers behind a proxy front of its own, and the proxy knows which
//! node a connection comes from by its source address (loopback mode: Weir's
//! `peer_source_ip`, `127.0.0.(10 + id)`; namespace mode: the node's own address). So the
//! proxy in front of node `j` applies the rule of the directed link `i → j` to every
//! connection node `i` opens to node `j`, in both of its directions:
//!
//! - pass;
//! - drop: new connections are accepted and closed at once, open ones are cut (what a reset
//!   looks like);
//! - black hole: connections stay open and nothing moves either way until the rule changes,
//!   then everything held back is delivered (what silent packet loss and TCP retransmission
//!   look like: late, never lost or reordered);
//! - delay each chunk of requests by a time with jitter;
//! - bandwidth: each direction of each connection paced to at most so many bytes a second;
//! - loss: each chunk, with the given chance, waits out a retransmission timeout (200 ms,
//!   Linux's minimum RTO, plus up to 100 ms of jitter) before it is forwarded — how packet
//!   loss appears to a TCP application.
//!
//! Delay and jitter always go through here: this kernel has no netem. In namespace mode the
//! kernel drops packets for partitions and loss (nftables) and shapes bandwidth (tbf); the
//! proxy keeps delay and the one-way cut, which TCP cannot show at the packet level (an
//! input drop kills a connection in both directions).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;

use crate::rng::Rng;
use crate::rules::{Chunk, Rules, read_chunk};

/// What a directed link does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Link {
    #[default]
    Pass,
    Drop,
    BlackHole,
    Delay {
        ms: u64,
        jitter_ms: u64,
    },
    Bandwidth {
        bytes_per_s: u64,
    },
    Loss {
        percent: u64,
    },
}

/// Linux's minimum retransmission timeout: what a lost segment costs a TCP stream.
const RTO_MS: u64 = 200;

/// The rules of every directed link, per (from, to).
pub type Links = Rules<(u64, u64), Link>;

/// One proxy's deterministic noise (jitter, loss), seeded by the run.
struct Noise(Mutex<Rng>);

impl Noise {
    /// A number in `0..=max`.
    fn upto(&self, max: u64) -> u64 {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .range(0, max)
    }
}

/// The loopback address node `id` dials out from in loopback mode.
pub fn source_ip(id: u64) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 10 + id as u8))
}

/// How a proxy tells which node a connection comes from, and where it connects from.
#[derive(Clone, Copy, Debug)]
pub enum Addressing {
    /// Node `i` dials from `127.0.0.(10 + i)`; the proxy connects from anywhere.
    Loopback,
    /// Node `i` dials from its own namespace address `10.213.0.i`; the proxy connects to the
    /// target from `10.213.0.(30 + i)`, so the target's firewall can tell whose connection
    /// it carries.
    Netns,
}

impl Addressing {
    /// Which node a connection from `addr` comes from, if any.
    fn node_of(self, addr: SocketAddr) -> Option<u64> {
        const MAX: u8 = crate::addrs::MAX_NODES as u8;
        let IpAddr::V4(v4) = addr.ip() else {
            return None;
        };
        let [a, _, _, d] = v4.octets();
        match self {
            Addressing::Loopback if a == 127 && (11..=10 + MAX).contains(&d) => Some(d as u64 - 10),
            Addressing::Netns if a == 10 && (1..=MAX).contains(&d) => Some(d as u64),
            _ => None,
        }
    }

    async fn connect(self, from: u64, target: SocketAddr) -> std::io::Result<TcpStream> {
        match self {
            Addressing::Loopback => TcpStream::connect(target).await,
            Addressing::Netns => {
                let socket = TcpSocket::new_v4()?;
                socket.bind(SocketAddr::new(crate::addrs::leg_ip(from), 0))?;
                socket.connect(target).await
            }
        }
    }
}

/// Runs the proxy in front of node `to` until the listener fails; `seed` seeds its noise.
pub async fn run(
    to: u64,
    listener: TcpListener,
    target: SocketAddr,
    links: Arc<Links>,
    addressing: Addressing,
    seed: u64,
) {
    let noise = Arc::new(Noise(Mutex::new(Rng::new(seed ^ to))));
    loop {
        let Ok((inbound, from_addr)) = listener.accept().await else {
            return;
        };
        let Some(from) = addressing.node_of(from_addr) else {
            continue;
        };
        if links.get((from, to)) == Link::Drop {
            continue;
        }
        let links = links.clone();
        let noise = noise.clone();
        tokio::spawn(async move {
            // A connection opened into a black hole waits for the rule to change first.
            let mut changed = links.subscribe();
            if past_black_hole(&links, (from, to), &mut changed)
                .await
                .is_none()
            {
                return;
            }
            let Ok(outbound) = addressing.connect(from, target).await else {
                return;
            };
            let _ = inbound.set_nodelay(true);
            let _ = outbound.set_nodelay(true);
            let (ri, wi) = inbound.into_split();
            let (ro, wo) = outbound.into_split();
            // Requests flow from -> to, answers to -> from; both obey the link from -> to
            // (cut means cut), and delay applies to the requests.
            tokio::select! {
                _ = pipe(ri, wo, (from, to), links.clone(), noise.clone(), true) => {}
                _ = pipe(ro, wi, (from, to), links, noise, false) => {}
            }
        });
    }
}

/// The link's rule once it is no black hole (waiting while it is one); `None` when it is,
/// or has turned into, a cut. `changed` is the caller's own subscription to rule changes.
async fn past_black_hole(
    links: &Links,
    link: (u64, u64),
    changed: &mut watch::Receiver<u64>,
) -> Option<Link> {
    links
        .until_not(link, changed, |l| l == Link::BlackHole)
        .await
        .filter(|l| *l != Link::Drop)
}

/// One direction of a connection over `link` (`requests`: from -> to).
async fn pipe(
    mut rd: OwnedReadHalf,
    mut wr: OwnedWriteHalf,
    link: (u64, u64),
    links: Arc<Links>,
    noise: Arc<Noise>,
    requests: bool,
) {
    let mut changed = links.subscribe();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // Nothing is read while the link is a black hole: the bytes wait in the kernel's
        // buffers, as they would in the sender's retransmission queue.
        if past_black_hole(&links, link, &mut changed).await.is_none() {
            return;
        }
        let n = match read_chunk(&mut rd, &mut buf, &mut changed).await {
            Chunk::Bytes(n) => n,
            Chunk::RuleChanged => continue,
            Chunk::Ended => return,
        };
        let Some(rule) = past_black_hole(&links, link, &mut changed).await else {
            return;
        };
        match rule {
            Link::Delay { ms, jitter_ms } if requests => {
                tokio::time::sleep(Duration::from_millis(ms + noise.upto(jitter_ms))).await;
            }
            Link::Bandwidth { bytes_per_s } => {
                let ns = n as u64 * 1_000_000_000 / bytes_per_s.max(1);
                tokio::time::sleep(Duration::from_nanos(ns)).await;
            }
            Link::Loss { percent } if noise.upto(99) < percent => {
                tokio::time::sleep(Duration::from_millis(RTO_MS + noise.upto(100))).await;
            }
            _ => {}
        }
        if wr.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;
    use tokio::io::AsyncReadExt;

    /// A proxy in front of an echo server, entered from node 1's loopback source address.
    async fn echo_behind_proxy(links: Arc<Links>) -> SocketAddr {
        let target = crate::rules::echo_server().await;
        let front = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = front.local_addr().unwrap();
        tokio::spawn(run(2, front, target, links, Addressing::Loopback, 1));
        addr
    }

    async fn dial_as_node_1(addr: SocketAddr) -> TcpStream {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::new(source_ip(1), 0)).unwrap();
        socket.connect(addr).await.unwrap()
    }

    /// Node 1's connection to node 2 through a proxy in front of an echo server, and the
    /// proxy's rules.
    async fn node_1_through_proxy() -> (Arc<Links>, TcpStream) {
        let links = Links::new();
        let addr = echo_behind_proxy(links.clone()).await;
        (links, dial_as_node_1(addr).await)
    }

    async fn round_trip(s: &mut TcpStream, bytes: &[u8]) -> Vec<u8> {
        s.write_all(bytes).await.unwrap();
        let mut got = vec![0u8; bytes.len()];
        s.read_exact(&mut got).await.unwrap();
        got
    }

    #[tokio::test]
    async fn a_black_hole_holds_bytes_back_and_delivers_them_all_when_it_lifts() {
        let (links, mut s) = node_1_through_proxy().await;
        assert_eq!(round_trip(&mut s, b"before").await, b"before");
        links.set((1, 2), Link::BlackHole);
        s.write_all(b"during").await.unwrap();
        let mut got = [0u8; 6];
        let early = tokio::time::timeout(Duration::from_millis(300), s.read_exact(&mut got)).await;
        assert!(early.is_err(), "nothing crosses a black hole");
        links.heal();
        tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut got))
            .await
            .expect("delivered after the heal")
            .unwrap();
        assert_eq!(&got, b"during");
    }

    #[tokio::test]
    async fn a_drop_cuts_open_connections_and_other_links_are_untouched() {
        let (links, mut s) = node_1_through_proxy().await;
        assert_eq!(round_trip(&mut s, b"x").await, b"x");
        links.set((2, 1), Link::Drop);
        assert_eq!(
            round_trip(&mut s, b"y").await,
            b"y",
            "the reverse link is not ours"
        );
        links.set((1, 2), Link::Drop);
        let mut buf = [0u8; 1];
        let r = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
        assert!(matches!(r, Ok(Ok(0)) | Ok(Err(_))), "cut: {r:?}");
    }

    #[tokio::test]
    async fn bandwidth_paces_a_transfer() {
        let (links, mut s) = node_1_through_proxy().await;
        links.set(
            (1, 2),
            Link::Bandwidth {
                bytes_per_s: 20_000,
            },
        );
        let start = Instant::now();
        let payload = vec![7u8; 4_000];
        assert_eq!(round_trip(&mut s, &payload).await, payload);
        // 4,000 bytes each way at 20,000 bytes/s: at least 0.2 s of pacing (a lower bound
        // only: pacing can never make a transfer faster).
        assert!(
            start.elapsed() >= Duration::from_millis(200),
            "{:?}",
            start.elapsed()
        );
    }

    #[tokio::test]
    async fn loss_makes_a_chunk_wait_out_a_retransmission_timeout_and_loses_nothing() {
        let (links, mut s) = node_1_through_proxy().await;
        links.set((1, 2), Link::Loss { percent: 100 });
        let start = Instant::now();
        assert_eq!(round_trip(&mut s, b"lossy").await, b"lossy");
        // Every chunk "lost" once each way: at least two RTOs (a lower bound: waiting can
        // only make it later).
        assert!(
            start.elapsed() >= Duration::from_millis(2 * RTO_MS),
            "{:?}",
            start.elapsed()
        );
    }

    #[tokio::test]
    async fn connections_from_unknown_sources_are_refused() {
        let links = Links::new();
        let addr = echo_behind_proxy(links).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        let _ = s.write_all(b"hello").await;
        let mut buf = [0u8; 1];
        let r = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await;
        assert!(matches!(r, Ok(Ok(0)) | Ok(Err(_))), "closed: {r:?}");
    }
}
