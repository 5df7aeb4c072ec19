//! Snapshots survive what the run did to the nodes: a node that logged a snapshot saved
//! (built, or installed from the leader) loads that snapshot, or a newer one, at each later
//! start — through kills, and through power losses that drop every write not fsynced.
//!
//! Read from the node logs (each node's log runs across its starts): the server logs each
//! snapshot it saved, and at each start the one it loaded or that there was none, in the
//! words of `weir_server::raft::state_store`'s `SNAPSHOT_*` constants, with the snapshot's
//! id (`TERM-NODE-INDEX`). A snapshot is ordered by its last log index. A node of several
//! Raft groups ends each such line with the group's tag (` (group G)`): each group's
//! snapshots are judged apart.
//!
//! The same lines give the coverage counts (built, sent, installed, loaded at start), which
//! the harness records into the history as a `snapshots` fact.
//!
//! What it cannot see: a snapshot file damaged but still loadable (the file is a checked
//! frame: damage is refused at start, and the node then does not start, which convergence
//! sees); a node that never restarted after saving one (nothing to judge: the row is valid
//! on its other starts, and the count of judged starts is in its detail).

use serde_json::json;
use weir_server::raft::network::SNAPSHOT_SENT;
use weir_server::raft::state_store::{
    SNAPSHOT_BUILT, SNAPSHOT_INSTALLED, SNAPSHOT_LOADED, SNAPSHOT_NONE,
};

use super::verdict::Verdict;

/// What the node logs say of snapshots, summed over the nodes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub built: u64,
    pub sent: u64,
    pub installed: u64,
    /// Starts that loaded a snapshot.
    pub loaded: u64,
    /// Starts after the node had saved a snapshot: the starts judged.
    pub judged: u64,
}

impl Tally {
    /// The `snapshots` fact's value.
    pub fn json(&self) -> serde_json::Value {
        json!({"built": self.built, "sent": self.sent, "installed": self.installed,
            "loaded": self.loaded, "judged": self.judged})
    }
}

/// Whether the logs come from nodes that log their snapshots (every start logs one line).
pub fn present(logs: &[(String, String)]) -> bool {
    logs.iter()
        .any(|(_, text)| text.contains(SNAPSHOT_LOADED) || text.contains(SNAPSHOT_NONE))
}

/// The index of the snapshot id after `marker: ` on `line` (`TERM-NODE-INDEX`, maybe
/// followed by `, N bytes`); `Err` for a line that names none.
fn index_after(line: &str, marker: &str) -> Result<u64, String> {
    let id = line
        .split_once(&format!("{marker}: "))
        .map(|(_, rest)| rest.split([',', ' ']).next().unwrap_or(""))
        .ok_or_else(|| format!("no snapshot id: {line}"))?;
    // A snapshot of nothing applied yet.
    if id == "empty" {
        return Ok(0);
    }
    id.rsplit('-')
        .next()
        .and_then(|i| i.parse().ok())
        .ok_or_else(|| format!("snapshot id {id:?} has no index: {line}"))
}

/// Judges every node's log and counts what it says.
pub fn judge(logs: &[(String, String)]) -> (Tally, Verdict) {
    let mut tally = Tally::default();
    let mut verdict = Verdict::Valid;
    for (name, text) in logs {
        if let Err(v) = judge_node(name, text, &mut tally)
            && (verdict == Verdict::Valid || matches!(v, Verdict::Invalid(_)))
        {
            verdict = v;
        }
    }
    (tally, verdict)
}

/// The Raft group a snapshot line names by its tag (` (group G)`), if any.
fn group_of(line: &str) -> Option<&str> {
    line.rsplit_once(" (group ")
        .and_then(|(_, rest)| rest.strip_suffix(')'))
}

