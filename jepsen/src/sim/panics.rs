//! Panics inside a run: a node's task that panics (an assertion in openraft, the machine
//! or the log) is caught by tokio and ends only that task, so the run would see it only by
//! its effects. A process-wide panic hook counts panics per thread, and a run reads the
//! count of its own thread (every task of a run polls on the run's one thread).
//!
//! Invariants:
//! - The hook is installed once and chains to the hook before it (the message is still
//!   printed).
//! - A thread's count only grows; a run compares it before and after.

use std::cell::RefCell;
use std::sync::Once;

thread_local! {
    /// Panics on this thread, and the first one's message.
    static SEEN: RefCell<(u64, Option<String>)> = const { RefCell::new((0, None)) };
}

static HOOK: Once = Once::new();

/// Installs the counting hook (once per process).
pub fn count() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            SEEN.with(|seen| {
                let mut seen = seen.borrow_mut();
                seen.0 += 1;
                if seen.1.is_none() {
                    seen.1 = Some(info.to_string());
                }
            });
            previous(info);
        }));
    });
}

/// How many panics this thread has seen, and the first one's message.
pub fn seen() -> (u64, Option<String>) {
    SEEN.with(|seen| seen.borrow().clone())
}

/// Forgets the first message, so the next run reports its own.
pub fn reset_first() {
    SEEN.with(|seen| seen.borrow_mut().1 = None);
}
