/* A job made of processes that cosched did not start: this program registers a job, starts
 * its workers itself (fork), adds each to the job, and waits for them. Each worker spins for
 * the seconds given, so that two such jobs on the same processors take turns.
 *
 *   register [-n PROCS] [-s SECONDS] [-N NAME]
 *
 * Prints the job id and its processors, then each worker's CPU time; exits 1 with the
 * daemon's reason when the job cannot be registered or a worker cannot join. */
#define _GNU_SOURCE
#include "cosched.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double seconds(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Spins until `wall` seconds have passed; reports the CPU time it got. */
static void work(double wall) {
    double start = seconds(CLOCK_MONOTONIC);
    volatile unsigned long spins = 0;
    while (seconds(CLOCK_MONOTONIC) - start < wall) spins++;
    printf("worker %d: cpu %.2f s of %.2f s\n", getpid(), seconds(CLOCK_PROCESS_CPUTIME_ID), wall);
}

int main(int argc, char **argv) {
    unsigned procs = 2;
    double wall = 2;
    const char *name = "register-example";
    for (int opt; (opt = getopt(argc, argv, "n:s:N:")) != -1;) {
        switch (opt) {
        case 'n': procs = (unsigned)atoi(optarg); break;
        case 's': wall = atof(optarg); break;
        case 'N': name = optarg; break;
        default:
            fprintf(stderr, "usage: %s [-n PROCS] [-s SECONDS] [-N NAME]\n", argv[0]);
            return 2;
        }
    }
    struct cosched_job_spec spec = {.procs = procs, .name = name};
    cosched_job_id job;
    char cpus[256];
    if (cosched_job_register(&spec, &job, cpus, sizeof cpus) != 0) {
        fprintf(stderr, "register: %s\n", cosched_last_error());
        return 1;
    }
    printf("job %llu runs on cpus %s\n", (unsigned long long)job, cpus);
    fflush(stdout);
    int failed = 0;
    for (unsigned i = 0; i < procs; i++) {
        int go[2];
        if (pipe(go) != 0) return 1;
        pid_t pid = fork();
        if (pid == 0) {
            /* Joined before it works: its first instruction of work is in the job's slot. */
            char byte;
            close(go[1]);
            if (read(go[0], &byte, 1) != 1) _exit(1);
            work(wall);
            fflush(stdout);
            _exit(0);
        }
        close(go[0]);
        if (cosched_proc_add(job, pid) != 0) {
            fprintf(stderr, "register: worker %d: %s\n", pid, cosched_last_error());
            failed = 1;
        }
        if (write(go[1], "g", 1) != 1) failed = 1;
        close(go[1]);
    }
    for (int status; wait(&status) > 0;)
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
    char state[32];
    if (cosched_job_state(job, state, sizeof state) == 0) printf("job %llu: %s\n", (unsigned long long)job, state);
    return failed;
}
