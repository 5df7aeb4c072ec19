//! The invariant check of the whole machine ([`Machine::check`]): the invariants of the
//! state module doc, and of each part (sessions, tenants, limits and their queues).

use super::Machine;
use crate::machine::command::{Fence, LimitId, SessionId, TicketId};
use crate::machine::queue_key::QueueKey;
use crate::machine::session::Ticket;

impl Machine {
    /// Checks every invariant of the module doc and of the parts; returns the first broken.
    /// Run on every decoded snapshot, and by tests after every entry.
    pub fn check(&self) -> Result<(), String> {
        let (waiters_expected, holders_expected, estimating) = self.check_sessions()?;
        let recorded: usize = self.saved.limits.values().map(|l| l.estimating.len()).sum();
        if recorded != estimating {
            return Err(format!(
                "limits record {recorded} unsettled estimates, tickets {estimating}"
            ));
        }
        let waiters: usize = self.saved.limits.values().map(|l| l.queue.len()).sum();
        let holders: usize = self.saved.limits.values().map(|l| l.holders.len()).sum();
        if waiters != waiters_expected || holders != holders_expected {
            return Err(format!(
                "limits have {waiters} waiters and {holders} holders, sessions \
                 {waiters_expected} and {holders_expected}"
            ));
        }
        self.check_names()?;
        self.check_lean_keys()?;
        self.deadlines.check(&self.saved)?;
        let totals = self.saved.count_totals();
        if totals != self.totals {
            return Err(format!("totals kept {:?}, counted {totals:?}", self.totals));
        }
        self.check_token_leases()?;
        self.check_placements()?;
        self.check_limits()
    }

    /// No tenant is placed in the metadata group, and no more are placed than the bound.
    fn check_placements(&self) -> Result<(), String> {
        let placements = &self.saved.placements;
        if let Some((tenant, _)) = placements.iter().find(|(_, g)| **g == 0) {
            return Err(format!(
                "tenant {tenant} is placed in group 0, the metadata group"
            ));
        }
        if placements.len() > crate::bounds::PLACEMENTS_MAX {
            return Err(format!(
                "{} tenants placed; the bound is {}",
                placements.len(),
                crate::bounds::PLACEMENTS_MAX
            ));
        }
        Ok(())
    }

    /// Every token lease names a live session and a live limit or key that rates, is not
    /// empty, and is counted in its limit's sums; every request counter is a live session's.
    fn check_token_leases(&self) -> Result<(), String> {
        let leases = &self.saved.token_leases;
        let mut sums = std::collections::BTreeMap::<LimitId, (u64, u64, u32)>::new();
        for (&(sid, id), lease) in &leases.leases {
            if !self.saved.sessions.contains_key(&sid) {
                return Err(format!("a token lease of session {sid}, which is not live"));
            }
            let Some(limit) = self.saved.limits.get(&id) else {
                return Err(format!(
                    "a token lease of session {sid} on limit {id}, which is gone"
                ));
            };
            if !limit.spec.rates() || (lease.rate_micro_per_s == 0 && lease.cap == 0) {
                return Err(format!(
                    "session {sid}'s token lease on limit {id} leases nothing"
                ));
            }
            let sum = sums.entry(id).or_default();
            sum.0 += lease.rate_micro_per_s;
            sum.1 += lease.cap;
            sum.2 += 1;
        }
        for (&id, limit) in &self.saved.limits {
            let l = limit.leased;
            let sum = sums.get(&id).copied().unwrap_or_default();
            if (l.rate_micro_per_s, l.cap, l.holders) != sum {
                return Err(format!(
                    "limit {id} counts leases {l:?}, its leases sum to {sum:?}"
                ));
            }
        }
        if let Some(sid) = leases
            .seqs
            .keys()
            .find(|s| !self.saved.sessions.contains_key(s))
        {
            return Err(format!(
                "a lease request counter of session {sid}, which is not live"
            ));
        }
        Ok(())
    }

