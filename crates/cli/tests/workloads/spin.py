#!/usr/bin/env python3
"""A test job: PROCS processes that each spin until they have used CPU_SECONDS of CPU time,
then the first exits with EXIT_CODE (after its children). Spinning by CPU time, not wall time,
makes a job's length independent of how it is scheduled."""
import os
import sys
import time


def spin(cpu_seconds):
    while time.process_time() < cpu_seconds:
        pass


def main():
    procs, cpu_seconds, code = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    children = []
    for _ in range(procs - 1):
        pid = os.fork()
        if pid == 0:
            spin(cpu_seconds)
            os._exit(0)
        children.append(pid)
    spin(cpu_seconds)
    for pid in children:
        os.waitpid(pid, 0)
    sys.exit(code)


if __name__ == "__main__":
    main()
