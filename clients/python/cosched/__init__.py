"""Client for the cosched daemon: its Unix-socket protocol (docs/protocol.md, version 1).

One connection per request, one JSON line each way. Before sending anything the client checks
who serves the socket (SO_PEERCRED): root or the caller, else it refuses, since `run` sends the
caller's environment.

Every verb's result is typed (the package ships `py.typed`): frozen dataclasses for jobs, ends,
history rows, registrations and the matrix; `TypedDict`s (plain dicts at run time, as these
verbs always returned) for `stats()`, `nodes()` and `boundaries()`. A job's `state` is a `str`:
the daemon's names for how jobs end may grow (a newer daemon tells `completed` from `failed`
where an older one said `done`), and an older client must still read them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import struct
from typing import Any, Dict, List, Optional, Sequence, TypedDict

__all__ = [
    "Client",
    "Job",
    "Ended",
    "HistoryRow",
    "History",
    "Registered",
    "MatrixEntry",
    "Matrix",
    "Summary",
    "Stats",
    "Histogram",
    "NodeHistograms",
    "SlotStart",
    "NodeStatus",
    "Node",
    "JobMoment",
    "JobSkew",
    "Boundary",
    "CoschedError",
    "DaemonUnreachable",
    "UntrustedSocket",
    "RequestRefused",
    "NoSuchJob",
    "NotAllowed",
    "DEFAULT_SOCKET",
]

DEFAULT_SOCKET = "/run/cosched/cosched.sock"
PROTOCOL_VERSION = 1
# Longest reply line read (the daemon's longest: ps --all, boundaries).
_REPLY_LIMIT = 64 << 20


class CoschedError(Exception):
    """Anything the daemon refused or could not be asked; the message is one line."""


class DaemonUnreachable(CoschedError):
    """No daemon answers at the socket."""


class UntrustedSocket(CoschedError):
    """The socket is served by neither root nor the caller: nothing was sent."""


class RequestRefused(CoschedError):
    """The daemon refused the request (its reason is the message)."""


class NoSuchJob(RequestRefused):
    """The job named does not exist."""


class NotAllowed(RequestRefused):
    """The caller may not do this to that job (only its owner or root may act on it)."""


@dataclasses.dataclass(frozen=True)
class Job:
    """One job, as `ps` shows it."""

    id: int
    name: str
    uid: int
    user: str
    job_class: str
    procs: int
    state: str
    cpus: Optional[str]
    slices: List[int]
    submitted_us: int
    started_us: Optional[int]
    ended_us: Optional[int]
    exit_code: Optional[int]
    exit_signal: Optional[int]
    argv: List[str]
    note: Optional[str]
    node_count: Optional[int] = None
    suspended_us: int = 0
    # The listing carries only the start of the command; ps(job=...) has it whole.
    argv_cut: bool = False
    # Why it waits (resources, memory, priority, limit, node, held), while it does.
    reason: Optional[str] = None
    # Its time limit and the time it has been let run (its share of the slots), in µs.
    time_limit_us: Optional[int] = None
    run_us: int = 0
    # Memory it asked for on each node (bytes).
    mem_bytes: Optional[int] = None
    # Since when every process of it has waited in its own slots (no CPU, no I/O), if it is
    # stalled (a deadlock, say); only on a running job.
    stalled_since_us: Optional[int] = None
    # Its mode (asked for, or the daemon's); an auto job's chosen one and why, once chosen.
    mode: str = "gang"
    runs_as: Optional[str] = None
    mode_why: Optional[str] = None

    @property
    def time_left_us(self) -> Optional[int]:
        """What is left of its time limit (µs), if it has one."""
        if self.time_limit_us is None:
            return None
        return max(0, self.time_limit_us - self.run_us)

    @classmethod
    def _from(cls, v: Dict[str, Any]) -> "Job":
        exit_info = v.get("exit") or {}
        return cls(
            id=v["id"],
            name=v["name"],
            uid=v["uid"],
            user=v["user"],
            job_class=v["class"],
            procs=v["procs"],
            state=v["state"],
            cpus=v.get("cpus"),
            slices=list(v.get("slices", [])),
            submitted_us=v["submitted_us"],
            started_us=v.get("started_us"),
            ended_us=v.get("ended_us"),
            exit_code=exit_info.get("code"),
            exit_signal=exit_info.get("signal"),
            argv=list(v.get("argv", [])),
            note=v.get("note"),
            node_count=v.get("node_count"),
            suspended_us=v.get("suspended_us", 0),
            argv_cut=v.get("argv_cut", False),
            reason=v.get("reason"),
            time_limit_us=v.get("time_limit_us"),
            run_us=v.get("run_us", 0),
            mem_bytes=v.get("mem_bytes"),
            stalled_since_us=v.get("stalled_since_us"),
            mode=v.get("mode", "gang"),
            runs_as=v.get("runs_as"),
            mode_why=v.get("mode_why"),
        )


@dataclasses.dataclass(frozen=True)
class Ended:
    """How a job ended: `state` completed (exit 0), failed (a non-zero exit, a signal, or
    ended by cosched), cancelled, timeout or lost; its exit code or signal."""

    job: int
    state: str
    exit_code: Optional[int]
    exit_signal: Optional[int]
    note: Optional[str] = None

    @property
    def status(self) -> int:
        """The shell's status: the exit code, 128 + the signal, or 1; never 0 for a job that
        ended `failed` (cosched ended it: out of memory), whatever its own code."""
        if self.exit_code is not None:
            if self.state == "failed":
                return max(self.exit_code, 1)
            return self.exit_code
        if self.exit_signal is not None:
            return 128 + self.exit_signal
        return 1


@dataclasses.dataclass(frozen=True)
class HistoryRow:
    """One ended job as `history` shows it: its times (µs), how it ended, what it used."""

    id: int
    name: str
    uid: int
    user: str
    gid: int
    job_class: str
    procs: int
    state: str
    exit_code: Optional[int]
    exit_signal: Optional[int]
    # Why it ended so when its exit does not say ("out of memory").
    note: Optional[str]
    submitted_us: int
    started_us: Optional[int]
    ended_us: int
    wait_us: int
    # From start to end, frozen slots included; None if it never started.
    elapsed_us: Optional[int]
    # How long its owner kept it suspended.
    suspended_us: int
    # How long it was let run (not frozen in others' slots), its limit, its memory per node.
    run_us: int
    time_limit_us: Optional[int]
    mem_bytes: Optional[int]
    # From its cgroup as it ended; None where its node could not tell.
    cpu_us: Optional[int]
    peak_memory_bytes: Optional[int]
    nodes: List[str]
    cpus_on_nodes: List[int]
    # The first 1 KiB of its command (argv_cut when that is not all of it).
    argv: List[str]
    argv_cut: bool = False

    @classmethod
    def _from(cls, v: Dict[str, Any]) -> "HistoryRow":
        # The wire's names, but for the class and the exit (and fields this client predates).
        exit_info = v.get("exit") or {}
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(
            **{k: value for k, value in v.items() if k in known},
            job_class=v["class"],
            exit_code=exit_info.get("code"),
            exit_signal=exit_info.get("signal"),
        )


class History(List[HistoryRow]):
    """The rows `history` returned; `truncated` when the reply's 4 MiB bound left older
    matches out (narrow the window for them)."""

    truncated: bool = False


@dataclasses.dataclass(frozen=True)
class Registered:
    """A registered job that runs: its id and its processors (a cpuset list)."""

    job: int
    cpus: str


@dataclasses.dataclass(frozen=True)
class MatrixEntry:
    job: int
    cpus: str
    role: str


@dataclasses.dataclass(frozen=True)
class Matrix:
    """The Ousterhout matrix now: slot k starts at epoch_us + k * quantum_us."""

    procs: int
    mode: str
    epoch_us: int
    quantum_us: int
    slot: int
    running_slice: Optional[int]
    generation: int
    slices: List[List[MatrixEntry]]
    queued: List[int]


class Summary(TypedDict):
    """Percentiles of a measure (µs); `count`: every sample ever recorded."""

    p50: int
    p99: int
    max: int
    count: int


class Stats(TypedDict):
    """`stats()`: the daemon's mode and slot, how its switches go (over every node: the worst
    percentiles, the sum of counts), and how many jobs are where."""

    mode: str
    quantum_ms: float
    actuator: str
    realtime: bool
    lateness_us: Summary
    switch_us: Summary
    skew_us: Summary
    missed_slots: int
    jobs_running: int
    jobs_queued: int
    jobs_ended: int
    idle_departures: int
    clients_waiting: int


class Histogram(TypedDict):
    """Samples per bucket (not cumulative; the last bucket is past the last bound)."""

    buckets: List[int]
    sum_us: int
    count: int


class NodeHistograms(TypedDict):
    lateness: Histogram
    switch: Histogram
    skew: Histogram


class SlotStart(TypedDict):
    slot: int
    job: int
    at_us: int


class _NodeStatus(TypedDict):
    node: str
    # The CPUs it schedules: [[first, last], ...].
    cpus: List[List[int]]
    mode: str
    actuator: str
    realtime: bool
    generation: Optional[int]
    lateness_us: Summary
    switch_us: Summary
    skew_us: Summary
    publish_us: Summary
    missed_slots: int
    clock_offset_us: Optional[int]
    clock_shift_us: int
    sent_us: int
    scheduling: bool
    histograms: NodeHistograms


class NodeStatus(_NodeStatus, total=False):
    """A node agent's latest report on itself; `starts` only when it started jobs at sampled
    slot boundaries since its report before."""

    starts: List[SlotStart]


class Node(TypedDict):
    """`nodes()`: a node as the daemon knows it; `left`: its lease expired (`status` is then
    its last report)."""

    name: str
    joined_us: int
    heard_ms_ago: int
    status: NodeStatus
    left: bool


class JobMoment(TypedDict):
    job: int
    at_us: int


class JobSkew(TypedDict):
    job: int
    skew_us: int


class _BoundaryLenders(TypedDict, total=False):
    # Only at a handover within a slot (`--give-away-after-ms`): the blocked jobs that lent
    # their processors; such a record has no lateness.
    blocked: List[int]
    # Only where a started gang job's skew was measured: how long after its first working
    # task its last began to run (µs).
    skews: List[JobSkew]


class Boundary(_BoundaryLenders):
    """`boundaries()`: a slot boundary at which a node stopped or started jobs (true clock)."""

    node: str
    slot: int
    generation: Optional[int]
    woke_us: int
    lateness_us: Optional[int]
    stopped: List[JobMoment]
    started: List[JobMoment]


def _refusal(message: str) -> RequestRefused:
    if message.startswith("no job "):
        return NoSuchJob(message)
    if "only its owner or root" in message or "only root may" in message:
        return NotAllowed(message)
    return RequestRefused(message)


class Client:
    """A client of the daemon at `socket_path` (COSCHED_SOCKET, else the default)."""

    def __init__(self, socket_path: Optional[str] = None, timeout: float = 30.0):
        self.socket_path = socket_path or os.environ.get("COSCHED_SOCKET") or DEFAULT_SOCKET
        self.timeout = timeout

    # -- the connection -------------------------------------------------------------------

    def _connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError as error:
            sock.close()
            raise DaemonUnreachable(
                f"no cosched daemon answers at {self.socket_path}: {error.strerror or error}"
            ) from None
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        if uid not in (0, os.getuid()):
            sock.close()
            raise UntrustedSocket(
                f"{self.socket_path} is served by uid {uid}, not by root's cosched daemon; "
                "refusing to use it"
            )
        return sock

    def _send(self, request: Dict[str, Any], fds: Sequence[int] = ()) -> socket.socket:
        sock = self._connect()
        line = (json.dumps(request) + "\n").encode()
        try:
            if fds:
                socket.send_fds(sock, [line[:1]], list(fds))
                sock.sendall(line[1:])
            else:
                sock.sendall(line)
        except OSError:
            # A daemon that refuses at once may close first: its reason is still to be read.
            pass
        return sock

    @staticmethod
    def _read(sock: socket.socket, replies: Any, timeout: Optional[float]) -> Dict[str, Any]:
        """The next reply line from `replies` (`sock.makefile("rb")`)."""
        sock.settimeout(timeout)
        line = replies.readline(_REPLY_LIMIT + 1)
        if not line.endswith(b"\n"):
            if len(line) > _REPLY_LIMIT:
                raise CoschedError(f"a reply longer than {_REPLY_LIMIT} bytes")
            raise DaemonUnreachable("the daemon closed the connection without a reply")
        reply: Dict[str, Any] = json.loads(line.decode())
        if not reply.get("ok"):
            raise _refusal(reply.get("error", "the daemon refused without a reason"))
        return reply

    def _ask(self, request: Dict[str, Any]) -> Dict[str, Any]:
        with self._send(request) as sock, sock.makefile("rb") as replies:
            return self._read(sock, replies, self.timeout)

    # -- the verbs --------------------------------------------------------------------------

    def run(
        self,
        argv: Sequence[str],
        procs: int = 1,
        *,
        nodes: Optional[int] = None,
        name: Optional[str] = None,
        job_class: Optional[str] = None,
        env: Optional[Dict[str, str]] = None,
        cwd: Optional[str] = None,
        output: Optional[str] = None,
        time_limit_s: Optional[int] = None,
        mem_bytes: Optional[int] = None,
        mem_per_cpu_bytes: Optional[int] = None,
        mode: Optional[str] = None,
    ) -> int:
        """Submits a job and returns its id at once (`wait` for its end). `output`: a file
        for its stdout and stderr (appended to; on a cluster, opened by the job on its
        nodes), else they are discarded. The job runs as the caller, in `cwd` (default:
        here) with `env` (default: this environment). `time_limit_s`: seconds it may be let
        run (then it ends `timeout`); `mem_bytes` per node or `mem_per_cpu_bytes`; `mode`:
        gang, moderate, implicit or auto (default: the daemon's)."""
        if isinstance(argv, str) or not argv:
            raise ValueError("argv must be a non-empty list of words (a command, not a string)")
        request: Dict[str, Any] = {
            "op": "run",
            "argv": list(argv),
            "env": sorted((env if env is not None else dict(os.environ)).items()),
            "cwd": os.path.abspath(cwd or os.getcwd()),
            "procs": procs,
            "detach": True,
            # Where the descriptors sent cannot reach the job (a cluster's nodes), it opens
            # this itself (without one: discarded).
            "output": os.path.abspath(output) if output is not None else os.devnull,
        }
        if nodes is not None:
            request["node_count"] = nodes
        if name is not None:
            request["name"] = name
        if job_class is not None:
            request["class"] = job_class
        for key, value in (
            ("time_limit_s", time_limit_s),
            ("mem_bytes", mem_bytes),
            ("mem_per_cpu_bytes", mem_per_cpu_bytes),
            ("mode", mode),
        ):
            if value is not None:
                request[key] = value
        opened: List[int] = []
        try:
            if output is not None:
                opened.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
                # Never through a link (another user's, in /tmp, would get the output).
                out = os.open(
                    output,
                    os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW,
                    0o600,
                )
                opened += [out, out]
                request["stdio"] = True
            with self._send(request, opened) as sock, sock.makefile("rb") as replies:
                job: int = self._read(sock, replies, self.timeout)["job"]
                return job
        finally:
            for fd in set(opened):
                os.close(fd)

    def wait(self, job: int, timeout: Optional[float] = None) -> Ended:
        """Blocks until `job` ends (or `timeout` seconds pass: TimeoutError)."""
        with self._send({"op": "wait", "job": job}) as sock, sock.makefile("rb") as replies:
            reply = self._read(sock, replies, timeout)
        exit_info = reply.get("exit") or {}
        return Ended(
            job=reply["job"],
            state=reply["state"],
            exit_code=exit_info.get("code"),
            exit_signal=exit_info.get("signal"),
            note=reply.get("note"),
        )

    def ps(self, all: bool = False, job: Optional[int] = None) -> List[Job]:  # noqa: A002
        """Unfinished jobs, or with `all` the ended ones the daemon keeps in memory too, or with
        `job` that one, whole (from the daemon's store if it left memory; an empty list if there
        is no such job). A listing carries the first 1 KiB of each command (`argv_cut` says when
        that is not all of it); an ended job keeps the first 4 KiB of its command."""
        request: Dict[str, Any] = {"op": "ps", "all": all}
        if job is not None:
            request["job"] = job
        return [Job._from(v) for v in self._ask(request)["jobs"]]

    def history(
        self,
        *,
        uid: Optional[int] = None,
        jobs: Sequence[int] = (),
        states: Sequence[str] = (),
        since_us: Optional[int] = None,
        until_us: Optional[int] = None,
        limit: Optional[int] = None,
    ) -> History:
        """Ended jobs from the daemon's store, the latest ended first; each filter given must
        hold: owner `uid`, ids `jobs` (at most 1,000), ended `states` (completed, failed, cancelled,
        timeout, lost), an end time in [`since_us`, `until_us`) (µs since the epoch),
        at most `limit` jobs (1 to 10,000; 1,000 by default). A reply holds at most 4 MiB: the
        list's `truncated` says whether it left older matches out."""
        request: Dict[str, Any] = {"op": "history"}
        optional = {"uid": uid, "since_us": since_us, "until_us": until_us, "limit": limit}
        request.update({k: v for k, v in optional.items() if v is not None})
        if jobs:
            request["jobs"] = list(jobs)
        if states:
            request["states"] = list(states)
        reply = self._ask(request)
        rows = History(HistoryRow._from(v) for v in reply["history"])
        rows.truncated = reply.get("truncated", False)
        return rows

    def matrix(self) -> Matrix:
        m = self._ask({"op": "matrix"})["matrix"]
        return Matrix(
            procs=m["procs"],
            mode=m["mode"],
            epoch_us=m["epoch_us"],
            quantum_us=m["quantum_us"],
            slot=m["slot"],
            running_slice=m.get("running_slice"),
            generation=m["generation"],
            slices=[[MatrixEntry(e["job"], e["cpus"], e["role"]) for e in s] for s in m["slices"]],
            queued=list(m["queued"]),
        )

    def stats(self) -> Stats:
        stats: Stats = self._ask({"op": "stats"})["stats"]
        return stats

    def nodes(self) -> List[Node]:
        nodes: List[Node] = self._ask({"op": "nodes"})["nodes"]
        return nodes

    def boundaries(self, since_us: int) -> List[Boundary]:
        """The agent's log of slot boundaries from `since_us` on (one machine)."""
        found: List[Boundary] = self._ask({"op": "boundaries", "since_us": since_us})["boundaries"]
        return found

    def _act(self, request: Dict[str, Any]) -> str:
        """The daemon's one-line answer to an action."""
        message: str = self._ask(request)["message"]
        return message

    def cancel(self, job: int) -> str:
        return self._act({"op": "cancel", "job": job})

    def suspend(self, job: int) -> str:
        return self._act({"op": "suspend", "job": job})

    def resume(self, job: int) -> str:
        return self._act({"op": "resume", "job": job})

    def set_class(self, job: int, job_class: str) -> str:
        return self._act({"op": "class", "job": job, "class": job_class})

    # -- registration: jobs of processes started elsewhere (one machine) ---------------------

    def register(
        self,
        procs: int,
        *,
        name: Optional[str] = None,
        job_class: Optional[str] = None,
        join_within_s: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> Registered:
        """Records a job whose processes are started elsewhere and blocks until it runs (it
        may queue behind others; `timeout` seconds: TimeoutError). Its processes then join
        with `proc_add`. It ends once every process that joined has exited, or (exit 3) when
        none joined within `join_within_s` (default 60) of its start; `job_end` ends it
        sooner."""
        request: Dict[str, Any] = {"op": "register", "procs": procs}
        if name is not None:
            request["name"] = name
        if job_class is not None:
            request["class"] = job_class
        if join_within_s is not None:
            request["join_within_s"] = join_within_s
        with self._send(request) as sock, sock.makefile("rb") as replies:
            job = self._read(sock, replies, self.timeout)["job"]
            started = self._read(sock, replies, timeout)
        if "cpus" not in started:
            raise CoschedError(f"job {job} ended before it started ({started.get('state')})")
        return Registered(job=job, cpus=started["cpus"])

    def proc_add(self, job: int, pid: int) -> str:
        """Process `pid` (one of the job owner's) joins running registered job `job`: it runs
        in the job's slots, on its processors, from now on."""
        return self._act({"op": "proc_add", "job": job, "pid": pid})

    def job_end(self, job: int) -> str:
        """The registered job is over: its processes run unscheduled, and it ends once they
        have exited (nothing is killed)."""
        return self._act({"op": "job_end", "job": job})
