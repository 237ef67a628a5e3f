//! `cosched daemon --check`: what this machine offers and which actuator the daemon would use.
//! It probes for real (a scratch cgroup, a real-time thread), then removes what it made.

use cosched_cgroups::{Actuator, Cgroups, Layout};
use serde::ser::{Serialize, SerializeStruct, Serializer};

/// One thing the daemon may use: whether this machine has it, and where or why not.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Feature {
    pub name: &'static str,
    pub available: bool,
    pub detail: String,
}

#[derive(Clone, Debug)]
pub struct Report {
    pub features: Vec<Feature>,
    /// The actuator the daemon would use, or why none can be used.
    pub actuator: Result<String, String>,
    pub cpus: u32,
}

/// `daemon --check --json` (docs/clients.md): `{"usable": bool, "actuator": the actuator or
/// null, "unusable_because": why none can be used or null, "cpus": n, "features": [{"name",
/// "available", "detail"}]}`; exactly one of `actuator` and `unusable_because` is a string.
impl Serialize for Report {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut report = serializer.serialize_struct("Report", 5)?;
        report.serialize_field("usable", &self.usable())?;
        report.serialize_field("actuator", &self.actuator.as_ref().ok())?;
        report.serialize_field("unusable_because", &self.actuator.as_ref().err())?;
        report.serialize_field("cpus", &self.cpus)?;
        report.serialize_field("features", &self.features)?;
        report.end()
    }
}

impl Report {
    pub fn usable(&self) -> bool {
        self.actuator.is_ok()
    }
}

fn feature(name: &'static str, available: bool, detail: impl Into<String>) -> Feature {
    Feature {
        name,
        available,
        detail: detail.into(),
    }
}

/// Whether the agent can keep idle processors polling while it switches jobs (a halted one
/// may wake for a boundary late). Opening the device alone asks nothing.
fn idle_feature() -> Feature {
    use cosched_agent::awake::DEVICE;
    let driver = std::fs::read_to_string("/sys/devices/system/cpu/cpuidle/current_driver")
        .map_or_else(|_| "none".to_string(), |d| d.trim().to_string());
    match std::fs::OpenOptions::new().write(true).open(DEVICE) {
        Ok(_) => feature(
            "idle wakeups",
            true,
            format!(
                "idle processors poll while jobs are switched ({DEVICE} at 0 µs; cpuidle driver {driver})"
            ),
        ),
        Err(error) => feature(
            "idle wakeups",
            false,
            format!(
                "{DEVICE}: {error}: a processor idle before a boundary may wake late from its idle state (cpuidle driver {driver})"
            ),
        ),
    }
}

/// Whether jobs' processes get the time slice `--time-slice-us` asks (the kernel's shortest
/// is probed: any in its bounds is taken alike).
fn slice_feature() -> Feature {
    use cosched_os::slice::{honoured, SHORTEST_US};
    match honoured(SHORTEST_US) {
        Ok(()) => feature(
            "time slices",
            true,
            "jobs' processes take the slice --time-slice-us gives (sched_attr.sched_runtime)",
        ),
        Err(kept) => feature(
            "time slices",
            false,
            format!(
                "the kernel keeps its own ({kept} µs reported; Linux 6.12 on takes one per \
                 task): a task waking beside a job's process, such as a kernel thread \
                 completing its disk writes, may wait milliseconds for the processor"
            ),
        ),
    }
}

fn realtime_thread() -> Result<(), String> {
    std::thread::spawn(|| cosched_os::realtime::make_realtime(cosched_os::realtime::CLOCK_PRIORITY))
        .join()
        .map_err(|_| "the probe thread panicked".to_string())?
        .map_err(|e| e.to_string())
}

/// How the kernel preempts kernel code, as far as it can be told.
#[derive(Debug, PartialEq)]
struct Preemption {
    /// none, voluntary, full, lazy or rt.
    model: Option<String>,
    /// Whether the model is chosen at boot (`preempt=`).
    dynamic: bool,
}

