//! Against a real etcd (Debian's etcd-server, installed by scripts/deps), on loopback ports
//! of its own with its data on tmpfs, killed by pid at the end: over TLS with a client
//! certificate, as a cluster's, or plain HTTP where a test says so.

use cosched_etcd::testing::{free_port, Etcd};
use cosched_etcd::{Client, EtcdError, WatchEvent, Write, MAX_TXN_OPS};
use std::time::Duration;

#[test]
fn keys_prefixes_and_compare_and_create() {
    let etcd = Etcd::start_plain("kv");
    let c = etcd.client();
    assert_eq!(c.get("/t/a").unwrap(), None);
    let first = c.put("/t/b", b"2", None).unwrap();
    let second = c.put("/t/a", b"1\0binary\xff", None).unwrap();
    assert!(second > first);
    c.put("/u/x", b"elsewhere", None).unwrap();
    let a = c.get("/t/a").unwrap().unwrap();
    assert_eq!(a.value, b"1\0binary\xff");
    assert_eq!(a.mod_revision, second);
    let (under, revision) = c.get_prefix("/t/").unwrap();
    let keys: Vec<&str> = under.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["/t/a", "/t/b"]);
    assert!(revision > second);
    let (keys_only, _) = c.get_prefix_keys("/t/").unwrap();
    assert_eq!(keys_only.len(), 2);
    assert!(keys_only
        .iter()
        .all(|kv| kv.value.is_empty() && kv.mod_revision > 0));
    assert_eq!(keys_only[0].mod_revision, second);
    assert!(c.delete("/t/a").unwrap());
    assert!(!c.delete("/t/a").unwrap());
    assert!(c.create("/t/leader", b"me", None).unwrap());
    assert!(!c.create("/t/leader", b"you", None).unwrap());
    assert_eq!(c.get("/t/leader").unwrap().unwrap().value, b"me");
}

#[test]
fn a_key_on_a_lease_goes_with_it() {
    let etcd = Etcd::start("lease");
    let c = etcd.client();
    let lease = c.grant(30).unwrap();
    assert!(lease.id != 0 && lease.ttl > 0, "{lease:?}");
    c.put("/nodes/a", b"alive", Some(lease.id)).unwrap();
    assert_eq!(c.get("/nodes/a").unwrap().unwrap().lease, lease.id);
    assert!(c.keep_alive(lease.id).unwrap().ttl > 0);
    c.revoke(lease.id).unwrap();
    assert_eq!(c.get("/nodes/a").unwrap(), None);
    assert_eq!(c.keep_alive(lease.id).unwrap().ttl, 0);
    assert!(matches!(
        c.put("/nodes/a", b"x", Some(lease.id)),
        Err(EtcdError::Refused { .. })
    ));
}

#[test]
fn a_broken_watch_resumes_without_losing_or_repeating_events() {
    let etcd = Etcd::start("watch");
    let c = etcd.client();
    c.put("/w/old", b"before", None).unwrap();
    let (_, revision) = c.get_prefix("/w/").unwrap();
    let mut watch = c.watch("/w/", revision + 1).unwrap();
    let stopper = watch.stopper().unwrap();
    for i in 0..6 {
        c.put(&format!("/w/{i}"), i.to_string().as_bytes(), None)
            .unwrap();
    }
    c.delete("/w/2").unwrap();
    c.put("/elsewhere", b"not watched", None).unwrap();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        seen.extend(watch.next_batch().unwrap());
    }
    // Cut while events are still coming, as a lost connection would.
    stopper.stop();
    while let Ok(batch) = watch.next_batch() {
        seen.extend(batch);
    }
    // Changes made while no watch is open come with the resumed one.
    c.put("/w/6", b"6", None).unwrap();
    let mut resumed = c.watch("/w/", watch.resume_from()).unwrap();
    while seen.len() < 8 {
        seen.extend(resumed.next_batch().unwrap());
    }
    let described: Vec<String> = seen
        .iter()
        .map(|event| match event {
            WatchEvent::Put(kv) => format!("put {}", kv.key),
            WatchEvent::Delete { key, .. } => format!("delete {key}"),
        })
        .collect();
    assert_eq!(
        described,
        [
            "put /w/0",
            "put /w/1",
            "put /w/2",
            "put /w/3",
            "put /w/4",
            "put /w/5",
            "delete /w/2",
            "put /w/6"
        ]
    );
    assert!(seen.windows(2).all(|w| w[0].revision() < w[1].revision()));
}

