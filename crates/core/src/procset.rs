//! A fixed-size set of processors as a bitset: the occupancy of one slice.
//!
//! Every placement question ("is this span free?", "where is the first free run of n?") is
//! answered a word (64 processors) at a time, which is what keeps placement on 65,536
//! processors × 16 slices in the microseconds.

use crate::partition::Span;

#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ProcSet {
    words: Vec<u64>,
    len: u32,
    /// How many processors are in the set, kept current by every change: "can `n` fit?" is
    /// a comparison, not a scan of every word (1,458 of them on 93,312 processors).
    members: u32,
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
    /// An empty set over processors `0..len`.
    pub fn new(len: u32) -> Self {
        ProcSet {
            words: vec![0; (len as usize).div_ceil(64)],
            len,
            members: 0,
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

    pub fn insert_span(&mut self, span: Span) {
        debug_assert!(span.end() <= self.len, "{span} outside 0..{}", self.len);
        Self::for_span_words(span, |i, mask, bits| {
            // Marking a free run is the common case: no bit count needed (no POPCNT on the
            // baseline x86-64 target, and this runs for every word of every partition).
            let added = match mask & self.words[i] {
                0 => bits,
                already => bits - already.count_ones(),
            };
            self.members += added;
            self.words[i] |= mask;
            true
        });
    }

    pub fn remove_span(&mut self, span: Span) {
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

    /// Adds every processor of `other` (same capacity).
    pub fn union_with(&mut self, other: &ProcSet) {
        debug_assert_eq!(self.len, other.len);
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= b;
        }
        self.members = self.words.iter().map(|w| w.count_ones()).sum();
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
            if index >= self.words.len() {
                return None;
            }
            word = self.words[index] ^ flip;
        }
    }

    /// Maximal runs of members (`member = true`) or of non-members, in increasing order.
    pub fn runs(&self, member: bool) -> impl Iterator<Item = Span> + '_ {
        let mut cursor = 0;
        std::iter::from_fn(move || {
            let start = self.next(cursor, member)?;
            let end = self.next(start, !member).unwrap_or(self.len);
            cursor = end;
            Some(Span::new(start, end - start))
        })
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

    #[test]
    fn counts_and_fullness_follow_every_change() {
        // A fixed pseudo-random walk of spans over a set that does not end on a word boundary.
        let mut set = ProcSet::new(1000);
        let mut model = vec![false; 1000];
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        for step in 0..5_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let start = (state % 1000) as u32;
            let len = ((state >> 20) % 300) as u32 % (1000 - start) + 1;
            let insert = step % 3 != 0;
            let span = Span::new(start, len);
            if insert {
                set.insert_span(span);
            } else {
                set.remove_span(span);
            }
            (start..start + len).for_each(|p| model[p as usize] = insert);
            if step % 7 == 0 {
                let mut other = ProcSet::new(1000);
                other.insert_span(Span::new(990, 10));
                set.union_with(&other);
                (990..1000).for_each(|p| model[p] = true);
            }
            assert_eq!(set.count() as usize, model.iter().filter(|&&m| m).count());
            let free: Vec<u32> = (0..1000).filter(|&p| !model[p as usize]).collect();
            let found: Vec<u32> = set.runs(false).flat_map(|s| s.start..s.end()).collect();
            assert_eq!(found, free, "step {step}");
        }
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
