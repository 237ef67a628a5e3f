/* I/O bound (LLNL saw gang scheduling slow such jobs, blocked in their own slots): -t forked
 * processes each do -n iterations of a little CPU work (-w units) and one synchronous write of
 * -b bytes (O_DIRECT | O_DSYNC: the process sleeps until the device has the data) to a file of
 * their own in -d DIR. The default directory is $TMPDIR, else /var/tmp: it must be on a disk,
 * as a write to tmpfs is no I/O. The files are unlinked as soon as they are made, so nothing
 * is left behind however the program ends.
 *
 * Give-away (cosched daemon --give-away-after-ms) sees a job as blocked once its CPU usage has
 * stood still for a while (5 ms in bench/compare's modes case): each wait must be longer than
 * that. Here (a VM whose disk the host caches) a write of 4 MiB blocked 0.7 ms (strace -T:
 * median; never over 5 ms), 16 MiB 5.4 ms, 32 MiB 13.5 ms (12.7-18.5, 10th-90th percentile),
 * and `iobound -n 280 -w 100 -b 33554432` ran 3.2 s alone, 10 % of it on the CPU (pinning the
 * pages for O_DIRECT: system time). With -t 2 the two writers share the disk: 23 ms a write
 * (22-26 ms), `-t 2 -n 200` 2.5 s, using 11 % of one CPU. */
#include "common.h"
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>

/* O_DIRECT wants buffers, offsets and sizes aligned to the device's block. */
#define ALIGN 4096
/* The writes go round over this many blocks of -b bytes: the file stays small. */
#define BLOCKS 4

struct job {
    const char *dir;
    struct cs_options o;
    int *files; /* one per worker */
};

static void worker(long index, const void *arg) {
    const struct job *job = arg;
    void *buf = NULL;
    if (posix_memalign(&buf, ALIGN, (size_t)job->o.bytes) != 0) {
        fprintf(stderr, "iobound: cannot allocate %ld bytes\n", job->o.bytes);
        _exit(1);
    }
    memset(buf, 0x5a, (size_t)job->o.bytes);
    for (long i = 0; i < job->o.iterations; i++) {
        cs_work(job->o.work);
        off_t at = (off_t)(i % BLOCKS) * job->o.bytes;
        for (long done = 0; done < job->o.bytes;) {
            ssize_t n = pwrite(job->files[index], (char *)buf + done,
                               (size_t)(job->o.bytes - done), at + done);
            if (n <= 0) {
                fprintf(stderr, "iobound: writing in %s: %s\n", job->dir,
                        n < 0 ? strerror(errno) : "nothing written");
                _exit(1);
            }
            done += n;
        }
    }
}

/* Exits with a one-line error naming the directory. */
static void refuse(const char *program, const char *dir, const char *why) {
    fprintf(stderr, "%s: -d %s: %s\n", program, dir, why);
    exit(2);
}

/* A file in `dir` for synchronous direct writes, already unlinked. */
static int open_file(const char *program, const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/cosched-iobound-XXXXXX", dir) >= (int)sizeof path) {
        refuse(program, dir, "name too long");
    }
    int fd = mkstemp(path);
    if (fd < 0) {
        char why[256];
        snprintf(why, sizeof why, "cannot create a file there (%s)", strerror(errno));
        refuse(program, dir, why);
    }
    unlink(path);
    if (fcntl(fd, F_SETFL, O_DIRECT | O_DSYNC) != 0) {
        refuse(program, dir, "no direct I/O on this file system");
    }
    return fd;
}

int main(int argc, char **argv) {
    struct job job = {getenv("TMPDIR"), {0}, NULL};
    if (!job.dir || !*job.dir) {
        job.dir = "/var/tmp";
    }
    /* -d DIR is this program's own option; the others go to the common parser. */
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int count = 0;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && !strcmp(argv[i], "-d")) {
            if (i + 1 >= argc || !*argv[i + 1]) {
                fprintf(stderr, "%s: -d needs a directory\n", argv[0]);
                exit(2);
            }
            job.dir = argv[++i];
        } else {
            rest[count++] = argv[i];
        }
    }
    job.o = cs_parse(count, rest,
                     "forked processes of CPU work (-w units) and a synchronous write of -b "
                     "bytes (O_DIRECT, O_DSYNC) each iteration, in -d DIR (default $TMPDIR or "
                     "/var/tmp; not tmpfs)",
                     (struct cs_options){100, 100, 32 << 20, 1});
    if (job.o.bytes % ALIGN != 0 || job.o.bytes > (256L << 20)) {
        fprintf(stderr,
                "%s: -b must be a multiple of %d (direct I/O) and at most 256 MiB (got %ld)\n",
                argv[0], ALIGN, job.o.bytes);
        exit(2);
    }
    if (job.o.threads > 64) {
        fprintf(stderr, "%s: -t must be at most 64 (got %ld)\n", argv[0], job.o.threads);
        exit(2);
    }
    struct statfs fs;
    if (statfs(job.dir, &fs) != 0) {
        refuse(argv[0], job.dir, strerror(errno));
    }
    if (fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC) {
        refuse(argv[0], job.dir, "in memory (tmpfs): a write there is no I/O");
    }
    /* Made here, not in the workers: a directory that will not do is one line and status 2. */
    job.files = calloc((size_t)job.o.threads, sizeof *job.files);
    for (long p = 0; p < job.o.threads; p++) {
        job.files[p] = open_file(argv[0], job.dir);
    }
    double start = cs_now();
    double cpu = cs_forked("iobound", job.o.threads, worker, &job);
    cs_report("iobound", (int)job.o.threads, job.o.threads * job.o.iterations, "writes",
              cs_now() - start, cpu, "none");
    return 0;
}
