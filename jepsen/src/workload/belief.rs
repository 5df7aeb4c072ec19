//! [`Belief`]: one held permit as its application sees it, and the `hold` fact that records
//! it.
//!
//! The workloads hold permits the way an application does: each step of work is preceded
//! by `lost_reason()` and raced against `lost()`, and whatever else the holder waits on (a
//! fence validation, the nemesis letting go) is raced against `lost()` too. The moment the
//! library first tells the application that the permit may be lost — `lost_reason()`
//! answering, or `lost()` resolving — is recorded (`told_ns`), so the belief the checkers
//! judge ends where the application stopped believing: at that moment, or at the release
//! being sent if that came first (`to_ns`). The library's own deadline is recorded beside
//! it (`deadline_ns`), so a library that tells the application late (or never, before a
//! release sent after its deadline) is seen by `told` and, where the lateness lets another
//! holder in, by P1, capacity, linearizable and fenced.
//!
//! Invariants:
//! - `told` is set once, at the first loss the application hears of, and never moves.
//! - A recorded `to_ns` is at least `from_ns`, and is `told_ns` when the application was
//!   told, else the moment the release is about to be sent.
//!
//! Not recorded this way: a holder that the nemesis stops whole (`client-pause`): it hears
//! nothing while stopped, so its belief ends at the library's deadline as G2 defines it
//! ([`super::acquire::belief_end`]), and its `hold` says `"application": false`.

use std::future::Future;
use std::time::Duration;

use serde_json::{Value, json};
use weir_client::{Lost, Permit, Session};

use crate::history::{Kind, Recorder};

/// One step of work: the application asks `lost_reason()` before each.
const STEP: Duration = Duration::from_millis(10);

/// One held permit, as its application sees it.
pub struct Belief<'a> {
    permit: &'a Permit,
    history: &'a Recorder,
    /// Harness time the grant arrived.
    from: u64,
    /// When the application was first told the permit may be lost, and why.
    told: Option<(u64, Lost)>,
}

impl<'a> Belief<'a> {
    /// The belief in `permit`, granted at harness time `from`.
    pub fn new(permit: &'a Permit, history: &'a Recorder, from: u64) -> Self {
        Belief {
            permit,
            history,
            from,
            told: None,
        }
    }

    /// `lost_reason()`, as the application asks it before acting: the first answer is
    /// recorded as the moment it was told.
    pub fn check(&mut self) -> Option<Lost> {
        let why = self.permit.lost_reason()?;
        Some(self.tell(why))
    }

    /// Runs `work` raced against `lost()`, after checking `lost_reason()`: its output, or
    /// the loss the application was told of first (`work` is then dropped unfinished).
    pub async fn race<F: Future>(&mut self, work: F) -> Result<F::Output, Lost> {
        if let Some(why) = self.check() {
            return Err(why);
        }
        let permit = self.permit;
        let lost = tokio::select! {
            out = work => return Ok(out),
            why = permit.lost() => why,
        };
        Err(self.tell(lost))
    }

    /// Works for `d` in steps of [`STEP`], each preceded by `lost_reason()` and raced
    /// against `lost()`; the loss that stopped the work, if one did.
    pub async fn work(&mut self, d: Duration) -> Option<Lost> {
        let mut left = d;
        while !left.is_zero() {
            let step = left.min(STEP);
            if let Err(why) = self.race(tokio::time::sleep(step)).await {
                return Some(why);
            }
            left -= step;
        }
        self.check()
    }

    /// Records the loss `why` as told now, unless one was told before (the first stands).
    fn tell(&mut self, why: Lost) -> Lost {
        let now = self.history.now_ns();
        self.told.get_or_insert((now, why)).1.clone()
    }

    /// Records the belief's `hold` fact, now (the release is about to be sent, or the
    /// permit given up): `fields` (limit, cap, fence, and any of the workload's own) with
    /// `from_ns`, `to_ns` (when told, else now), `seen_ns` (now), `deadline_ns` (the
    /// session's latest deadline, from the library), `told_ns` and `lost`.
    pub fn record(&self, process: u64, session: &Session, mut fields: Value) {
        let seen = self.history.now_ns();
        let deadline = self.history.ns_of(session.deadline());
        let told = self.told.as_ref().map(|(at, _)| *at);
        let to = application_end(self.from, seen, told);
        let lost = self.told.as_ref().map(|(_, why)| why.to_string());
        let value = json!({"from_ns": self.from, "to_ns": to, "seen_ns": seen,
            "deadline_ns": deadline, "told_ns": told, "lost": lost, "application": true});
        if let (Value::Object(fields), Value::Object(more)) = (&mut fields, value) {
            fields.extend(more);
        }
        self.history
            .record_at(process, Kind::Ok, "hold", fields, seen);
    }
}

/// Where the application's belief in a permit granted at `from` ended: when it was told
/// the permit may be lost, or at `seen` (the release about to be sent) if it never was.
fn application_end(from: u64, seen: u64, told: Option<u64>) -> u64 {
    told.unwrap_or(seen).min(seen).max(from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_belief_ends_when_the_application_was_told_or_at_the_release() {
        // Told at 700, released at 900: the belief ended when it was told.
        assert_eq!(application_end(100, 900, Some(700)), 700);
        // Never told: it ended when the release was sent, however late the deadline was.
        assert_eq!(application_end(100, 900, None), 900);
        // Told at once on a grant that arrived after the deadline: an empty belief.
        assert_eq!(application_end(500, 500, Some(500)), 500);
    }
}
