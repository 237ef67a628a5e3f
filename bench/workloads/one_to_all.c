/* Fine grain: "one to all" with answerbacks (seed 000, section 4.1): rank 0 sends a small
 * message to every other rank, and each answers back before the next round. */
#define COSCHED_MPI
#include "common.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    struct cs_options o = cs_parse(argc, argv, "rounds of rank 0 -> all -> rank 0",
                                   (struct cs_options){6000000, 0, 8, 1});
    cs_wait_init(argv[0]);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char *buf = calloc(1, (size_t)o.bytes);
    cs_barrier();
    double start = cs_now();
    for (long i = 0; i < o.iterations; i++) {
        if (rank == 0) {
            for (int r = 1; r < size; r++) cs_send(buf, (int)o.bytes, r, 1);
            for (int r = 1; r < size; r++) cs_recv(buf, (int)o.bytes, r, 2);
        } else {
            cs_recv(buf, (int)o.bytes, 0, 1);
            cs_send(buf, (int)o.bytes, 0, 2);
        }
    }
    cs_barrier();
    cs_mpi_report("one_to_all", o.iterations, "rounds", cs_now() - start);
    free(buf);
    MPI_Finalize();
    return 0;
}
