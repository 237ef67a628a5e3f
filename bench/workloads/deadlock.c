/* Deadlocks on purpose: every rank receives from its neighbour before sending, so no message
 * is ever sent. It waits as a blocking receive would, asleep: MPI_Test, then a nap that
 * doubles from 50 us to 100 ms (Open MPI's MPI_Recv busy-polls, which uses CPU and looks like
 * compute, not like a wait). cosched should report the job stalled (docs/using.md). */
#define COSCHED_MPI
#include "common.h"

static void sleepy_wait(MPI_Request *request) {
    int done = 0;
    long nap_us = 50;
    MPI_Test(request, &done, MPI_STATUS_IGNORE);
    while (!done) {
        const struct timespec nap = {nap_us / 1000000, nap_us % 1000000 * 1000};
        nanosleep(&nap, NULL);
        if (nap_us < 100000) nap_us *= 2;
        MPI_Test(request, &done, MPI_STATUS_IGNORE);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    struct cs_options o = cs_parse(argc, argv, "every rank receives first: waits forever, asleep",
                                   (struct cs_options){1, 1, 8, 1});
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char buffer[8] = {0};
    int peer = (rank + 1) % size;
    MPI_Request request;
    fprintf(stderr, "deadlock: rank %d of %d receives from rank %d first\n", rank, size, peer);
    MPI_Irecv(buffer, (int)sizeof buffer, MPI_BYTE, peer, 0, MPI_COMM_WORLD, &request);
    sleepy_wait(&request);
    /* Never reached while every rank receives first (a single rank receives from itself). */
    MPI_Send(buffer, (int)sizeof buffer, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
    cs_mpi_report("deadlock", o.iterations, "messages", 0.0);
    MPI_Finalize();
    return 0;
}
