/* Sealed inspector_logs segments compressed with zstd, on the log writer thread, in slices.
 *
 * A segment sealed as <name>.jsonl is queued here; between two drains of the ring the writer
 * gives this a slice of its time (a quarter of its flush period), so draining always comes
 * first and a large segment is compressed over several periods. The frame is written to
 * <name>.jsonl.zst.partial with zstd's content checksum, fsync'ed, renamed to <name>.jsonl.zst
 * and only then is <name>.jsonl unlinked: at every moment at least one complete copy exists
 * (for a moment both do, with the same content; readers take the uncompressed one). A failure
 * (no libzstd, a full disk, a read error) leaves the sealed segment as it is, counted in
 * log_compress_errors: nothing is lost, it is only larger.
 *
 * libzstd is loaded with dlopen so that neither the build nor a training node needs its
 * headers, and a node without it only keeps segments uncompressed. The few entry points used
 * are declared here with the layout of zstd's stable API (1.4.0 on); the version is checked.
 * Only the writer thread (or the finalizing thread after joining it) calls into this file.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ci_internal.h"

#define CHUNK (128u * 1024u)    /* bytes read and written per compression call */
#define QUEUE 8                 /* sealed segments waiting; past this a new one stays raw */
#define FINAL_BYTES (32u << 20) /* the last pass compresses this much at most, */
#define FINAL_NS 500000000ull   /* and for this long: exit is not delayed long at any level */
#define NAME_MAX_LEN 256

/* zstd's stable API (zstd.h, 1.4.0 on): the opaque context, the two buffer structs and the
 * parameter and directive values used. */
typedef struct zstd_cctx zstd_cctx_t;
typedef struct {
    const void* src;
    size_t size, pos;
} zstd_in_t;
typedef struct {
    void* dst;
    size_t size, pos;
} zstd_out_t;
enum { ZSTD_C_COMPRESSION_LEVEL = 100, ZSTD_C_CHECKSUM_FLAG = 201 };
enum { ZSTD_E_CONTINUE = 0, ZSTD_E_END = 2 };
#define ZSTD_MIN_VERSION 10400u

typedef struct zstd_api {
    unsigned (*version_number)(void);
    zstd_cctx_t* (*create_cctx)(void);
    size_t (*free_cctx)(zstd_cctx_t*);
    size_t (*set_parameter)(zstd_cctx_t*, int, int);
    size_t (*set_pledged_src_size)(zstd_cctx_t*, unsigned long long);
    size_t (*compress_stream2)(zstd_cctx_t*, zstd_out_t*, zstd_in_t*, int);
    unsigned (*is_error)(size_t);
    const char* (*error_name)(size_t);
} zstd_api_t;

typedef struct job {
    char name[NAME_MAX_LEN]; /* <name>.jsonl in the writer's directory */
    char tmp[NAME_MAX_LEN + 16];
    int in_fd, out_fd;
    uint64_t size, read;
    bool input_done, frame_done;
} job_t;

static struct {
    bool loaded, unavailable, warned;
    zstd_api_t api;
    zstd_cctx_t* cctx;
    char* in_buf;
    char* out_buf;
    char queue[QUEUE][NAME_MAX_LEN];
    unsigned head, count;
    bool active;
    job_t job;
} z = {.job = {.in_fd = -1, .out_fd = -1}};

static bool load_api(void) {
    if (z.loaded) return !z.unavailable;
    z.loaded = true;
    void* lib = dlopen("libzstd.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        ci_warn("libzstd.so.1 not found (%s): sealed inspector_logs segments stay uncompressed", dlerror());
        z.unavailable = true;
        return false;
    }
    zstd_api_t* a = &z.api;
    *(void**)&a->version_number = dlsym(lib, "ZSTD_versionNumber");
    *(void**)&a->create_cctx = dlsym(lib, "ZSTD_createCCtx");
    *(void**)&a->free_cctx = dlsym(lib, "ZSTD_freeCCtx");
    *(void**)&a->set_parameter = dlsym(lib, "ZSTD_CCtx_setParameter");
    *(void**)&a->set_pledged_src_size = dlsym(lib, "ZSTD_CCtx_setPledgedSrcSize");
    *(void**)&a->compress_stream2 = dlsym(lib, "ZSTD_compressStream2");
    *(void**)&a->is_error = dlsym(lib, "ZSTD_isError");
    *(void**)&a->error_name = dlsym(lib, "ZSTD_getErrorName");
    bool all = a->version_number && a->create_cctx && a->free_cctx && a->set_parameter &&
               a->set_pledged_src_size && a->compress_stream2 && a->is_error && a->error_name;
    if (!all || a->version_number() < ZSTD_MIN_VERSION) {
        ci_warn("libzstd.so.1 is older than 1.4.0: sealed inspector_logs segments stay uncompressed");
        z.unavailable = true;
        return false; /* the library stays loaded: unloading what NCCL's process may use is not ours */
    }
    return true;
}

