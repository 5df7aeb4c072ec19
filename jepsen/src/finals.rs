//! The final reads, after the workloads stopped and the last heal: each limit's status
//! (`max_in_use` for the capacity checker) and the spend of every period a settlement key
//! went into (the settlement checker judges each key by its own period). Each read is
//! recorded as an invoke and one completion.
//!
//! The spend reads share a budget ([`SPEND_READS_WITHIN`]): a cluster that answers nothing
//! (every node dead, or alive with Raft stopped) would otherwise cost each of a thousand
//! periods its client's whole timeout. A period not read in time is recorded as a failed
//! read, which the settlement checker counts as unread (its verdict unknown, never valid).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::json;
use weir_client::Client;

use crate::history::{Kind, Recorder};
use crate::workload::{LIMITS, TENANT};

/// Reads at once, at most.
const PARALLEL_READS: usize = 16;

/// How long the spend reads may take, all told.
const SPEND_READS_WITHIN: Duration = Duration::from_secs(90);

/// Process number of the final reads.
const READER: u64 = 0;

/// Reads every limit's status and every settled period's spend.
pub async fn read(client: &Client, history: &Recorder) {
    for (limit, ..) in LIMITS {
        history.record(
            READER,
            Kind::Invoke,
            "limit-status",
            json!({"limit": limit}),
        );
        match client.limit_status(TENANT, limit).await {
            Ok(Some(s)) => history.record(READER, Kind::Ok, "limit-status", json!({"limit": limit, "concurrent": s.concurrent, "in_use": s.in_use, "waiting": s.waiting, "max_in_use": s.max_in_use})),
            other => history.record(
                READER,
                Kind::Fail,
                "limit-status",
                json!({"limit": limit, "error": format!("{other:?}")}),
            ),
        };
    }
    let periods: BTreeSet<String> = history
        .ops()
        .iter()
        .filter(|o| o.kind == Kind::Invoke && (o.f == "settle" || o.f == "settle-conflict"))
        .filter_map(|o| Some(o.value.get("period")?.as_str()?.to_string()))
        .collect();
    let periods: Vec<String> = periods.into_iter().collect();
    let deadline = Instant::now() + SPEND_READS_WITHIN;
    for chunk in periods.chunks(PARALLEL_READS) {
        let reads: Vec<_> = chunk
            .iter()
            .enumerate()
            .map(|(i, period)| {
                let (client, history, period) = (client.clone(), history.clone(), period.clone());
                // Each concurrent reader is a process of its own.
                let process = READER + 1 + i as u64 + crate::workload::FINAL_READERS;
                tokio::spawn(async move {
                    history.record(process, Kind::Invoke, "spent", json!({"period": period}));
                    let left = deadline.saturating_duration_since(Instant::now());
                    match tokio::time::timeout(left, client.spent(TENANT, &period)).await {
                        Err(_) => history.record(
                            process,
                            Kind::Fail,
                            "spent",
                            json!({"period": period, "error": format!("not read: the final reads ran past {SPEND_READS_WITHIN:?}")}),
                        ),
                        Ok(Ok(s)) => history.record(
                            process,
                            Kind::Ok,
                            "spent",
                            json!({"period": period, "tokens": s.tokens}),
                        ),
                        Ok(Err(e)) => history.record(
                            process,
                            Kind::Fail,
                            "spent",
                            json!({"period": period, "error": e.to_string()}),
                        ),
                    };
                })
            })
            .collect();
        for r in reads {
            let _ = r.await;
        }
    }
}
