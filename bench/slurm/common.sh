# Sourced by bench/slurm/slurm-local and bench/slurm/slurm-lab (which define die): Debian's
# Slurm and munge installed if missing, and munged running (without systemd nobody starts it).

install_packages() {
  local missing=()
  for tool in slurmctld slurmd sbatch munged; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  [[ ${#missing[@]} -eq 0 ]] && return
  [[ $(id -u) -eq 0 ]] || die "needs root to install slurmctld slurmd slurm-client munge"
  echo "== installing Slurm and munge"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client munge >/dev/null
}

# Sets started_munge=yes when it had to start munged (a caller that is done stops it again).
start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return; fi
  started_munge=yes
  # Without systemd nobody creates /run/munge: do it, then run munged as its own user.
  install -d -o munge -g munge -m 0755 /run/munge
  [[ -f /etc/munge/munge.key ]] || die "no /etc/munge/munge.key (the munge package makes it)"
  runuser -u munge -- munged
  for _ in $(seq 50); do
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return
    sleep 0.1
  done
  die "munged did not start (check /var/log/munge/munged.log)"
}

# Whether the daemon whose pid file is $1 runs.
running() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# The slurm.conf lines both set-ups share: gang time slicing (facts in
# ../shared/notes/slurm-on-one-machine.md), munge, no accounting, Gang debug logging.
gang_settings() {
  cat <<CONF
SlurmUser=root
AuthType=auth/munge
SlurmctldDebug=info
DebugFlags=Gang
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
PreemptType=preempt/none
PreemptMode=GANG
SchedulerTimeSlice=5
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
CONF
}