/// The preemption model: from debugfs (`none voluntary (full) lazy`: the current one in
/// parentheses), a dynamic kernel's last valid `preempt=` boot option, the kernel's build
/// options (`config`), or `uname -v`.
fn preemption(
    debugfs: Option<&str>,
    cmdline: &str,
    config: Option<&str>,
    version: &str,
) -> Preemption {
    let built = |option: &str| config.is_some_and(|c| c.lines().any(|line| line.trim() == option));
    let dynamic = version.contains("PREEMPT_DYNAMIC") || built("CONFIG_PREEMPT_DYNAMIC=y");
    let answer = |model: &str| Preemption {
        model: Some(model.to_string()),
        dynamic,
    };
    let current = debugfs.and_then(|text| {
        text.split_whitespace()
            .find_map(|word| word.strip_prefix('(')?.strip_suffix(')'))
    });
    if let Some(model) = current {
        return answer(model);
    }
    if version.contains("PREEMPT_RT") || built("CONFIG_PREEMPT_RT=y") {
        return answer("rt");
    }
    // The kernel takes the last one, and keeps its built model for a value it does not know.
    let chosen = cmdline
        .split_whitespace()
        .filter_map(|word| word.strip_prefix("preempt="))
        .next_back()
        .filter(|model| ["none", "voluntary", "full", "lazy"].contains(model));
    if let Some(model) = chosen.filter(|_| dynamic) {
        return answer(model);
    }
    let models = [
        ("CONFIG_PREEMPT_LAZY=y", "lazy"),
        ("CONFIG_PREEMPT=y", "full"),
        ("CONFIG_PREEMPT_VOLUNTARY=y", "voluntary"),
        ("CONFIG_PREEMPT_NONE=y", "none"),
    ];
    if let Some((_, model)) = models.iter().find(|(option, _)| built(option)) {
        return answer(model);
    }
    // `uname -v` names PREEMPT alone for a fully preemptible kernel.
    match version.split_whitespace().any(|word| word == "PREEMPT") {
        true => answer("full"),
        false => Preemption {
            model: None,
            dynamic,
        },
    }
}

/// The kernel's build options: /proc/config.gz, else Debian's /boot/config-RELEASE.
fn kernel_config() -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    let packed = std::fs::File::open("/proc/config.gz")
        .ok()
        .and_then(|file| {
            flate2::read::GzDecoder::new(file)
                .read_to_string(&mut text)
                .ok()
        });
    if packed.is_some() {
        return Some(text);
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    std::fs::read_to_string(format!("/boot/config-{}", release.trim())).ok()
}

fn preemption_feature(preemption: Preemption) -> Feature {
    const NAME: &str = "kernel preemption";
    let how = match preemption.dynamic {
        true => "boot with preempt=full",
        false => "a kernel built with CONFIG_PREEMPT",
    };
    match preemption.model.as_deref() {
        Some(model @ ("full" | "lazy" | "rt")) => feature(
            NAME,
            true,
            format!("{model}: a woken task may take its processor back from kernel code"),
        ),
        Some(model) => feature(
            NAME,
            false,
            format!(
                "{model}: a kernel thread keeps its processor until it yields, even from the \
                 real-time clock, so a boundary or a thaw is now and then milliseconds late \
                 ({how})"
            ),
        ),
        None => feature(
            NAME,
            false,
            "unknown: debugfs, the boot line, /proc/config.gz or /boot/config and uname -v do \
             not tell",
        ),
    }
}

