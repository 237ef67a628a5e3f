use super::*;
use cosched_core::{Class, ClassTimes};
use proptest::prelude::*;

const S: Micros = MICROS_PER_SEC;

fn parse(text: &str) -> Result<Policy, PolicyError> {
    Policy::parse(text, "site.toml")
}

/// The one-line refusal of `text`.
fn refusal(text: &str) -> String {
    let message = parse(text).expect_err(text).to_string();
    assert!(!message.contains('\n'), "not one line: {message}");
    message
}

#[test]
fn an_empty_file_is_the_default_and_the_default_is_gang_mpl_4_with_easy_backfilling() {
    assert_eq!(parse("").unwrap(), Policy::default());
    let config = Policy::default().core_config();
    assert_eq!(config.mpl, 4);
    assert_eq!(config.backfill, Backfill::Easy);
    assert!(config.alternates && config.interactive_preempts && !config.repack);
    assert_eq!(config.partitioner, PartitionerKind::FirstFit);
    assert_eq!(Policy::default().quantum(), 100_000);
}

#[test]
fn every_key_is_read() {
    let policy = parse(
        r#"
[scheduler]
mode = "moderate"
quantum_ms = 50
mpl = 8
partitioner = "scatter"
alternates = false
backfill = "none"
repack = true
interactive_preempt = "0:30"
idle_after = "none"

[classes.batch]
default_time = "1:00:00"
max_time = "7-0"

[classes.interactive]
max_time = "30"

[limits]
running_jobs = 64
queued_jobs = 1000
procs = "none"

[memory]
fit = false
node_memory = "64G"
default_mem_per_cpu = 512
"#,
    );
    let policy = policy.unwrap();
    let s = &policy.scheduler;
    assert_eq!(s.mode, Mode::Moderate);
    assert_eq!((s.quantum_ms, s.mpl), (50, 8));
    assert_eq!(s.partitioner, PartitionerKind::Scatter);
    assert!(!s.alternates && s.repack);
    assert_eq!(s.backfill, Backfill::None);
    assert_eq!(s.interactive_preempt, Some(30 * S));
    assert_eq!(s.idle_after, None);
    assert_eq!(
        policy.time_limits().0,
        [
            (
                Class::Interactive,
                ClassTimes {
                    default: None,
                    max: Some(30 * 60 * S)
                }
            ),
            (
                Class::Batch,
                ClassTimes {
                    default: Some(3600 * S),
                    max: Some(7 * 86_400 * S)
                }
            ),
        ]
        .into()
    );
    assert_eq!(
        policy.user_limits(),
        UserLimits {
            running_jobs: Some(64),
            queued_jobs: Some(1000),
            procs: None
        }
    );
    assert_eq!(
        policy.memory,
        MemoryPolicy {
            fit: false,
            node_memory: NodeMemory::Bytes(64 << 30),
            default_mem_per_cpu: Some(512 << 20),
        }
    );
}

#[test]
fn unknown_keys_sections_and_classes_are_refused_by_name_and_line() {
    let message = refusal("[scheduler]\nmode = \"gang\"\nmpll = 4\n");
    assert!(message.starts_with("site.toml:3: "), "{message}");
    assert!(message.contains("`mpll`"), "{message}");
    let message = refusal("[schedule]\nmpl = 4\n");
    assert!(
        message.starts_with("site.toml:1: ") && message.contains("`schedule`"),
        "{message}"
    );
    let message = refusal("[classes.gold]\nmax_time = \"1:00:00\"\n");
    assert!(message.contains("`gold`"), "{message}");
    let message = refusal("[limits]\nmemory = 5\n");
    assert!(message.contains("`memory`"), "{message}");
    // Not TOML at all: still one line, with where.
    let message = refusal("[scheduler\nmpl = 4\n");
    assert!(message.starts_with("site.toml:1: "), "{message}");
    let message = refusal("[scheduler]\nmpl = 4\nmpl = 5\n");
    assert!(message.starts_with("site.toml:3: "), "{message}");
}

