//! The leader key against a real three-member etcd (Debian's etcd-server, scripts/deps).

use cosched_cluster::{become_leader, Keys};
use cosched_etcd::testing::Etcd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn a_leader_leads_on_through_an_etcd_election() {
    let mut etcd = Etcd::start_members("leader", 3);
    let client = Arc::new(etcd.client());
    let keys = Keys::new(&format!("leader-{}", std::process::id())).unwrap();
    let lost = Arc::new(AtomicBool::new(false));
    let told = Arc::clone(&lost);
    // A 1 s lease, shorter than the election (writes are back ~2 s after the kill): renewals
    // wait for the new leader, which extends every lease when it takes over.
    let leadership = become_leader(Arc::clone(&client), &keys, 1, move |why| {
        eprintln!("{why}");
        told.store(true, Ordering::Relaxed);
    })
    .unwrap();
    etcd.kill_leader();
    std::thread::sleep(Duration::from_secs(6));
    assert!(!lost.load(Ordering::Relaxed), "gave up leading");
    // Its writes still pass the leader's condition (the key, under its lease).
    let guard = leadership.guard();
    assert!(
        client.txn(&[guard.compare()], &[]).unwrap(),
        "no longer holds the key"
    );
}
