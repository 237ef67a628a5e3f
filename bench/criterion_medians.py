"""Prints the median of every Criterion benchmark under a folder, and the issue 2 targets.
   criterion_medians.py [FOLDER] [--json PATH]: with --json, the medians also go to PATH, with
   the machine, commit and date they were taken on (the Speed tables of docs/performance.md come from it)."""
import datetime
import json
import pathlib
import platform
import subprocess
import sys

args = sys.argv[1:]
json_path = None
if "--json" in args:
    at = args.index("--json")
    json_path = args[at + 1]
    del args[at : at + 2]
root = pathlib.Path(args[0] if args else "target/criterion")
rows = []
for est in sorted(root.glob("**/new/estimates.json")):
    bench = json.loads((est.parent / "benchmark.json").read_text())
    median_ns = json.loads(est.read_text())["median"]["point_estimate"]
    rows.append((bench["full_id"], median_ns))

def fmt(ns):
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"

cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
cpus = len([l for l in open("/proc/cpuinfo") if l.startswith("processor")])
print(f"machine: {platform.node()}, {cpu}, {cpus} CPUs")
import re
natural = lambda row: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", row[0])]
print(f"{'benchmark':45} {'median':>10}")
for name, ns in sorted(rows, key=natural):
    print(f"{name:45} {fmt(ns):>10}")
medians = dict(rows)
targets = [
    ("place/65536procs/mpl16", 100e3, "placing one job, 65,536 processors x 16 slices"),
    ("ctc-sp2/gang-mpl4", 1e9, "CTC-SP2 full trace, gang MPL 4, alternates"),
]
print()
for name, target, what in targets:
    if name in medians:
        ns = medians[name]
        verdict = "meets" if ns < target else "MISSES"
        print(f"target: {what}: median {fmt(ns)} vs {fmt(target)} -> {ns / target:.3f} of the target ({verdict})")

if json_path:
    def git(*words):
        done = subprocess.run(["git", *words], capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""
    commit = git("rev-parse", "--short=12", "HEAD") or "unknown"
    if git("status", "--porcelain", "--untracked-files=no"):
        commit += "-dirty"
    report = {
        "provenance": {
            "machine": f"{cpus} CPUs, {cpu}, Linux {platform.release()}",
            "commit": commit,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": "bench/core-and-sim (Criterion medians)",
        },
        "rows": [{"benchmark": name, "median_ns": ns} for name, ns in sorted(rows, key=natural)],
    }
    pathlib.Path(json_path).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {json_path}")
