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

fn ones(count: u32) -> u64 {
    if count >= 64 {
        u64::MAX
    } else {
        (1u64 << count) - 1
    }
}

impl ProcSet {
    /// An empty set over processors `0..len`.
    pub fn new(len: u32) -> Self {
        ProcSet {
            words: vec![0; (len as usize).div_ceil(64)],
            len,
        }
    }

    pub fn contains(&self, proc: u32) -> bool {
        proc < self.len && self.words[(proc / 64) as usize] >> (proc % 64) & 1 == 1
    }

    pub fn count(&self) -> u32 {
        self.words.iter().map(|w| w.count_ones()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// Calls `f(word_index, mask)` for the words a span covers.
    fn for_span_words(span: Span, mut f: impl FnMut(usize, u64) -> bool) -> bool {
        let mut start = span.start;
        let end = span.end();
        while start < end {
            let bit = start % 64;
            let take = (64 - bit).min(end - start);
            if !f((start / 64) as usize, ones(take) << bit) {
                return false;
            }
            start += take;
        }
        true
    }

    /// True when no processor of the span is in the set. The span must lie inside the set.
    pub fn is_span_clear(&self, span: Span) -> bool {
        debug_assert!(span.end() <= self.len, "{span} outside 0..{}", self.len);
        Self::for_span_words(span, |i, mask| self.words[i] & mask == 0)
    }

    pub fn insert_span(&mut self, span: Span) {
        debug_assert!(span.end() <= self.len, "{span} outside 0..{}", self.len);
        Self::for_span_words(span, |i, mask| {
            self.words[i] |= mask;
            true
        });
    }

    pub fn remove_span(&mut self, span: Span) {
        debug_assert!(span.end() <= self.len, "{span} outside 0..{}", self.len);
        Self::for_span_words(span, |i, mask| {
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
    fn next_stops_at_capacity() {
        let mut set = ProcSet::new(70);
        set.insert_span(Span::new(0, 70));
        assert_eq!(set.next(0, false), None);
        assert_eq!(set.next(69, true), Some(69));
        assert_eq!(set.next(70, true), None);
    }
}
