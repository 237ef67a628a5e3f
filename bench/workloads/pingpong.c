/* Fine grain: ping-pong of small messages between rank pairs (0-1, 2-3, ...). */
#define COSCHED_MPI
#include "common.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    struct cs_options o = cs_parse(argc, argv, "ping-pong round trips between rank pairs",
                                   (struct cs_options){10000000, 0, 8, 1});
    cs_wait_init(argv[0]);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size % 2) {
        if (rank == 0) fprintf(stderr, "%s: needs an even number of ranks (got %d)\n", argv[0], size);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char *buf = calloc(1, (size_t)o.bytes);
    int peer = rank ^ 1;
    cs_barrier();
    double start = cs_now();
    for (long i = 0; i < o.iterations; i++) {
        if (rank % 2 == 0) {
            cs_send(buf, (int)o.bytes, peer, 0);
            cs_recv(buf, (int)o.bytes, peer, 0);
        } else {
            cs_recv(buf, (int)o.bytes, peer, 0);
            cs_send(buf, (int)o.bytes, peer, 0);
        }
    }
    cs_barrier();
    cs_mpi_report("pingpong", o.iterations, "round trips", cs_now() - start);
    free(buf);
    MPI_Finalize();
    return 0;
}
