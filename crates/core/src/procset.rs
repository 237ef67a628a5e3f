//! A fixed-size set of processors as a bitset: the occupancy of one slice.
//!
//! Every placement question ("is this span free?", "where is the first free run of n?") is
//! answered a word (64 processors) at a time, which is what keeps placement on 65,536
//! processors × 16 slices in the microseconds.

use crate::partition::Span;
use std::cell::Cell;
use std::collections::BTreeMap;

#[derive(Clone)]
pub struct ProcSet {
    words: Vec<u64>,
    len: u32,
    /// How many processors are in the set, kept current by every change: "can `n` fit?" is
    /// a comparison, not a scan of every word (1,458 of them on 93,312 processors).
    members: u32,
    /// The free runs of each block of [`BLOCK_WORDS`] words, kept current by every change:
    /// "where is the first free run of n?" skips every block whose runs are all shorter.
    /// Empty in a set made with [`ProcSet::members_only`].
    blocks: Vec<BlockRuns>,
    /// Whether `blocks` is kept: a set never searched for runs (a slice's lent processors,
    /// marked and unmarked for every alternate at every refill) skips the re-measuring that
    /// was most of a wide gang replay's time.
    measured: bool,
    /// No free run is longer than this (`u32::MAX`: unknown), learnt by a search that
    /// failed: backfilling asks the same full slice for smaller and smaller runs, and each
    /// ask after the first is then answered without a walk. Adding members keeps it true;
    /// removing any forgets it.
    longest_free: Cell<u32>,
}

/// Equal members, whatever each set has learnt about its runs.
impl PartialEq for ProcSet {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.words == other.words
    }
}

impl Eq for ProcSet {}

/// Words per block of [`BlockRuns`]: small enough that refreshing the two blocks at the ends
/// of a changed span is cheap, large enough that a query walks few blocks (183 on Curie).
const BLOCK_WORDS: usize = 8;
const BLOCK_BITS: u32 = BLOCK_WORDS as u32 * 64;

/// Free runs in one block: the run at its start, the run at its end and the longest run
/// wholly inside it (all three are the block's size when it is free). Processors past the
/// set's capacity count as busy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct BlockRuns {
    head: u16,
    tail: u16,
    longest: u16,
}

impl BlockRuns {
    const FREE: BlockRuns = BlockRuns {
        head: BLOCK_BITS as u16,
        tail: BLOCK_BITS as u16,
        longest: BLOCK_BITS as u16,
    };
    const FULL: BlockRuns = BlockRuns {
        head: 0,
        tail: 0,
        longest: 0,
    };

    /// Measures the runs of clear bits in `words` (bits set = busy).
    fn measure(words: impl Iterator<Item = u64>) -> BlockRuns {
        let (mut head, mut run, mut longest) = (None, 0u32, 0u32);
        for word in words {
            let mut pos = 0;
            while pos < 64 {
                let rest = word >> pos;
                if rest == 0 {
                    run += 64 - pos;
                    break;
                }
                let clear = rest.trailing_zeros();
                run += clear;
                head.get_or_insert(run);
                longest = longest.max(run);
                run = 0;
                pos += clear;
                pos += (!(word >> pos)).trailing_zeros().min(64 - pos);
            }
        }
        let longest = longest.max(run);
        BlockRuns {
            head: head.unwrap_or(run) as u16,
            tail: run as u16,
            longest: longest as u16,
        }
    }
}

impl std::fmt::Debug for ProcSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProcSet{{")?;
        let mut first = true;
        for span in self.runs(true) {
            if !first {
                write!(f, ",")?;
            }
            first = false;
            write!(f, "{span}")?;
        }
        write!(f, "}}")
    }
}

impl ProcSet {
    /// The same members over `len` processors (at least as many as now): a machine that
    /// gained a node. Rare, so rebuilt rather than patched.
    pub fn grow(&mut self, len: u32) {
        debug_assert!(len >= self.len);
        let mut grown = if self.measured {
            ProcSet::new(len)
        } else {
            ProcSet::members_only(len)
        };
        for run in self.runs(true) {
            grown.insert_span(run);
        }
        *self = grown;
    }

