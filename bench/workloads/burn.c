/* Compute bound without MPI: -t forked processes each do -n iterations of -w work units, no
 * communication at all; the parent waits for them. For measurements where mpirun's start-up
 * (about 2.6 s here, varying by tenths) would drown the figure: the overhead benchmark. */
#include "common.h"
#include <sys/wait.h>

int main(int argc, char **argv) {
    struct cs_options o = cs_parse(argc, argv, "forked processes of pure CPU work, no messages",
                                   (struct cs_options){5000, 1000, 8, 2});
    double start = cs_now();
    for (long p = 0; p < o.threads; p++) {
        pid_t pid = fork();
        if (pid < 0) {
            perror("burn: fork");
            exit(1);
        }
        if (pid == 0) {
            for (long i = 0; i < o.iterations; i++) cs_work(o.work);
            _exit(0);
        }
    }
    int status = 0, failed = 0;
    while (wait(&status) > 0) failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    if (failed) {
        fprintf(stderr, "burn: a worker process failed\n");
        exit(1);
    }
    double wall = cs_now() - start;
    struct rusage children;
    getrusage(RUSAGE_CHILDREN, &children);
    double cpu = (double)children.ru_utime.tv_sec + (double)children.ru_utime.tv_usec * 1e-6 +
                 (double)children.ru_stime.tv_sec + (double)children.ru_stime.tv_usec * 1e-6;
    cs_report("burn", (int)o.threads, o.threads * o.iterations * o.work, "work units", wall, cpu,
              "none");
    return 0;
}
