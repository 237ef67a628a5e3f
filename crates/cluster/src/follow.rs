//! Following a prefix: read what is there, then watch from the next revision; after a break,
//! resume from the revision after the last event seen (after a compaction, read again). A
//! key's value is passed on once per write, however often a reconnection replays it.

use crate::backoff::Backoff;
use cosched_etcd::{Client, EtcdError, KeyValue, WatchEvent, WatchStopper};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

pub(crate) enum Change {
    Put(KeyValue),
    Delete(String),
}

/// Calls `on` for each change under `prefix` until it returns false, or `quitting` says so
/// when the watch breaks. The watch's stopper is left in `stopper` so that another thread can
/// cut a watch a silent network cut left hanging (or end the following: make `quitting` true,
/// then cut).
pub(crate) fn follow(
    client: &Client,
    prefix: &str,
    stopper: Option<&Mutex<Option<WatchStopper>>>,
    quitting: &dyn Fn() -> bool,
    mut on: impl FnMut(Change) -> bool,
) {
    // The last write passed on, per key: a replayed write is not passed on again.
    let mut seen: BTreeMap<String, i64> = BTreeMap::new();
    let mut from = None;
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
    loop {
        if quitting() {
            return;
        }
        let start = match from {
            Some(revision) => revision,
            None => match client.get_prefix(prefix) {
                Ok((mut present, revision)) => {
                    // Read again after a compaction: the keys deleted meanwhile, whose
                    // deletions are gone from the history, are passed on as deleted (a
                    // follower remembering what it was handed would keep them forever).
                    let there: BTreeSet<&str> = present.iter().map(|kv| kv.key.as_str()).collect();
                    let gone: Vec<String> = seen
                        .keys()
                        .filter(|key| !there.contains(key.as_str()))
                        .cloned()
                        .collect();
                    for key in gone {
                        if !pass(&mut seen, &mut on, Change::Delete(key)) {
                            return;
                        }
                    }
                    // In the order written: a key rewritten in place comes at its last write.
                    present.sort_by_key(|kv| kv.mod_revision);
                    for kv in present {
                        if !pass(&mut seen, &mut on, Change::Put(kv)) {
                            return;
                        }
                    }
                    revision + 1
                }
                Err(_) => {
                    backoff.pause_after_failure();
                    continue;
                }
            },
        };
        let mut watch = match client.watch(prefix, start) {
            Ok(watch) => watch,
            Err(_) => {
                from = Some(start);
                backoff.pause_after_failure();
                continue;
            }
        };
        backoff.succeeded();
        if let Some(slot) = stopper {
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = watch.stopper().ok();
            // Asked to quit before the stopper was in place: nobody could cut this watch.
            if quitting() {
                return;
            }
        }
        loop {
            match watch.next_batch() {
                Ok(batch) => {
                    for event in batch {
                        let change = match event {
                            WatchEvent::Put(kv) => Change::Put(kv),
                            WatchEvent::Delete { key, .. } => Change::Delete(key),
                        };
                        if !pass(&mut seen, &mut on, change) {
                            return;
                        }
                    }
                }
                Err(EtcdError::Compacted { .. }) => {
                    from = None;
                    break;
                }
                Err(_) => {
                    from = Some(watch.resume_from());
                    break;
                }
            }
        }
    }
}

/// Passes `change` on to `on` unless it replays a write already passed on.
fn pass(
    seen: &mut BTreeMap<String, i64>,
    on: &mut impl FnMut(Change) -> bool,
    change: Change,
) -> bool {
    match &change {
        Change::Put(kv) => {
            if seen.get(&kv.key).is_some_and(|&rev| rev >= kv.mod_revision) {
                return true;
            }
            seen.insert(kv.key.clone(), kv.mod_revision);
        }
        Change::Delete(key) => {
            seen.remove(key);
        }
    }
    on(change)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cosched_etcd::testing::Etcd;
    use std::sync::mpsc::channel;
    use std::sync::Arc;

    /// A key deleted while the watch was down, its deletion compacted away before the watch
    /// came back, is passed on as deleted when the prefix is read again (real etcd).
    #[test]
    fn a_deletion_compacted_away_during_a_break_is_passed_on_after_the_read_again() {
        let etcd = Etcd::start("follow-compacted");
        let client = Arc::new(etcd.client());
        let stopper = Arc::new(Mutex::new(None));
        let (changes, seen) = channel();
        let (go, held) = channel::<()>();
        let follower = {
            let (client, stopper) = (Arc::clone(&client), Arc::clone(&stopper));
            std::thread::spawn(move || {
                follow(&client, "/f/", Some(&stopper), &|| false, |change| {
                    let (text, hold) = match change {
                        Change::Put(kv) => (format!("put {}", kv.key), kv.key == "/f/a"),
                        Change::Delete(key) => (format!("delete {key}"), false),
                    };
                    let more = !text.ends_with("/f/c");
                    let _ = changes.send(text);
                    // Held on the first write while the test breaks the watch behind it.
                    if hold {
                        let _ = held.recv();
                    }
                    more
                });
            })
        };
        let watching = std::time::Instant::now();
        while stopper.lock().unwrap().is_none() {
            assert!(watching.elapsed() < Duration::from_secs(10), "no watch");
            std::thread::sleep(Duration::from_millis(10));
        }
        client.put("/f/a", b"1", None).unwrap();
        assert_eq!(
            seen.recv_timeout(Duration::from_secs(10)).unwrap(),
            "put /f/a"
        );
        stopper.lock().unwrap().take().unwrap().stop();
        client.delete("/f/a").unwrap();
        let head = client.put("/f/c", b"1", None).unwrap();
        client.compact(head).unwrap();
        go.send(()).unwrap();
        let after: Vec<String> = (0..2)
            .map(|_| seen.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        assert_eq!(after, ["delete /f/a", "put /f/c"]);
        follower.join().unwrap();
    }
}