    /// An empty set over processors `0..len`.
    pub fn new(len: u32) -> Self {
        let words = (len as usize).div_ceil(64);
        let mut set = ProcSet {
            words: vec![0; words],
            len,
            members: 0,
            blocks: vec![BlockRuns::FREE; words.div_ceil(BLOCK_WORDS)],
            measured: true,
            longest_free: Cell::new(u32::MAX),
        };
        if let Some(last) = set.blocks.len().checked_sub(1) {
            set.measure_block(last);
        }
        set
    }

    /// An empty set over processors `0..len` that keeps its members and their count only:
    /// membership and counts answer as in any set; searching it for free runs is a bug.
    pub fn members_only(len: u32) -> Self {
        ProcSet {
            words: vec![0; (len as usize).div_ceil(64)],
            len,
            members: 0,
            blocks: Vec::new(),
            measured: false,
            longest_free: Cell::new(u32::MAX),
        }
    }

    /// Copies `other` (same capacity) into this set without allocating.
    pub fn copy_from(&mut self, other: &ProcSet) {
        debug_assert_eq!(self.len, other.len);
        debug_assert_eq!(self.measured, other.measured);
        self.words.copy_from_slice(&other.words);
        self.blocks.copy_from_slice(&other.blocks);
        self.members = other.members;
        self.longest_free.set(other.longest_free.get());
    }

    /// Re-measures one block's runs from its words.
    fn measure_block(&mut self, block: usize) {
        let first = block * BLOCK_WORDS;
        let words = &self.words[first..(first + BLOCK_WORDS).min(self.words.len())];
        let capacity = self.len;
        let beyond = |i: usize| {
            // Bits past the capacity, and whole missing words of a short last block, are busy.
            let start = ((first + i) * 64) as u32;
            match capacity.saturating_sub(start) {
                0 => u64::MAX,
                n if n >= 64 => 0,
                n => u64::MAX << n,
            }
        };
        let padded = (0..BLOCK_WORDS).map(|i| words.get(i).copied().unwrap_or(0) | beyond(i));
        self.blocks[block] = BlockRuns::measure(padded);
    }

    /// Brings the block runs up to date after every processor of `spans` (sorted, disjoint,
    /// not empty) was set (`now_member`) or cleared. Each block is measured once, however
    /// many runs it holds: a scattered partition has many in one block.
    fn remeasure(&mut self, spans: &[Span], now_member: bool) {
        if !self.measured {
            return;
        }
        let whole = if now_member {
            BlockRuns::FULL
        } else {
            BlockRuns::FREE
        };
        let mut measured = None;
        for &span in spans {
            let (first, last) = Self::word_range(span);
            let (first_block, last_block) = (first / BLOCK_WORDS, last / BLOCK_WORDS);
            if measured != Some(first_block) {
                self.measure_block(first_block);
            }
            if last_block > first_block {
                // Blocks strictly inside the span are wholly set or wholly clear; only the
                // last block may be short, and it is the span's last, which is measured.
                self.blocks[first_block + 1..last_block].fill(whole);
                self.measure_block(last_block);
            }
            measured = Some(last_block);
        }
    }

    /// The members among processors `64 * index ..` the next 64, as bits (none past the end).
    pub fn word(&self, index: usize) -> u64 {
        self.words.get(index).copied().unwrap_or(0)
    }

    /// Adds `bits` to each word `(index, bits)` of `words`. Only for a set that keeps its
    /// members only ([`ProcSet::members_only`]): no block is measured.
    pub fn insert_words(&mut self, words: &[(usize, u64)]) {
        debug_assert!(!self.measured, "insert_words on a measured set");
        for &(index, bits) in words {
            self.members += (bits & !self.words[index]).count_ones();
            self.words[index] |= bits;
        }
    }

