/* Compute bound without MPI: -t forked processes each do -n iterations of -w work units, no
 * communication at all; the parent waits for them. For measurements where mpirun's start-up
 * (about 2.6 s here, varying by tenths) would drown the figure: the overhead benchmark. */
#include "common.h"

static void worker(long index, const void *arg) {
    (void)index;
    const struct cs_options *o = arg;
    for (long i = 0; i < o->iterations; i++) cs_work(o->work);
}

int main(int argc, char **argv) {
    struct cs_options o = cs_parse(argc, argv, "forked processes of pure CPU work, no messages",
                                   (struct cs_options){5000, 1000, 8, 2});
    double start = cs_now();
    double cpu = cs_forked("burn", o.threads, worker, &o);
    double wall = cs_now() - start;
    cs_report("burn", (int)o.threads, o.threads * o.iterations * o.work, "work units", wall, cpu,
              "none");
    return 0;
}
