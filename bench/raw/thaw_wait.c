/* How long a thawed gang thread waits for its processor beside a process outside every job.
 *
 * Two groups of one spinning thread each take turns on one processor, every QUANTUM ms: this
 * program (SCHED_FIFO, on another processor) freezes one and thaws the other, then reads the
 * thawed thread's run-queue wait from /proc/PID/schedstat. Beside them an "outsider" (a normal
 * process, as a user's command would be) starts every 10-30 ms and spins BURST ms, about what
 * `cosched run` needs of a processor to start. The question is which kernel levers make the
 * thawed thread take its processor back at once: the threads' own slice (sched_attr's
 * sched_runtime, Linux 6.12 on), and the weight of the groups' parent, with the groups either
 * directly under the root (flat) or under one parent (nested, as cosched places jobs).
 *
 *   thaw_wait flat|nested SLICE_US PARENT_WEIGHT_X SECONDS QUANTUM_MS BURST_MS
 *
 * SLICE_US 0 leaves the kernel's slice; PARENT_WEIGHT_X multiplies the parent's default CPU
 * weight (nested only). Prints one line: the variant and the waits' p50, p99, max and how
 * many exceeded 300 us. Needs root; cgroup v1 (freezer and cpu) or v2 (with cpu enabled). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct sched_attr_v1 {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime, deadline, period;
};

static int v2;                  /* 1: one unified tree at /sys/fs/cgroup */
static char group[2][64];       /* the groups, relative to each hierarchy's root */
static char parent[32];         /* "" when flat */
static pid_t spinner[2], outsider_loop, main_pid;

static void die(const char *what) {
    fprintf(stderr, "thaw_wait: %s: %s\n", what, strerror(errno));
    /* A child leaves the cleanup to this program. */
    if (getpid() != main_pid) _exit(1);
    exit(1);
}

static void put(const char *path, const char *text) {
    int fd = open(path, O_WRONLY);
    if (fd < 0 || write(fd, text, strlen(text)) < 0) die(path);
    close(fd);
}

static void path_of(char *out, const char *hierarchy, const char *rel, const char *file) {
    if (v2) snprintf(out, 512, "/sys/fs/cgroup/%s/%s", rel, file);
    else snprintf(out, 512, "/sys/fs/cgroup/%s/%s/%s", hierarchy, rel, file);
}

static void make_group(const char *rel) {
    char path[512];
    const char *hierarchies[] = {"freezer", "cpu"};
    for (int i = 0; i < (v2 ? 1 : 2); i++) {
        path_of(path, hierarchies[i], rel, "");
        if (mkdir(path, 0755) < 0 && errno != EEXIST) die(path);
    }
}

static void remove_group(const char *rel) {
    char path[512];
    const char *hierarchies[] = {"freezer", "cpu"};
    for (int i = 0; i < (v2 ? 1 : 2); i++) {
        path_of(path, hierarchies[i], rel, "");
        rmdir(path);
    }
}

static void set_frozen(int which, int frozen) {
    char path[512];
    path_of(path, "freezer", group[which], v2 ? "cgroup.freeze" : "freezer.state");
    put(path, v2 ? (frozen ? "1" : "0") : (frozen ? "FROZEN" : "THAWED"));
}

static void join(int which, pid_t pid) {
    char path[512], text[32];
    snprintf(text, sizeof text, "%d", pid);
    path_of(path, "freezer", group[which], "cgroup.procs");
    put(path, text);
    if (!v2) {
        path_of(path, "cpu", group[which], "cgroup.procs");
        put(path, text);
    }
}

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) < 0) die("sched_setaffinity");
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Run-queue wait (ns) and times switched in, from /proc/PID/schedstat. */
static void schedstat(pid_t pid, unsigned long long *wait, unsigned long long *switched) {
    char path[64], text[128];
    unsigned long long ran;
    snprintf(path, sizeof path, "/proc/%d/schedstat", pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) die(path);
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0) die(path);
    text[n] = 0;
    if (sscanf(text, "%llu %llu %llu", &ran, wait, switched) != 3) die("schedstat format");
}

static void cleanup(void) {
    if (outsider_loop > 0) kill(outsider_loop, SIGKILL), waitpid(outsider_loop, 0, 0);
    for (int i = 0; i < 2; i++) {
        if (spinner[i] <= 0) continue;
        kill(spinner[i], SIGKILL);
        set_frozen(i, 0);
        waitpid(spinner[i], 0, 0);
    }
    usleep(20000);
    for (int i = 0; i < 2; i++) remove_group(group[i]);
    if (parent[0]) remove_group(parent);
}

/* Interrupted (Ctrl-C), it stops at the next thaw and still cleans up (from main). */
static volatile sig_atomic_t interrupted;

static void on_signal(int signal) {
    (void)signal;
    interrupted = 1;
}

