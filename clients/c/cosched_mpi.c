/* libcosched-mpi: an unmodified MPI program, started by plain mpirun with this library
 * preloaded (mpirun -x LD_PRELOAD=.../libcosched-mpi.so ...), joins a gang through the MPI
 * profiling interface. In MPI_Init, rank 0 registers a job of as many processors as
 * MPI_COMM_WORLD has ranks, and every rank joins it once it runs; in MPI_Finalize, rank 0
 * ends it after the others are done. A program already under cosched (COSCHED_JOB_ID set,
 * as `cosched run` does) or one that cannot register runs as it would without the library,
 * with one line on standard error saying why.
 *
 * Fortran programs (mpif.h, the mpi and mpi_f08 modules) join too: Open MPI's Fortran
 * bindings, and MPICH's mpi_f08, reach PMPI_Init and PMPI_Finalize past the C wrappers, so
 * their entry points are wrapped here as well. The library is built for one MPI
 * (libcosched-mpi.so with mpicc, libcosched-mpi-mpich.so with MPICH's); a program of the
 * other runs without it, saying so.
 *
 * Environment: COSCHED_MPI_NAME (the job's name; default the program's), COSCHED_MPI_CLASS
 * (its class; default batch), COSCHED_SOCKET (the daemon's socket). */
#define _GNU_SOURCE
#include "cosched.h"

#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static cosched_job_id gang;
static int gang_rank;
static int tried;

#ifdef OPEN_MPI
#define BUILT_FOR_OPEN_MPI 1
#define OTHER_BUILD "libcosched-mpi-mpich.so"
#else
#define BUILT_FOR_OPEN_MPI 0
#define OTHER_BUILD "libcosched-mpi.so"
#endif

/* Whether the program runs the MPI this library was built for: handles (MPI_COMM_WORLD...)
 * differ between Open MPI and the MPICH family, and the other's would crash it. */
static int program_mpi_is_ours(void) {
    /* Larger than any MPI's MPI_MAX_LIBRARY_VERSION_STRING (MPICH's is 8192, this build's
     * may be Open MPI's 256), as the program's MPI writes it. */
    static char version[16384];
    int len = 0;
    if (PMPI_Get_library_version(version, &len) != MPI_SUCCESS) return 1;
    return (strstr(version, "Open MPI") != NULL) == BUILT_FOR_OPEN_MPI;
}

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
    /* Once, whichever binding comes first (MPICH's mpif.h binding calls the C MPI_Init). */
    if (tried) return;
    tried = 1;
    if (!program_mpi_is_ours()) {
        fprintf(stderr, "cosched-mpi: not gang-scheduled: this library was built for %s, the "
                        "program runs another MPI (preload " OTHER_BUILD ")\n",
                BUILT_FOR_OPEN_MPI ? "Open MPI" : "MPICH");
        return;
    }
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

static void leave_gang(void) {
    if (gang) {
        /* Every rank is past its work before the job ends and they run unscheduled. */
        PMPI_Barrier(MPI_COMM_WORLD);
        if (gang_rank == 0 && cosched_job_end(gang) != 0)
            fprintf(stderr, "cosched-mpi: ending job %llu: %s\n", (unsigned long long)gang,
                    cosched_last_error());
        gang = 0;
    }
}

int MPI_Finalize(void) {
    leave_gang();
    return PMPI_Finalize();
}

/* The MPI library's own definition of the Fortran entry point `name`, which the wrapper
 * below hides; NULL (said on stderr) if there is none. */
static void *fortran_next(const char *name) {
    void *next = dlsym(RTLD_NEXT, name);
    if (!next) fprintf(stderr, "cosched-mpi: cannot call the MPI library's %s\n", name);
    return next;
}

static void join_if_initialized(void) {
    int initialized = 0;
    if (PMPI_Initialized(&initialized) == MPI_SUCCESS && initialized) join_gang();
}

/* Each Fortran entry point by its symbol: the arguments (all by reference) pass through. */
#define FORTRAN_INIT(symbol)                                                                  \
    void symbol(MPI_Fint *ierr);                                                              \
    void symbol(MPI_Fint *ierr) {                                                             \
        void (*next)(MPI_Fint *) = (void (*)(MPI_Fint *))fortran_next(#symbol);               \
        if (!next) {                                                                          \
            if (ierr) *ierr = MPI_ERR_OTHER;                                                  \
            return;                                                                           \
        }                                                                                     \
        next(ierr);                                                                           \
        join_if_initialized();                                                                \
    }
#define FORTRAN_INIT_THREAD(symbol)                                                           \
    void symbol(MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierr);                      \
    void symbol(MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierr) {                     \
        void (*next)(MPI_Fint *, MPI_Fint *, MPI_Fint *) =                                    \
            (void (*)(MPI_Fint *, MPI_Fint *, MPI_Fint *))fortran_next(#symbol);              \
        if (!next) {                                                                          \
            if (ierr) *ierr = MPI_ERR_OTHER;                                                  \
            return;                                                                           \
        }                                                                                     \
        next(required, provided, ierr);                                                       \
        join_if_initialized();                                                                \
    }
#define FORTRAN_FINALIZE(symbol)                                                              \
    void symbol(MPI_Fint *ierr);                                                              \
    void symbol(MPI_Fint *ierr) {                                                             \
        void (*next)(MPI_Fint *) = (void (*)(MPI_Fint *))fortran_next(#symbol);               \
        leave_gang();                                                                         \
        if (next)                                                                             \
            next(ierr);                                                                       \
        else if (ierr)                                                                        \
            *ierr = MPI_ERR_OTHER;                                                            \
    }
/* mpif.h and the mpi module, as gfortran and other compilers name them; then mpi_f08. */
#define FORTRAN_NAMES(macro, lower, upper) macro(lower##_) macro(lower) macro(lower##__) macro(upper)
FORTRAN_NAMES(FORTRAN_INIT, mpi_init, MPI_INIT)
FORTRAN_NAMES(FORTRAN_INIT_THREAD, mpi_init_thread, MPI_INIT_THREAD)
FORTRAN_NAMES(FORTRAN_FINALIZE, mpi_finalize, MPI_FINALIZE)
FORTRAN_INIT(mpi_init_f08_)
FORTRAN_INIT_THREAD(mpi_init_thread_f08_)
FORTRAN_FINALIZE(mpi_finalize_f08_)
