//! `weir bench --incident`: a short `kill` schedule on its own cluster reports, for its
//! run, the fault with its election and the grants resuming, the sessions that held and
//! those that lost a permit, and the grants that arrived lost; its exit status says whether
//! every permit was kept. A leader cut from its peers but not from its clients costs no
//! holder its permit. Options the incident does not run with are refused.

#[test]
fn a_short_kill_incident_reports_its_fault_its_holders_and_its_grants() {
    #[rustfmt::skip]
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["bench", "--incident", "kill", "--clients", "4", "--clients-per-connection", "2",
               "--warmup", "0", "--json"])
        .env_remove("WEIR_BENCH_PYTHON")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("one JSON value ({e}): {stdout}\n{stderr}"));
    assert_eq!(v["schedule"], "kill", "{v}");
    assert_eq!(
        (v["nodes"].as_u64(), v["clients"].as_u64()),
        (Some(3), Some(4))
    );
    assert_eq!(v["python"].as_u64(), Some(0));
    let runs = v["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1, "{v}");
    let run = &runs[0];
    let faults = run["faults"].as_array().expect("faults");
    assert_eq!(faults.len(), 1, "{v}");
    let fault = &faults[0];
    assert!(
        fault["fault"].as_str().unwrap().starts_with("kill n"),
        "{v}"
    );
    let elected = fault["elected_ms"].as_f64().expect("a new leader was seen");
    let resumed = fault["resumed_ms"].as_f64().expect("grants resumed");
    assert!(elected > 0.0 && resumed > 0.0, "{v}");
    // Each figure is rounded on its own: the gap agrees with the other two within that.
    let gap = fault["gap_ms"].as_f64().expect("a gap");
    assert!(
        (gap - (resumed - elected).max(0.0)).abs() < 0.01,
        "gap {gap} against {resumed} - {elected}: {v}"
    );
    // Every client held; the sums are the run's.
    assert_eq!(run["sessions"].as_u64(), Some(4), "{v}\n{stderr}");
    assert_eq!(v["sessions"], run["sessions"]);
    assert!(run["grants"].as_u64().unwrap() > 0, "{v}");
    let lost = v["sessions_lost_permit"].as_u64().unwrap();
    let arrived_lost = v["grants_arrived_lost"].as_u64().unwrap();
    assert!(lost <= 4, "{v}");
    assert_eq!(v["never_resumed"].as_u64(), Some(0));
    let kept = lost == 0 && arrived_lost == 0;
    assert_eq!(
        out.status.code(),
        Some(if kept { 0 } else { 1 }),
        "{v}\n{stderr}"
    );
}

/// A leader cut from its peers but not from its clients keeps heartbeating them and commits
/// nothing: the quorum elects another, and every holder must move there before its belief
/// ends (G9). A client that judged liveness alone stayed with the cut leader and lost every
/// permit (every holder, before the clients hedged an unanswered write near its deadline).
#[test]
fn a_leader_cut_from_its_peers_but_not_its_clients_costs_no_holder_its_permit() {
    #[rustfmt::skip]
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["bench", "--incident", "partition-leader", "--clients", "8",
               "--clients-per-connection", "2", "--warmup", "0", "--json"])
        .env_remove("WEIR_BENCH_PYTHON")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("one JSON value ({e}): {stdout}\n{stderr}"));
    assert_eq!(v["sessions"].as_u64(), Some(8), "{v}\n{stderr}");
    assert_eq!(
        (
            v["sessions_lost_permit"].as_u64(),
            v["grants_arrived_lost"].as_u64(),
            v["never_resumed"].as_u64()
        ),
        (Some(0), Some(0), Some(0)),
        "{v}\n{stderr}"
    );
    assert_eq!(out.status.code(), Some(0), "{v}\n{stderr}");
}

#[test]
fn incident_options_that_make_no_run_are_refused() {
    let weir = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = weir(&["bench", "--incident", "kill", "--workload", "rate-take"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("starts its own cluster"), "{err}");
    let (code, err) = weir(&["bench", "--incident", "kill", "--spawn", "3"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("starts its own cluster"), "{err}");
    let (code, err) = weir(&["bench", "--python", "2"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("--python and --runs go with --incident"),
        "{err}"
    );
}