    /// Takes `bits` out of each word `(index, bits)` of `words` (see [`ProcSet::insert_words`]).
    pub fn remove_words(&mut self, words: &[(usize, u64)]) {
        debug_assert!(!self.measured, "remove_words on a measured set");
        for &(index, bits) in words {
            self.members -= (bits & self.words[index]).count_ones();
            self.words[index] &= !bits;
        }
    }

    pub fn contains(&self, proc: u32) -> bool {
        proc < self.len && self.words[(proc / 64) as usize] >> (proc % 64) & 1 == 1
    }

    pub fn count(&self) -> u32 {
        self.members
    }

    /// Processors not in the set.
    pub fn free(&self) -> u32 {
        self.len - self.members
    }

    pub fn is_empty(&self) -> bool {
        self.members == 0
    }

    /// Calls `f(word_index, mask, bits in mask)` for the words a span covers, in order, until
    /// `f` returns false. The words inside the span get the constant full mask, so a long span
    /// (a wide job's partition) costs a tight loop, not a mask computed per word.
    fn for_span_words(span: Span, mut f: impl FnMut(usize, u64, u32) -> bool) -> bool {
        if span.len == 0 {
            return true;
        }
        let (start, last_proc) = (span.start, span.end() - 1);
        let (first, last) = ((start / 64) as usize, (last_proc / 64) as usize);
        let low = u64::MAX << (start % 64);
        let high = u64::MAX >> (63 - last_proc % 64);
        if first == last {
            return f(first, low & high, span.len);
        }
        f(first, low, 64 - start % 64)
            && (first + 1..last).all(|i| f(i, u64::MAX, 64))
            && f(last, high, last_proc % 64 + 1)
    }

    /// True when no processor of the span is in the set. The span must lie inside the set.
    pub fn is_span_clear(&self, span: Span) -> bool {
        debug_assert!(span.end() <= self.len, "{span} outside 0..{}", self.len);
        Self::for_span_words(span, |i, mask, _| self.words[i] & mask == 0)
    }

    /// The word indices of a non-empty span's first and last processors.
    fn word_range(span: Span) -> (usize, usize) {
        ((span.start / 64) as usize, ((span.end() - 1) / 64) as usize)
    }

    pub fn insert_span(&mut self, span: Span) {
        if span.len > 0 {
            self.insert_spans(&[span]);
        }
    }

    pub fn remove_span(&mut self, span: Span) {
        if span.len > 0 {
            self.remove_spans(&[span]);
        }
    }

    /// Adds the processors of `spans`: sorted, disjoint and not empty (a partition's).
    pub fn insert_spans(&mut self, spans: &[Span]) {
        for &span in spans {
            debug_assert!(span.end() <= self.len, "{span} outside 0..{}", self.len);
            Self::for_span_words(span, |i, mask, bits| {
                // Marking a free run is the common case: no bit count needed (no POPCNT on
                // the baseline x86-64 target, and this runs for every word of every partition).
                let added = match mask & self.words[i] {
                    0 => bits,
                    already => bits - already.count_ones(),
                };
                self.members += added;
                self.words[i] |= mask;
                true
            });
        }
        self.remeasure(spans, true);
    }

    /// Takes out the processors of `spans`: sorted, disjoint and not empty (a partition's).
    pub fn remove_spans(&mut self, spans: &[Span]) {
        if spans.is_empty() {
            return;
        }
        self.longest_free.set(u32::MAX);
        for &span in spans {
            debug_assert!(span.end() <= self.len, "{span} outside 0..{}", self.len);
            Self::for_span_words(span, |i, mask, bits| {
                let removed = match mask & self.words[i] {
                    present if present == mask => bits,
                    present => present.count_ones(),
                };
                self.members -= removed;
                self.words[i] &= !mask;
                true
            });
        }
        self.remeasure(spans, false);
    }

