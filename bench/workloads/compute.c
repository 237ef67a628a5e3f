/* Compute bound: every rank works alone, no communication until the final report. */
#define COSCHED_MPI
#include "common.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    struct cs_options o = cs_parse(argc, argv, "iterations of -w work units, no messages",
                                   (struct cs_options){5000, 1000, 8, 1});
    cs_wait_init(argv[0]);
    double start = cs_now();
    for (long i = 0; i < o.iterations; i++) cs_work(o.work);
    double wall = cs_now() - start;
    /* The slowest rank's time is the job's. */
    double slowest = 0.0;
    MPI_Allreduce(&wall, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    cs_mpi_report("compute", o.iterations * o.work, "work units", slowest);
    MPI_Finalize();
    return 0;
}
