"""The Python client against a real daemon of its own (needs root, as CI runs): real jobs in
real cgroups, the gang check on the agent's own log, refusals with their reasons, and a socket
served by another user that gets nothing."""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from typing import IO, List, Optional, Tuple

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(HERE.parent))

import cosched  # noqa: E402

NOBODY = 65534
SPIN = "import time\nt = time.time()\nwhile time.time() - t < {}: pass"


def binary() -> str:
    for candidate in [os.environ.get("COSCHED"), REPO / "target/release/cosched", REPO / "target/debug/cosched"]:
        if candidate and os.access(str(candidate), os.X_OK):
            return str(candidate)
    raise unittest.SkipTest("no cosched binary: cargo build first")


def stretches(records: List[cosched.Boundary], job: int) -> List[Tuple[int, int]]:
    """[start, stop) of each time `job` ran, from the agent's boundary log."""
    out: List[Tuple[int, int]] = []
    running: Optional[int] = None
    for record in sorted(records, key=lambda r: r["woke_us"]):
        for stop in record["stopped"]:
            if stop["job"] == job and running is not None:
                out.append((running, stop["at_us"]))
                running = None
        for start in record["started"]:
            if start["job"] == job and running is None:
                running = start["at_us"]
    return out


@unittest.skipUnless(os.geteuid() == 0, "the daemon needs root")
class AgainstADaemon(unittest.TestCase):
    dir: str
    socket: str
    parent: str
    log: IO[str]
    daemon: "subprocess.Popen[bytes]"
    client: cosched.Client

    @classmethod
    def setUpClass(cls) -> None:
        cls.dir = tempfile.mkdtemp(prefix="cosched-py-")
        os.chmod(cls.dir, 0o755)
        cls.socket = os.path.join(cls.dir, "cosched.sock")
        cls.parent = f"cosched-py-{os.getpid()}"
        cls.log = open(os.path.join(cls.dir, "daemon.log"), "w")
        cls.daemon = subprocess.Popen(
            [binary(), "daemon", "--state-dir", os.path.join(cls.dir, "state"),
             "--socket", cls.socket, "--cgroup-parent", cls.parent,
             "--quantum-ms", "50", "--on-stop", "cancel", "--allow-registration"],
            stderr=cls.log,
        )
        deadline = time.time() + 20
        while not os.path.exists(cls.socket):
            if cls.daemon.poll() is not None or time.time() > deadline:
                raise RuntimeError(open(cls.log.name).read())
            time.sleep(0.05)
        cls.client = cosched.Client(cls.socket)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.daemon.terminate()
        cls.daemon.wait(30)
        cls.log.close()
        for root in pathlib.Path("/sys/fs/cgroup").glob(f"**/{cls.parent}"):
            for job in root.glob("job-*"):
                job.rmdir()
            root.rmdir()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def assert_took_turns(self, records: List[cosched.Boundary], a: int, b: int) -> None:
        """Both jobs ran several times, never at the same moment (the agent's own log)."""
        of_a, of_b = stretches(records, a), stretches(records, b)
        self.assertGreaterEqual(len(of_a), 3)
        self.assertGreaterEqual(len(of_b), 3)
        for start, stop in of_a:
            for other_start, other_stop in of_b:
                self.assertTrue(other_stop <= start or other_start >= stop,
                                f"{a} ran {start}-{stop} while {b} ran {other_start}-{other_stop}")

    def test_a_job_runs_as_asked_and_its_end_is_typed(self) -> None:
        out = os.path.join(self.dir, "hello.out")
        job = self.client.run(["sh", "-c", "echo hello $COSCHED_JOB_ID; exit 3"],
                              name="hello", output=out)
        ended = self.client.wait(job, timeout=60)
        self.assertEqual((ended.job, ended.state, ended.exit_code, ended.status), (job, "failed", 3, 3))
        self.assertEqual(open(out).read(), f"hello {job}\n")
        mine = [j for j in self.client.ps(all=True) if j.id == job]
        self.assertEqual(len(mine), 1)
        self.assertEqual((mine[0].name, mine[0].state, mine[0].exit_code, mine[0].uid),
                         ("hello", "failed", 3, os.getuid()))

    def test_a_job_past_its_time_limit_ends_timeout_with_its_run_time(self) -> None:
        job = self.client.run(["sleep", "60"], time_limit_s=1)
        [seen] = [j for j in self.client.ps() if j.id == job]
        self.assertEqual(seen.time_limit_us, 1_000_000)
        left = seen.time_left_us
        assert left is not None
        self.assertLessEqual(left, 1_000_000)
        ended = self.client.wait(job, timeout=60)
        self.assertEqual((ended.state, ended.exit_signal), ("timeout", 15))
        [done] = [j for j in self.client.ps(all=True) if j.id == job]
        self.assertGreaterEqual(done.run_us, 1_000_000)
        self.assertEqual(done.time_left_us, 0)
    def test_history_has_ended_jobs_typed_with_their_figures(self) -> None:
        since = int(time.time() * 1e6)
        ok = self.client.run(["python3", "-c", SPIN.format(0.3)], name="hist-ok")
        three = self.client.run(["sh", "-c", "exit 3"], name="hist-three")
        for job in (ok, three):
            self.client.wait(job, timeout=60)
        rows = self.client.history(since_us=since, uid=os.getuid())
        self.assertFalse(rows.truncated)
        by_id = {row.id: row for row in rows}
        self.assertTrue({ok, three} <= set(by_id), rows)
        self.assertEqual((by_id[ok].state, by_id[ok].exit_code), ("completed", 0))
        self.assertEqual((by_id[three].name, by_id[three].exit_code), ("hist-three", 3))
        cpu, elapsed = by_id[ok].cpu_us, by_id[ok].elapsed_us
        assert cpu is not None and elapsed is not None
        self.assertGreater(cpu, 100_000)
        self.assertGreaterEqual(elapsed, 300_000)
        self.assertEqual(by_id[ok].nodes, ["local"])
        self.assertEqual([r.id for r in self.client.history(jobs=[three])], [three])
        self.assertEqual([r.id for r in self.client.history(jobs=[ok, three], states=["cancelled"])], [])
        with self.assertRaisesRegex(cosched.RequestRefused, "'running' is not a way of ending"):
            self.client.history(states=["running"])

    def test_two_gang_jobs_never_run_at_once(self) -> None:
        since = int(time.time() * 1e6)
        a = self.client.run(["python3", "-c", SPIN.format(1.5)], procs=2)
        b = self.client.run(["python3", "-c", SPIN.format(1.5)], procs=2)
        matrix = self.client.matrix()
        self.assertEqual(matrix.mode, "gang")
        placed = {e.job for row in matrix.slices for e in row}
        self.assertTrue({a, b} <= placed, matrix)
        self.assertEqual(self.client.wait(a, timeout=60).status, 0)
        self.assertEqual(self.client.wait(b, timeout=60).status, 0)
        self.assert_took_turns(self.client.boundaries(since), a, b)

    def test_stats_nodes_and_boundaries_have_the_keys_their_types_declare(self) -> None:
        since = int(time.time() * 1e6)
        job = self.client.run(["sleep", "30"])
        time.sleep(1.5)  # the agent reports about once a second
        stats = self.client.stats()
        self.assertEqual(set(stats), cosched.Stats.__required_keys__)
        self.assertEqual(set(stats["switch_us"]), cosched.Summary.__required_keys__)
        self.assertEqual(stats["mode"], "gang")
        self.assertGreaterEqual(stats["jobs_running"], 1)
        [node] = self.client.nodes()
        self.assertEqual(set(node), cosched.Node.__required_keys__)
        status = node["status"]
        self.assertEqual(set(status) - cosched.NodeStatus.__optional_keys__,
                         cosched.NodeStatus.__required_keys__)
        self.assertEqual(set(status["histograms"]["switch"]), cosched.Histogram.__required_keys__)
        self.assertEqual((node["name"], node["left"]), ("local", False))
        boundaries = self.client.boundaries(since)
        self.assertTrue(boundaries)
        for boundary in boundaries:
            self.assertLessEqual(cosched.Boundary.__required_keys__, set(boundary))
            known = cosched.Boundary.__required_keys__ | cosched.Boundary.__optional_keys__
            self.assertLessEqual(set(boundary), known)
        self.client.cancel(job)

    def test_acting_on_a_job_and_refusals_name_what_was_wrong(self) -> None:
        job = self.client.run(["sleep", "30"])
        self.assertIn("suspended", self.client.suspend(job))
        self.assertIn("resumed", self.client.resume(job))
        self.assertIn("standby", self.client.set_class(job, "standby"))
        with self.assertRaisesRegex(cosched.RequestRefused, "unknown class"):
            self.client.set_class(job, "gold")
        self.client.cancel(job)
        self.assertEqual(self.client.wait(job, timeout=60).state, "cancelled")
        with self.assertRaisesRegex(cosched.NoSuchJob, "no job 999999"):
            self.client.cancel(999999)
        with self.assertRaisesRegex(cosched.RequestRefused, "at least one processor"):
            self.client.run(["true"], procs=0)
        with self.assertRaisesRegex(cosched.RequestRefused, "4096 processors requested but the machine has"):
            self.client.run(["true"], procs=4096)
        with self.assertRaises(ValueError):
            self.client.run("echo a string")
        with self.assertRaisesRegex(cosched.RequestRefused, "mode local is a whole machine's"):
            self.client.run(["true"], mode="local")
        moderate = self.client.run(["sleep", "30"], mode="moderate")
        self.assertEqual(self.client.ps(job=moderate)[0].mode, "moderate")
        self.client.cancel(moderate)
        with self.assertRaisesRegex(cosched.DaemonUnreachable, "no cosched daemon answers"):
            cosched.Client(os.path.join(self.dir, "nowhere.sock")).ps()

    def test_another_users_job_is_not_theirs_to_touch(self) -> None:
        job = self.client.run(["sleep", "30"])
        script = (f"import sys; sys.path.insert(0, {str(HERE.parent)!r}); import cosched\n"
                  f"c = cosched.Client({self.socket!r})\n"
                  f"print(len(c.ps()) > 0)\n"
                  f"try:\n    c.cancel({job})\nexcept cosched.NotAllowed as e:\n    print('refused:', e)")
        out = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                              "/usr/bin/python3", "-c", script],
                             capture_output=True, text=True, timeout=60)
        self.assertIn("True", out.stdout, out.stderr)
        self.assertIn("only its owner or root may cancel it", out.stdout, out.stderr)
        self.client.cancel(job)

    def test_registered_processes_started_here_take_turns(self) -> None:
        since = int(time.time() * 1e6)
        jobs, workers = [], []
        for name in ("py-one", "py-two"):
            registered = self.client.register(2, name=name)
            self.assertTrue(registered.cpus)
            jobs.append(registered.job)
            for _ in range(2):
                # The interpreter itself, not `python3` on the PATH: a version manager's shim
                # (pyenv's here) execs a chain of shells first, and a process still in an exec
                # cannot be held for its move (refused after 100 ms under CI's load).
                worker = subprocess.Popen([sys.executable, "-c", SPIN.format(1.5)])
                self.assertIn("joined", self.client.proc_add(registered.job, worker.pid))
                workers.append(worker)
        self.assertEqual({j.state for j in self.client.ps(job=jobs[0])}, {"running"})
        for worker in workers:
            self.assertEqual(worker.wait(60), 0)
        for job in jobs:
            ended = self.client.wait(job, timeout=30)
            self.assertEqual((ended.state, ended.status), ("completed", 0))
        self.assert_took_turns(self.client.boundaries(since), *jobs)

    def test_registration_refusals_name_what_was_wrong(self) -> None:
        with self.assertRaisesRegex(cosched.RequestRefused, "4096 processors requested"):
            self.client.register(4096)
        with self.assertRaisesRegex(cosched.NoSuchJob, "no job 999999"):
            self.client.proc_add(999999, os.getpid())
        plain = self.client.run(["sleep", "30"])
        with self.assertRaisesRegex(cosched.RequestRefused, "was not registered"):
            self.client.proc_add(plain, os.getpid())
        self.client.cancel(plain)
        job = self.client.register(1, join_within_s=30).job
        with self.assertRaisesRegex(cosched.RequestRefused, "init and the agent itself"):
            self.client.proc_add(job, 1)
        self.assertIn("no longer scheduled", self.client.job_end(job))
        self.assertEqual(self.client.wait(job, timeout=30).state, "completed")

    def test_a_socket_another_user_serves_gets_nothing(self) -> None:
        place = os.path.join(self.dir, "theirs")
        os.mkdir(place)
        os.chown(place, NOBODY, NOBODY)
        fake = os.path.join(place, "fake.sock")
        heard = os.path.join(place, "heard")
        server = subprocess.Popen(
            ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
             "/usr/bin/python3", "-c",
             "import socket, sys\n"
             "s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(); print('up', flush=True)\n"
             "c, _ = s.accept(); c.settimeout(2)\n"
             "try:\n    data = c.recv(65536)\nexcept OSError:\n    data = b''\n"
             "open(sys.argv[2], 'wb').write(data)",
             fake, heard],
            stdout=subprocess.PIPE, text=True)
        assert server.stdout is not None
        try:
            self.assertEqual(server.stdout.readline().strip(), "up")
            with self.assertRaisesRegex(cosched.UntrustedSocket, "served by uid 65534"):
                cosched.Client(fake).run(["true"], env={"SECRET": "root's"})
            server.wait(10)
            self.assertEqual(open(heard, "rb").read(), b"")
        finally:
            server.kill()
            server.wait()
            server.stdout.close()


if __name__ == "__main__":
    unittest.main()
