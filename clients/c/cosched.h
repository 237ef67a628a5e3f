/* libcosched: register processes started elsewhere with the cosched daemon, so that they are
 * gang-scheduled as one job (the registration API of LLNL's gang scheduler: GangJobRegister,
 * GangProcAdd), and ask about jobs. It speaks the daemon's socket protocol, version 1
 * (docs/protocol.md), and checks that root or the caller serves the socket before sending.
 *
 * Every call returns 0 on success and -1 on failure; cosched_last_error() then says why
 * (one line, per thread). The socket is $COSCHED_SOCKET, else /run/cosched/cosched.sock.
 * Registration works on one machine whose daemon runs with --allow-registration (a cluster's
 * daemon refuses it). */
#ifndef COSCHED_H
#define COSCHED_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COSCHED_PROTOCOL_VERSION 1

typedef uint64_t cosched_job_id;

/* What a registered job asks for. Zeroed fields take the defaults. */
struct cosched_job_spec {
    unsigned procs;            /* processors; at least 1 */
    const char *name;          /* shown by `cosched ps`; default "registered" */
    const char *job_class;     /* "batch" (default), "interactive", "standby", "express" (root) */
    unsigned join_within_s;    /* the job ends if no process joined within this; default 60 */
};

/* Records a job and waits until it runs (it may queue behind others, as any job).
 * On success *job is its id and, if cpus is not NULL, cpus holds its processors (a cpuset
 * list such as "0-3"). Its processes then join with cosched_proc_add. The job ends when every
 * process that joined has exited, or on cosched_job_end. */
int cosched_job_register(const struct cosched_job_spec *spec, cosched_job_id *job,
                         char *cpus, size_t cpus_len);

/* Process pid (the caller's own, or any of the job owner's processes) joins the job: from
 * now on it runs only in the job's slots, on its processors. */
int cosched_proc_add(cosched_job_id job, pid_t pid);

/* The registered job is over: its processes run unscheduled from now on, and the job ends
 * once they have exited. */
int cosched_job_end(cosched_job_id job);

/* The job's state: "queued", "waiting", "running", "suspended", "idle", "completed" (exit 0),
 * "failed", "cancelled", "timeout" or "lost" (copied into state; a daemon older than
 * "completed" says "done" for every exit). */
int cosched_job_state(cosched_job_id job, char *state, size_t state_len);

/* Why the calling thread's last failed call failed. */
const char *cosched_last_error(void);

#ifdef __cplusplus
}
#endif

#endif
