/* libcosched: the daemon's socket protocol (docs/protocol.md), for C programs. One request
 * per connection, one JSON object per line each way. */
#define _GNU_SOURCE
#include "cosched.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define DEFAULT_SOCKET "/run/cosched/cosched.sock"
/* Longest reply read: a job's view is a few hundred bytes; nothing here asks for more. */
#define MAX_REPLY (1 << 20)

static __thread char last_error[512];

const char *cosched_last_error(void) { return last_error; }

static int fail(const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(last_error, sizeof last_error, format, args);
    va_end(args);
    return -1;
}

/* A growing string for requests. */
struct text {
    char *bytes;
    size_t len, cap;
};

static int put(struct text *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->len + n + 1) cap *= 2;
        char *grown = realloc(t->bytes, cap);
        if (!grown) return fail("out of memory");
        t->bytes = grown;
        t->cap = cap;
    }
    memcpy(t->bytes + t->len, s, n);
    t->len += n;
    t->bytes[t->len] = '\0';
    return 0;
}

static int put_str(struct text *t, const char *s) { return put(t, s, strlen(s)); }

/* s as a JSON string, quotes included. */
static int put_json_string(struct text *t, const char *s) {
    if (put_str(t, "\"")) return -1;
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        char escaped[8];
        if (*c == '"' || *c == '\\') {
            snprintf(escaped, sizeof escaped, "\\%c", *c);
        } else if (*c < 0x20) {
            snprintf(escaped, sizeof escaped, "\\u%04x", *c);
        } else {
            escaped[0] = (char)*c;
            escaped[1] = '\0';
        }
        if (put_str(t, escaped)) return -1;
    }
    return put_str(t, "\"");
}

/* Replies, line by line, from one connection. */
struct reader {
    int fd;
    struct text buffer;
    size_t line_start;
};

static int connect_daemon(void) {
    const char *path = getenv("COSCHED_SOCKET");
    if (!path || !*path) path = DEFAULT_SOCKET;
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof address.sun_path)
        return fail("socket path %s is too long", path);
    strcpy(address.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return fail("socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&address, sizeof address) != 0) {
        int error = errno;
        close(fd);
        return fail("cannot reach the cosched daemon at %s: %s (is it running? COSCHED_SOCKET "
                    "names another socket)",
                    path, strerror(error));
    }
    /* A socket at a path someone else can write could be theirs: the request would tell
     * them our pids. Only root's or our own daemon is spoken to. */
    struct ucred peer;
    socklen_t len = sizeof peer;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0) {
        int error = errno;
        close(fd);
        return fail("SO_PEERCRED on %s: %s", path, strerror(error));
    }
    if (peer.uid != 0 && peer.uid != geteuid()) {
        close(fd);
        return fail("%s is served by uid %u, neither root nor you: not a cosched daemon to trust",
                    path, (unsigned)peer.uid);
    }
    return fd;
}

/* Sends one request line; returns the connection's reader (fd < 0 on failure). */
static struct reader ask(struct text *request) {
    struct reader r = {.fd = -1};
    if (put_str(request, "\n")) return r;
    int fd = connect_daemon();
    if (fd < 0) return r;
    for (size_t sent = 0; sent < request->len;) {
        ssize_t n = send(fd, request->bytes + sent, request->len - sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            fail("sending to the daemon: %s", strerror(errno));
            close(fd);
            return r;
        }
        sent += (size_t)n;
    }
    r.fd = fd;
    return r;
}

/* The next reply line (NUL-terminated, without its newline), or NULL. */
static const char *next_line(struct reader *r) {
    for (;;) {
        char *start = r->buffer.bytes ? r->buffer.bytes + r->line_start : NULL;
        char *end = start ? memchr(start, '\n', r->buffer.len - r->line_start) : NULL;
        if (end) {
            *end = '\0';
            r->line_start = (size_t)(end - r->buffer.bytes) + 1;
            return start;
        }
        if (r->buffer.len >= MAX_REPLY) {
            fail("the daemon's reply is longer than %d bytes", MAX_REPLY);
            return NULL;
        }
        char chunk[4096];
        ssize_t n = read(r->fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            fail("reading the daemon's reply: %s", strerror(errno));
            return NULL;
        }
        if (n == 0) {
            fail("the daemon closed the connection without a reply");
            return NULL;
        }
        if (put(&r->buffer, chunk, (size_t)n)) return NULL;
    }
}

static void done(struct reader *r, struct text *request) {
    if (r->fd >= 0) close(r->fd);
    free(r->buffer.bytes);
    free(request->bytes);
}

/* Where "key": starts its value in a reply line. Keys are the protocol's own: inside string
 * values every quote is escaped, so the pattern cannot start there. */
static const char *value_of(const char *line, const char *key) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char *at = strstr(line, pattern);
    return at ? at + strlen(pattern) : NULL;
}