    /// Adds every processor of `other` (same capacity).
    pub fn union_with(&mut self, other: &ProcSet) {
        debug_assert_eq!(self.len, other.len);
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= b;
        }
        self.members = self.words.iter().map(|w| w.count_ones()).sum();
        (0..self.blocks.len()).for_each(|block| self.measure_block(block));
    }

    /// The first processor of the leftmost run of `n` (at least 1) processors outside the
    /// set: the start of the first maximal free run at least `n` long. Walks the blocks'
    /// runs, looking at words only in a block that holds such a run wholly.
    pub fn first_free_run(&self, n: u32) -> Option<u32> {
        debug_assert!(n > 0);
        debug_assert!(self.measured, "a members-only set has no runs to search");
        if self.free() < n || self.longest_free.get() < n {
            return None;
        }
        self.walk_blocks(0, 0, 0, n)
            .map_err(|longest| self.longest_free.set(longest))
            .ok()
    }

    /// The length of the longest free run if a failed search has measured it since the last
    /// processor was freed.
    pub fn longest_free_known(&self) -> Option<u32> {
        Some(self.longest_free.get()).filter(|&longest| longest != u32::MAX)
    }

    /// [`ProcSet::first_free_run`] among processors `from` and after (a run reaching `from`
    /// from below counts from `from`).
    pub fn first_free_run_from(&self, from: u32, n: u32) -> Option<u32> {
        debug_assert!(n > 0);
        debug_assert!(self.measured, "a members-only set has no runs to search");
        if self.free() < n {
            return None;
        }
        // Word by word in `from`'s block, then block by block.
        let block = from / BLOCK_BITS;
        let block_end = (block + 1) * BLOCK_BITS;
        for run in self.runs_from(from, false) {
            if run.start >= block_end {
                break;
            }
            if run.len >= n {
                return Some(run.start);
            }
            if run.end() > block_end {
                // Too short, and over by its (busy) end: go on from the block holding it.
                let resume = run.end() / BLOCK_BITS;
                return self
                    .walk_blocks(
                        resume as usize,
                        run.start,
                        resume * BLOCK_BITS - run.start,
                        n,
                    )
                    .ok();
            }
        }
        self.walk_blocks(block as usize + 1, block_end, 0, n).ok()
    }

    /// The block walk behind the first-free-run searches, from block `first` on, with a free
    /// run of `run` processors from `start` reaching that block's start. Failing, it has seen
    /// every run from there on and returns the longest (from block 0: the set's longest).
    fn walk_blocks(&self, first: usize, mut start: u32, mut run: u32, n: u32) -> Result<u32, u32> {
        let mut longest = 0;
        for (index, block) in self.blocks.iter().enumerate().skip(first) {
            let block_start = index as u32 * BLOCK_BITS;
            if u32::from(block.head) == BLOCK_BITS {
                run += BLOCK_BITS;
                if run >= n {
                    return Ok(start);
                }
                continue;
            }
            if run + u32::from(block.head) >= n {
                return Ok(start);
            }
            if u32::from(block.longest) >= n {
                let from = block_start + u32::from(block.head);
                return self
                    .runs_from(from, false)
                    .find(|r| r.len >= n)
                    .map(|r| r.start)
                    // Never short (the block holds the run wholly): if it were, nothing learnt.
                    .ok_or(u32::MAX);
            }
            longest = longest
                .max(run + u32::from(block.head))
                .max(u32::from(block.longest));
            run = u32::from(block.tail);
            start = block_start + BLOCK_BITS - run;
        }
        Err(longest.max(run))
    }

    /// How many processors of `span` are in the set.
    pub fn count_in(&self, span: Span) -> u32 {
        let mut count = 0;
        Self::for_span_words(span, |i, mask, _| {
            count += (self.words[i] & mask).count_ones();
            true
        });
        count
    }

    pub fn is_disjoint(&self, other: &ProcSet) -> bool {
        self.words.iter().zip(&other.words).all(|(a, b)| a & b == 0)
    }

    /// The first processor at or after `from` whose membership equals `member`, if any.
    pub fn next(&self, from: u32, member: bool) -> Option<u32> {
        if from >= self.len {
            return None;
        }
        let mut index = (from / 64) as usize;
        let flip = if member { 0 } else { u64::MAX };
        let mut word = (self.words[index] ^ flip) & (u64::MAX << (from % 64));
        loop {
            if word != 0 {
                let proc = index as u32 * 64 + word.trailing_zeros();
                return (proc < self.len).then_some(proc);
            }
            index += 1;
            // Looking for a free processor, a wholly busy block is stepped over at once (a
            // full slice's low end, on every scatter search).
            while !member
                && index.is_multiple_of(BLOCK_WORDS)
                && self
                    .blocks
                    .get(index / BLOCK_WORDS)
                    .is_some_and(|b| b.longest == 0)
            {
                index += BLOCK_WORDS;
            }
            if index >= self.words.len() {
                return None;
            }
            word = self.words[index] ^ flip;
        }
    }

    /// The last processor before `before` whose membership equals `member`, if any.
    pub fn prev(&self, before: u32, member: bool) -> Option<u32> {
        let last = before.min(self.len).checked_sub(1)?;
        let mut index = (last / 64) as usize;
        let flip = if member { 0 } else { u64::MAX };
        let mut word = (self.words[index] ^ flip) & (u64::MAX >> (63 - last % 64));
        loop {
            if word != 0 {
                return Some(index as u32 * 64 + 63 - word.leading_zeros());
            }
            index = index.checked_sub(1)?;
            word = self.words[index] ^ flip;
        }
    }

    /// Maximal runs of members (`member = true`) or of non-members, in increasing order.
    pub fn runs(&self, member: bool) -> impl Iterator<Item = Span> + '_ {
        self.runs_from(0, member)
    }

    /// [`ProcSet::runs`] from processor `from` on (a run containing `from` starts there).
    pub fn runs_from(&self, from: u32, member: bool) -> impl Iterator<Item = Span> + '_ {
        let mut cursor = from;
        std::iter::from_fn(move || {
            let start = self.next(cursor, member)?;
            let end = self.next(start, !member).unwrap_or(self.len);
            cursor = end;
            Some(Span::new(start, end - start))
        })
    }
}

