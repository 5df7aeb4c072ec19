//! Client fronts (loopback mode): the fault-injecting proxy every client connection passes
//! through, one front per node, so the harness can fault one client's links and no other's.
//!
//! Each node listens for clients behind a front of its own (the node's `client_listen`),
//! while the cluster knows it by the front's address (`client_addr`, what `NotLeader`
//! redirects name and what the harness's clients are given): so a client that follows a
//! redirect lands on a front too. A front tells clients apart by the source address of the
//! connection (a client bound with `Client::with_local_addr`, e.g. [`CUT_CLIENT_IP`]) and
//! applies the rule of the pair (that address, this node) to every connection of it, in both
//! directions. Connections from any other address have no rule and always pass: the
//! ordinary workloads are never faulted here.
//!
//! Why not the peer proxy (`proxy.rs`): its rules are per pair of nodes, found from the
//! nodes' fixed source addresses (anything else is refused), and its delay holds each chunk
//! of requests in turn, so a steady stream (heartbeats every 200 ms) behind a delay of more
//! than 200 ms falls further behind with every chunk. A client fault needs the two
//! directions apart (replies delayed, requests dropped) and a delay that is a delay. Both
//! keep their rules in a [`crate::rules::Rules`] table.
//!
//! Rules ([`ClientLink`]):
//! - pass;
//! - cut: nothing moves either way (the bytes wait in the kernel's buffers, as in the
//!   sender's retransmission queue), new connections are accepted and held, until the rule
//!   changes — a silent black hole;
//! - delay replies: every chunk from the node reaches the client `ms` after it left the
//!   node, in order. The delay builds up at half of real time (a queue filling), so the
//!   client never hears a gap longer than 1.5 × the node's own (a step from 0 to a second
//!   would be a second of silence, which the client takes for a stopped node and leaves:
//!   the fault would test the silence detector, not a slow link). Each connection's delay
//!   builds up from its start;
//! - delay replies and drop requests: as above, and nothing from the client reaches the
//!   node (held back, as a cut holds it): the node stops hearing the client while the
//!   client still hears the node, late.
//!
//! Invariant: bytes are never lost, duplicated or reordered in either direction; a rule
//! only delays them (a cut until it lifts). A connection ends when either side closes.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::rules::Rules;

/// The source address of the one client process whose links the client nemeses fault.
pub const CUT_CLIENT_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 50));

/// The source address of the CLI holder's `weir acquire` processes (`--local-addr`).
pub const CLI_CLIENT_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 51));

/// What the links of one client to one node do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClientLink {
    #[default]
    Pass,
    /// Both directions silently held.
    Cut,
    /// Node → client delayed by `ms`; `drop_requests`: client → node held as well.
    DelayReplies { ms: u64, drop_requests: bool },
}

impl ClientLink {
    fn requests_held(self) -> bool {
        matches!(
            self,
            ClientLink::Cut
                | ClientLink::DelayReplies {
                    drop_requests: true,
                    ..
                }
        )
    }

    fn reply_delay_ms(self) -> u64 {
        match self {
            ClientLink::DelayReplies { ms, .. } => ms,
            _ => 0,
        }
    }
}

/// Chunks read from a node and not yet written to the client, per connection, at most:
/// the replies of a delay of seconds to one client fit many times over.
const DELAY_LINE_CHUNKS: usize = 1_024;

/// The rules in force, per (client address, node).
pub type ClientLinks = Rules<(IpAddr, u64), ClientLink>;

/// Runs the front of node `node`, forwarding to its client port `target`, until the
/// listener fails.
pub async fn run(node: u64, listener: TcpListener, target: SocketAddr, links: Arc<ClientLinks>) {
    loop {
        let Ok((inbound, from)) = listener.accept().await else {
            return;
        };
        tokio::spawn(forward(node, inbound, from.ip(), target, links.clone()));
    }
}

/// One client connection: held while cut, then connected through to the node.
async fn forward(
    node: u64,
    inbound: TcpStream,
    client: IpAddr,
    target: SocketAddr,
    links: Arc<ClientLinks>,
) {
    let mut changed = links.subscribe();
    // Opened into a cut: nothing reaches the node until it lifts.
    if links
        .until_not((client, node), &mut changed, |l| l == ClientLink::Cut)
        .await
        .is_none()
    {
        return;
    }
    let Ok(outbound) = TcpStream::connect(target).await else {
        return;
    };
    let _ = inbound.set_nodelay(true);
    let _ = outbound.set_nodelay(true);
    let (ri, wi) = inbound.into_split();
    let (ro, wo) = outbound.into_split();
    let (line, queued) = mpsc::channel(DELAY_LINE_CHUNKS);
    tokio::select! {
        _ = requests(ri, wo, client, node, links.clone()) => {}
        _ = replies_in(ro, line, client, node, links.clone()) => {}
        _ = replies_out(queued, wi, client, node, links) => {}
    }
}