/* Copies the JSON string value of key into out (escapes undone; \u beyond ASCII as '?'). */
static int string_of(const char *line, const char *key, char *out, size_t len) {
    const char *at = value_of(line, key);
    if (!at || *at != '"' || len == 0) return -1;
    size_t n = 0;
    for (at++; *at && *at != '"'; at++) {
        char c = *at;
        if (c == '\\') {
            at++;
            switch (*at) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case 'u': {
                unsigned code = 0;
                for (int i = 1; i <= 4; i++) {
                    char h = at[i];
                    if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F')))
                        return -1;
                    code = code * 16 + (unsigned)(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
                }
                at += 4;
                c = code < 0x80 ? (char)code : '?';
                break;
            }
            case '\0': return -1;
            default: c = *at;
            }
        }
        if (n + 1 < len) out[n++] = c;
    }
    out[n] = '\0';
    return 0;
}

/* The reply's verdict: 0 when "ok":true; else -1 with the daemon's error as the last error. */
static int verdict(const char *line) {
    if (!line) return -1;
    const char *ok = value_of(line, "ok");
    if (ok && strncmp(ok, "true", 4) == 0) return 0;
    char error[sizeof last_error];
    if (string_of(line, "error", error, sizeof error) == 0) return fail("%s", error);
    return fail("unexpected reply from the daemon: %.200s", line);
}

static int job_of(const char *line, cosched_job_id *job) {
    const char *at = value_of(line, "job");
    if (!at) return fail("the daemon's reply names no job: %.200s", line);
    *job = strtoull(at, NULL, 10);
    return 0;
}

int cosched_job_register(const struct cosched_job_spec *spec, cosched_job_id *job, char *cpus,
                         size_t cpus_len) {
    if (!spec || !job) return fail("cosched_job_register: spec and job must not be NULL");
    if (spec->procs == 0) return fail("a job needs at least one processor (procs is 0)");
    struct text request = {0};
    char number[32];
    snprintf(number, sizeof number, "%u", spec->procs);
    int bad = put_str(&request, "{\"op\":\"register\",\"procs\":") || put_str(&request, number);
    if (spec->name) bad = bad || put_str(&request, ",\"name\":") || put_json_string(&request, spec->name);
    if (spec->job_class)
        bad = bad || put_str(&request, ",\"class\":") || put_json_string(&request, spec->job_class);
    if (spec->join_within_s) {
        snprintf(number, sizeof number, "%u", spec->join_within_s);
        bad = bad || put_str(&request, ",\"join_within_s\":") || put_str(&request, number);
    }
    bad = bad || put_str(&request, "}");
    struct reader r = {.fd = -1};
    int rc = -1;
    if (!bad) r = ask(&request);
    const char *line = r.fd >= 0 ? next_line(&r) : NULL;
    if (verdict(line) == 0 && job_of(line, job) == 0) {
        /* The second line comes once the job runs (or has ended before it could). */
        line = next_line(&r);
        if (verdict(line) == 0) {
            char state[32];
            if (string_of(line, "state", state, sizeof state) == 0) {
                fail("job %llu ended before it started (%s)", (unsigned long long)*job, state);
            } else if (cpus && string_of(line, "cpus", cpus, cpus_len) != 0) {
                fail("the daemon's start reply has no cpus: %.200s", line);
            } else {
                rc = 0;
            }
        }
    }
    done(&r, &request);
    return rc;
}

/* A request about one job whose whole answer is "ok" or an error. */
static int simple(const char *op, cosched_job_id job, const char *extra) {
    struct text request = {0};
    char head[128];
    snprintf(head, sizeof head, "{\"op\":\"%s\",\"job\":%llu%s}", op, (unsigned long long)job,
             extra);
    struct reader r = {.fd = -1};
    if (put_str(&request, head) == 0) r = ask(&request);
    int rc = r.fd >= 0 ? verdict(next_line(&r)) : -1;
    done(&r, &request);
    return rc;
}

int cosched_proc_add(cosched_job_id job, pid_t pid) {
    if (pid <= 0) return fail("cosched_proc_add: %d is not a process id", (int)pid);
    char extra[32];
    snprintf(extra, sizeof extra, ",\"pid\":%d", (int)pid);
    return simple("proc_add", job, extra);
}

int cosched_job_end(cosched_job_id job) { return simple("job_end", job, ""); }

int cosched_job_state(cosched_job_id job, char *state, size_t state_len) {
    if (!state || state_len == 0) return fail("cosched_job_state: no room for the state");
    struct text request = {0};
    char text[96];
    snprintf(text, sizeof text, "{\"op\":\"ps\",\"job\":%llu}", (unsigned long long)job);
    struct reader r = {.fd = -1};
    if (put_str(&request, text) == 0) r = ask(&request);
    const char *line = r.fd >= 0 ? next_line(&r) : NULL;
    int rc = verdict(line);
    if (rc == 0 && string_of(line, "state", state, state_len) != 0)
        rc = fail("no job %llu (or it ended long ago: `cosched ps --all` lists what is kept)",
                  (unsigned long long)job);
    done(&r, &request);
    return rc;
}