pub fn check() -> Report {
    let mut features = Vec::new();
    let layout = match Layout::detect() {
        Ok(layout) => layout,
        Err(error) => {
            return Report {
                features,
                actuator: Err(format!("/proc/self/mountinfo: {error}")),
                cpus: cosched_os::usable_cpus(),
            }
        }
    };
    let v2_controllers = layout.v2_controllers();
    let v2_has = |c: &str| v2_controllers.iter().any(|x| x == c);
    let probe = format!("cosched-check-{}", std::process::id());
    // The scratch cgroup's files, or why it could not be made (then nothing is known).
    let v2_freeze = layout.v2.as_ref().map(|root| {
        let dir = root.join(&probe);
        let made = std::fs::create_dir(&dir);
        let has = dir.join("cgroup.freeze").exists();
        // Only where the root passes the memory controller down (as the daemon has it do).
        let peak = dir.join("memory.peak").exists();
        if made.is_ok() {
            let _ = std::fs::remove_dir(&dir);
        }
        (root.clone(), made.err(), has, peak)
    });
    let v2_peak = v2_freeze.as_ref().is_some_and(|(_, _, _, peak)| *peak);
    features.push(match &v2_freeze {
        Some((root, Some(error), _, _)) => feature(
            "cgroup v2 freezer",
            false,
            format!("cannot make a cgroup under {}: {error}", root.display()),
        ),
        Some((root, None, true, _)) => feature(
            "cgroup v2 freezer",
            true,
            match (layout.v2_favordynmods, &layout.v1_freezer) {
                (true, _) => format!("{} (favordynmods)", root.display()),
                // The v1 freezer is used: no freeze waits on the cgroup lock.
                (false, Some(_)) => format!("{}", root.display()),
                (false, None) => format!(
                    "{} without favordynmods: a job's start can hold a freeze back by \
                     milliseconds (each joining process holds the cgroup lock for an RCU \
                     grace period): mount -o remount,favordynmods {0}",
                    root.display()
                ),
            },
        ),
        Some((root, None, false, _)) => feature(
            "cgroup v2 freezer",
            false,
            format!(
                "{} has no cgroup.freeze (kernel before 5.2?)",
                root.display()
            ),
        ),
        None => feature("cgroup v2 freezer", false, "no cgroup2 mount"),
    });
    features.push(match &layout.v1_freezer {
        Some(dir) => feature("cgroup v1 freezer", true, dir.display().to_string()),
        None => feature("cgroup v1 freezer", false, "not mounted"),
    });
    features.push(if v2_has("cpuset") {
        feature("cpuset", true, "cgroup v2")
    } else if let Some(dir) = &layout.v1_cpuset {
        feature("cpuset", true, format!("cgroup v1 at {}", dir.display()))
    } else {
        feature(
            "cpuset",
            false,
            "no cpuset controller: jobs cannot be kept on their processors",
        )
    });
    features.push(if v2_has("cpu") {
        feature("cpu weight", true, "cgroup v2 cpu.weight")
    } else if let Some(dir) = &layout.v1_cpu {
        feature(
            "cpu weight",
            true,
            format!("cgroup v1 cpu.shares at {}", dir.display()),
        )
    } else {
        feature(
            "cpu weight",
            false,
            "no cpu controller: moderate mode cannot work",
        )
    });
    features.push(if v2_has("pids") {
        feature("task limit", true, "cgroup v2 pids.max")
    } else if let Some(dir) = &layout.v1_pids {
        feature(
            "task limit",
            true,
            format!("cgroup v1 pids at {}", dir.display()),
        )
    } else {
        feature(
            "task limit",
            false,
            "no pids controller: --tasks-per-cpu cannot be enforced",
        )
    });
    features.push(if v2_has("memory") {
        let peak = match v2_peak {
            true => "peak from memory.peak",
            false => "no memory.peak (Linux before 5.19?): jobs' peak memory is not known",
        };
        feature(
            "memory limit",
            true,
            format!("cgroup v2 memory.max, swap.max 0; {peak}"),
        )
    } else if let Some(dir) = &layout.v1_memory {
        let swap = match dir.join("memory.memsw.limit_in_bytes").exists() {
            true => "memory and swap limited together",
            false => "swap is not accounted (swapaccount=0): a job may page past its limit",
        };
        feature(
            "memory limit",
            true,
            format!("cgroup v1 at {}; {swap}", dir.display()),
        )
    } else {
        feature(
            "memory limit",
            false,
            "no memory controller: a job asking for memory ends lost when it starts, and \
             no job's peak memory is known",
        )
    });
    features.push(match realtime_thread() {
        Ok(()) => feature(
            "real-time priority",
            true,
            "SCHED_FIFO for the clock thread",
        ),
        Err(error) => feature(
            "real-time priority",
            false,
            format!("{error}: switches will be late by milliseconds under load"),
        ),
    });
    features.push(idle_feature());
    features.push(slice_feature());
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    features.push(preemption_feature(preemption(
        std::fs::read_to_string("/sys/kernel/debug/sched/preempt")
            .ok()
            .as_deref(),
        &read("/proc/cmdline"),
        kernel_config().as_deref(),
        &read("/proc/sys/kernel/version"),
    )));
    let actuator = match Cgroups::open(&layout, &probe, None) {
        Ok(cgroups) => {
            let description = cgroups.describe();
            cgroups
                .close()
                .map(|()| description)
                .map_err(|e| e.to_string())
        }
        Err(error) => Err(error.to_string()),
    };
    Report {
        features,
        actuator,
        cpus: cosched_os::usable_cpus(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_preemption_model_is_told_from_what_the_kernel_shows() {
        let model = |debugfs, cmdline, config, version| {
            preemption(debugfs, cmdline, config, version)
                .model
                .unwrap_or_default()
        };
        // This VM's kernel: dynamic, no preempt= on its boot line, built for none.
        let vm = "CONFIG_PREEMPT_BUILD=y\nCONFIG_PREEMPT_NONE=y\n# CONFIG_PREEMPT is not set\n\
                  CONFIG_PREEMPTION=y\nCONFIG_PREEMPT_DYNAMIC=y\n";
        let dynamic = "#1 SMP PREEMPT_DYNAMIC @0";
        assert_eq!(model(None, "quiet", Some(vm), dynamic), "none");
        assert_eq!(model(None, "quiet preempt=full", Some(vm), dynamic), "full");
        // The last one counts; one the kernel does not know leaves the built model.
        let twice = "preempt=full quiet preempt=voluntary";
        assert_eq!(model(None, twice, Some(vm), dynamic), "voluntary");
        assert_eq!(model(None, "preempt=bogus", Some(vm), dynamic), "none");
        assert_eq!(
            model(
                Some("none voluntary (full) lazy\n"),
                "quiet",
                Some(vm),
                dynamic
            ),
            "full"
        );
        // preempt= means nothing to a kernel that cannot change its model.
        let voluntary = "CONFIG_PREEMPT_VOLUNTARY=y\n";
        assert_eq!(
            model(None, "preempt=full", Some(voluntary), "#1 SMP"),
            "voluntary"
        );
        assert_eq!(model(None, "", None, "#1 SMP PREEMPT_RT"), "rt");
        assert_eq!(model(None, "", None, "#1 SMP PREEMPT Thu"), "full");
        let unknown = preemption(None, "", None, "#1 SMP");
        assert_eq!(unknown.model, None);
        let none = preemption_feature(preemption(None, "", Some(vm), dynamic));
        assert!(
            !none.available && none.detail.contains("preempt=full"),
            "{none:?}"
        );
        let fixed = preemption_feature(preemption(None, "", Some("CONFIG_PREEMPT_NONE=y"), "#1"));
        assert!(fixed.detail.contains("CONFIG_PREEMPT"), "{fixed:?}");
        assert!(!preemption_feature(unknown).available);
        let full = preemption_feature(preemption(None, "preempt=full", Some(vm), dynamic));
        assert!(full.available, "{full:?}");
    }

    #[test]
    fn the_json_report_says_usable_and_the_actuator_or_why_not_in_fields_of_their_own() {
        let mut report = Report {
            features: vec![feature("cpuset", true, "cgroup v2")],
            actuator: Ok("stop: cgroup v2 freezer".into()),
            cpus: 2,
        };
        assert_eq!(
            serde_json::to_value(&report).unwrap(),
            json!({
                "usable": true,
                "actuator": "stop: cgroup v2 freezer",
                "unusable_because": null,
                "cpus": 2,
                "features": [{"name": "cpuset", "available": true, "detail": "cgroup v2"}],
            })
        );
        report.actuator = Err("no freezer".into());
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(
            (
                &json["usable"],
                &json["actuator"],
                &json["unusable_because"]
            ),
            (&json!(false), &json!(null), &json!("no freezer"))
        );
    }
}
