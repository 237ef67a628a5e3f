//! What a site bounds: jobs' time limits (in Slurm's formats), memory sizes, each class's
//! default and longest time, and what one user may hold. Plain values: the policy file fills
//! them, the controller and the simulator obey them.

use crate::job::{Class, Micros, MICROS_PER_SEC};
use std::collections::BTreeMap;
use std::fmt;

/// The longest time limit written: a year, far beyond any site's maximum, far below overflow.
pub const LONGEST_LIMIT: Micros = 365 * 86_400 * MICROS_PER_SEC;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("'{0}' is not a time limit (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS)")]
    Malformed(String),
    #[error("'{0}' is zero: a time limit must be at least one second")]
    Zero(String),
    #[error("'{0}' is longer than a year")]
    TooLong(String),
    #[error("'{text}': {field} must be below {below} (only the first field may be larger)", below = field.bound())]
    OutOfRange { text: String, field: ClockField },
}

/// A field of a clock after the first, which must stay below its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockField {
    Hours,
    Minutes,
    Seconds,
}

impl ClockField {
    fn bound(self) -> i64 {
        match self {
            ClockField::Hours => 24,
            ClockField::Minutes | ClockField::Seconds => 60,
        }
    }
}

impl fmt::Display for ClockField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClockField::Hours => "hours",
            ClockField::Minutes => "minutes",
            ClockField::Seconds => "seconds",
        })
    }
}

/// A time limit as Slurm writes it: `M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S`.
pub fn parse_duration(text: &str) -> Result<Micros, DurationError> {
    let malformed = || DurationError::Malformed(text.to_string());
    let number = |s: &str| -> Result<i64, DurationError> {
        if s.is_empty() || s.len() > 9 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(malformed());
        }
        s.parse().map_err(|_| malformed())
    };
    let (days, clock) = match text.split_once('-') {
        Some((days, clock)) => (Some(number(days)?), clock),
        None => (None, text),
    };
    let parts = clock
        .split(':')
        .map(number)
        .collect::<Result<Vec<_>, _>>()?;
    // As a clock reads: a first field may be large (90:00 is ninety minutes), the rest not.
    use ClockField::*;
    let bounded: &[ClockField] = match (days, parts.len()) {
        (None, 2) => &[Seconds],
        (None, _) => &[Minutes, Seconds],
        (Some(_), _) => &[Hours, Minutes, Seconds],
    };
    let first_bounded = usize::from(days.is_none());
    for (&value, &field) in parts[first_bounded..].iter().zip(bounded) {
        if value >= field.bound() {
            return Err(DurationError::OutOfRange {
                text: text.to_string(),
                field,
            });
        }
    }
    let seconds = match (days, parts.as_slice()) {
        (None, [m]) => m * 60,
        (None, [m, s]) => m * 60 + s,
        (None, [h, m, s]) | (Some(_), [h, m, s]) => h * 3600 + m * 60 + s,
        (Some(_), [h]) => h * 3600,
        (Some(_), [h, m]) => h * 3600 + m * 60,
        _ => return Err(malformed()),
    } + days.unwrap_or(0) * 86_400;
    let micros = seconds.saturating_mul(MICROS_PER_SEC);
    if micros == 0 {
        return Err(DurationError::Zero(text.to_string()));
    }
    if micros > LONGEST_LIMIT {
        return Err(DurationError::TooLong(text.to_string()));
    }
    Ok(micros)
}

/// A duration as `D-HH:MM:SS` (days only when there are some), rounded down to the second.
pub struct Clock(pub Micros);

impl fmt::Display for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let total = self.0.max(0) / MICROS_PER_SEC;
        let (days, rest) = (total / 86_400, total % 86_400);
        let (h, m, s) = (rest / 3600, rest % 3600 / 60, rest % 60);
        let text = if days > 0 {
            format!("{days}-{h:02}:{m:02}:{s:02}")
        } else {
            format!("{h:02}:{m:02}:{s:02}")
        };
        f.pad(&text)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a memory size (a number with K, M, G or T: 512M, 4G; a bare number is megabytes, as in Slurm)")]
pub struct SizeError(pub String);

/// Bytes from `512M`, `4G`, `1.5G`, `100K`, `2T` (powers of 1024); a bare number is MiB.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let error = || SizeError(text.to_string());
    let trimmed = text.trim();
    let (number, unit) = match trimmed.find(|c: char| c.is_ascii_alphabetic()) {
        Some(at) => trimmed.split_at(at),
        None => (trimmed, "M"),
    };
    let shift = match unit.to_ascii_uppercase().trim_end_matches(['B', 'I']) {
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => return Err(error()),
    };
    let value: f64 = number.trim().parse().map_err(|_| error())?;
    let bytes = value * (1u64 << shift) as f64;
    if !(value.is_finite() && value > 0.0 && bytes < (1u64 << 60) as f64) {
        return Err(error());
    }
    Ok(bytes as u64)
}

