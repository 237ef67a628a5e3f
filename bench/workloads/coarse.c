/* Coarse grain (seed 000, Fig. 8): long compute phases, then large messages exchanged with a
 * partner rank through blocking waits. */
#define COSCHED_MPI
#include "common.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    struct cs_options o = cs_parse(argc, argv,
                                   "iterations of compute (-w units) + exchange of -b bytes",
                                   (struct cs_options){250, 20000, 4 << 20, 1});
    cs_wait_init(argv[0]);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char *out = calloc(1, (size_t)o.bytes), *in = calloc(1, (size_t)o.bytes);
    int peer = (rank ^ 1) < size ? rank ^ 1 : rank;
    cs_barrier();
    double start = cs_now();
    for (long i = 0; i < o.iterations; i++) {
        cs_work(o.work);
        if (peer != rank) {
            MPI_Request r[2];
            MPI_Irecv(in, (int)o.bytes, MPI_BYTE, peer, 6, MPI_COMM_WORLD, &r[0]);
            MPI_Isend(out, (int)o.bytes, MPI_BYTE, peer, 6, MPI_COMM_WORLD, &r[1]);
            cs_wait(&r[0]);
            cs_wait(&r[1]);
        }
    }
    cs_barrier();
    cs_mpi_report("coarse", o.iterations, "iterations", cs_now() - start);
    free(out), free(in);
    MPI_Finalize();
    return 0;
}