#[test]
fn values_out_of_range_are_refused_naming_key_value_and_line() {
    for (text, expected) in [
        (
            "[scheduler]\nmpl = 0\n",
            "site.toml:2: scheduler.mpl = 0: must be from 1 to 64 slices",
        ),
        ("[scheduler]\nmpl = 65\n", "scheduler.mpl = 65: must be from 1"),
        (
            "[scheduler]\n\nquantum_ms = 5\n",
            "site.toml:3: scheduler.quantum_ms = 5: must be from 10 to 600000 ms",
        ),
        ("[scheduler]\nquantum_ms = 600001\n", "scheduler.quantum_ms = 600001"),
        (
            "[scheduler]\nmpl = \"four\"\n",
            "scheduler.mpl = \"four\": expected a whole number",
        ),
        (
            "[scheduler]\nmode = \"fast\"\n",
            "scheduler.mode = \"fast\": not one of gang, moderate, implicit, local",
        ),
        (
            "[scheduler]\nbackfill = \"conservative\"\n",
            "scheduler.backfill = \"conservative\": not one of none, easy",
        ),
        (
            "[scheduler]\npartitioner = \"worst-fit\"\n",
            "scheduler.partitioner = \"worst-fit\": not one of",
        ),
        (
            "[scheduler]\npartitioner = \"adaptive-scan\"\n",
            "scheduler.partitioner = \"adaptive-scan\": adaptive-scan places submeshes",
        ),
        (
            "[scheduler]\nalternates = \"yes\"\n",
            "scheduler.alternates = \"yes\": expected true or false",
        ),
        (
            "[scheduler]\ninteractive_preempt = 10\n",
            "scheduler.interactive_preempt = 10: a bare number here would be minutes",
        ),
        (
            "[scheduler]\nidle_after = \"ten\"\n",
            "scheduler.idle_after = \"ten\": 'ten' is not a time limit",
        ),
        (
            "[scheduler]\ngive_away_after_ms = -5\n",
            "scheduler.give_away_after_ms = -5: must be from 0 to 600000 ms (0: never)",
        ),
        (
            "[classes.batch]\ndefault_time = \"2:00:00\"\nmax_time = \"1:00:00\"\n",
            "site.toml:2: classes.batch.default_time = \"2:00:00\": longer than max_time (01:00:00)",
        ),
        (
            "[scheduler]\nidle_after = \"5:00\"\n[stall]\nafter = \"10:00\"\n",
            "site.toml:4: stall.after = \"10:00\": not shorter than scheduler.idle_after (00:05:00)",
        ),
        (
            "[stall]\nafter = \"20:00\"\n",
            "stall.after = \"20:00\": not shorter than scheduler.idle_after (00:10:00)",
        ),
        (
            "[classes.standby]\nmax_time = \"400-0\"\n",
            "classes.standby.max_time = \"400-0\": '400-0' is longer than a year",
        ),
        (
            "[limits]\nprocs = 0\n",
            "limits.procs = 0: must be from 1 to 4294967295 (or \"none\" for no bound)",
        ),
        ("[limits]\nqueued_jobs = -3\n", "limits.queued_jobs = -3"),
        (
            "[memory]\nnode_memory = \"lots\"\n",
            "memory.node_memory = \"lots\": 'lots' is not a memory size",
        ),
        (
            "[memory]\ndefault_mem_per_cpu = true\n",
            "memory.default_mem_per_cpu = true: expected a size",
        ),
        (
            "[stall]\naction = \"kill\"\n",
            "stall.action = \"kill\": not one of report, cancel",
        ),
        (
            "[stall]\nafter = 30\n",
            "stall.after = 30: a bare number here would be minutes",
        ),
    ] {
        let message = refusal(text);
        assert!(message.contains(expected), "{text:?}: {message}");
    }
}