static void job_close(int dir_fd, bool keep_output) {
    job_t* j = &z.job;
    bool made = j->out_fd >= 0; /* the .zst.partial is ours only once we created it */
    if (j->in_fd >= 0) close(j->in_fd);
    if (made) close(j->out_fd);
    if (made && !keep_output && dir_fd >= 0) unlinkat(dir_fd, j->tmp, 0);
    j->in_fd = j->out_fd = -1;
    z.active = false;
    /* an idle writer holds none of compression's memory (a context is a few MiB) */
    if (z.cctx) z.api.free_cctx(z.cctx);
    z.cctx = NULL;
    free(z.in_buf);
    free(z.out_buf);
    z.in_buf = z.out_buf = NULL;
}

static void job_fail(int dir_fd, const char* what, const char* why) {
    ci_counter_add(&ci_g.hdr->log_compress_errors, 1);
    if (!z.warned) /* once per process: a full disk would otherwise warn for every segment */
        ci_warn("cannot compress inspector_logs/%s (%s: %s); it stays uncompressed", z.job.name, what, why);
    z.warned = true;
    job_close(dir_fd, false);
}

static bool job_start(int dir_fd, const char* name) {
    job_t* j = &z.job;
    memset(j, 0, sizeof(*j));
    j->in_fd = j->out_fd = -1;
    snprintf(j->name, sizeof(j->name), "%s", name);
    snprintf(j->tmp, sizeof(j->tmp), "%s.zst.partial", name);
    z.active = true;
    /* non-blocking: a FIFO swapped in under the sealed name must not hold the writer (and
     * with it the last communicator's destroy) for ever; fstat then refuses it */
    j->in_fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (j->in_fd < 0 || fstat(j->in_fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        job_fail(dir_fd, "open", j->in_fd < 0 ? strerror(errno) : "not a regular file");
        return false;
    }
    j->size = (uint64_t)st.st_size;
    /* a .zst.partial left by a process killed while compressing this very name is ours to
     * replace; anything else there (a directory) makes the open fail and the segment stays */
    int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    j->out_fd = openat(dir_fd, j->tmp, flags, 0600);
    if (j->out_fd < 0 && errno == EEXIST && unlinkat(dir_fd, j->tmp, 0) == 0)
        j->out_fd = openat(dir_fd, j->tmp, flags, 0600);
    if (j->out_fd < 0) {
        job_fail(dir_fd, "create", strerror(errno));
        return false;
    }
    z.cctx = z.api.create_cctx();
    z.in_buf = malloc(CHUNK);
    z.out_buf = malloc(CHUNK);
    if (!z.cctx || !z.in_buf || !z.out_buf) {
        job_fail(dir_fd, "start", "out of memory");
        return false;
    }
    size_t e1 = z.api.set_parameter(z.cctx, ZSTD_C_COMPRESSION_LEVEL, (int)ci_g.cfg.log_zstd_level);
    size_t e2 = z.api.set_parameter(z.cctx, ZSTD_C_CHECKSUM_FLAG, 1);
    size_t e3 = z.api.set_pledged_src_size(z.cctx, j->size); /* the size goes in the frame header */
    if (z.api.is_error(e1) || z.api.is_error(e2) || z.api.is_error(e3)) {
        job_fail(dir_fd, "parameters", z.api.error_name(z.api.is_error(e1) ? e1 : z.api.is_error(e2) ? e2 : e3));
        return false;
    }
    return true;
}

static bool write_all(int fd, const char* p, size_t n) {
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            if (k == 0) errno = ENOSPC;
            return false;
        }
        p += k;
        n -= (size_t)k;
    }
    return true;
}

