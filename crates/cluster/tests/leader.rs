//! The leader key against a real three-member etcd (Debian's etcd-server, scripts/deps).

use cosched_cluster::{become_leader, Keys};
use cosched_etcd::testing::Etcd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn a_leader_leads_on_through_an_etcd_election() {
    let mut etcd = Etcd::start_members("leader", 3);
    // Requests time out after 0.1 s, so renewals fail all through the election.
    let client = Arc::new(etcd.client().with_timeout(Duration::from_millis(100)));
    let keys = Keys::new(&format!("leader-{}", std::process::id())).unwrap();
    let lost = Arc::new(AtomicBool::new(false));
    let told = Arc::clone(&lost);
    // A 1 s lease, shorter than the election (writes are back ~2 s after the kill): renewals
    // may fail for longer than the lease, yet the new leader extends every lease when it takes
    // over, so the key is still this controller's. (Once taken for "another controller leads
    // now": the key existed, under its own lease.)
    let leadership = become_leader(Arc::clone(&client), &keys, 1, None, move |why| {
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
