//! The fault-injecting TCP proxy of loopback mode: every peer link passes through it.
//!
//! Each node listens for peers behind a proxy of its own and dials out from an address of
//! its own (`127.0.0.(10 + id)`, Weir's `peer_source_ip`), so the proxy in front of node `j`
//! knows that a connection comes from node `i` and applies the rule of the directed link
//! `i → j`: pass, drop (refuse new connections and cut open ones), or delay each chunk by a
//! time with jitter. Delay and jitter always go through here: this kernel has no netem.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What a directed link does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    Pass,
    Drop,
    Delay { ms: u64, jitter_ms: u64 },
}

/// The rules of every directed link, and a counter bumped on each change.
pub struct Links {
    rules: Mutex<BTreeMap<(u64, u64), Link>>,
    changed: watch::Sender<u64>,
    /// Deterministic jitter source.
    noise: Mutex<u64>,
}

impl Links {
    pub fn new(seed: u64) -> Arc<Links> {
        let (changed, _) = watch::channel(0);
        Arc::new(Links {
            rules: Mutex::new(BTreeMap::new()),
            changed,
            noise: Mutex::new(seed | 1),
        })
    }

    pub fn get(&self, from: u64, to: u64) -> Link {
        *self
            .rules
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(from, to))
            .unwrap_or(&Link::Pass)
    }

    pub fn set(&self, from: u64, to: u64, link: Link) {
        self.rules
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((from, to), link);
        self.changed.send_modify(|n| *n += 1);
    }

    /// Every link passes again.
    pub fn heal(&self) {
        self.rules.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.changed.send_modify(|n| *n += 1);
    }

    fn jitter(&self, max: u64) -> u64 {
        if max == 0 {
            return 0;
        }
        let mut n = self.noise.lock().unwrap_or_else(|p| p.into_inner());
        *n ^= *n << 13;
        *n ^= *n >> 7;
        *n ^= *n << 17;
        *n % (max + 1)
    }
}

/// The loopback address node `id` dials out from.
pub fn source_ip(id: u64) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 10 + id as u8))
}

/// Which node a connection from `addr` comes from, if any.
fn node_of(addr: SocketAddr) -> Option<u64> {
    match addr.ip() {
        IpAddr::V4(v4) if v4.octets()[0] == 127 && v4.octets()[3] > 10 => {
            Some(v4.octets()[3] as u64 - 10)
        }
        _ => None,
    }
}

/// Runs the proxy in front of node `to` until the listener fails.
pub async fn run(to: u64, listener: TcpListener, target: SocketAddr, links: Arc<Links>) {
    loop {
        let Ok((inbound, from_addr)) = listener.accept().await else {
            return;
        };
        let Some(from) = node_of(from_addr) else {
            continue;
        };
        if links.get(from, to) == Link::Drop {
            continue;
        }
        let links = links.clone();
        tokio::spawn(async move {
            let Ok(outbound) = TcpStream::connect(target).await else {
                return;
            };
            let _ = inbound.set_nodelay(true);
            let _ = outbound.set_nodelay(true);
            let (ri, wi) = inbound.into_split();
            let (ro, wo) = outbound.into_split();
            // Requests flow from -> to, answers to -> from; both obey the link from -> to
            // (cut means cut), and delay applies to the requests.
            tokio::select! {
                _ = pipe(ri, wo, from, to, links.clone(), true) => {}
                _ = pipe(ro, wi, from, to, links.clone(), false) => {}
            }
        });
    }
}

async fn pipe(
    mut rd: tokio::net::tcp::OwnedReadHalf,
    mut wr: tokio::net::tcp::OwnedWriteHalf,
    from: u64,
    to: u64,
    links: Arc<Links>,
    delayed: bool,
) {
    let mut changed = links.changed.subscribe();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if links.get(from, to) == Link::Drop {
            return;
        }
        let n = tokio::select! {
            r = rd.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            _ = changed.changed() => continue,
        };
        match links.get(from, to) {
            Link::Drop => return,
            Link::Delay { ms, jitter_ms } if delayed => {
                tokio::time::sleep(Duration::from_millis(ms + links.jitter(jitter_ms))).await;
            }
            _ => {}
        }
        if wr.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