/// Client → node: forwarded as read, except while the rule holds requests back (then
/// nothing is read: the bytes wait in the kernel).
async fn requests(
    mut rd: OwnedReadHalf,
    mut wr: OwnedWriteHalf,
    client: IpAddr,
    node: u64,
    links: Arc<ClientLinks>,
) {
    let mut changed = links.subscribe();
    let mut buf = vec![0u8; 64 * 1024];
    let key = (client, node);
    while let Some(n) = links
        .next_chunk(
            key,
            &mut rd,
            &mut buf,
            &mut changed,
            ClientLink::requests_held,
        )
        .await
    {
        if wr.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// Node → the delay line: each chunk stamped with when it may reach the client. While the
/// link is cut nothing is read.
async fn replies_in(
    mut rd: OwnedReadHalf,
    line: mpsc::Sender<(Instant, Vec<u8>)>,
    client: IpAddr,
    node: u64,
    links: Arc<ClientLinks>,
) {
    let mut changed = links.subscribe();
    let mut buf = vec![0u8; 64 * 1024];
    let mut ramp = Ramp::default();
    let key = (client, node);
    while let Some(n) = links
        .next_chunk(key, &mut rd, &mut buf, &mut changed, |l| {
            l == ClientLink::Cut
        })
        .await
    {
        let now = Instant::now();
        let due = ramp.due(now, links.get((client, node)).reply_delay_ms());
        if line.send((due, buf[..n].to_vec())).await.is_err() {
            return;
        }
    }
}

/// The delay line → the client, each chunk at its time, never while the link is cut.
async fn replies_out(
    mut line: mpsc::Receiver<(Instant, Vec<u8>)>,
    mut wr: OwnedWriteHalf,
    client: IpAddr,
    node: u64,
    links: Arc<ClientLinks>,
) {
    let mut changed = links.subscribe();
    while let Some((due, bytes)) = line.recv().await {
        // Undelayed chunks (no rule) go at once: a timer, even one already due, waits for
        // the runtime's timer to turn (a millisecond tick, later on a busy runtime), and
        // every reply of every client passes here.
        if due > Instant::now() {
            tokio::time::sleep_until(due).await;
        }
        if links
            .until_not((client, node), &mut changed, |l| l == ClientLink::Cut)
            .await
            .is_none()
        {
            return;
        }
        if wr.write_all(&bytes).await.is_err() {
            return;
        }
    }
}

/// A connection's reply delay as it builds up: it grows toward the rule's at half of real
/// time, drops at once when the rule's is lower, and never lets a chunk overtake the one
/// before it.
#[derive(Default)]
struct Ramp {
    /// The delay given to the last chunk, and when it was read.
    last: Option<(Instant, Duration)>,
    /// When the last chunk is due (chunks leave in order).
    last_due: Option<Instant>,
}

impl Ramp {
    /// When a chunk read at `now` is due, under a rule delay of `target_ms`.
    fn due(&mut self, now: Instant, target_ms: u64) -> Instant {
        let target = Duration::from_millis(target_ms);
        let delay = match self.last {
            Some((at, d)) if d < target => (d + now.saturating_duration_since(at) / 2).min(target),
            Some(_) | None if target.is_zero() => Duration::ZERO,
            Some(_) => target,
            // A connection opened under a delay builds it up from its start.
            None => Duration::ZERO,
        };
        self.last = Some((now, delay));
        let due = (now + delay).max(self.last_due.unwrap_or(now));
        self.last_due = Some(due);
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[test]
    fn the_delay_builds_up_at_half_of_real_time_drops_at_once_and_keeps_order() {
        let t0 = Instant::now();
        let ms = |n: u64| Duration::from_millis(n);
        let mut r = Ramp::default();
        assert_eq!(r.due(t0, 0), t0, "no rule: no delay");
        // The rule becomes 1 s: chunks every 200 ms get 100, 200, ... ms of delay.
        assert_eq!(r.due(t0 + ms(200), 1_000), t0 + ms(300));
        assert_eq!(r.due(t0 + ms(400), 1_000), t0 + ms(600));
        for i in 3..=12 {
            r.due(t0 + ms(200 * i), 1_000);
        }
        assert_eq!(
            r.due(t0 + ms(2_600), 1_000),
            t0 + ms(3_600),
            "built up to the whole delay, and held there"
        );
        // Healed: the delay drops, but nothing overtakes what is still on its way.
        assert_eq!(r.due(t0 + ms(2_700), 0), t0 + ms(3_600));
        assert_eq!(r.due(t0 + ms(4_000), 0), t0 + ms(4_000));
    }

    /// An echo server behind a front; returns the front's address.
    async fn echo_behind_front(links: Arc<ClientLinks>) -> SocketAddr {
        let target = crate::rules::echo_server().await;
        let front = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = front.local_addr().unwrap();
        tokio::spawn(run(1, front, target, links));
        addr
    }

    async fn dial_from(ip: IpAddr, addr: SocketAddr) -> TcpStream {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::new(ip, 0)).unwrap();
        socket.connect(addr).await.unwrap()
    }

    async fn round_trip(s: &mut TcpStream, bytes: &[u8], within: Duration) -> Option<Vec<u8>> {
        s.write_all(bytes).await.unwrap();
        let mut got = vec![0u8; bytes.len()];
        match tokio::time::timeout(within, s.read_exact(&mut got)).await {
            Ok(r) => {
                r.unwrap();
                Some(got)
            }
            Err(_) => None,
        }
    }

    const WAIT: Duration = Duration::from_secs(5);
    const SHORT: Duration = Duration::from_millis(300);

    #[tokio::test]
    async fn a_cut_holds_one_clients_bytes_both_ways_and_delivers_them_when_it_lifts() {
        let links = ClientLinks::new();
        let addr = echo_behind_front(links.clone()).await;
        let mut cut = dial_from(CUT_CLIENT_IP, addr).await;
        let mut other = dial_from("127.0.0.1".parse().unwrap(), addr).await;
        assert_eq!(round_trip(&mut cut, b"a", WAIT).await.unwrap(), b"a");
        links.set((CUT_CLIENT_IP, 1), ClientLink::Cut);
        assert_eq!(round_trip(&mut cut, b"held", SHORT).await, None);
        assert_eq!(
            round_trip(&mut other, b"free", WAIT).await.unwrap(),
            b"free",
            "another client's links are untouched"
        );
        // A connection opened into the cut is accepted and held too.
        let mut late = dial_from(CUT_CLIENT_IP, addr).await;
        assert_eq!(round_trip(&mut late, b"late", SHORT).await, None);
        links.heal();
        let mut got = [0u8; 4];
        tokio::time::timeout(WAIT, cut.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&got, b"held");
        tokio::time::timeout(WAIT, late.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&got, b"late");
    }

    #[tokio::test]
    async fn dropped_requests_never_reach_the_node_while_delayed_replies_still_arrive() {
        // The node speaks first here (a heartbeat): a server that writes on its own.
        let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = server.local_addr().unwrap();
        let (heard_tx, mut heard) = mpsc::unbounded_channel::<Vec<u8>>();
        let (say_tx, mut say) = mpsc::unbounded_channel::<Vec<u8>>();
        tokio::spawn(async move {
            let (s, _) = server.accept().await.unwrap();
            let (mut rd, mut wr) = s.into_split();
            tokio::spawn(async move {
                while let Some(b) = say.recv().await {
                    wr.write_all(&b).await.unwrap();
                }
            });
            let mut buf = [0u8; 64];
            while let Ok(n) = rd.read(&mut buf).await {
                if n == 0 {
                    return;
                }
                let _ = heard_tx.send(buf[..n].to_vec());
            }
        });
        let links = ClientLinks::new();
        let front = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = front.local_addr().unwrap();
        tokio::spawn(run(2, front, target, links.clone()));
        let mut c = dial_from(CUT_CLIENT_IP, addr).await;
        c.write_all(b"hello").await.unwrap();
        assert_eq!(
            tokio::time::timeout(WAIT, heard.recv())
                .await
                .unwrap()
                .unwrap(),
            b"hello"
        );
        links.set(
            (CUT_CLIENT_IP, 2),
            ClientLink::DelayReplies {
                ms: 200,
                drop_requests: true,
            },
        );
        c.write_all(b"dropped").await.unwrap();
        say_tx.send(b"beat".to_vec()).unwrap();
        let mut got = [0u8; 4];
        tokio::time::timeout(WAIT, c.read_exact(&mut got))
            .await
            .expect("the reply still arrives")
            .unwrap();
        assert_eq!(&got, b"beat");
        assert!(
            tokio::time::timeout(SHORT, heard.recv()).await.is_err(),
            "the request did not reach the node"
        );
        links.heal();
        assert_eq!(
            tokio::time::timeout(WAIT, heard.recv())
                .await
                .unwrap()
                .unwrap(),
            b"dropped",
            "held back, not lost"
        );
    }
}
