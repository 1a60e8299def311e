//! The cluster kit against real servers: it forms, fails over and migrates slots as the
//! cluster itself reports.

use fencelock_testkit::RedisCluster;

#[test]
fn the_cluster_forms_fails_over_and_migrates_a_slot() {
    let cluster = RedisCluster::start();
    let key = "{kit}:probe";
    let slot = RedisCluster::slot_of(key);
    let keyslot = cluster.nodes()[0].cli(&["CLUSTER", "KEYSLOT", key]);
    assert_eq!(
        keyslot,
        slot.to_string(),
        "the kit hashes keys as Redis does"
    );

    let master = cluster.master_of(slot);
    assert_eq!(master.cli(&["SET", key, "v", "PX", "60000"]), "OK");
    let old_port = master.port();
    let new_port = cluster.failover(slot);
    assert_ne!(new_port, old_port);
    let promoted = cluster.master_of(slot);
    assert_eq!(promoted.port(), new_port);
    assert_eq!(
        promoted.cli(&["GET", key]),
        "v",
        "a manual failover keeps the key"
    );

    let target = cluster.migrate_slot(slot);
    assert_ne!(target, new_port);
    let owner = cluster.master_of(slot);
    assert_eq!(owner.port(), target);
    assert_eq!(owner.cli(&["GET", key]), "v", "the key moved with its slot");
    let ttl: i64 = owner.cli(&["PTTL", key]).parse().expect("PTTL");
    assert!(ttl > 0, "MIGRATE keeps the expiry, got {ttl}");
}
