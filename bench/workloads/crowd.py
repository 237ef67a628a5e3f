"""A crowd of sleeping processes: forks children that sleep until killed, at most MOST of
them, until a fork is refused (the job's task cap); prints how many, then sleeps too.
    crowd.py MOST
The fork that is refused prints "fork refused after N" first."""
import os
import sys
import time

most = int(sys.argv[1])
forked = 0
try:
    while forked < most:
        if os.fork() == 0:
            time.sleep(3600)
            os._exit(0)
        forked += 1
except OSError:
    print("fork refused after", forked, flush=True)
print("crowd of", forked, flush=True)
time.sleep(3600)
