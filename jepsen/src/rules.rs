//! The fault rules the harness's two forwarders obey, and the read they both do.
//!
//! The peer proxy (`proxy.rs`) keeps a rule per directed pair of nodes, the client
//! fronts (`client_front.rs`) one per (client address, node); both keep them in a
//! [`Rules`] table. Every forwarding task watches the table's change counter, so a stream
//! held by a rule wakes at the change that frees it, and a read in progress gives way to a
//! change ([`read_chunk`]) so the new rule applies to the next chunk.
//!
//! Invariants:
//! - a key without a rule has the rule's `Default` (pass);
//! - every change (set, heal) bumps the counter after the table holds it, so a task woken
//!   by the bump reads the new rule.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::io::AsyncReadExt;
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::watch;

/// The rules in force, per key, and a counter bumped on each change.
pub struct Rules<K, L> {
    rules: Mutex<BTreeMap<K, L>>,
    changed: watch::Sender<u64>,
}

impl<K: Ord + Copy, L: Copy + Default> Rules<K, L> {
    pub fn new() -> Arc<Rules<K, L>> {
        let (changed, _) = watch::channel(0);
        Arc::new(Rules {
            rules: Mutex::default(),
            changed,
        })
    }

    /// The rule of `key`: the default (pass) when none was set.
    pub fn get(&self, key: K) -> L {
        self.table().get(&key).copied().unwrap_or_default()
    }

    pub fn set(&self, key: K, rule: L) {
        self.table().insert(key, rule);
        self.changed.send_modify(|n| *n += 1);
    }

    /// Every key passes again.
    pub fn heal(&self) {
        self.table().clear();
        self.changed.send_modify(|n| *n += 1);
    }

    /// A subscription to the changes, for one forwarding task.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Waits while `held` is true of the rule of `key`, and returns the rule that ended the
    /// wait; `None` when the table is gone (the cluster dropped). `changed` is the caller's
    /// own subscription.
    pub async fn until_not(
        &self,
        key: K,
        changed: &mut watch::Receiver<u64>,
        held: impl Fn(L) -> bool,
    ) -> Option<L> {
        loop {
            let rule = self.get(key);
            if !held(rule) {
                return Some(rule);
            }
            changed.changed().await.ok()?;
        }
    }

    /// The next chunk of `rd`, read once `held` is false of the rule of `key` (nothing is
    /// read while it is true): its length in `buf`; `None` when the stream ended or the
    /// table is gone.
    pub async fn next_chunk(
        &self,
        key: K,
        rd: &mut OwnedReadHalf,
        buf: &mut [u8],
        changed: &mut watch::Receiver<u64>,
        held: impl Fn(L) -> bool,
    ) -> Option<usize> {
        loop {
            self.until_not(key, changed, &held).await?;
            match read_chunk(rd, buf, changed).await {
                Chunk::Bytes(n) => return Some(n),
                Chunk::RuleChanged => continue,
                Chunk::Ended => return None,
            }
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, BTreeMap<K, L>> {
        self.rules.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What one read of a forwarded stream gave.
pub enum Chunk {
    /// This many bytes, at the front of the buffer.
    Bytes(usize),
    /// A rule changed before anything arrived: look at the rule again.
    RuleChanged,
    /// The stream ended (closed or failed).
    Ended,
}

/// Reads what `rd` has into `buf`, giving way to a rule change.
pub async fn read_chunk(
    rd: &mut OwnedReadHalf,
    buf: &mut [u8],
    changed: &mut watch::Receiver<u64>,
) -> Chunk {
    tokio::select! {
        r = rd.read(buf) => match r {
            Ok(0) | Err(_) => Chunk::Ended,
            Ok(n) => Chunk::Bytes(n),
        },
        _ = changed.changed() => Chunk::RuleChanged,
    }
}

/// An echo server on loopback, for the forwarders' tests to put behind a proxy or a front.
#[cfg(test)]
pub(crate) async fn echo_server() -> std::net::SocketAddr {
    use tokio::io::AsyncWriteExt;
    let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = echo.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = echo.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_unset_key_passes_a_set_one_holds_until_healed() {
        let rules = Rules::<u64, bool>::new();
        assert!(!rules.get(1), "no rule: the default");
        rules.set(1, true);
        assert!(rules.get(1));
        assert!(!rules.get(2), "another key is untouched");
        let mut changed = rules.subscribe();
        let waiter = {
            let rules = rules.clone();
            tokio::spawn(async move { rules.until_not(1, &mut changed, |held| held).await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "held while the rule holds");
        rules.heal();
        let freed = tokio::time::timeout(std::time::Duration::from_secs(5), waiter).await;
        assert_eq!(freed.expect("woken by the heal").unwrap(), Some(false));
    }
}
