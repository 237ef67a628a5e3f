/* Round trip of one cache line between two CPUs (the first two this process may use): -n
 * samples of -w round trips each, 10 ms apart. A probe of the host, not a workload: on this
 * kind of VM the same two vCPUs measured ~120 ns or ~500 ns per round trip, flipping within
 * seconds (the host moves the vCPUs between cores that share a cache and cores that do not),
 * and a small-message ping-pong's speed follows it. Prints one JSON line: every sample (ns per
 * round trip) and their median. */
#include "common.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

static _Atomic long turn __attribute__((aligned(64)));
static long round_trips;
static int cpus[2];

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) {
        perror("cacheline: sched_setaffinity");
        exit(1);
    }
}

static void *answer(void *unused) {
    (void)unused;
    pin(cpus[1]);
    for (long i = 0; i < round_trips; i++) {
        while (atomic_load_explicit(&turn, memory_order_acquire) != 2 * i + 1) {
        }
        atomic_store_explicit(&turn, 2 * i + 2, memory_order_release);
    }
    return NULL;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    struct cs_options o = cs_parse(argc, argv,
                                   "cache-line round trip between two CPUs: -n samples of -w "
                                   "round trips (a probe of the host's core placement)",
                                   (struct cs_options){20, 20000, 0, 2});
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    sched_getaffinity(0, sizeof allowed, &allowed);
    int found = 0;
    for (int c = 0; c < CPU_SETSIZE && found < 2; c++) {
        if (CPU_ISSET(c, &allowed)) cpus[found++] = c;
    }
    if (found < 2) {
        fprintf(stderr, "cacheline: needs two CPUs, this process may use %d\n", found);
        exit(1);
    }
    round_trips = o.work;
    double *samples = calloc((size_t)o.iterations, sizeof *samples);
    if (!samples) {
        perror("cacheline: calloc");
        exit(1);
    }
    for (long s = 0; s < o.iterations; s++) {
        atomic_store(&turn, 0);
        pthread_t other;
        if (pthread_create(&other, NULL, answer, NULL) != 0) {
            fprintf(stderr, "cacheline: pthread_create failed\n");
            exit(1);
        }
        pin(cpus[0]);
        double start = cs_now();
        for (long i = 0; i < round_trips; i++) {
            atomic_store_explicit(&turn, 2 * i + 1, memory_order_release);
            while (atomic_load_explicit(&turn, memory_order_acquire) != 2 * i + 2) {
            }
        }
        samples[s] = (cs_now() - start) * 1e9 / (double)round_trips;
        pthread_join(other, NULL);
        usleep(10000);
    }
    printf("{\"workload\":\"cacheline\",\"cpus\":[%d,%d],\"samples_ns\":[", cpus[0], cpus[1]);
    for (long s = 0; s < o.iterations; s++) printf("%s%.1f", s ? "," : "", samples[s]);
    qsort(samples, (size_t)o.iterations, sizeof *samples, by_value);
    printf("],\"median_ns\":%.1f}\n", samples[o.iterations / 2]);
    free(samples);
    return 0;
}
