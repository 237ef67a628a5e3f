//! A set of CPU numbers on one node, as the kernel's cpuset lists write it ("0-3,8").

use cosched_core::{Partition, Span};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// CPU numbers as sorted, disjoint, non-adjacent inclusive ranges: one set has one form, so
/// two equal sets compare equal on the wire too.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "Vec<[u32; 2]>", into = "Vec<[u32; 2]>")]
pub struct CpuSet(Vec<[u32; 2]>);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CpuSetError {
    #[error("CPU range {0}-{1} runs backwards")]
    Reversed(u32, u32),
    #[error("CPU ranges are not in order, apart and not touching at {0}-{1}")]
    NotCanonical(u32, u32),
    #[error("'{0}' is not a CPU list (like 0-3,8)")]
    Syntax(String),
}

impl CpuSet {
    pub fn from_cpus(cpus: impl IntoIterator<Item = u32>) -> CpuSet {
        let mut cpus: Vec<u32> = cpus.into_iter().collect();
        cpus.sort_unstable();
        cpus.dedup();
        let mut ranges: Vec<[u32; 2]> = Vec::new();
        for cpu in cpus {
            match ranges.last_mut() {
                Some(last) if last[1] + 1 == cpu => last[1] = cpu,
                _ => ranges.push([cpu, cpu]),
            }
        }
        CpuSet(ranges)
    }

    pub fn cpus(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().flat_map(|&[first, last]| first..=last)
    }

    pub fn len(&self) -> u32 {
        self.0.iter().map(|[first, last]| last - first + 1).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The same CPUs as a core partition (whose processors are then CPU numbers).
    pub fn to_partition(&self) -> Partition {
        Partition::from_spans(
            self.0
                .iter()
                .map(|&[first, last]| Span::new(first, last - first + 1))
                .collect(),
        )
    }
}

impl TryFrom<Vec<[u32; 2]>> for CpuSet {
    type Error = CpuSetError;
    fn try_from(ranges: Vec<[u32; 2]>) -> Result<Self, Self::Error> {
        for &[first, last] in &ranges {
            if first > last {
                return Err(CpuSetError::Reversed(first, last));
            }
        }
        for pair in ranges.windows(2) {
            if pair[0][1].saturating_add(1) >= pair[1][0] {
                return Err(CpuSetError::NotCanonical(pair[1][0], pair[1][1]));
            }
        }
        Ok(CpuSet(ranges))
    }
}

impl From<CpuSet> for Vec<[u32; 2]> {
    fn from(set: CpuSet) -> Self {
        set.0
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, [first, last]) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if first == last {
                write!(f, "{first}")?;
            } else {
                write!(f, "{first}-{last}")?;
            }
        }
        Ok(())
    }
}

impl FromStr for CpuSet {
    type Err = CpuSetError;
    /// A cpuset list as the kernel prints it: ranges and single CPUs, in any order.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let syntax = || CpuSetError::Syntax(text.chars().take(80).collect());
        let mut cpus = Vec::new();
        for part in text.trim().split(',') {
            let (first, last) = match part.split_once('-') {
                Some((first, last)) => (first, last),
                None => (part, part),
            };
            let first: u32 = first.trim().parse().map_err(|_| syntax())?;
            let last: u32 = last.trim().parse().map_err(|_| syntax())?;
            if first > last {
                return Err(CpuSetError::Reversed(first, last));
            }
            // A list for one node: thousands of CPUs at most, never a range to expand blindly.
            if last - first > 1 << 16 {
                return Err(syntax());
            }
            cpus.extend(first..=last);
        }
        Ok(CpuSet::from_cpus(cpus))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_print_and_round_trip_on_the_wire() {
        let set: CpuSet = "8,0-3,4".parse().unwrap();
        assert_eq!(set.to_string(), "0-4,8");
        assert_eq!(set.len(), 6);
        assert_eq!(set.to_partition().to_string(), "0-4,8");
        let json = serde_json::to_string(&set).unwrap();
        assert_eq!(json, "[[0,4],[8,8]]");
        assert_eq!(serde_json::from_str::<CpuSet>(&json).unwrap(), set);
        for bad in ["[[3,1]]", "[[0,2],[3,4]]", "[[4,5],[0,1]]"] {
            assert!(serde_json::from_str::<CpuSet>(bad).is_err(), "{bad}");
        }
        for bad in ["", "a", "3-1", "1-", "0-99999999"] {
            assert!(bad.parse::<CpuSet>().is_err(), "{bad}");
        }
    }
}
