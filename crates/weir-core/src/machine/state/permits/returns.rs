//! Tokens returned to rate buckets without a take to settle (`ReturnTokens`, Envoy's
//! `is_negative_hits`): each part's units go back to its limit's bucket, or its key's.
//!
//! Invariants:
//! - All or nothing: every part is judged (its limit live and rated, its key fitting the
//!   limit) before any bucket changes; a refusal names the part and changes nothing.
//! - A bucket never passes its burst (`Limit::give_back`).
//! - A return creates no state: a key without one is fresh, its bucket full already, and
//!   stays without one; a key the return fills is fresh and dropped as any fresh key is
//!   (`serve` files it). The live-key bounds are untouched.
//! - Every limit a return touches is served (the tokens may let its waiters through) and
//!   filed before the command is answered.

use crate::machine::command::{LimitId, Part};
use crate::machine::reply::{Event, Refusal, Reply};
use crate::machine::state::Machine;

impl Machine {
    /// Returns each part's units to its bucket in `tenant`; answers `Done`.
    pub(in crate::machine::state) fn return_tokens(
        &mut self,
        tenant: &str,
        parts: &[Part],
        events: &mut Vec<Event>,
    ) -> Result<Reply, Refusal> {
        let mut targets: Vec<Option<LimitId>> = Vec::with_capacity(parts.len());
        for (i, part) in parts.iter().enumerate() {
            let n = i + 1;
            let def = self.live_limit_id(tenant, &part.limit)?;
            let d = &self.saved.limits[&def];
            if !d.spec.rates() {
                return Err(Refusal::Invalid(format!(
                    "part {n}: limit {tenant}/{} has no rate: there is no bucket to return \
                     tokens to",
                    part.limit
                )));
            }
            let target = match (d.spec.keys_max, &part.key) {
                (Some(_), None) => {
                    return Err(Refusal::Invalid(format!(
                        "part {n}: limit {tenant}/{} is keyed, and the part names no key",
                        part.limit
                    )));
                }
                (None, Some(key)) => {
                    return Err(Refusal::Invalid(format!(
                        "part {n}: limit {tenant}/{} is not keyed, and the part names key \
                         {key}",
                        part.limit
                    )));
                }
                (None, None) => Some(def),
                (Some(_), Some(key)) => self.key_state(def, key),
            };
            targets.push(target);
        }
        let now_ms = self.now_ms();
        for (target, part) in targets.into_iter().zip(parts) {
            // A key without a state is full: nothing to return, nothing to create.
            let Some(id) = target else { continue };
            let limit = self.saved.limits.get_mut(&id).expect("judged live above");
            limit.refill(now_ms);
            limit.give_back(part.units as u64);
            self.serve(id, events);
        }
        Ok(Reply::Done)
    }
}