/* A child dies with this program, whatever kills it. */
static void die_with_parent(void) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) die("prctl");
    if (getppid() != main_pid) _exit(1);
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc != 7 || (strcmp(argv[1], "flat") && strcmp(argv[1], "nested"))) {
        fprintf(stderr, "usage: thaw_wait flat|nested SLICE_US PARENT_WEIGHT_X SECONDS "
                        "QUANTUM_MS BURST_MS\n");
        return 2;
    }
    main_pid = getpid();
    int nested = !strcmp(argv[1], "nested");
    long slice_us = atol(argv[2]), weight_x = atol(argv[3]);
    double seconds = atof(argv[4]), quantum = atof(argv[5]) / 1e3, burst = atof(argv[6]) / 1e3;
    if (slice_us < 0 || weight_x < 1 || seconds <= 0 || quantum <= 0 || burst <= 0 ||
        seconds < quantum) {
        fprintf(stderr, "thaw_wait: SLICE_US must be 0 or more, PARENT_WEIGHT_X 1 or more, "
                        "SECONDS, QUANTUM_MS and BURST_MS positive, SECONDS at least a slot\n");
        return 2;
    }
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
        fprintf(stderr, "thaw_wait: needs two processors\n");
        return 2;
    }
    v2 = access("/sys/fs/cgroup/freezer", F_OK) != 0;
    char path[512];
    if (v2 && access("/sys/fs/cgroup/cgroup.subtree_control", F_OK) != 0) {
        fprintf(stderr, "thaw_wait: neither cgroup v1 freezer nor cgroup v2 found\n");
        return 2;
    }
    if (v2) put("/sys/fs/cgroup/cgroup.subtree_control", "+cpu");
    snprintf(parent, sizeof parent, "%s", nested ? "thaw-wait-jobs" : "");
    for (int i = 0; i < 2; i++)
        snprintf(group[i], sizeof group[i], "%s%sthaw-wait-%c", parent, nested ? "/" : "",
                 'a' + i);
    if (nested) {
        make_group(parent);
        if (v2) {
            snprintf(path, sizeof path, "/sys/fs/cgroup/%s/cgroup.subtree_control", parent);
            put(path, "+cpu");
        }
        char weight[32];
        snprintf(weight, sizeof weight, "%ld", (v2 ? 100 : 1024) * weight_x);
        path_of(path, "cpu", parent, v2 ? "cpu.weight" : "cpu.shares");
        put(path, weight);
    }
    atexit(cleanup);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    int last = (int)sysconf(_SC_NPROCESSORS_ONLN) - 1;
    for (int i = 0; i < 2; i++) {
        make_group(group[i]);
        pid_t child = fork();
        if (child < 0) die("fork");
        if (child == 0) {
            die_with_parent();
            pin(last);
            if (slice_us > 0) {
                struct sched_attr_v1 attr = {.size = sizeof attr,
                                             .runtime = (uint64_t)slice_us * 1000};
                if (syscall(SYS_sched_setattr, 0, &attr, 0) < 0) die("sched_setattr");
            }
            for (;;) {
            }
        }
        spinner[i] = child;
        join(i, child);
    }
    set_frozen(1, 1);
    outsider_loop = fork();
    if (outsider_loop < 0) die("fork");
    if (outsider_loop == 0) {
        die_with_parent();
        pin(last);
        srand(7);
        for (;;) {
            usleep(10000 + rand() % 20000);
            pid_t one = fork();
            if (one == 0) {
                double begin = now();
                while (now() - begin < burst) {
                }
                _exit(0);
            }
            waitpid(one, 0, 0);
        }
    }
    struct sched_param fifo = {.sched_priority = 50};
    if (sched_setscheduler(0, SCHED_FIFO, &fifo) < 0) die("SCHED_FIFO (run as root)");
    pin(0);
    int thaws = (int)(seconds / quantum), running = 0;
    double *waits = calloc(thaws, sizeof *waits), next = now() + quantum;
    if (!waits) die("calloc");
    for (int t = 0; t < thaws; t++) {
        while (now() < next && !interrupted) usleep(200);
        if (interrupted) return 130;
        next += quantum;
        int entering = 1 - running;
        unsigned long long wait0, switched0, wait1, switched1;
        set_frozen(running, 1);
        schedstat(spinner[entering], &wait0, &switched0);
        set_frozen(entering, 0);
        double thawed = now();
        do {
            usleep(20);
            schedstat(spinner[entering], &wait1, &switched1);
        } while (switched1 == switched0 && now() - thawed < quantum / 2);
        waits[t] = (wait1 - wait0) / 1e3;
        running = entering;
    }
    qsort(waits, thaws, sizeof *waits, by_value);
    int over = 0;
    for (int t = 0; t < thaws; t++) over += waits[t] > 300;
    printf("%-6s slice %5s parent weight x%-3ld %d thaws: wait p50 %4.0f p99 %5.0f max %5.0f us, "
           "over 300 us %d\n",
           argv[1], slice_us ? argv[2] : "kern", nested ? weight_x : 1, thaws, waits[thaws / 2],
           waits[thaws * 99 / 100], waits[thaws - 1], over);
    return 0;
}