#[test]
fn off_is_zero_or_none() {
    for off in ["0", "\"none\"", "\"0\""] {
        let policy = parse(&format!(
            "[scheduler]\ninteractive_preempt = {off}\nidle_after = {off}\n"
        ))
        .unwrap();
        assert_eq!(policy.scheduler.interactive_preempt, None, "{off}");
        assert_eq!(policy.scheduler.idle_after, None, "{off}");
        assert!(!policy.core_config().interactive_preempts);
    }
}

#[test]
fn the_mode_sets_the_core_s_slices() {
    let with_mode = |mode: &str| {
        parse(&format!("[scheduler]\nmode = \"{mode}\"\nmpl = 3\n"))
            .unwrap()
            .core_config()
            .mpl
    };
    assert_eq!(with_mode("gang"), 3);
    assert_eq!(with_mode("moderate"), 3);
    assert_eq!(with_mode("implicit"), 1);
    assert_eq!(with_mode("local"), LOCAL_MPL);
}

#[test]
fn reading_a_missing_file_names_it() {
    let message = Policy::read(Path::new("/nonexistent/cosched.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        message.starts_with("/nonexistent/cosched.toml: "),
        "{message}"
    );
}

#[test]
fn the_written_policy_names_every_key() {
    let written = Policy::default().to_toml();
    for key in RESTART_KEYS {
        let name = key.split('.').nth(1).unwrap();
        assert!(
            written.contains(&format!("\n{name} = ")),
            "{key}: {written}"
        );
    }
    for class in Class::ALL {
        assert!(written.contains(&format!("[classes.{class}]")), "{written}");
    }
    for key in [
        "running_jobs",
        "queued_jobs",
        "procs",
        "default_time",
        "max_time",
    ] {
        assert!(written.contains(&format!("\n{key} = ")), "{key}: {written}");
    }
}

#[test]
fn changes_say_which_keys_need_a_restart() {
    let running = Policy::default();
    let mut next = running.clone();
    assert!(next.changes(&running).is_empty());
    next.scheduler.mpl = 8;
    next.scheduler.backfill = Backfill::None;
    next.limits.running_jobs = Some(2);
    next.classes.0.insert(
        Class::Batch,
        ClassTimes {
            default: None,
            max: Some(60 * S),
        },
    );
    assert_eq!(
        next.restart_needed(&running),
        ["scheduler.mpl", "scheduler.backfill"]
    );
    let live: Vec<String> = next
        .changes(&running)
        .into_iter()
        .filter(|c| c.live)
        .map(|c| c.to_string())
        .collect();
    assert_eq!(
        live,
        [
            "classes.batch.max_time \"none\" -> \"00:01:00\"",
            "limits.running_jobs \"none\" -> 2"
        ]
    );
}

#[test]
fn sizes_are_written_as_they_read_back() {
    for bytes in [
        1,
        1000,
        1024,
        1536,
        512 << 20,
        3 << 29,
        64 << 30,
        2 << 40,
        (1 << 50) + 7,
    ] {
        let written = document::size(bytes);
        assert_eq!(cosched_core::parse_size(&written), Ok(bytes), "{written}");
    }
    assert_eq!(document::size(64 << 30), "64G");
}

fn times() -> impl Strategy<Value = Option<Micros>> {
    prop::option::of((1..=365 * 86_400i64).prop_map(|s| s * S))
}

fn policies() -> impl Strategy<Value = Policy> {
    let scheduler = (
        prop::sample::select(vec![
            Mode::Gang,
            Mode::Moderate,
            Mode::Implicit,
            Mode::Local,
        ]),
        10..=600_000u32,
        1..=64u32,
        prop::sample::select(
            PartitionerKind::ALL
                .into_iter()
                .filter(|k| !k.is_2d())
                .collect::<Vec<_>>(),
        ),
        any::<(bool, bool, bool)>(),
        times(),
        times(),
        0..=600_000u32,
    )
        .prop_map(
            |(
                mode,
                quantum_ms,
                mpl,
                partitioner,
                (alternates, easy, repack),
                preempt,
                idle,
                give_away_after_ms,
            )| {
                SchedulerPolicy {
                    mode,
                    quantum_ms,
                    mpl,
                    partitioner,
                    alternates,
                    backfill: if easy { Backfill::Easy } else { Backfill::None },
                    repack,
                    interactive_preempt: preempt,
                    idle_after: idle,
                    give_away_after_ms,
                }
            },
        );
    let class = (times(), times()).prop_map(|(a, b)| {
        // A default is never above the maximum.
        let (default, max) = match (a, b) {
            (Some(a), Some(b)) => (Some(a.min(b)), Some(a.max(b))),
            other => other,
        };
        ClassTimes { default, max }
    });
    let classes = prop::collection::btree_map(
        prop::sample::select(Class::ALL.to_vec()),
        class.prop_filter("a class without limits is left out", |t| {
            *t != ClassTimes::default()
        }),
        0..=4,
    )
    .prop_map(TimeLimits);
    let count = || prop::option::of(1..=u32::MAX);
    let limits = (count(), count(), count()).prop_map(|(r, q, p)| UserLimits {
        running_jobs: r,
        queued_jobs: q,
        procs: p,
    });
    let size = || 1..(1u64 << 50);
    let memory = (
        any::<bool>(),
        prop::option::of(size()),
        prop::option::of(size()),
    )
        .prop_map(|(fit, node, per_cpu)| MemoryPolicy {
            fit,
            node_memory: node.map_or(NodeMemory::Auto, NodeMemory::Bytes),
            default_mem_per_cpu: per_cpu,
        });
    let stall = (times(), any::<bool>()).prop_map(|(after, cancel)| StallPolicy {
        after,
        action: if cancel {
            StallAction::Cancel
        } else {
            StallAction::Report
        },
    });
    (scheduler, classes, limits, memory, stall).prop_map(
        |(scheduler, classes, limits, memory, mut stall)| {
            // A stall time must come before idleness takes the job out (the reader's rule).
            if let (Some(after), Some(idle)) = (stall.after, scheduler.idle_after) {
                if after >= idle {
                    stall.after = None;
                }
            }
            Policy {
                scheduler,
                classes,
                limits,
                memory,
                stall,
            }
        },
    )
}

proptest! {
    #[test]
    fn the_written_policy_reads_back_the_same(policy in policies()) {
        let written = policy.to_toml();
        let read = Policy::parse(&written, "written").map_err(|e| TestCaseError::fail(format!("{e}\n{written}")))?;
        prop_assert_eq!(read, policy);
    }
}

#[test]
fn the_example_file_holds_the_defaults() {
    let example = include_str!("../../../dist/cosched.toml");
    assert_eq!(
        Policy::parse(example, "dist/cosched.toml").unwrap(),
        Policy::default()
    );
    // Every key is in it.
    for line in Policy::default().to_toml().lines() {
        assert!(
            example.contains(line),
            "{line:?} is not in dist/cosched.toml"
        );
    }
}

#[test]
fn the_daemon_reads_only_a_file_no_one_but_root_may_write() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let path = std::env::temp_dir().join(format!("cosched-trusted-{}.toml", std::process::id()));
    std::fs::write(&path, "[limits]\nprocs = 8\n").unwrap();
    let refusal = |path: &Path| Policy::read_trusted(path).unwrap_err().to_string();
    if std::fs::metadata(&path).unwrap().uid() == 0 {
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(Policy::read_trusted(&path).unwrap().limits.procs, Some(8));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o664)).unwrap();
        let message = refusal(&path);
        assert!(
            message.contains("mode 664 lets others write it"),
            "{message}"
        );
    } else {
        let message = refusal(&path);
        assert!(message.contains(", not root: "), "{message}");
    }
    // Anyone may still read it for `cosched config` and the simulator.
    assert_eq!(Policy::read(&path).unwrap().limits.procs, Some(8));
    std::fs::remove_file(&path).unwrap();
}