/// A set seen with some of its members released, without copying it: EASY asks "where
/// would the head fit once these jobs end?" at every event, and a copy of 93,312 processors
/// plus the unmarking cost more than the answer.
#[derive(Debug)]
pub struct Released<'a> {
    set: &'a ProcSet,
    /// The maximal free runs (released processors counting as free) that hold a released
    /// processor, start to end: each release merges with its neighbours once, so a look costs
    /// a lookup however many jobs have ended.
    runs: BTreeMap<u32, u32>,
}

impl<'a> Released<'a> {
    pub fn new(set: &'a ProcSet) -> Self {
        Released {
            set,
            runs: BTreeMap::new(),
        }
    }

    /// Releases a span of members none of which was released before.
    pub fn release(&mut self, span: Span) {
        if span.len == 0 {
            return;
        }
        debug_assert!(span.end() <= self.set.len && self.free_run_at(span.start).is_none());
        // A run holding a released processor is maximal, so a neighbouring one ends (starts)
        // exactly at this span; otherwise the set's own free run, if any, is the neighbour.
        let start = match self.runs.range(..span.start).next_back() {
            Some((&start, &end)) if end == span.start => {
                self.runs.remove(&start);
                start
            }
            _ => self.set.prev(span.start, true).map_or(0, |busy| busy + 1),
        };
        let end = match self.runs.remove(&span.end()) {
            Some(end) => end,
            None => self.set.next(span.end(), true).unwrap_or(self.set.len),
        };
        self.runs.insert(start, end);
    }

