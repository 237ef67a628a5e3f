/* Fine grain: a 1-D stencil with a barrier every iteration: compute, exchange halos with
 * both neighbours, then a barrier (the bulk-synchronous pattern). */
#define COSCHED_MPI
#include "common.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    struct cs_options o = cs_parse(argc, argv,
                                   "iterations of compute (-w units) + halo exchange + barrier",
                                   (struct cs_options){50000, 100, 64, 1});
    cs_wait_init(argv[0]);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char *left_out = calloc(1, (size_t)o.bytes), *right_out = calloc(1, (size_t)o.bytes);
    char *left_in = calloc(1, (size_t)o.bytes), *right_in = calloc(1, (size_t)o.bytes);
    int left = (rank + size - 1) % size, right = (rank + 1) % size;
    cs_barrier();
    double start = cs_now();
    for (long i = 0; i < o.iterations; i++) {
        cs_work(o.work);
        if (size > 1) {
            MPI_Request r[4];
            MPI_Irecv(left_in, (int)o.bytes, MPI_BYTE, left, 4, MPI_COMM_WORLD, &r[0]);
            MPI_Irecv(right_in, (int)o.bytes, MPI_BYTE, right, 5, MPI_COMM_WORLD, &r[1]);
            MPI_Isend(right_out, (int)o.bytes, MPI_BYTE, right, 4, MPI_COMM_WORLD, &r[2]);
            MPI_Isend(left_out, (int)o.bytes, MPI_BYTE, left, 5, MPI_COMM_WORLD, &r[3]);
            for (int k = 0; k < 4; k++) cs_wait(&r[k]);
        }
        cs_barrier();
    }
    cs_mpi_report("stencil", o.iterations, "iterations", cs_now() - start);
    free(left_out), free(right_out), free(left_in), free(right_in);
    MPI_Finalize();
    return 0;
}
