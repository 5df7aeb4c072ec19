//! Permits: acquiring (granted at once, queued, or refused), releasing, and serving a
//! limit's queue when room appears.
//!
//! A ticket gets a permit in one of two ways, at once on its acquire or from the queue when
//! the limit is served; a request of one part goes through `Machine::grant`, which takes
//! the fence, and one of several parts (or with an estimate) takes one fence for all its
//! parts and records them with `record_grant`. A live ticket leaves its limits in one of
//! two ways, its release or its session's end; both go through `Machine::unlink`, and the
//! caller then serves the limits.
//!
//! Requests of several parts, keys and shadow parts are resolved and decided here (the
//! rule is the machine's module doc, "Several parts"), and so are takes with an estimate
//! and their settlement (`SettleTake`), and tokens returned unlinked (`ReturnTokens`).
//!
//! Each step has its own child module: `decide` (a new request: granted, queued or refused),
//! `resolve` (its parts against the state), `grant` (fences and what a grant records), `serve`
//! (a queue when room appears, and filing a limit), `leave` (release, session end, refusal of
//! a waiter), `settle` (a take's estimate) and `returns` (tokens given back).

mod decide;
mod grant;
mod leave;
mod resolve;
mod returns;
mod serve;
mod settle;

use std::collections::BTreeMap;

use crate::machine::command::LimitId;
use crate::machine::limit::Limit;

/// The live limit `id` of `limits`, which a ticket names.
fn limit_mut<'a>(limits: &'a mut BTreeMap<LimitId, Box<Limit>>, id: &LimitId) -> &'a mut Limit {
    limits.get_mut(id).expect("tickets name live limits")
}
