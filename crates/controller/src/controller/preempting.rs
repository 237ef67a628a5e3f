//! Each user's share of interactive preemption. An interactive job runs ahead of the batch
//! jobs on its processors for its first stretch (the policy's `interactive_preempt`), so that
//! a short command answers at once. Without a share, one user submitting interactive jobs one
//! after another (each cancelled before its stretch ends), or several at once, kept every
//! other job on those processors from running at all. A user's (root aside) interactive job
//! is let preempt only while that user's preempting time within the last [`WINDOW_STRETCHES`]
//! stretches, each stretch granted and not yet ended counted whole, is under one stretch,
//! and then only for what is left of it (its allowance): one preempting job at a time, and at
//! most one stretch in any window. Past that, the job starts settled: it time-shares in a
//! slice of its own at once.

use cosched_core::{JobId, Micros};
use std::collections::BTreeMap;

/// The window a user's preempting time is counted over, in stretches.
pub(super) const WINDOW_STRETCHES: i64 = 6;

/// One job's preemption: granted at its submission (for at most `allowance`), begun when
/// placed ahead of the others, ended when it leaves that place (settled, suspended, ended).
#[derive(Clone, Copy, Debug)]
struct Stretch {
    job: JobId,
    allowance: Micros,
    began: Option<Micros>,
    ended: Option<Micros>,
}

/// Every user's recent stretches.
#[derive(Debug, Default)]
pub(super) struct Preempted {
    by_user: BTreeMap<u32, Vec<Stretch>>,
    /// The owner of each stretch not ended yet.
    open: BTreeMap<JobId, u32>,
}

impl Preempted {
    /// `uid`'s preempting time in the window that ends `now`: what ended stretches spent in
    /// it, and its whole allowance for each granted or ongoing one.
    /// Stretches that ended before the window are forgotten.
    pub(super) fn spent(&mut self, uid: u32, stretch: Micros, now: Micros) -> Micros {
        let Some(stretches) = self.by_user.get_mut(&uid) else {
            return 0;
        };
        let from = now - WINDOW_STRETCHES * stretch;
        stretches.retain(|s| s.ended.is_none_or(|ended| ended > from));
        let spent = stretches
            .iter()
            .map(|s| match (s.began, s.ended) {
                (Some(began), Some(ended)) => ended - began.max(from),
                _ => s.allowance,
            })
            .sum();
        if stretches.is_empty() {
            self.by_user.remove(&uid);
        }
        spent
    }

    /// `uid`'s interactive job `job` may preempt for `allowance`: it counts whole until it
    /// ends.
    pub(super) fn grant(&mut self, uid: u32, job: JobId, allowance: Micros) {
        if self.open.insert(job, uid).is_none() {
            (self.by_user.entry(uid).or_default()).push(Stretch {
                job,
                allowance,
                began: None,
                ended: None,
            });
        }
    }

    /// The jobs preempting at `now` whose allowance is spent: they are to settle.
    pub(super) fn spent_allowances(&self, now: Micros) -> Vec<JobId> {
        let stretches = self.by_user.values().flatten();
        let over = stretches.filter(|s| {
            s.ended.is_none() && s.began.is_some_and(|began| now - began >= s.allowance)
        });
        over.map(|s| s.job).collect()
    }

    /// Whether `job` holds a grant not ended yet.
    pub(super) fn holds(&self, job: JobId) -> bool {
        self.open.contains_key(&job)
    }

    /// A granted job was placed ahead of the others at `now` (placed again: no change).
    pub(super) fn began(&mut self, job: JobId, now: Micros) {
        if let Some(stretch) = self.open_stretch(job) {
            stretch.began.get_or_insert(now);
        }
    }

    /// A granted job was placed anywhere else, queued or removed at `now`: its stretch ended
    /// there, or, never begun, is dropped.
    pub(super) fn left(&mut self, job: JobId, now: Micros) {
        let Some(stretch) = self.open_stretch(job) else {
            return;
        };
        let began = stretch.began;
        stretch.ended = Some(now);
        let uid = self
            .open
            .remove(&job)
            .expect("an open stretch has its owner");
        if began.is_none() {
            if let Some(stretches) = self.by_user.get_mut(&uid) {
                stretches.retain(|s| s.job != job);
            }
        }
    }

    fn open_stretch(&mut self, job: JobId) -> Option<&mut Stretch> {
        let uid = self.open.get(&job)?;
        (self.by_user.get_mut(uid)?.iter_mut()).find(|s| s.job == job && s.ended.is_none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Micros = 1_000_000;
    const STRETCH: Micros = 10 * S;

    #[test]
    fn a_granted_or_ongoing_stretch_counts_whole_and_an_ended_one_what_it_spent() {
        let mut p = Preempted::default();
        p.grant(7, 1, STRETCH);
        assert_eq!(p.spent(7, STRETCH, 0), STRETCH, "granted, not placed yet");
        p.began(1, 0);
        assert_eq!(p.spent(7, STRETCH, 3 * S), STRETCH, "ongoing");
        p.left(1, 4 * S);
        assert_eq!(p.spent(7, STRETCH, 5 * S), 4 * S);
        assert_eq!(
            p.spent(8, STRETCH, 5 * S),
            0,
            "another user's is not counted"
        );
        p.grant(7, 2, STRETCH - 4 * S);
        assert_eq!(
            p.spent(7, STRETCH, 5 * S),
            STRETCH,
            "what was left, granted"
        );
        p.began(2, 5 * S);
        assert_eq!(p.spent_allowances(10 * S), Vec::<JobId>::new());
        assert_eq!(p.spent_allowances(11 * S), [2], "its 6 s are spent");
    }

    #[test]
    fn the_window_forgets_what_ended_before_it_and_cuts_what_straddles_it() {
        let mut p = Preempted::default();
        for (job, from) in [(1, 0), (2, 9 * S)] {
            p.grant(7, job, STRETCH);
            p.began(job, from);
            p.left(job, from + 9 * S);
        }
        // [0, 9 s] and [9 s, 18 s]; the window is 60 s.
        assert_eq!(p.spent(7, STRETCH, 60 * S), 18 * S);
        assert_eq!(p.spent(7, STRETCH, 65 * S), 13 * S);
        assert_eq!(p.spent(7, STRETCH, 69 * S), 9 * S);
        assert_eq!(p.spent(7, STRETCH, 79 * S), 0);
        assert!(p.by_user.is_empty(), "nothing kept past the window");
    }

    #[test]
    fn a_grant_never_begun_costs_nothing_once_it_ends() {
        let mut p = Preempted::default();
        p.grant(7, 1, STRETCH);
        p.left(1, 5 * S);
        assert_eq!(p.spent(7, STRETCH, 5 * S), 0);
        p.began(1, 6 * S);
        assert_eq!(
            p.spent(7, STRETCH, 6 * S),
            0,
            "a placement after its end is no stretch"
        );
    }
}