    /// Every session is well formed and has its expiry record, and every live ticket is
    /// where it says it is. Returns the numbers of waiters, holders and unsettled estimates
    /// the tickets account for.
    fn check_sessions(&self) -> Result<(usize, usize, usize), String> {
        let mut waiters = 0usize;
        let mut holders = 0usize;
        let mut estimating = 0usize;
        for (&sid, session) in &self.saved.sessions {
            session.check().map_err(|e| format!("session {sid}: {e}"))?;
            if !self.expiries.contains(&(session.expires_at_ms, sid)) {
                return Err(format!("session {sid} has no expiry record"));
            }
            if sid == 0 {
                return Err("session id 0".into());
            }
            for (&tid, ticket) in &session.live {
                match ticket {
                    Ticket::Queued { limit, key } => {
                        if !self.waits_in(*limit, key, sid, tid) {
                            return Err(format!("queued ticket {sid}/{tid} is not in its queue"));
                        }
                        waiters += 1;
                    }
                    Ticket::Held {
                        limit,
                        fence,
                        units,
                    } => {
                        if !self.holds(*limit, *fence, *units, sid, tid) {
                            return Err(format!("held ticket {sid}/{tid} is not a holder"));
                        }
                        holders += 1;
                    }
                    Ticket::QueuedParts { parts, estimate } => {
                        for (limit, key) in parts {
                            if !self.waits_in(*limit, key, sid, tid) {
                                return Err(format!(
                                    "queued part of {sid}/{tid} is not in its queue"
                                ));
                            }
                        }
                        if parts.len() < 2 && !estimate {
                            return Err(format!(
                                "ticket {sid}/{tid} of parts has {} part",
                                parts.len()
                            ));
                        }
                        waiters += parts.len();
                    }
                    Ticket::HeldParts {
                        fence,
                        parts,
                        estimates,
                        ..
                    } => {
                        for (limit, units) in parts {
                            if !self.holds(*limit, *fence, *units, sid, tid) {
                                return Err(format!("held part of {sid}/{tid} is not a holder"));
                            }
                        }
                        for (limit, units) in estimates {
                            let e = self.saved.limits.get(limit);
                            if e.and_then(|l| l.estimating.get(fence)) != Some(units) {
                                return Err(format!("estimate of {sid}/{tid} is not recorded"));
                            }
                        }
                        estimating += estimates.len();
                        if parts.is_empty() && estimates.is_empty() {
                            return Err(format!("ticket {sid}/{tid} holds no part"));
                        }
                        holders += parts.len();
                    }
                }
            }
        }
        if self.expiries.len() != self.saved.sessions.len() {
            return Err(format!(
                "{} expiry records for {} sessions",
                self.expiries.len(),
                self.saved.sessions.len()
            ));
        }
        Ok((waiters, holders, estimating))
    }

    /// Ticket `sid`/`tid` waits in `limit`'s queue under `key`.
    fn waits_in(&self, limit: LimitId, key: &QueueKey, sid: SessionId, tid: TicketId) -> bool {
        let w = self.saved.limits.get(&limit).and_then(|l| l.queue.get(key));
        w.is_some_and(|w| w.session == sid && w.ticket == tid)
    }

    /// Ticket `sid`/`tid` holds `units` of `limit` under `fence`.
    fn holds(
        &self,
        limit: LimitId,
        fence: Fence,
        units: u32,
        sid: SessionId,
        tid: TicketId,
    ) -> bool {
        let h = self
            .saved
            .limits
            .get(&limit)
            .and_then(|l| l.holders.get(&fence));
        h.is_some_and(|h| h.session == sid && h.ticket == tid && h.units == units)
    }

    /// Every tenant is well formed, and exactly the limits that exist are reachable by
    /// their own names.
    fn check_names(&self) -> Result<(), String> {
        let mut named = 0usize;
        for (name, t) in &self.saved.tenants {
            t.check().map_err(|e| format!("tenant {name}: {e}"))?;
            for (lname, id) in &t.limits {
                let l = self
                    .saved
                    .limits
                    .get(id)
                    .ok_or(format!("{name}/{lname} names no limit"))?;
                if &l.tenant != name || &l.name != lname || l.is_key() {
                    return Err(format!("{name}/{lname} names limit {id} of another name"));
                }
                named += 1;
                for (key, kid) in &l.keys {
                    let k = self
                        .saved
                        .limits
                        .get(kid)
                        .ok_or(format!("{name}/{lname} key {key} names no state"))?;
                    if k.of != Some(*id) || &k.name != key || !k.tenant.is_empty() {
                        return Err(format!("{name}/{lname} key {key} names another state"));
                    }
                    if k.spec != l.spec || k.removing != l.removing {
                        return Err(format!("{name}/{lname} key {key} has another spec"));
                    }
                    if k.is_fresh() {
                        // Dropped when it is found fresh; by refill alone it is found so at
                        // the deadline it is filed under.
                        return Err(format!("{name}/{lname} key {key} is fresh and kept"));
                    }
                    named += 1;
                }
            }
        }
        if named != self.saved.limits.len() {
            return Err(format!(
                "{} limits and keys, {named} reachable by name",
                self.saved.limits.len()
            ));
        }
        Ok(())
    }

    /// Every limit is well formed, under the id and fence counters. (Its filing in the
    /// deadline index is checked with the others, in `check`.)
    fn check_limits(&self) -> Result<(), String> {
        for (&id, l) in &self.saved.limits {
            l.check()?;
            if id > self.saved.last_limit {
                return Err(format!(
                    "limit {id} above the last id {}",
                    self.saved.last_limit
                ));
            }
            if let Some((&fence, _)) = l.holders.last_key_value()
                && fence > self.saved.last_fence
            {
                return Err(format!(
                    "fence {fence} above the last fence {}",
                    self.saved.last_fence
                ));
            }
        }
        Ok(())
    }
}
