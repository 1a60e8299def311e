//! Smoke runs of every fencelock scenario, a fraction of a second each against private
//! `redis-server`s, so that the bench cannot rot. The peers (etcd too) are left out: they need
//! installs.

use std::path::Path;
use std::time::Duration;

use fencelock_bench::election::{Departure, System};
use fencelock_bench::handoff::Mode;
use fencelock_bench::market::Variant;
use fencelock_bench::report::Output;
use fencelock_bench::{
    election, handoff, market, redlock, renewal, takeover, uncontended, Settings,
};

fn settings(out: &Path) -> Settings {
    let mut settings = Settings::new(out.to_owned(), out.join("peers"));
    settings.duration = Duration::from_millis(300);
    settings.market_duration = Duration::from_millis(300);
    settings.tasks = vec![1, 8];
    settings.workers = vec![3];
    settings.leases = vec![200];
    settings
}

/// The JSON written for `scenario`, with the run's circumstances.
fn written(out: &Path, scenario: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(out.join(format!("{scenario}.json")))
        .unwrap_or_else(|e| panic!("{scenario}.json: {e}"));
    let json: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    assert!(
        json["run"]["server"]
            .as_str()
            .is_some_and(|s| s.starts_with("Redis ") || s.starts_with("Valkey ")),
        "{json}"
    );
    assert!(json["run"]["cores"].as_u64() > Some(0), "{json}");
    // Every result says which code it measured: the lock path as it is in this tree.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let today = fencelock_sources::digest(&root, fencelock_sources::BENCH).expect("a digest");
    assert_eq!(
        json["run"]["sources"]["digest"].as_str(),
        Some(today.as_str())
    );
    let markdown = std::fs::read_to_string(out.join(format!("{scenario}.md")))
        .unwrap_or_else(|e| panic!("{scenario}.md: {e}"));
    let stamp = fencelock_sources::Stamp::of_markdown(&markdown).expect("a sources line");
    assert_eq!(stamp.digest, today);
    assert_eq!(stamp.matches(&root), Ok(()));
    json
}

#[tokio::test(flavor = "multi_thread")]
async fn uncontended_compares_fencelock_with_the_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = settings(dir.path());
    let output = Output::new(dir.path()).expect("output");
    let results = uncontended::run(&settings, &output).await.expect("run");
    assert_eq!(results.rows.len(), 2);
    for row in &results.rows {
        assert!(
            row.fencelock.cycles > 0 && row.limit.cycles == row.fencelock.cycles,
            "{row:?}"
        );
        assert!(
            row.ratio > 0.0 && row.fencelock.commands_per_cycle >= 2.0,
            "{row:?}"
        );
        // Redis spends CPU on every cycle: a zero would be a misread INFO cpu.
        assert!(
            row.fencelock.redis_cpu_us_per_cycle > 0.0 && row.limit.redis_cpu_us_per_cycle > 0.0,
            "{row:?}"
        );
    }
    written(dir.path(), "uncontended");
}

#[tokio::test(flavor = "multi_thread")]
async fn handoffs_change_hands_without_overlap() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = settings(dir.path());
    let output = Output::new(dir.path()).expect("output");
    let results = handoff::run(&settings, &output).await.expect("run");
    assert_eq!(results.runs.len(), 4);
    for run in &results.runs {
        let s = &run.stats;
        assert_eq!(s.overlaps, 0, "{run:?}");
        assert!(
            s.acquires > 3
                && run.commands_per_acquire > Some(0.0)
                && run.redis_cpu_us_per_acquire > Some(0.0),
            "{run:?}"
        );
        if run.mode == Mode::Handoff {
            assert!(s.switch_rate > 0.99, "{run:?}");
            assert!(s.min_per_worker > 0 && s.latency.count > 0, "{run:?}");
        }
    }
    written(dir.path(), "handoff");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_market_trades_under_every_variant() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = settings(dir.path());
    let output = Output::new(dir.path()).expect("output");
    let results = market::run(&settings, &output).await.expect("run");
    assert_eq!(results.runs.len(), 9);
    for run in &results.runs {
        assert!(run.listed > 0, "{run:?}");
        assert!(run.bought <= run.listed, "{run:?}");
        if run.variant != Variant::Watch {
            assert_eq!(run.purchase_retries, 0, "{run:?}");
            // The locks let purchases through: nobody is starved for the whole run.
            assert!(run.bought > 0, "{run:?}");
        }
    }
    written(dir.path(), "market");
}

