/* A process no freezer can stop, made by any user: its main thread calls execve while another
 * of its threads is traced by a child that never reaps it. The exec waits (in the kernel, in
 * de_thread, killable but not freezable) for that thread to be reaped, that is for good, so
 * neither the v1 nor the v2 freezer ever reads the group frozen; SIGKILL ends it. cosched's
 * slot clock must not wait for it (crates/agent FREEZE_PATIENCE). Prints "stuck" once the
 * exec is under way. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <unistd.h>

static volatile pid_t traced;

static void *wait_to_be_traced(void *unused) {
    (void)unused;
    traced = (pid_t)syscall(SYS_gettid);
    for (;;) pause();
    return NULL;
}

int main(void) {
    pthread_t thread;
    if (pthread_create(&thread, NULL, wait_to_be_traced, NULL) != 0) {
        fprintf(stderr, "unfreezable: cannot start a thread\n");
        return 1;
    }
    while (traced == 0) usleep(1000);
    int ready[2];
    if (pipe(ready) != 0) {
        perror("unfreezable: pipe");
        return 1;
    }
    /* Where Yama restricts tracing to descendants, the tracer (a child) is let in. */
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    pid_t tracer = fork();
    if (tracer < 0) {
        perror("unfreezable: fork");
        return 1;
    }
    if (tracer == 0) {
        if (ptrace(PTRACE_SEIZE, traced, 0, 0) != 0) {
            perror("unfreezable: PTRACE_SEIZE");
            _exit(1);
        }
        if (write(ready[1], "x", 1) != 1) _exit(1);
        for (;;) pause();
    }
    char byte;
    if (read(ready[0], &byte, 1) != 1) {
        fprintf(stderr, "unfreezable: the tracer could not attach\n");
        return 1;
    }
    printf("stuck\n");
    fflush(stdout);
    execl("/bin/true", "true", (char *)NULL);
    perror("unfreezable: execl");
    return 1;
}
