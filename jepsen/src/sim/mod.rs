//! The deterministic simulator: the whole cluster's own code (openraft, the machine, the
//! proposer with its stamper, the log over an in-memory disk: `weir_server::sim`) on
//! simulated time and a simulated network, driven by a seed, its history judged by the
//! harness's own checkers. `docs/design.md`, "The simulator", says why and what is not
//! simulated.
//!
//! One file per concern: [`driver`] (seeds over threads, the report), [`run`] (one seed's
//! phases and verdicts), [`nemesis`] (the faults carried out), [`behind`] (a client killed
//! with a waiter queued behind it), [`halts`] (halts and admissions in their scope),
//! [`keyed`] (requests of several parts of keyed limits, and the drain of their keys),
//! [`leased`] (a token-lease holder spending locally beside cluster takers),
//! [`ledger`] (settlements and the final reads of their charges), [`trespass`] (writes the
//! edge must refuse: bad arguments, another's session), [`kept`] (a session
//! kept alive and its belief deadline), [`client`] (permit
//! processes and their belief, and the door every process writes and reads through), [`world`] (the nodes' lives), [`net`] (delivery on
//! simulated time), [`links`] (the network's faults and fates), [`schedule`] (the faults
//! drawn from the seed), [`panics`] (a node task's panic counted). The history is the
//! harness's own [`crate::history::Recorder`], whose tokio clock is the simulated one here.
//!
//! The modules are declared in layers, highest first: a file imports only modules declared
//! below its own.

pub mod driver;
pub mod run;
pub mod nemesis;
pub mod behind;
pub mod halts;
pub mod keyed;
pub mod leased;
pub mod ledger;
pub mod trespass;
pub mod kept;
pub mod client;
pub mod world;
pub mod schedule;
pub mod net;
pub mod links;
pub mod panics;