/// A class's time limits: what a job that names none gets, and the most it may ask for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassTimes {
    pub default: Option<Micros>,
    pub max: Option<Micros>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a {class} job may run at most {max}; it asked for {asked}", max = Clock(*max), asked = Clock(*asked))]
pub struct OverMaxTime {
    pub class: Class,
    pub max: Micros,
    pub asked: Micros,
}

/// Every class's time limits (a class not named has none).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TimeLimits(pub BTreeMap<Class, ClassTimes>);

impl TimeLimits {
    /// The limit a job of `class` runs under, from what it asked for and the class's times.
    pub fn limit_for(
        &self,
        class: Class,
        asked: Option<Micros>,
    ) -> Result<Option<Micros>, OverMaxTime> {
        let times = self.0.get(&class).copied().unwrap_or_default();
        match (asked, times.max) {
            (Some(asked), Some(max)) if asked > max => Err(OverMaxTime { class, max, asked }),
            (Some(asked), _) => Ok(Some(asked)),
            (None, max) => Ok(times.default.or(max)),
        }
    }
}

/// What one user (root aside) may hold at once; `None` is no bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserLimits {
    /// Jobs started and not ended (running, waiting, suspended, idle).
    pub running_jobs: Option<u32>,
    /// Jobs submitted and not started: more are refused at submission.
    pub queued_jobs: Option<u32>,
    /// Processors held by the user's started jobs.
    pub procs: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Micros = MICROS_PER_SEC;

    #[test]
    fn slurm_time_formats() {
        for (text, seconds) in [
            ("10", 600),
            ("1:30", 90),
            ("01:00:05", 3605),
            ("2-0", 2 * 86_400),
            ("1-2:30", 86_400 + 2 * 3600 + 30 * 60),
            ("1-00:00:01", 86_401),
            ("0:1", 1),
        ] {
            assert_eq!(parse_duration(text), Ok(seconds * S), "{text}");
        }
        for bad in [
            "",
            "x",
            "1:2:3:4",
            "-5",
            "1-",
            "1-1:2:3:4",
            " 5",
            "1.5",
            "+3",
            "1--2",
        ] {
            assert!(
                matches!(parse_duration(bad), Err(DurationError::Malformed(_))),
                "{bad}"
            );
        }
        for (over, field) in [
            ("00:60", ClockField::Seconds),
            ("1:60:00", ClockField::Minutes),
            ("1-24", ClockField::Hours),
            ("1-2:60", ClockField::Minutes),
        ] {
            assert!(
                matches!(parse_duration(over), Err(DurationError::OutOfRange { field: f, .. }) if f == field),
                "{over}"
            );
        }
        assert_eq!(parse_duration("90:00"), Ok(90 * 60 * S));
        assert_eq!(parse_duration("36:00:00"), Ok(36 * 3600 * S));
        assert!(matches!(parse_duration("0"), Err(DurationError::Zero(_))));
        assert!(matches!(
            parse_duration("366-0"),
            Err(DurationError::TooLong(_))
        ));
        assert!(matches!(
            parse_duration("999999999"),
            Err(DurationError::TooLong(_))
        ));
    }

    #[test]
    fn clocks_read_back_as_limits() {
        for seconds in [1, 59, 3600, 86_399, 86_400, 3 * 86_400 + 7] {
            let written = Clock(seconds * S).to_string();
            assert_eq!(parse_duration(&written), Ok(seconds * S), "{written}");
        }
        assert_eq!(Clock(90 * S).to_string(), "00:01:30");
        assert_eq!(Clock(-5).to_string(), "00:00:00");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("4GiB"), Ok(4 << 30));
        assert_eq!(parse_size("1.5g"), Ok(3 << 29));
        assert_eq!(parse_size("100"), Ok(100 << 20));
        assert_eq!(parse_size("2T"), Ok(2 << 40));
        for bad in ["", "G", "-1G", "0", "1X", "nanG", "1e30G"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_class_default_applies_and_its_max_bounds() {
        let limits = TimeLimits(BTreeMap::from([(
            Class::Batch,
            ClassTimes {
                default: Some(60 * S),
                max: Some(3600 * S),
            },
        )]));
        assert_eq!(limits.limit_for(Class::Batch, None), Ok(Some(60 * S)));
        assert_eq!(
            limits.limit_for(Class::Batch, Some(600 * S)),
            Ok(Some(600 * S))
        );
        assert!(limits.limit_for(Class::Batch, Some(7200 * S)).is_err());
        assert_eq!(limits.limit_for(Class::Standby, None), Ok(None));
        let max_only = TimeLimits(BTreeMap::from([(
            Class::Batch,
            ClassTimes {
                default: None,
                max: Some(3600 * S),
            },
        )]));
        assert_eq!(max_only.limit_for(Class::Batch, None), Ok(Some(3600 * S)));
    }
}
