/* libcosched-mpi: an unmodified MPI program, started by plain mpirun with this library
 * preloaded (mpirun -x LD_PRELOAD=.../libcosched-mpi.so ...), joins a gang through the MPI
 * profiling interface. In MPI_Init, rank 0 registers a job of as many processors as
 * MPI_COMM_WORLD has ranks, and every rank joins it once it runs; in MPI_Finalize, rank 0
 * ends it after the others are done. A program already under cosched (COSCHED_JOB_ID set,
 * as `cosched run` does) or one that cannot register runs as it would without the library,
 * with one line on standard error saying why.
 *
 * Environment: COSCHED_MPI_NAME (the job's name; default the program's), COSCHED_MPI_CLASS
 * (its class; default batch), COSCHED_SOCKET (the daemon's socket). */
#define _GNU_SOURCE
#include "cosched.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static cosched_job_id gang;
static int gang_rank = -1;

/* Rank 0's job id, or 0 when the ranks run without cosched. */
static cosched_job_id register_world(int size) {
    if (getenv("COSCHED_JOB_ID")) return 0; /* already scheduled as a job of its own */
    char name[64] = "mpi";
    const char *wanted = getenv("COSCHED_MPI_NAME");
    if (wanted && *wanted) {
        snprintf(name, sizeof name, "%s", wanted);
    } else {
        FILE *comm = fopen("/proc/self/comm", "r");
        if (comm) {
            if (fgets(name, sizeof name, comm)) name[strcspn(name, "\n")] = '\0';
            fclose(comm);
        }
    }
    struct cosched_job_spec spec = {
        .procs = (unsigned)size,
        .name = name,
        .job_class = getenv("COSCHED_MPI_CLASS"),
    };
    cosched_job_id job = 0;
    if (cosched_job_register(&spec, &job, NULL, 0) != 0) {
        fprintf(stderr, "cosched-mpi: not gang-scheduled: %s\n", cosched_last_error());
        return 0;
    }
    return job;
}

static void join_gang(void) {
    int size;
    PMPI_Comm_rank(MPI_COMM_WORLD, &gang_rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &size);
    unsigned long long job = gang_rank == 0 ? register_world(size) : 0;
    PMPI_Bcast(&job, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD);
    if (job && cosched_proc_add(job, getpid()) != 0)
        fprintf(stderr, "cosched-mpi: rank %d does not join job %llu: %s\n", gang_rank, job,
                cosched_last_error());
    gang = job;
}

int MPI_Init(int *argc, char ***argv) {
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) join_gang();
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) join_gang();
    return rc;
}

int MPI_Finalize(void) {
    if (gang) {
        /* Every rank is past its work before the job ends and they run unscheduled. */
        PMPI_Barrier(MPI_COMM_WORLD);
        if (gang_rank == 0 && cosched_job_end(gang) != 0)
            fprintf(stderr, "cosched-mpi: ending job %llu: %s\n", (unsigned long long)gang,
                    cosched_last_error());
        gang = 0;
    }
    return PMPI_Finalize();
}