/// One node's log: counts into `tally`; `Err` at the first start that lost a saved
/// snapshot (invalid) or a line it cannot read (unknown).
fn judge_node(name: &str, text: &str, tally: &mut Tally) -> Result<(), Verdict> {
    // The newest snapshot saved so far of each group, and the line that said so.
    let mut saved_of: std::collections::BTreeMap<Option<&str>, (u64, &str)> = Default::default();
    let unreadable = |e: String| Verdict::Unknown(format!("{name}: {e}"));
    for line in text.lines() {
        let saved_now = if line.contains(SNAPSHOT_BUILT) {
            tally.built += 1;
            Some(index_after(line, SNAPSHOT_BUILT).map_err(unreadable)?)
        } else if line.contains(SNAPSHOT_INSTALLED) {
            tally.installed += 1;
            Some(index_after(line, SNAPSHOT_INSTALLED).map_err(unreadable)?)
        } else {
            None
        };
        let group = group_of(line.trim_end());
        if let Some(index) = saved_now {
            if saved_of.get(&group).is_none_or(|(s, _)| index > *s) {
                saved_of.insert(group, (index, line));
            }
            continue;
        }
        if line.contains(SNAPSHOT_SENT) {
            tally.sent += 1;
            continue;
        }
        let loaded = if line.contains(SNAPSHOT_LOADED) {
            tally.loaded += 1;
            Some(index_after(line, SNAPSHOT_LOADED).map_err(unreadable)?)
        } else if line.contains(SNAPSHOT_NONE) {
            None
        } else {
            continue;
        };
        let Some(&(want, said)) = saved_of.get(&group) else {
            continue;
        };
        tally.judged += 1;
        if loaded.is_none_or(|l| l < want) {
            return Err(Verdict::Invalid(format!(
                "{name}: started with {} after it had saved snapshot index {want} ({})",
                match loaded {
                    Some(l) => format!("snapshot index {l}"),
                    None => "no snapshot".into(),
                },
                said.trim()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(lines: &[String]) -> String {
        lines.join("\n")
    }

    fn built(index: u64) -> String {
        format!(
            "node=1 INFO weir_server::raft::state_store: {SNAPSHOT_BUILT}: 3-1-{index}, 812 bytes"
        )
    }

    fn installed(index: u64) -> String {
        format!("node=1 INFO weir_server::raft::state_store: {SNAPSHOT_INSTALLED}: 4-2-{index}")
    }

    fn loaded(index: u64) -> String {
        format!("node=1 INFO weir_server::raft::state_store: {SNAPSHOT_LOADED}: 3-1-{index}")
    }

    fn none() -> String {
        format!("node=1 INFO weir_server::raft::state_store: {SNAPSHOT_NONE}")
    }

    #[test]
    fn each_start_after_a_save_loads_it_or_newer() {
        let text = log(&[
            none(),
            built(100),
            installed(250),
            format!("node=2 INFO weir_server::raft::network: {SNAPSHOT_SENT} to node 3: 4-2-250"),
            loaded(250),
            built(400),
            loaded(520),
        ]);
        let (tally, verdict) = judge(&[("node1".into(), text)]);
        assert_eq!(verdict, Verdict::Valid);
        assert_eq!(
            tally,
            Tally {
                built: 2,
                sent: 1,
                installed: 1,
                loaded: 2,
                judged: 2
            }
        );
    }

    #[test]
    fn a_start_that_lost_a_saved_snapshot_is_invalid() {
        let older = log(&[none(), built(100), installed(250), loaded(100)]);
        let (_, verdict) = judge(&[("node1".into(), log(&[none()])), ("node2".into(), older)]);
        assert!(
            matches!(&verdict, Verdict::Invalid(d) if d.starts_with("node2: started with snapshot index 100 after it had saved snapshot index 250")),
            "{verdict:?}"
        );
        let gone = log(&[none(), built(100), none()]);
        assert!(matches!(
            judge(&[("node1".into(), gone)]).1,
            Verdict::Invalid(d) if d.contains("started with no snapshot")
        ));
    }

    #[test]
    fn each_group_of_a_node_of_several_is_judged_apart() {
        let of = |line: String, group: u32| format!("{line} (group {group})");
        // Group 2 saved 250 and loads it; group 0 saved none and loads none.
        let text = log(&[
            of(none(), 0),
            of(none(), 2),
            of(built(250), 2),
            of(none(), 0),
            of(loaded(250), 2),
        ]);
        let (tally, verdict) = judge(&[("node1".into(), text)]);
        assert_eq!(verdict, Verdict::Valid);
        assert_eq!(tally.judged, 1);
        // Group 2 starting with none after its save is a loss, whatever group 0 loads.
        let lost = log(&[of(built(250), 2), of(loaded(300), 0), of(none(), 2)]);
        assert!(matches!(
            judge(&[("node1".into(), lost)]).1,
            Verdict::Invalid(d) if d.contains("started with no snapshot after it had saved snapshot index 250")
        ));
    }

    #[test]
    fn logs_of_nodes_that_log_no_snapshots_are_not_judged_and_a_garbled_id_is_unknown() {
        assert!(!present(&[("node1".into(), "node=1 INFO serving".into())]));
        assert!(present(&[("node1".into(), none())]));
        let garbled = format!("{}\n{SNAPSHOT_BUILT}: 3-x", none());
        assert!(matches!(
            judge(&[("node1".into(), garbled)]).1,
            Verdict::Unknown(_)
        ));
    }
}