#[tokio::test(flavor = "multi_thread")]
async fn renewal_keeps_every_lease_and_counts_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = settings(dir.path());
    // A window longer than the lease: a lease that was not renewed has run out by its end.
    settings.duration = renewal::LEASE + renewal::LEASE / 3;
    let output = Output::new(dir.path()).expect("output");
    let results = renewal::run(&settings, &output).await.expect("run");
    let row = results.rows.first().expect("one row");
    assert_eq!(row.still_held, 200, "{row:?}");
    assert!(
        row.intervals >= 1.0 && row.scripts_per_interval > 0.0,
        "{row:?}"
    );
    assert!(
        row.bytes_per_lock > 0.0 && row.bytes_per_plain_key > 0.0,
        "{row:?}"
    );
    // The plain keys are as long as the locks' keys and values: `fencelock:{lease:N}:mutex`.
    assert!(
        row.key_bytes > "{lease:0}".len() && row.value_bytes > 16,
        "{row:?}"
    );
    written(dir.path(), "renewal");
}

#[tokio::test(flavor = "multi_thread")]
async fn redlock_asks_one_and_five_masters() {
    let dir = tempfile::tempdir().expect("tempdir");
    let settings = settings(dir.path());
    let output = Output::new(dir.path()).expect("output");
    let results = redlock::run(&settings, &output).await.expect("run");
    let masters: Vec<usize> = results.rows.iter().map(|r| r.masters).collect();
    assert_eq!(masters, [1, 1, 5]);
    assert!(results
        .rows
        .iter()
        .all(|r| r.cycles > 0 && r.acquire.p50_ms > 0.0));
    // A paused master costs an acquire nothing, a refusal that needs its vote a node timeout.
    let paused = &results.paused;
    assert!(paused.cycles > 0, "{paused:?}");
    assert!(paused.acquire.max_ms < paused.node_timeout_ms, "{paused:?}");
    assert!(
        paused.refusals.count > 0 && paused.refusal_ratio >= 1.0,
        "{paused:?}"
    );
    written(dir.path(), "redlock");
}

#[tokio::test(flavor = "multi_thread")]
async fn takeover_waits_for_a_killed_holders_lease_and_not_a_terminated_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = settings(dir.path());
    settings.program = env!("CARGO_BIN_EXE_fencelock-bench").into();
    let lease = Duration::from_secs(1);
    settings.takeover_leases = vec![lease];
    settings.takeover_rounds = 1;
    let output = Output::new(dir.path()).expect("output");
    let results = takeover::run(&settings, &output).await.expect("run");
    assert_eq!(results.takeovers.len(), 2, "{results:?}");
    for t in &results.takeovers {
        assert_eq!(t.rounds_ms.len(), 1, "{t:?}");
        match t.departure {
            // Renewed every third of the lease: at least two thirds of it are left to wait.
            takeover::Departure::Killed => assert!(t.median_ms >= 600.0, "{t:?}"),
            // Woken by the release.
            takeover::Departure::Terminated => assert!(t.median_ms < 600.0, "{t:?}"),
        }
    }
    assert_eq!(results.pauses.len(), takeover::PAUSES.len(), "{results:?}");
    for pause in &results.pauses {
        assert_eq!(pause.kept + pause.lost, 1, "{pause:?}");
        if pause.pause_ms > pause.lease_ms {
            // A pause longer than the lease always costs the lock.
            assert_eq!(pause.lost, 1, "{pause:?}");
        }
    }
    written(dir.path(), "takeover");
}

#[tokio::test(flavor = "multi_thread")]
async fn election_takes_over_in_other_processes_and_counts_observers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut settings = settings(dir.path());
    settings.program = env!("CARGO_BIN_EXE_fencelock-bench").into();
    // No peer is chosen: etcd would need an install.
    settings.peers = vec!["none".to_owned()];
    settings.election_rounds = 1;
    settings.observers = vec![0, 2];
    let output = Output::new(dir.path()).expect("output");
    let results = election::run(&settings, &output).await.expect("run");
    assert!(results.etcd.starts_with("skipped"), "{results:?}");
    assert_eq!(results.takeovers.len(), 2, "{results:?}");
    for takeover in &results.takeovers {
        assert_eq!(takeover.system, System::Fencelock);
        assert_eq!(takeover.rounds_ms.len(), 1, "{takeover:?}");
        if takeover.departure == Departure::Killed {
            // The standby waits for what is left of the dead leader's lease.
            assert!(takeover.summary.p50_ms >= 100.0, "{takeover:?}");
        }
    }
    let commands: Vec<f64> = results
        .observer_costs
        .iter()
        .filter_map(|c| c.redis_commands)
        .collect();
    // Observers re-read the leader on each change: they cost commands.
    assert!(
        commands.len() == 2 && commands[1] > commands[0],
        "{results:?}"
    );
    written(dir.path(), "election");
}
