/* Fine grain: pipelined round robin (seed 000, section 4.1): a token travels the ring
 * 0 -> 1 -> ... -> P-1 -> 0; one iteration is one lap. */
#define COSCHED_MPI
#include "common.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    struct cs_options o = cs_parse(argc, argv, "laps of a token around the ring of ranks",
                                   (struct cs_options){8000000, 0, 8, 1});
    cs_wait_init(argv[0]);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char *buf = calloc(1, (size_t)o.bytes);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    cs_barrier();
    double start = cs_now();
    for (long i = 0; i < o.iterations && size > 1; i++) {
        if (rank == 0) {
            cs_send(buf, (int)o.bytes, next, 3);
            cs_recv(buf, (int)o.bytes, prev, 3);
        } else {
            cs_recv(buf, (int)o.bytes, prev, 3);
            cs_send(buf, (int)o.bytes, next, 3);
        }
    }
    cs_barrier();
    cs_mpi_report("round_robin", o.iterations, "laps", cs_now() - start);
    free(buf);
    MPI_Finalize();
    return 0;
}
