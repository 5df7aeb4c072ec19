//! Weir's core: the limit state machine and everything it is made of, pure and
//! deterministic.
//!
//! Owns: the machine ([`machine`]: limits, sessions, tickets, queues, tenants, budgets,
//! halts), the bounds every layer checks ([`bounds`]), the pinned binary codec and its
//! sealed frame ([`codec`]), and the switch of the test-only planted bugs ([`planted`]).
//!
//! Must never depend on: an async runtime, sockets, files, file formats (YAML, TOML: whoever
//! reads a file parses it and hands the core definitions), clocks or randomness. Time and
//! randomness arrive inside the commands; every other Weir crate builds on this one and
//! never the other way round. Where it sits among the crates: `docs/design.md`, "Layers".
//!
//! The modules are declared in layers, highest first: a file imports only modules declared
//! below its own (`tests/layering` holds every crate to its list), and no two files import
//! each other.

#![forbid(unsafe_code)]

pub mod machine;
pub mod rls;
pub mod codec;
pub mod bounds;
// Test-only planted bugs (the `planted` feature); inert in default builds.
pub mod planted;
