//! Following a prefix: read what is there, then watch from the next revision; after a break,
//! resume from the revision after the last event seen (after a compaction, read again). A
//! key's value is passed on once per write, however often a reconnection replays it.

use crate::backoff::Backoff;
use cosched_etcd::{Client, EtcdError, KeyValue, WatchEvent, WatchStopper};
use std::collections::BTreeMap;
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
    let mut pass = |change: Change| -> bool {
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
    };
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
                    // In the order written: a key rewritten in place comes at its last write.
                    present.sort_by_key(|kv| kv.mod_revision);
                    for kv in present {
                        if !pass(Change::Put(kv)) {
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
                        if !pass(change) {
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
