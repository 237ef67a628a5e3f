/* Threads with spin barriers, the OpenMP pattern of LLNL's benchmarks (seed 004, tables 3 and
 * 4): Gaussian elimination (-k gauss) or a matrix multiply (-k matmul) of an N x N
 * matrix (-w N), rows shared cyclically among -t threads, every step ended by a
 * sense-reversing barrier that spins without yielding (as libgomp does while it spins).
 * -n repeats the whole computation. The defaults take about 2 s for gauss and 5 s for matmul
 * on a 2-vCPU AMD EPYC VM (matmul -w 500 -n 30: 0.7 s). */
#include "common.h"
#include <pthread.h>
#include <stdatomic.h>

struct barrier {
    atomic_int waiting;
    atomic_int sense;
    int threads;
};

static void barrier_wait(struct barrier *b, int *local_sense) {
    *local_sense = !*local_sense;
    if (atomic_fetch_add(&b->waiting, 1) == b->threads - 1) {
        atomic_store(&b->waiting, 0);
        atomic_store(&b->sense, *local_sense);
    } else {
        while (atomic_load_explicit(&b->sense, memory_order_acquire) != *local_sense) {
        }
    }
}

enum kernel { GAUSS, MATMUL };

struct shared {
    enum kernel kernel;
    long n, repeats, threads;
    double *a, *b, *c;
    struct barrier barrier;
};

struct worker {
    struct shared *s;
    int id;
};

static void fill(struct shared *s) {
    for (long i = 0; i < s->n; i++)
        for (long j = 0; j < s->n; j++) {
            s->a[i * s->n + j] = (i == j) ? (double)s->n : 1.0 / (double)(1 + i + j);
            if (s->b) s->b[i * s->n + j] = (double)((i + j) % 7);
        }
}

static void *run(void *arg) {
    struct worker *w = arg;
    struct shared *s = w->s;
    long n = s->n;
    int sense = 0;
    for (long r = 0; r < s->repeats; r++) {
        if (w->id == 0) fill(s);
        barrier_wait(&s->barrier, &sense);
        if (s->kernel == GAUSS) {
            for (long k = 0; k < n - 1; k++) {
                for (long i = k + 1 + w->id; i < n; i += s->threads) {
                    double f = s->a[i * n + k] / s->a[k * n + k];
                    for (long j = k; j < n; j++) s->a[i * n + j] -= f * s->a[k * n + j];
                }
                barrier_wait(&s->barrier, &sense);
            }
        } else {
            for (long i = w->id; i < n; i += s->threads) {
                for (long j = 0; j < n; j++) s->c[i * n + j] = 0.0;
                for (long k = 0; k < n; k++) {
                    double aik = s->a[i * n + k];
                    for (long j = 0; j < n; j++) s->c[i * n + j] += aik * s->b[k * n + j];
                }
                barrier_wait(&s->barrier, &sense); /* a barrier per row block: fine grain */
            }
            /* Threads with fewer rows still meet every barrier of the round. */
            long rows = (n - w->id + s->threads - 1) / s->threads;
            long most = (n + s->threads - 1) / s->threads;
            for (long extra = rows; extra < most; extra++) barrier_wait(&s->barrier, &sense);
        }
        barrier_wait(&s->barrier, &sense);
    }
    return NULL;
}

int main(int argc, char **argv) {
    enum kernel kernel = GAUSS;
    if (argc > 2 && !strcmp(argv[1], "-k")) {
        if (!strcmp(argv[2], "gauss")) kernel = GAUSS;
        else if (!strcmp(argv[2], "matmul")) kernel = MATMUL;
        else {
            fprintf(stderr, "%s: -k takes gauss or matmul (got '%s')\n", argv[0], argv[2]);
            return 2;
        }
        argv[2] = argv[0];
        argv += 2;
        argc -= 2;
    }
    struct cs_options o = cs_parse(argc, argv,
                                   "[-k gauss|matmul] first: the kernel; -w is the matrix size N",
                                   (struct cs_options){30, 1000, 0, 2});
    struct shared s = {.kernel = kernel, .n = o.work, .repeats = o.iterations, .threads = o.threads};
    s.a = malloc(sizeof(double) * (size_t)(s.n * s.n));
    if (kernel == MATMUL) {
        s.b = malloc(sizeof(double) * (size_t)(s.n * s.n));
        s.c = malloc(sizeof(double) * (size_t)(s.n * s.n));
    }
    s.barrier.threads = (int)s.threads;
    pthread_t *tids = calloc((size_t)s.threads, sizeof *tids);
    struct worker *workers = calloc((size_t)s.threads, sizeof *workers);
    double start = cs_now();
    for (int t = 0; t < s.threads; t++) {
        workers[t] = (struct worker){&s, t};
        if (pthread_create(&tids[t], NULL, run, &workers[t])) {
            fprintf(stderr, "%s: cannot start thread %d\n", argv[0], t);
            return 1;
        }
    }
    for (int t = 0; t < s.threads; t++) pthread_join(tids[t], NULL);
    cs_report(kernel == GAUSS ? "spinbarrier_gauss" : "spinbarrier_matmul", (int)s.threads,
              o.iterations, "solves", cs_now() - start, cs_cpu_seconds(), "spin");
    free(s.a), free(s.b), free(s.c), free(tids), free(workers);
    return 0;
}
