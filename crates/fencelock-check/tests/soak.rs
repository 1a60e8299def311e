//! Soak mode with a tiny target: real servers, worker processes taking several names at once,
//! faults drawn from the seed. The totals of the results file add up, and no fencelock claim is
//! violated.

use std::path::PathBuf;
use std::time::Duration;

use fencelock_check::soak::{soak, SoakOptions};
use fencelock_check::{MatrixOptions, Strategy};

#[test]
fn a_short_soak_adds_up_and_fencelock_keeps_its_claims() {
    let out = std::env::temp_dir().join(format!("fencelock-soak-test-{}", std::process::id()));
    let options = SoakOptions {
        sections: 400,
        time_bound: Duration::from_secs(90),
        strategies: vec![
            Strategy::FencelockMutexFenced,
            Strategy::FencelockRwlockFenced,
        ],
        round: MatrixOptions {
            workers: 2,
            duration: Duration::from_secs(3),
            lease: Duration::from_secs(1),
            work: Duration::from_millis(1),
            faults: 1,
            lanes: 4,
            seed: 20_261_124,
            worker_exe: PathBuf::from(env!("CARGO_BIN_EXE_fencelock-check")),
        },
    };
    let report = soak(&options, "soak test".into()).expect("the soak runs");
    report.write(&out).expect("the results are written");
    println!("{}", report.markdown());

    for strategy in ["fencelock-mutex-fenced", "fencelock-rwlock-fenced"] {
        let sections: usize = report
            .rows
            .iter()
            .filter(|r| r.strategy == strategy)
            .map(|r| r.measurement.sections)
            .sum();
        assert!(sections > 0, "{strategy} ran no section");
    }
    for row in &report.rows {
        let m = &row.measurement;
        assert!(row.rounds > 0);
        assert!(m.acquired >= m.sections, "{row:?}");
        assert_eq!(row.violations, 0, "{row:?}");
        assert!(row.worker_failures.is_empty(), "{row:?}");
    }
    assert!(report.passes());

    // The JSON file carries the same totals as the report.
    let json = std::fs::read_to_string(out.with_extension("json")).expect("json written");
    let parsed: serde_json::Value = serde_json::from_str(&json).expect("valid json");
    let rows = parsed["rows"].as_array().expect("rows");
    let total: u64 = rows
        .iter()
        .map(|r| r["measurement"]["sections"].as_u64().expect("sections"))
        .sum();
    assert_eq!(total as usize, report.sections());
    assert_eq!(parsed["seed"].as_u64(), Some(20_261_124));
    let markdown = std::fs::read_to_string(out.with_extension("md")).expect("markdown written");
    assert!(markdown.contains(&format!("{} sections (target 400)", report.sections())));
    let _ = std::fs::remove_file(out.with_extension("json"));
    let _ = std::fs::remove_file(out.with_extension("md"));
}
