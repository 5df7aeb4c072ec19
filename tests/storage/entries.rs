//! Log entries for the log-store tests: normal entries carrying batches of a given size.

use openraft::{CommittedLeaderId, EntryPayload, LogId};
use weir_core::machine::{Batch, Command, HaltScope, Leadership};
use weir_server::raft::Entry;

/// Entry `index` of `term`, a batch of `commands` halts whose reasons hold `tag`.
pub fn entry(term: u64, index: u64, commands: usize, tag: u64) -> Entry {
    Entry {
        log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
        payload: EntryPayload::Normal(Batch {
            leadership: Leadership {
                term,
                node: 1,
                incarnation: 7,
            },
            clock_ms: index * 10,
            wall_ms: 1_700_000_000_000 + index,
            commands: (0..commands)
                .map(|i| Command::SetHalt {
                    tenant: "t".into(),
                    scope: HaltScope::Tenant,
                    reason: format!("entry {index} command {i} tag {tag}"),
                })
                .collect(),
        }),
    }
}
