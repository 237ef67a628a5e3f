/* A job that resists being stopped by signals, as any user can write one (the signals
 * freezer, where no freezer cgroup exists, stops a job with SIGSTOP and lets it go with
 * SIGCONT):
 *   stop_resistant traced     a spinning child held in ptrace-stop by its parent: SIGCONT
 *                             does not end a tracer's stop.
 *   stop_resistant continues  four spinning processes, each sending SIGCONT to the others
 *                             without pause.
 * The freezer cgroups stop both at once; cosched's slot clock must not wait on either, and
 * must not let the second run in other jobs' slots. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

enum { PROCESSES = 4 };

static void spin(void) {
    for (volatile unsigned long n = 0;; n++) {
    }
}

static int traced(void) {
    pid_t child = fork();
    if (child < 0) {
        perror("stop_resistant: fork");
        return 1;
    }
    if (child == 0) spin();
    if (ptrace(PTRACE_SEIZE, child, 0, 0) != 0 || ptrace(PTRACE_INTERRUPT, child, 0, 0) != 0) {
        perror("stop_resistant: ptrace");
        return 1;
    }
    int status;
    waitpid(child, &status, 0);
    printf("held %d\n", (int)child);
    fflush(stdout);
    for (;;) pause();
}

static int continues(void) {
    /* The pids, shared: every process learns the others' once they are all started. */
    volatile pid_t *pids = mmap(NULL, sizeof(pid_t) * PROCESSES, PROT_READ | PROT_WRITE,
                                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (pids == MAP_FAILED) {
        perror("stop_resistant: mmap");
        return 1;
    }
    pids[0] = getpid();
    for (int i = 1; i < PROCESSES; i++) {
        pid_t child = fork();
        if (child < 0) {
            perror("stop_resistant: fork");
            return 1;
        }
        if (child == 0) break;
        pids[i] = child;
    }
    while (pids[PROCESSES - 1] == 0) {
    }
    if (getpid() == pids[0]) {
        printf("continuing\n");
        fflush(stdout);
    }
    for (;;) {
        for (int i = 0; i < PROCESSES; i++) {
            if (pids[i] != getpid()) kill(pids[i], SIGCONT);
        }
    }
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "traced") == 0) return traced();
    if (argc == 2 && strcmp(argv[1], "continues") == 0) return continues();
    fprintf(stderr, "usage: stop_resistant traced|continues\n");
    return 2;
}
