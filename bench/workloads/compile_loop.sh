#!/usr/bin/env bash
# A sequential "local" load (seed 002, table 1): compiles a small C program over and over and
# prints one JSON line like the other workloads.   compile_loop.sh [-n COMPILES]
set -euo pipefail
. "$(dirname "$0")/../../scripts/lib/usage.sh"
n=40
while [[ $# -gt 0 ]]; do
  case "$1" in
    -n) [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || { echo "compile_loop.sh: -n needs a positive integer (got '${2:-}')" >&2; exit 2; }; n="$2"; shift 2 ;;
    -h|--help) usage_of; exit 0 ;;
    *) echo "compile_loop.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
  esac
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
here=$(cd "$(dirname "$0")" && pwd)
cp "$here/spinbarrier.c" "$here/common.h" "$dir/"
cpu_before=$(awk '{print $14 + $15 + $16 + $17}' /proc/$$/stat)
start=$(date +%s.%N)
for ((i = 0; i < n; i++)); do
  cc -O2 -pthread -c "$dir/spinbarrier.c" -o "$dir/out.o"
done
end=$(date +%s.%N)
ticks=$(getconf CLK_TCK)
cpu_after=$(awk '{print $14 + $15 + $16 + $17}' /proc/$$/stat)
awk -v n="$n" -v s="$start" -v e="$end" -v c0="$cpu_before" -v c1="$cpu_after" -v hz="$ticks" 'BEGIN {
  wall = e - s; printf "{\"workload\":\"compile_loop\",\"ranks\":1,\"work\":%d,\"unit\":\"compiles\",\"wall_s\":%.6f,\"rate\":%.3f,\"cpu_s\":%.6f,\"wait\":\"none\"}\n", n, wall, n / wall, (c1 - c0) / hz }'