    /// The maximal free run holding `proc`, if `proc` was released.
    pub fn free_run_at(&self, proc: u32) -> Option<Span> {
        self.runs
            .range(..=proc)
            .next_back()
            .filter(|&(_, &end)| proc < end)
            .map(|(&start, &end)| Span::new(start, end - start))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_across_word_boundaries() {
        let mut set = ProcSet::new(200);
        set.insert_span(Span::new(60, 10));
        assert!(set.contains(60) && set.contains(69) && !set.contains(70) && !set.contains(59));
        assert_eq!(set.count(), 10);
        assert!(!set.is_span_clear(Span::new(0, 61)));
        assert!(set.is_span_clear(Span::new(0, 60)));
        assert!(set.is_span_clear(Span::new(70, 130)));
        set.remove_span(Span::new(62, 2));
        assert_eq!(
            set.runs(true).collect::<Vec<_>>(),
            vec![Span::new(60, 2), Span::new(64, 6)]
        );
        assert_eq!(
            set.runs(false).collect::<Vec<_>>(),
            vec![Span::new(0, 60), Span::new(62, 2), Span::new(70, 130)]
        );
    }

    /// The leftmost free run of `n` from `from` on, by looking at every run.
    fn first_free_run_by_scan(set: &ProcSet, from: u32, n: u32) -> Option<u32> {
        set.runs_from(from, false)
            .find(|run| run.len >= n)
            .map(|run| run.start)
    }

    #[test]
    fn counts_runs_and_block_summaries_follow_every_change() {
        // A fixed pseudo-random walk of spans over sets that do not end on a word boundary,
        // with spans long enough to cover whole blocks.
        for capacity in [1000u32, 5000] {
            let mut set = ProcSet::new(capacity);
            let mut model = vec![false; capacity as usize];
            let mut state = 0x9e37_79b9_7f4a_7c15_u64;
            for step in 0..3_000 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                let start = (state % u64::from(capacity)) as u32;
                let len = ((state >> 20) % u64::from(capacity / 3)) as u32 % (capacity - start) + 1;
                let insert = step % 3 != 0;
                // Every other step, the span cut into runs a few processors apart, several
                // to a block, changed at once (as a scattered partition is).
                let spans: Vec<Span> = if step % 2 == 0 {
                    vec![Span::new(start, len)]
                } else {
                    (start..start + len)
                        .step_by(5)
                        .map(|at| Span::new(at, 3.min(start + len - at)))
                        .collect()
                };
                if insert {
                    set.insert_spans(&spans);
                } else {
                    set.remove_spans(&spans);
                }
                for span in &spans {
                    (span.start..span.end()).for_each(|p| model[p as usize] = insert);
                }
                if step % 7 == 0 {
                    let mut other = ProcSet::new(capacity);
                    other.insert_span(Span::new(capacity - 10, 10));
                    set.union_with(&other);
                    (capacity - 10..capacity).for_each(|p| model[p as usize] = true);
                }
                assert_eq!(set.count() as usize, model.iter().filter(|&&m| m).count());
                let free: Vec<u32> = (0..capacity).filter(|&p| !model[p as usize]).collect();
                let found: Vec<u32> = set.runs(false).flat_map(|s| s.start..s.end()).collect();
                assert_eq!(found, free, "capacity {capacity} step {step}");
                let mut measured = set.clone();
                (0..measured.blocks.len()).for_each(|b| measured.measure_block(b));
                assert_eq!(
                    set.blocks, measured.blocks,
                    "capacity {capacity} step {step}"
                );
                let longest = set.runs(false).map(|r| r.len).max().unwrap_or(0);
                assert_eq!(
                    set.walk_blocks(0, 0, 0, u32::MAX).unwrap_err(),
                    longest,
                    "capacity {capacity} step {step}"
                );
                for n in [1, 2, 63, 64, 65, 200, 511, 512, 513, 1100, capacity] {
                    assert_eq!(
                        set.first_free_run(n),
                        first_free_run_by_scan(&set, 0, n),
                        "capacity {capacity} step {step} n {n}"
                    );
                    let from = (state >> 40) as u32 % capacity;
                    assert_eq!(
                        set.first_free_run_from(from, n),
                        first_free_run_by_scan(&set, from, n),
                        "capacity {capacity} step {step} n {n} from {from}"
                    );
                }
                let span = Span::new(start, len);
                let in_span = (start..start + len).filter(|&p| model[p as usize]).count();
                assert_eq!(set.count_in(span) as usize, in_span);
            }
        }
    }