/* One compression call on up to CHUNK more input bytes (or the frame's end); false: failed. */
static bool job_step(int dir_fd) {
    job_t* j = &z.job;
    zstd_in_t in = {z.in_buf, 0, 0};
    if (!j->input_done) {
        ssize_t n = read(j->in_fd, z.in_buf, CHUNK);
        if (n < 0 && errno == EINTR) return true;
        if (n < 0) {
            job_fail(dir_fd, "read", strerror(errno));
            return false;
        }
        in.size = (size_t)n;
        j->read += (uint64_t)n;
        if (n == 0 || j->read >= j->size) j->input_done = true;
        if (j->read > j->size) { /* the sealed file grew: not what was sealed */
            job_fail(dir_fd, "read", "the sealed file changed while it was compressed");
            return false;
        }
    }
    int directive = j->input_done ? ZSTD_E_END : ZSTD_E_CONTINUE;
    for (;;) {
        zstd_out_t out = {z.out_buf, CHUNK, 0};
        size_t left = z.api.compress_stream2(z.cctx, &out, &in, directive);
        if (z.api.is_error(left)) {
            job_fail(dir_fd, "compress", z.api.error_name(left));
            return false;
        }
        if (out.pos && !write_all(j->out_fd, z.out_buf, out.pos)) {
            job_fail(dir_fd, "write", strerror(errno));
            return false;
        }
        bool consumed = in.pos == in.size;
        if (directive == ZSTD_E_END ? left == 0 : consumed && out.pos < out.size) break;
    }
    if (directive == ZSTD_E_END) j->frame_done = true;
    return true;
}

/* The frame is complete: make it durable under its final name, then drop the raw copy. */
static void job_finish(int dir_fd) {
    job_t* j = &z.job;
    if (j->read != j->size) {
        job_fail(dir_fd, "read", "the sealed file shrank while it was compressed");
        return;
    }
    char final_name[NAME_MAX_LEN + 8];
    snprintf(final_name, sizeof(final_name), "%s.zst", j->name);
    if (fsync(j->out_fd) != 0 || renameat(dir_fd, j->tmp, dir_fd, final_name) != 0) {
        job_fail(dir_fd, "seal", strerror(errno));
        return;
    }
    fsync(dir_fd); /* the compressed copy's name survives a crash before the raw one goes */
    job_close(dir_fd, true);
    /* if this fails the two copies stay side by side, both complete: readers take one */
    unlinkat(dir_fd, j->name, 0);
    ci_counter_add(&ci_g.hdr->log_segments_compressed, 1);
}

/* A sealed segment that stays uncompressed although compression is on: counted. */
static void left_raw(void) { ci_counter_add(&ci_g.hdr->log_compress_errors, 1); }

void ci_zstd_enqueue(const char* sealed_name) {
    if (ci_g.cfg.log_zstd_level == 0) return;
    if ((z.loaded && z.unavailable) || strlen(sealed_name) >= NAME_MAX_LEN) {
        left_raw();
        return;
    }
    if (z.count == QUEUE) { /* writing outpaces compressing: this one stays as it is */
        left_raw();
        if (!z.warned) ci_warn("compression of sealed inspector_logs segments fell behind: %s stays uncompressed", sealed_name);
        z.warned = true;
        return;
    }
    snprintf(z.queue[(z.head + z.count) % QUEUE], NAME_MAX_LEN, "%s", sealed_name);
    z.count++;
}

void ci_zstd_work(int dir_fd, uint64_t budget_ns, bool final) {
    if (!z.active && !z.count) return;
    if (!load_api()) {
        for (; z.count; z.count--) left_raw();
        return;
    }
    uint64_t until = ci_now_mono() + (final ? FINAL_NS : budget_ns), spent = 0;
    for (;;) {
        if (!z.active) {
            if (!z.count) return;
            char name[NAME_MAX_LEN];
            snprintf(name, sizeof(name), "%s", z.queue[z.head]);
            z.head = (z.head + 1) % QUEUE;
            z.count--;
            if (!job_start(dir_fd, name)) continue;
        }
        if (final && (spent >= FINAL_BYTES || ci_now_mono() >= until)) {
            /* the rest stays uncompressed, and whole, counted */
            job_close(dir_fd, false);
            left_raw();
            for (; z.count; z.count--) left_raw();
            return;
        }
        uint64_t before = z.job.read;
        if (!job_step(dir_fd)) continue;
        spent += z.job.read - before;
        if (z.job.frame_done) job_finish(dir_fd);
        if (!final && ci_now_mono() >= until) return;
    }
}

void ci_zstd_reset(void) {
    /* a forked child: the parent's descriptors and memory are copies; its files are the
     * parent's to finish */
    if (z.job.in_fd >= 0) close(z.job.in_fd);
    if (z.job.out_fd >= 0) close(z.job.out_fd);
    if (z.cctx) z.api.free_cctx(z.cctx);
    free(z.in_buf);
    free(z.out_buf);
    bool loaded = z.loaded, unavailable = z.unavailable;
    zstd_api_t api = z.api;
    memset(&z, 0, sizeof(z));
    z.loaded = loaded;
    z.unavailable = unavailable;
    z.api = api;
    z.job.in_fd = z.job.out_fd = -1;
}
