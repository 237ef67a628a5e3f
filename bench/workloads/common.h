/* Shared helpers of the cosched test workloads: options, timing, deterministic CPU work,
 * waiting policy, and the one JSON result line every program prints.
 *
 * Waiting: Open MPI busy-polls inside MPI_Wait/MPI_Recv (100 % CPU even with
 * OMPI_MCA_mpi_yield_when_idle=1, see ../shared/notes/linux-mechanisms.md). For the implicit
 * coscheduling variant the programs wait through cs_wait(), which COSCHED_WAIT selects:
 *   COSCHED_WAIT=spin            MPI_Wait (the library's own busy poll; the default)
 *   COSCHED_WAIT=spinblock[:US]  poll for US microseconds (default 200), then poll every
 *                                50 us while sleeping in between: two-phase spin-block. */
#ifndef COSCHED_WORKLOAD_COMMON_H
#define COSCHED_WORKLOAD_COMMON_H

#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static inline double cs_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU seconds (user + system) used by this process so far, all threads. */
static inline double cs_cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* Runs `worker(index, arg)` in `count` forked processes (index 0 to count - 1) and waits for
 * them all; exits if one fails. Returns their CPU seconds, user + system. */
static inline double cs_forked(const char *program, long count,
                               void (*worker)(long, const void *), const void *arg) {
    for (long p = 0; p < count; p++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "%s: fork: %s\n", program, strerror(errno));
            exit(1);
        }
        if (pid == 0) {
            worker(p, arg);
            _exit(0);
        }
    }
    int status = 0, failed = 0;
    while (wait(&status) > 0) {
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    if (failed) {
        fprintf(stderr, "%s: a worker process failed\n", program);
        exit(1);
    }
    struct rusage ru;
    getrusage(RUSAGE_CHILDREN, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* `units` of pure CPU work that the compiler cannot remove (about 0.4 us each on a 2-vCPU
 * AMD EPYC VM: `compute -n 2000 -w 1000` took 0.75 s per rank). */
static inline double cs_work(long units) {
    volatile double acc = 1.0;
    for (long u = 0; u < units; u++) {
        double x = acc;
        for (int i = 0; i < 250; i++) {
            x = x * 1.0000001 + 0.0000001;
        }
        acc = x;
    }
    return acc;
}

/* Parses a positive integer option value or exits with a one-line error. */
static inline long cs_positive(const char *program, const char *flag, const char *text) {
    char *end = NULL;
    errno = 0;
    long value = strtol(text ? text : "", &end, 10);
    if (!text || errno || *end || value <= 0) {
        fprintf(stderr, "%s: %s needs a positive integer (got '%s')\n", program, flag,
                text ? text : "");
        exit(2);
    }
    return value;
}

/* Options shared by every program: -n iterations, -w work units per iteration, -b bytes. */
struct cs_options {
    long iterations;
    long work;
    long bytes;
    long threads;
};

static inline void cs_usage(const char *program, const char *what, struct cs_options d) {
    fprintf(stderr,
            "usage: %s [-n ITERATIONS] [-w WORK_UNITS] [-b BYTES] [-t THREADS]\n"
            "%s\n"
            "defaults: -n %ld -w %ld -b %ld -t %ld; prints one JSON line on rank 0\n",
            program, what, d.iterations, d.work, d.bytes, d.threads);
}

static inline struct cs_options cs_parse(int argc, char **argv, const char *what,
                                  struct cs_options defaults) {
    struct cs_options o = defaults;
    const char *program = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            cs_usage(program, what, defaults);
            exit(0);
        } else if (!strcmp(arg, "-n")) {
            o.iterations = cs_positive(program, arg, value), i++;
        } else if (!strcmp(arg, "-w")) {
            o.work = cs_positive(program, arg, value), i++;
        } else if (!strcmp(arg, "-b")) {
            o.bytes = cs_positive(program, arg, value), i++;
        } else if (!strcmp(arg, "-t")) {
            o.threads = cs_positive(program, arg, value), i++;
        } else {
            fprintf(stderr, "%s: unknown option '%s' (try --help)\n", program, arg);
            exit(2);
        }
    }
    return o;
}

/* The result line: the harness reads it from stdout. */
static inline void cs_report(const char *workload, int ranks, long work_done, const char *unit,
                      double wall_s, double cpu_s, const char *wait) {
    printf("{\"workload\":\"%s\",\"ranks\":%d,\"work\":%ld,\"unit\":\"%s\",\"wall_s\":%.6f,"
           "\"rate\":%.3f,\"cpu_s\":%.6f,\"wait\":\"%s\"}\n",
           workload, ranks, work_done, unit, wall_s, wall_s > 0 ? work_done / wall_s : 0.0,
           cpu_s, wait);
    fflush(stdout);
}

#ifdef COSCHED_MPI
#include <mpi.h>

static long cs_spin_us = -1; /* -1: plain MPI_Wait */

static inline const char *cs_wait_name(void) { return cs_spin_us < 0 ? "spin" : "spinblock"; }

static inline void cs_wait_init(const char *program) {
    const char *mode = getenv("COSCHED_WAIT");
    if (!mode || !strcmp(mode, "spin")) {
        return;
    }
    if (!strncmp(mode, "spinblock", 9) && (mode[9] == '\0' || mode[9] == ':')) {
        cs_spin_us = mode[9] ? cs_positive(program, "COSCHED_WAIT=spinblock:", mode + 10) : 200;
        return;
    }
    fprintf(stderr, "%s: COSCHED_WAIT must be spin or spinblock[:US] (got '%s')\n", program,
            mode);
    exit(2);
}

static inline void cs_wait(MPI_Request *request) {
    if (cs_spin_us < 0) {
        MPI_Wait(request, MPI_STATUS_IGNORE);
        return;
    }
    int done = 0;
    double spin_until = cs_now() + (double)cs_spin_us * 1e-6;
    while (!done && cs_now() < spin_until) {
        MPI_Test(request, &done, MPI_STATUS_IGNORE);
    }
    const struct timespec nap = {0, 50 * 1000};
    while (!done) {
        nanosleep(&nap, NULL);
        MPI_Test(request, &done, MPI_STATUS_IGNORE);
    }
}

static inline void cs_send(const void *buf, int bytes, int to, int tag) {
    MPI_Request r;
    MPI_Isend(buf, bytes, MPI_BYTE, to, tag, MPI_COMM_WORLD, &r);
    cs_wait(&r);
}

static inline void cs_recv(void *buf, int bytes, int from, int tag) {
    MPI_Request r;
    MPI_Irecv(buf, bytes, MPI_BYTE, from, tag, MPI_COMM_WORLD, &r);
    cs_wait(&r);
}

/* A barrier that waits by the selected policy. */
static inline void cs_barrier(void) {
    MPI_Request r;
    MPI_Ibarrier(MPI_COMM_WORLD, &r);
    cs_wait(&r);
}

/* Sums every rank's CPU time on rank 0 and prints the result line there. */
static inline void cs_mpi_report(const char *workload, long work_done, const char *unit, double wall_s) {
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double cpu = cs_cpu_seconds(), total = 0.0;
    MPI_Reduce(&cpu, &total, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        cs_report(workload, size, work_done, unit, wall_s, total, cs_wait_name());
    }
}
#endif

#endif
