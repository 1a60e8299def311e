//! `cli_args`: the `fencelock` command line, down to the checks fencelock makes on the deployment's
//! URLs before it connects. Input: the arguments after the program name, separated by NUL
//! bytes (any bytes: a command line need not be UTF-8).

use fencelock::fuzzing::{open_cluster, open_redlock, open_sentinel, open_single};
use fencelock::SentinelOptions;
use fencelock_cli::{Action, Config, LockPlan, Target, Wait, Want};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use crate::connection_url::refused_as_bad_input;
use crate::duration::LONGEST;

/// Reads the command line; what it accepts is well formed, what it refuses renders as a
/// message, and the deployment it names is checked as `connect` would.
pub fn cli_args(input: &[u8]) {
    let mut argv = vec![OsStr::new("fencelock")];
    if !input.is_empty() {
        argv.extend(input.split(|&b| b == 0).map(OsStr::from_bytes));
    }
    let config = match Config::from_args(argv) {
        Ok(config) => config,
        Err(refused) => {
            let _message = refused.render().to_string();
            return;
        }
    };
    assert!(config.options.validate().is_ok());
    let _shown = config.target.to_string();
    match &config.action {
        Action::Run(plan) => {
            assert!(!plan.command.is_empty());
            assert!(plan.kill_grace <= LONGEST);
            check_lock(&plan.lock);
        }
        Action::Hold(plan) => check_lock(plan),
        _ => {}
    }
    if let Action::Elect(plan) = &config.action {
        assert!(!plan.command.is_empty());
        assert!(plan.lease <= LONGEST && plan.kill_grace <= LONGEST);
    }
    check_target(&config);
}

/// A lock plan read is within the documented bounds.
fn check_lock(plan: &LockPlan) {
    assert!(plan.lease <= LONGEST);
    assert!(plan.hold_at_least.is_none_or(|d| d <= LONGEST));
    if let Wait::AtMost(limit) = plan.wait {
        assert!(limit <= LONGEST);
    }
    if let Want::Semaphore { total, permits } = plan.want {
        assert!(total >= 1 && permits >= 1, "{:?}", plan.want);
    }
}

/// The checks `fencelock` makes on its deployment before it opens a connection: whatever
/// the URLs, an error saying what is wrong, never a panic.
fn check_target(config: &Config) {
    let options = &config.options;
    let checked = match &config.target {
        Target::Single(url) => open_single(url, options),
        Target::RedLock(masters) => open_redlock(&urls(masters), options),
        Target::Cluster(nodes) => open_cluster(&urls(nodes), options),
        Target::Sentinel { sentinels, service } => open_sentinel(
            &urls(sentinels),
            service,
            &SentinelOptions::default(),
            options,
        ),
        _ => return,
    };
    refused_as_bad_input(checked);
}

fn urls(list: &[String]) -> Vec<&str> {
    list.iter().map(String::as_str).collect()
}
