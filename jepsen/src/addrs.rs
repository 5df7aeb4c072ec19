//! The nodes' numbering bound and namespace mode's address plan (the table in `netns.rs`):
//! node `i`'s own address, its proxy front, the leg the proxy dials from, the clients'.
//! Pure constants and functions: this file imports nothing of the crate, so the cluster,
//! the namespaces, the proxy and the probes all read it from below, and it must never
//! import them back.

use std::net::{IpAddr, Ipv4Addr};

/// The most nodes a run has: the proxies and namespaces know node addresses up to it.
pub const MAX_NODES: u64 = 5;

fn ip(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 213, 0, last))
}

/// Node `id`'s own address.
pub fn node_ip(id: u64) -> IpAddr {
    ip(id as u8)
}

/// The proxy front of node `id`.
pub fn front_ip(id: u64) -> IpAddr {
    ip(20 + id as u8)
}

/// Where the proxy dials from when it carries node `id`'s connections.
pub fn leg_ip(id: u64) -> IpAddr {
    ip(30 + id as u8)
}

/// The clients' address.
pub fn client_ip() -> IpAddr {
    ip(254)
}