#[test]
fn a_dead_member_is_skipped_and_none_alive_is_a_clear_error() {
    let etcd = Etcd::start("members");
    let dead = format!("https://127.0.0.1:{}", free_port());
    let two = [dead.clone(), etcd.url.clone()];
    let c = Client::new(&two, Duration::from_secs(2), etcd.tls()).unwrap();
    c.put("/m", b"1", None).unwrap();
    assert_eq!(c.get("/m").unwrap().unwrap().value, b"1");
    let none = Client::new(
        std::slice::from_ref(&dead),
        Duration::from_secs(2),
        etcd.tls(),
    )
    .unwrap();
    let error = none.get("/m").unwrap_err().to_string();
    assert!(
        error.contains("no etcd member answers") && error.contains(&dead),
        "{error}"
    );
}

#[test]
fn with_its_leader_killed_a_three_member_etcd_goes_on_and_so_does_the_client() {
    let mut etcd = Etcd::start_members("three", 3);
    let c = etcd.client();
    let before = c.put("/l/before", b"1", None).unwrap();
    let mut watch = c.watch("/l/", before).unwrap();
    let killed = etcd.kill_leader();
    // The others elect a leader (the note measured a 1.3-1.6 s write outage); until then
    // writes fail with a clear error, never hang past the client's timeout.
    let cut = std::time::Instant::now();
    let after = loop {
        match c.put("/l/after", b"2", None) {
            Ok(revision) => break revision,
            Err(error) => {
                assert!(
                    cut.elapsed() < Duration::from_secs(20),
                    "no write for 20 s after killing {killed}: {error}"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    eprintln!(
        "killed the leader {killed}: writes back after {} ms",
        cut.elapsed().as_millis()
    );
    assert_eq!(c.get("/l/after").unwrap().unwrap().value, b"2");
    // A watch that began on the dead member, or on one that lived, sees both writes once.
    let mut seen = Vec::new();
    while seen.len() < 2 {
        match watch.next_batch() {
            Ok(batch) => seen.extend(batch.iter().map(WatchEvent::revision)),
            Err(_) => watch = c.watch("/l/", watch.resume_from()).unwrap(),
        }
    }
    assert_eq!(seen, [before, after]);
}

#[test]
fn with_auth_on_only_a_client_with_the_password_gets_in_and_its_token_is_renewed() {
    let mut etcd = Etcd::start("auth");
    let credentials = etcd.enable_auth();
    let root = etcd.client();
    root.put("/cosched/t/secret", b"root's", None).unwrap();
    // What a job that reaches etcd could do without the password: nothing.
    let url = std::slice::from_ref(&etcd.url);
    let anyone = Client::new(url, Duration::from_secs(2), etcd.tls()).unwrap();
    let refused = anyone.get("/cosched/t/secret").unwrap_err().to_string();
    // With a client certificate (this one has no common name, so no etcd user) and no token.
    assert!(
        refused.contains("403 etcdserver: permission denied"),
        "{refused}"
    );
    assert!(anyone.put("/cosched/t/secret", b"mine", None).is_err());
    let guessed = Client::new(url, Duration::from_secs(2), etcd.tls())
        .unwrap()
        .with_credentials(cosched_etcd::Credentials {
            user: "root".into(),
            password: "guess".into(),
        });
    let refused = guessed.get("/cosched/t/secret").unwrap_err().to_string();
    assert!(refused.contains("authentication failed"), "{refused}");
    assert!(!format!("{credentials:?}").contains(&credentials.password));
    // Tokens live a second here: one left unused past that is renewed, not fatal; a watch
    // opened with a stale token is too.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        root.get("/cosched/t/secret").unwrap().unwrap().value,
        b"root's"
    );
    std::thread::sleep(Duration::from_millis(2500));
    let mut watch = root.watch("/cosched/t/", 1).unwrap();
    let events = watch.next_batch().unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    // An open watch outlives its token.
    std::thread::sleep(Duration::from_millis(2500));
    root.put("/cosched/t/later", b"1", None).unwrap();
    let events = watch.next_batch().unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
}

#[test]
fn a_compaction_keeps_the_keys_and_ends_watches_from_before_it() {
    let etcd = Etcd::start("compact");
    let c = etcd.client();
    let first = c.put("/cosched/c/k", b"1", None).unwrap();
    let last = c.put("/cosched/c/k", b"2", None).unwrap();
    c.compact(last).unwrap();
    assert_eq!(c.get("/cosched/c/k").unwrap().unwrap().value, b"2");
    let mut old = c.watch("/cosched/c/", first).unwrap();
    assert!(
        matches!(old.next_batch(), Err(EtcdError::Compacted { .. })),
        "a watch from a forgotten revision"
    );
}

#[test]
fn a_batch_of_writes_is_one_revision_and_etcd_refuses_one_too_big() {
    let etcd = Etcd::start_plain("batch");
    let c = etcd.client();
    c.put("/b/gone", b"x", None).unwrap();
    let keys: Vec<String> = (0..MAX_TXN_OPS - 1).map(|i| format!("/b/{i:03}")).collect();
    let mut writes: Vec<Write> = keys.iter().map(|k| Write::Put(k, b"v")).collect();
    writes.push(Write::Delete("/b/gone"));
    c.write_all(&writes).unwrap();
    let (under, _) = c.get_prefix("/b/").unwrap();
    assert_eq!(
        under.len(),
        MAX_TXN_OPS - 1,
        "every put made, the delete too"
    );
    let revisions: std::collections::BTreeSet<i64> =
        under.iter().map(|kv| kv.mod_revision).collect();
    assert_eq!(revisions.len(), 1, "one revision for the whole batch");
    let too_many: Vec<String> = (0..=MAX_TXN_OPS).map(|i| format!("/c/{i}")).collect();
    let writes: Vec<Write> = too_many.iter().map(|k| Write::Put(k, b"v")).collect();
    assert!(matches!(
        c.write_all(&writes),
        Err(EtcdError::Refused { .. })
    ));
    let twice = [Write::Put("/d", b"1"), Write::Put("/d", b"2")];
    assert!(matches!(
        c.write_all(&twice),
        Err(EtcdError::Refused { .. })
    ));
}

/// Sockets in TIME_WAIT towards `port` (a connection closed by this side lingers there).
fn time_wait_towards(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let remote_port = fields[2].rsplit(':').next().unwrap();
            let local_port = fields[1].rsplit(':').next().unwrap();
            // 06: TIME_WAIT, on whichever side closed first.
            fields[3] == "06"
                && (u16::from_str_radix(remote_port, 16) == Ok(port)
                    || u16::from_str_radix(local_port, 16) == Ok(port))
        })
        .count()
}

#[test]
fn requests_share_one_kept_connection() {
    let mut etcd = Etcd::start("kept");
    etcd.enable_auth();
    let c = etcd.client();
    let port: u16 = etcd.url.rsplit(':').next().unwrap().parse().unwrap();
    c.put("/k", b"v", None).unwrap();
    let lease = c.grant(30).unwrap();
    let before = time_wait_towards(port);
    for _ in 0..150 {
        assert_eq!(c.get("/k").unwrap().unwrap().value, b"v");
        // Through the gateway a stream: a chunked answer.
        assert!(c.keep_alive(lease.id).unwrap().ttl > 0);
    }
    // A connection per request left 300 sockets in TIME_WAIT here.
    let after = time_wait_towards(port);
    assert!(after < before + 10, "{before} then {after} in TIME_WAIT");
}

#[test]
fn a_deletes_only_watch_hears_no_writes() {
    let etcd = Etcd::start("noput");
    let c = etcd.client();
    let first = c.put("/l/leader", b"1", None).unwrap();
    let mut watch = c.watch_deletes("/l/leader", first + 1).unwrap();
    for value in [b"2", b"3"] {
        c.put("/l/leader", value, None).unwrap();
    }
    c.put("/l/leader-not", b"x", None).unwrap();
    c.delete("/l/leader-not").unwrap();
    c.delete("/l/leader").unwrap();
    let events = watch.next_batch().unwrap();
    assert!(
        matches!(&events[..], [WatchEvent::Delete { key, .. }] if key == "/l/leader"),
        "{events:?}"
    );
}

/// etcd's count of watchers it serves, from its `/metrics`.
fn watchers(metrics_url: &str) -> Option<u64> {
    let address = metrics_url
        .strip_prefix("http://")?
        .strip_suffix("/metrics")?;
    let mut stream = std::net::TcpStream::connect(address).ok()?;
    use std::io::{Read, Write};
    write!(
        stream,
        "GET /metrics HTTP/1.0\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("etcd_debugging_mvcc_watcher_total "))
        .and_then(|count| count.trim().parse::<f64>().ok())
        .map(|count| count as u64)
}

#[test]
fn a_dropped_watch_is_no_longer_served() {
    let etcd = Etcd::start("dropped-watch");
    let client = etcd.client();
    let served = || watchers(&etcd.metrics_url).expect("etcd's watcher count");
    let before = served();
    let watch = client.watch("/dropped/", 1).unwrap();
    let counted = |wanted: u64| {
        (0..200).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            served() == wanted
        })
    };
    assert!(counted(before + 1), "the watch was never served");
    // Dropped while its stopper lives on (left where another thread could cut the watch,
    // by a follower that quit first): the stopper's descriptor kept the connection open, and
    // etcd served the watch on.
    let stopper = watch.stopper().unwrap();
    drop(watch);
    assert!(counted(before), "etcd still serves the dropped watch");
    drop(stopper);
}
