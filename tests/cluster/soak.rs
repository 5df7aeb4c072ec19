//! `weir bench --report-every`: a short soak prints a line per interval with every series of
//! every node, kills and stalls the leader when told, judges the drift, and draws its chart.

const NODE_SERIES: [&str; 5] = ["rss_mib", "fds", "threads", "log_mib", "snapshot_mib"];

fn json_lines(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect()
}

#[test]
fn a_short_soak_reports_every_series_of_every_node_and_kills_and_stalls_the_leader() {
    let chart = std::env::temp_dir().join(format!("weir-soak-{}.svg", std::process::id()));
    #[rustfmt::skip]
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["bench", "--spawn", "3", "--clients", "8", "--limits", "4", "--warmup", "0.5",
               "--duration", "20", "--report-every", "5", "--kill-every", "6",
               "--stall-every", "11", "--drift-threshold", "100000", "--json", "--chart"])
        .arg(&chart)
        .output()
        .unwrap();
    let svg = std::fs::read_to_string(&chart).unwrap_or_default();
    let _ = std::fs::remove_file(&chart);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let lines = json_lines(&String::from_utf8_lossy(&out.stdout));
    let (verdict, intervals) = lines.split_last().expect("lines");
    assert_eq!(intervals.len(), 4, "one line per 5 s of 20 s: {lines:?}");
    for i in intervals {
        assert!(
            i["p99_ms"].as_f64().is_some() && i["ops"].as_u64().is_some(),
            "{i}"
        );
        let nodes = i["nodes"].as_array().expect("nodes");
        assert_eq!(nodes.len(), 3, "{i}");
        for n in nodes {
            for s in NODE_SERIES {
                assert!(n[s].as_f64().is_some(), "{s} of {n}");
            }
        }
    }
    assert!(
        intervals.iter().any(|i| i["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["restarted"] == true)),
        "a killed leader's node comes back as a new process: {intervals:?}"
    );
    let cycled: u64 = intervals
        .iter()
        .map(|i| i["limits_cycled"].as_u64().expect("limits_cycled"))
        .sum();
    assert!(
        cycled >= 5,
        "keyed limits appear and disappear: {intervals:?}"
    );
    let v = &verdict["verdict"];
    assert!(v["kills"].as_u64().unwrap() >= 1, "{v}\n{stderr}");
    assert!(v["stalls"].as_u64().unwrap() >= 1, "{v}\n{stderr}");
    assert_eq!(v["incidents_failed"].as_u64(), Some(0), "{v}\n{stderr}");
    assert_eq!(v["intervals"].as_u64(), Some(4), "{v}");
    let drift = v["drift"].as_array().expect("drift");
    assert_eq!(drift.len(), 3 * NODE_SERIES.len() + 1, "{v}");
    assert!(drift.iter().any(|d| d["series"] == "n3 threads"), "{v}");
    assert!(
        stderr.contains("SIGSTOP") && stderr.contains("SIGCONT"),
        "{stderr}"
    );
    assert!(
        svg.starts_with("<svg") && svg.contains("rss per node"),
        "{svg}"
    );
    assert_eq!(
        svg.matches("<polyline").count(),
        5 * 3 + 1,
        "a line per node and series"
    );
}

#[test]
fn soak_options_without_a_spawned_cluster_or_with_too_few_intervals_are_refused() {
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
    let (code, err) = weir(&["bench", "--report-every", "5", "--duration", "20"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--report-every needs --spawn"), "{err}");
    let (code, err) = weir(&[
        "bench",
        "--spawn",
        "1",
        "--report-every",
        "5",
        "--duration",
        "10",
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("at least four intervals"), "{err}");
    let (code, err) = weir(&["bench", "--spawn", "1", "--chart", "/tmp/x.svg"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--chart needs --report-every"), "{err}");
}

#[test]
fn a_short_keyed_churn_grants_every_take_and_keeps_each_key_live_for_its_minute() {
    let chart = std::env::temp_dir().join(format!("weir-churn-{}.svg", std::process::id()));
    #[rustfmt::skip]
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["bench", "--spawn", "3", "--workload", "keyed-churn", "--duration", "4",
               "--report-every", "1", "--keys-per-minute", "6000", "--clients", "4", "--json",
               "--chart"])
        .arg(&chart)
        .output()
        .unwrap();
    let svg = std::fs::read_to_string(&chart).unwrap_or_default();
    let _ = std::fs::remove_file(&chart);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines = json_lines(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(out.status.code(), Some(0), "{lines:?}\n{stderr}");
    let (verdict, intervals) = lines.split_last().expect("lines");
    assert_eq!(intervals.len(), 4, "one line a second for 4 s: {lines:?}");
    for i in intervals {
        for field in ["takes", "granted", "expected_live_keys", "live_keys"] {
            assert!(i[field].as_u64().is_some(), "{field} of {i}");
        }
        assert_eq!(
            (i["refusals"].as_u64(), i["errors"].as_u64()),
            (Some(0), Some(0)),
            "{i}"
        );
        let nodes = i["nodes"].as_array().expect("nodes");
        assert_eq!(nodes.len(), 3, "{i}");
        assert!(nodes.iter().all(|n| n["rss_mib"].as_f64().is_some()), "{i}");
    }
    // 100 new keys a second: the live keys climb by about 100 each interval.
    let live: Vec<u64> = intervals
        .iter()
        .map(|i| i["live_keys"].as_u64().unwrap())
        .collect();
    assert!(
        live.windows(2).all(|w| w[1] > w[0]) && (50..=150).contains(&live[0]),
        "{live:?}"
    );
    let v = &verdict["verdict"];
    // Takes 0..400 fall due within 4 s, each of a key of its own, and no key's minute
    // ends within the run: every key taken from is live at the end.
    assert_eq!(
        (
            v["takes"].as_u64(),
            v["granted"].as_u64(),
            v["refusals"].as_u64()
        ),
        (Some(400), Some(400), Some(0)),
        "{v}"
    );
    assert_eq!(v["live_keys_end"].as_u64(), Some(400), "{v}");
    assert_eq!(v["expected_live_keys_end"].as_u64(), Some(400), "{v}");
    assert_eq!(v["live_keys_off"].as_u64(), Some(0), "{v}");
    assert!(
        v["plateau_live_keys"].is_null(),
        "a 4 s run has no plateau: {v}"
    );
    let rss = v["rss"].as_array().expect("rss");
    assert_eq!(rss.len(), 3, "{v}");
    assert!(rss.iter().all(|t| t["flagged"] == false), "{v}");
    assert_eq!(v["passed"], true, "{v}");
    assert!(
        svg.starts_with("<svg") && svg.contains("rss per node") && svg.contains("live keys"),
        "{svg}"
    );
    assert_eq!(
        svg.matches("<polyline").count(),
        3 + 2,
        "a line per node, live keys and expected"
    );
}