    #[test]
    fn a_failed_search_learns_a_longest_run_that_reaches_the_end() {
        // Wholly free blocks at the end: the run is still open when the walk ends.
        let mut set = ProcSet::new(1024);
        set.insert_span(Span::new(0, 1));
        assert_eq!(set.first_free_run(1024), None);
        assert_eq!(set.longest_free_known(), None, "more than free: no walk");
        assert_eq!(set.first_free_run(1023), Some(1));
        set.insert_span(Span::new(300, 1));
        // Runs 1..300 and 301..1024: the longest (723) ends with the set.
        assert_eq!(set.first_free_run(724), None);
        assert_eq!(set.longest_free_known(), Some(723));
        assert_eq!(set.first_free_run(723), Some(301));
        set.remove_span(Span::new(300, 1));
        assert_eq!(set.longest_free_known(), None);
    }

    #[test]
    fn block_runs_of_words() {
        let runs = |words: [u64; BLOCK_WORDS]| BlockRuns::measure(words.into_iter());
        assert_eq!(runs([0; BLOCK_WORDS]), BlockRuns::FREE);
        assert_eq!(runs([u64::MAX; BLOCK_WORDS]), BlockRuns::FULL);
        let mut words = [0; BLOCK_WORDS];
        words[1] = 1 << 3 | 1 << 60; // busy at 67 and 124
        words[7] = 1 << 63; // busy at 511
        let expected = BlockRuns {
            head: 67,
            tail: 0,
            longest: 511 - 125,
        };
        assert_eq!(runs(words), expected);
    }

    #[test]
    fn released_runs_match_a_copy_with_the_spans_removed() {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut random = |below: u32| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % u64::from(below)) as u32
        };
        for capacity in [70u32, 1000, 3000] {
            for round in 0..40 {
                // Jobs side by side with gaps, as in a slice; release them in random order.
                let mut set = ProcSet::new(capacity);
                let mut jobs = Vec::new();
                let mut at = random(5);
                while at < capacity {
                    let len = (random(600) + 1).min(capacity - at);
                    jobs.push(Span::new(at, len));
                    set.insert_span(Span::new(at, len));
                    at += len + random(3) * random(40);
                }
                let mut copy = set.clone();
                let mut released = Released::new(&set);
                while !jobs.is_empty() {
                    let job = jobs.swap_remove(random(jobs.len() as u32) as usize);
                    released.release(job);
                    copy.remove_span(job);
                    let run = copy
                        .runs(false)
                        .find(|r| r.start <= job.start && job.start < r.end());
                    assert_eq!(
                        released.free_run_at(job.start),
                        run,
                        "capacity {capacity} round {round} job {job}"
                    );
                    for proc in [job.start, job.end() - 1, random(capacity)] {
                        let expected = copy.runs(false).find(|r| r.start <= proc && proc < r.end());
                        let found = released.free_run_at(proc);
                        // Only runs holding a released processor are known.
                        assert!(found.is_none() || found == expected, "proc {proc}");
                    }
                }
            }
        }
    }

    #[test]
    fn prev_finds_the_last_match_before() {
        let mut set = ProcSet::new(130);
        set.insert_span(Span::new(10, 60));
        assert_eq!(set.prev(0, true), None);
        assert_eq!(set.prev(10, true), None);
        assert_eq!(set.prev(11, true), Some(10));
        assert_eq!(set.prev(200, true), Some(69));
        assert_eq!(set.prev(200, false), Some(129));
        assert_eq!(set.prev(70, false), Some(9));
        assert_eq!(set.prev(64, true), Some(63));
    }

    #[test]
    fn next_stops_at_capacity() {
        let mut set = ProcSet::new(70);
        set.insert_span(Span::new(0, 70));
        assert_eq!(set.next(0, false), None);
        assert_eq!(set.next(69, true), Some(69));
        assert_eq!(set.next(70, true), None);
    }
}
