//! Weir's core: the limit state machine and everything it is made of, pure and
//! deterministic.
//!
//! Owns: the machine ([`machine`]: limits, sessions, tickets, queues, tenants, budgets,
//! halts), the bounds every layer checks ([`bounds`]), the pinned binary codec and its
//! sealed frame ([`codec`]), and the switch of the test-only planted bugs ([`planted`]).
//!
//! Must never depend on: an async runtime, sockets, files, clocks or randomness. Time and
//! randomness arrive inside the commands; the node (`weir-server`) and the client library
//! (`weir-client`) build on this crate and never the other way round.

#![forbid(unsafe_code)]

pub mod bounds;
pub mod codec;
pub mod machine;
pub mod rls;
// Test-only planted bugs (the `planted` feature); inert in default builds.
pub mod planted;
