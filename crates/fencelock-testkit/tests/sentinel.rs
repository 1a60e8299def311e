//! Exercises `SentinelGroup` against real redis-server processes in sentinel mode.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use fencelock_testkit::{SentinelGroup, ServerOptions};

#[test]
fn the_group_discovers_itself_and_fails_over_on_request() {
    let group = SentinelGroup::start();
    let first = group.master_port();
    assert_eq!(first, group.node(0).port());
    assert_eq!(group.current_replica().port(), group.node(1).port());
    assert_eq!(group.sentinel_urls().len(), 3);

    let second = group.failover();
    assert_eq!(second, group.node(1).port());
    assert_eq!(
        group.current_master().cli(&["ROLE"]).lines().next(),
        Some("master")
    );
    // The old master is demoted and follows the new one.
    group.await_replica_of_current_master();
    assert_eq!(group.node(0).cli(&["ROLE"]).lines().next(), Some("slave"));
}

#[test]
fn the_sentinels_elect_the_replica_when_the_master_is_killed() {
    let mut group = SentinelGroup::start_with(ServerOptions::default().password("s3cret"));
    let first = group.master_port();
    group.current_master_mut().kill9();
    let second = group.await_master_other_than(first);
    assert_eq!(second, group.node(1).port());
    assert_eq!(group.current_master().cli(&["SET", "k", "v"]), "OK");
}
