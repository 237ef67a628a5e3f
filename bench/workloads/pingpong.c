/* Fine grain: ping-pong of small messages between rank pairs (0-1, 2-3, ...). With -w, both
 * ranks of a pair compute that many work units before each round trip (in parallel): a
 * compute-then-exchange loop whose speed depends less on how fast the host moves one cache
 * line between the two CPUs (see cacheline.c) and still stalls whenever a partner is not
 * running. */
#define COSCHED_MPI
#include "common.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    struct cs_options o = cs_parse(argc, argv, "ping-pong round trips between rank pairs (-w: work units before each)",
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
    double sink = 0.0;
    for (long i = 0; i < o.iterations; i++) {
        if (o.work) sink += cs_work(o.work);
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
    if (sink < 0) printf("%f\n", sink); /* keeps the work */
    free(buf);
    MPI_Finalize();
    return 0;
}
