//! The file's shape, once: read with every value spanned (so a bad value names its line),
//! written with plain values (so every key is printed). `deny_unknown_fields` on every table
//! refuses an unknown section, class or key by its name.

use crate::{
    MemoryPolicy, NodeMemory, Place, Policy, PolicyError, Problem, SchedulerPolicy, StallPolicy,
};
use cosched_core::{
    parse_duration, parse_size, Backfill, Class, ClassTimes, Clock, Micros, PartitionerKind,
};
use cosched_proto::{Mode, StallAction};
use serde::{Deserialize, Serialize};
use std::str::FromStr;
use toml::{Spanned, Value};

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Document<V> {
    scheduler: Option<SchedulerKeys<V>>,
    classes: Option<ClassesKeys<V>>,
    limits: Option<LimitKeys<V>>,
    memory: Option<MemoryKeys<V>>,
    stall: Option<StallKeys<V>>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SchedulerKeys<V> {
    mode: Option<V>,
    quantum_ms: Option<V>,
    mpl: Option<V>,
    partitioner: Option<V>,
    alternates: Option<V>,
    backfill: Option<V>,
    repack: Option<V>,
    interactive_preempt: Option<V>,
    idle_after: Option<V>,
    give_away_after_ms: Option<V>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClassesKeys<V> {
    express: Option<ClassKeys<V>>,
    interactive: Option<ClassKeys<V>>,
    batch: Option<ClassKeys<V>>,
    standby: Option<ClassKeys<V>>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClassKeys<V> {
    default_time: Option<V>,
    max_time: Option<V>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitKeys<V> {
    running_jobs: Option<V>,
    queued_jobs: Option<V>,
    procs: Option<V>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct MemoryKeys<V> {
    fit: Option<V>,
    node_memory: Option<V>,
    default_mem_per_cpu: Option<V>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StallKeys<V> {
    after: Option<V>,
    action: Option<V>,
}

/// What "no value" is written as, for keys that may have none.
const NONE: &str = "none";
const MODES: &str = "gang, moderate, implicit, local";
const PARTITIONERS: &str = "first-fit, best-fit, buddy, scatter";
const BACKFILLS: &str = "none, easy";
const STALL_ACTIONS: &str = "report, cancel";

fn backfill_name(backfill: Backfill) -> &'static str {
    match backfill {
        Backfill::None => "none",
        Backfill::Easy => "easy",
    }
}

/// Reads values of one text, placing errors at their lines.
struct Reader<'a> {
    text: &'a str,
    origin: &'a str,
}

impl Reader<'_> {
    fn place(&self, at: usize) -> Place {
        let upto = &self.text.as_bytes()[..at.min(self.text.len())];
        Place {
            origin: self.origin.to_string(),
            line: Some(upto.iter().filter(|&&b| b == b'\n').count() as u32 + 1),
        }
    }

    fn invalid(&self, key: &str, value: &Spanned<Value>, problem: Problem) -> PolicyError {
        PolicyError::Invalid {
            at: self.place(value.span().start),
            key: key.to_string(),
            value: value.get_ref().to_string(),
            problem,
        }
    }

    /// Sets `field` from `value` when the key is given.
    fn set<T>(
        &self,
        field: &mut T,
        key: &str,
        value: Option<Spanned<Value>>,
        read: impl FnOnce(&Value) -> Result<T, Problem>,
    ) -> Result<(), PolicyError> {
        if let Some(value) = value {
            *field = read(value.get_ref()).map_err(|problem| self.invalid(key, &value, problem))?;
        }
        Ok(())
    }
}

fn text(value: &Value) -> Result<&str, Problem> {
    value.as_str().ok_or(Problem::Type("a string"))
}

fn word<T: FromStr>(known: &'static str) -> impl FnOnce(&Value) -> Result<T, Problem> {
    move |value| text(value)?.parse().map_err(|_| Problem::Unknown(known))
}

fn boolean(value: &Value) -> Result<bool, Problem> {
    value.as_bool().ok_or(Problem::Type("true or false"))
}

fn integer(min: i64, max: i64, unit: &'static str) -> impl FnOnce(&Value) -> Result<i64, Problem> {
    move |value| {
        let n = value.as_integer().ok_or(Problem::Type("a whole number"))?;
        if !(min..=max).contains(&n) {
            return Err(Problem::Range { min, max, unit });
        }
        Ok(n)
    }
}

/// A count of at least 1, or "none" for no bound.
fn count_or_none(value: &Value) -> Result<Option<u32>, Problem> {
    if value.as_str() == Some(NONE) {
        return Ok(None);
    }
    let max = i64::from(u32::MAX);
    let n = integer(1, max, " (or \"none\" for no bound)")(value)?;
    Ok(Some(n as u32))
}

/// A time in Slurm's formats, or 0 / "none" for none.
fn duration_or_none(value: &Value) -> Result<Option<Micros>, Problem> {
    match value {
        Value::Integer(0) => Ok(None),
        Value::Integer(_) => Err(Problem::BareDuration),
        Value::String(s) if s == NONE || s == "0" => Ok(None),
        Value::String(s) => Ok(Some(parse_duration(s)?)),
        _ => Err(Problem::Type(
            "a time as a string (\"1:00:00\", \"7-0\") or \"none\"",
        )),
    }
}

/// A size ("64G"; a bare number is megabytes, as in Slurm), or the word that means none.
fn size_or(none: &'static str) -> impl FnOnce(&Value) -> Result<Option<u64>, Problem> {
    move |value| match value {
        Value::String(s) if s == none => Ok(None),
        Value::String(s) => Ok(Some(parse_size(s)?)),
        Value::Integer(n) => Ok(Some(parse_size(&n.to_string())?)),
        _ => Err(Problem::Type("a size as a string (\"64G\")")),
    }
}

pub(crate) fn parse(text: &str, origin: &str) -> Result<Policy, PolicyError> {
    let reader = Reader { text, origin };
    let document: Document<Spanned<Value>> =
        toml::from_str(text).map_err(|e| PolicyError::Syntax {
            at: match e.span() {
                Some(span) => reader.place(span.start),
                None => Place {
                    origin: origin.to_string(),
                    line: None,
                },
            },
            message: e
                .message()
                .trim_end()
                .replace("unknown field", "unknown key")
                .replace('\n', "; "),
        })?;
    let mut policy = Policy::default();
    if let Some(keys) = document.scheduler {
        read_scheduler(&reader, keys, &mut policy.scheduler)?;
    }
    if let Some(classes) = document.classes {
        for (class, keys) in [
            (Class::Express, classes.express),
            (Class::Interactive, classes.interactive),
            (Class::Batch, classes.batch),
            (Class::Standby, classes.standby),
        ] {
            if let Some(keys) = keys {
                let times = read_class(&reader, class, keys)?;
                // A class without limits is left out, as the defaults leave it.
                if times != ClassTimes::default() {
                    policy.classes.0.insert(class, times);
                }
            }
        }
    }
    if let Some(keys) = document.limits {
        let limits = &mut policy.limits;
        reader.set(
            &mut limits.running_jobs,
            "limits.running_jobs",
            keys.running_jobs,
            count_or_none,
        )?;
        reader.set(
            &mut limits.queued_jobs,
            "limits.queued_jobs",
            keys.queued_jobs,
            count_or_none,
        )?;
        reader.set(&mut limits.procs, "limits.procs", keys.procs, count_or_none)?;
    }
    if let Some(keys) = document.memory {
        let memory = &mut policy.memory;
        reader.set(&mut memory.fit, "memory.fit", keys.fit, boolean)?;
        reader.set(
            &mut memory.node_memory,
            "memory.node_memory",
            keys.node_memory,
            |v| Ok(size_or("auto")(v)?.map_or(NodeMemory::Auto, NodeMemory::Bytes)),
        )?;
        reader.set(
            &mut memory.default_mem_per_cpu,
            "memory.default_mem_per_cpu",
            keys.default_mem_per_cpu,
            size_or(NONE),
        )?;
    }
    if let Some(keys) = document.stall {
        let stall = &mut policy.stall;
        let after_value = keys.after.clone();
        reader.set(
            &mut stall.after,
            "stall.after",
            keys.after,
            duration_or_none,
        )?;
        if let (Some(after), Some(idle), Some(value)) =
            (stall.after, policy.scheduler.idle_after, after_value)
        {
            if after >= idle {
                let problem = Problem::NotBeforeIdle(idle);
                return Err(reader.invalid("stall.after", &value, problem));
            }
        }
        reader.set(
            &mut stall.action,
            "stall.action",
            keys.action,
            word::<StallAction>(STALL_ACTIONS),
        )?;
    }
    Ok(policy)
}

fn read_scheduler(
    reader: &Reader,
    keys: SchedulerKeys<Spanned<Value>>,
    s: &mut SchedulerPolicy,
) -> Result<(), PolicyError> {
    reader.set(
        &mut s.mode,
        "scheduler.mode",
        keys.mode,
        word::<Mode>(MODES),
    )?;
    reader.set(
        &mut s.quantum_ms,
        "scheduler.quantum_ms",
        keys.quantum_ms,
        |v| Ok(integer(10, 600_000, " ms (10 ms to 10 minutes)")(v)? as u32),
    )?;
    reader.set(&mut s.mpl, "scheduler.mpl", keys.mpl, |v| {
        Ok(integer(1, 64, " slices")(v)? as u32)
    })?;
    reader.set(
        &mut s.partitioner,
        "scheduler.partitioner",
        keys.partitioner,
        |v| {
            let kind: PartitionerKind = word(PARTITIONERS)(v)?;
            match kind.is_2d() {
                true => Err(Problem::NeedsMesh(kind)),
                false => Ok(kind),
            }
        },
    )?;
    reader.set(
        &mut s.alternates,
        "scheduler.alternates",
        keys.alternates,
        boolean,
    )?;
    reader.set(&mut s.backfill, "scheduler.backfill", keys.backfill, |v| {
        [Backfill::None, Backfill::Easy]
            .into_iter()
            .find(|b| Some(backfill_name(*b)) == v.as_str())
            .ok_or(Problem::Unknown(BACKFILLS))
    })?;
    reader.set(&mut s.repack, "scheduler.repack", keys.repack, boolean)?;
    reader.set(
        &mut s.interactive_preempt,
        "scheduler.interactive_preempt",
        keys.interactive_preempt,
        duration_or_none,
    )?;
    reader.set(
        &mut s.idle_after,
        "scheduler.idle_after",
        keys.idle_after,
        duration_or_none,
    )?;
    reader.set(
        &mut s.give_away_after_ms,
        "scheduler.give_away_after_ms",
        keys.give_away_after_ms,
        |v| Ok(integer(0, 600_000, " ms (0: never)")(v)? as u32),
    )
}

fn read_class(
    reader: &Reader,
    class: Class,
    keys: ClassKeys<Spanned<Value>>,
) -> Result<ClassTimes, PolicyError> {
    let key = |name: &str| format!("classes.{class}.{name}");
    let mut times = ClassTimes::default();
    let default_value = keys.default_time.clone();
    reader.set(
        &mut times.default,
        &key("default_time"),
        keys.default_time,
        duration_or_none,
    )?;
    reader.set(
        &mut times.max,
        &key("max_time"),
        keys.max_time,
        duration_or_none,
    )?;
    if let (Some(default), Some(max), Some(value)) = (times.default, times.max, default_value) {
        if default > max {
            let problem = Problem::AboveMax(max);
            return Err(reader.invalid(&key("default_time"), &value, problem));
        }
    }
    Ok(times)
}

/// Every key with its value.
pub(crate) fn of(policy: &Policy) -> Document<Value> {
    let s = &policy.scheduler;
    let string = |s: &str| Some(Value::String(s.to_string()));
    let duration = |d: Option<Micros>| string(&d.map_or(NONE.into(), |d| Clock(d).to_string()));
    let count = |n: Option<u32>| n.map_or(string(NONE), |n| Some(Value::Integer(n.into())));
    let class = |class: Class| {
        let times = policy.classes.0.get(&class).copied().unwrap_or_default();
        Some(ClassKeys {
            default_time: duration(times.default),
            max_time: duration(times.max),
        })
    };
    let MemoryPolicy {
        fit,
        node_memory,
        default_mem_per_cpu,
    } = policy.memory;
    let StallPolicy { after, action } = policy.stall;
    Document {
        scheduler: Some(SchedulerKeys {
            mode: string(s.mode.name()),
            quantum_ms: Some(Value::Integer(s.quantum_ms.into())),
            mpl: Some(Value::Integer(s.mpl.into())),
            partitioner: string(s.partitioner.name()),
            alternates: Some(Value::Boolean(s.alternates)),
            backfill: string(backfill_name(s.backfill)),
            repack: Some(Value::Boolean(s.repack)),
            interactive_preempt: duration(s.interactive_preempt),
            idle_after: duration(s.idle_after),
            give_away_after_ms: Some(Value::Integer(s.give_away_after_ms.into())),
        }),
        classes: Some(ClassesKeys {
            express: class(Class::Express),
            interactive: class(Class::Interactive),
            batch: class(Class::Batch),
            standby: class(Class::Standby),
        }),
        limits: Some(LimitKeys {
            running_jobs: count(policy.limits.running_jobs),
            queued_jobs: count(policy.limits.queued_jobs),
            procs: count(policy.limits.procs),
        }),
        memory: Some(MemoryKeys {
            fit: Some(Value::Boolean(fit)),
            node_memory: string(&match node_memory {
                NodeMemory::Auto => "auto".into(),
                NodeMemory::Bytes(bytes) => size(bytes),
            }),
            default_mem_per_cpu: string(&default_mem_per_cpu.map_or(NONE.into(), size)),
        }),
        stall: Some(StallKeys {
            after: duration(after),
            action: string(action.name()),
        }),
    }
}

/// A size in the largest unit that divides it, as `parse_size` reads it back exactly (a
/// fraction of a kilobyte is a finite binary fraction, so the decimal is exact).
pub(crate) fn size(bytes: u64) -> String {
    for (shift, unit) in [(40, 'T'), (30, 'G'), (20, 'M'), (10, 'K')] {
        if bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    format!("{}K", bytes as f64 / 1024.0)
}
