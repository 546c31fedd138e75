/* reload_cycles: what loading and unloading the plugin leaves behind in the process.
 *
 * NCCL dlopens the profiler plugin when a process creates its first communicator and dlcloses
 * it when the last one is destroyed; elastic and RL jobs do that again and again. Each cycle
 * here does what NCCL does: dlopen, init two communicators (NCCL makes internal ones beside the
 * user's), a few completed AllReduces on each, finalize both, dlclose. It checks that the
 * library really left the process (RTLD_NOLOAD finds it no more), and measures the process
 * after WARM cycles (the thread stacks and malloc arenas that glibc keeps for reuse exist from
 * then on) and after CYCLES more: descriptors, mappings, threads, resident memory, heap in use,
 * and the region files in the SHM directory and in <home>/shms.
 *
 * usage: reload_cycles PLUGIN.so CYCLES [OPS_PER_COMM [WARM]]   (defaults: 16 ops, 3 warm cycles)
 * Prints one JSON object: {"cycles", "unloaded", "first": {...}, "last": {...}}.
 * COMMINSIGHT_* settings come from the environment.
 */
#define _GNU_SOURCE

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "comminsight/nccl_profiler_v5.h"

typedef struct sample {
    long fds, maps, threads;
    long rss_kib, rss_shmem_kib;
    long long heap_bytes;
    long shm_files, home_files;
    long long shm_bytes;
} sample_t;

static int32_t mask;
static char send_buf, recv_buf;

static long entries(const char* dir, long long* bytes) {
    DIR* d = opendir(dir);
    if (!d) return 0;
    long n = 0;
    struct dirent* e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        n++;
        struct stat st;
        if (bytes && fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0) *bytes += st.st_blocks * 512;
    }
    closedir(d);
    return n;
}

static long lines(const char* path) {
    FILE* f = fopen(path, "r");
    if (!f) return -1;
    long n = 0;
    int c;
    while ((c = fgetc(f)) != EOF)
        if (c == '\n') n++;
    fclose(f);
    return n;
}

static long status_kib(const char* key) {
    FILE* f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long v = -1;
    size_t k = strlen(key);
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, key, k) == 0 && line[k] == ':') v = strtol(line + k + 1, NULL, 10);
    fclose(f);
    return v;
}

/* The SHM directory the plugin puts regions in: its setting, else the default. */
static const char* shm_dir(void) {
    const char* v = getenv("COMMINSIGHT_PROFILER_SHM_DIR");
    return v && *v ? v : "/dev/shm";
}

static sample_t measure(void) {
    sample_t s = {0};
    s.fds = entries("/proc/self/fd", NULL) - 1; /* less the one opendir holds while counting */
    s.maps = lines("/proc/self/maps");
    s.threads = entries("/proc/self/task", NULL);
    s.rss_kib = status_kib("VmRSS");
    s.rss_shmem_kib = status_kib("RssShmem");
    struct mallinfo2 mi = mallinfo2();
    s.heap_bytes = (long long)(mi.uordblks + mi.hblkhd); /* every arena, and mmapped chunks */
    s.shm_files = entries(shm_dir(), &s.shm_bytes);
    char shms[4096];
    const char* home = getenv("COMMINSIGHT_HOME");
    snprintf(shms, sizeof(shms), "%s/shms", home ? home : "/opt/comminsight");
    s.home_files = entries(shms, NULL);
    return s;
}

static void print_sample(const char* name, const sample_t* s) {
    printf("\"%s\":{\"fds\":%ld,\"maps\":%ld,\"threads\":%ld,\"rss_kib\":%ld,\"rss_shmem_kib\":%ld,"
           "\"heap_bytes\":%lld,\"shm_files\":%ld,\"shm_bytes\":%lld,\"home_shm_files\":%ld}",
           name, s->fds, s->maps, s->threads, s->rss_kib, s->rss_shmem_kib, s->heap_bytes, s->shm_files,
           s->shm_bytes, s->home_files);
}

static void collective(const ci_nccl_profiler_v5_t* prof, void* ctx, uint64_t seq) {
    ci_nccl_event_descr_v5_t d = {0};
    d.type = CI_NCCL_V5_EVENT_TYPE_COLL;
    d.u.coll.seqNumber = seq;
    d.u.coll.func = "AllReduce";
    d.u.coll.sendBuff = &send_buf;
    d.u.coll.recvBuff = &recv_buf;
    d.u.coll.count = 1024;
    d.u.coll.datatype = "ncclFloat32";
    d.u.coll.nChannels = 1;
    d.u.coll.nWarps = 8;
    d.u.coll.algo = "RING";
    d.u.coll.proto = "SIMPLE";
    void* coll = NULL;
    prof->startEvent(ctx, &coll, &d);
    if (coll && (__atomic_load_n(&mask, __ATOMIC_RELAXED) & CI_NCCL_V5_EVENT_TYPE_KERNEL_CH)) {
        ci_nccl_event_descr_v5_t k = {0};
        k.type = CI_NCCL_V5_EVENT_TYPE_KERNEL_CH;
        k.parentObj = coll;
        k.u.kernelCh.pTimer = 1000000 + seq * 20000;
        void* ch = NULL;
        prof->startEvent(ctx, &ch, &k);
        if (ch) {
            ci_nccl_state_args_v5_t a = {0};
            a.kernelCh.pTimer = k.u.kernelCh.pTimer + 15000;
            prof->recordEventState(ch, CI_NCCL_V5_EVENT_STATE_KERNEL_CH_STOP, &a);
            prof->stopEvent(ch);
        }
    }
    if (coll) prof->stopEvent(coll);
}

/* One NCCL lifetime of the plugin; false if it could not be loaded or stayed loaded. */
static int cycle(const char* path, long ops, uint64_t n) {
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    const ci_nccl_profiler_v5_t* prof = lib ? dlsym(lib, "ncclProfiler_v5") : NULL;
    if (!prof) {
        fprintf(stderr, "cycle %llu: cannot load ncclProfiler_v5 from %s: %s\n", (unsigned long long)n, path,
                dlerror());
        return 0;
    }
    void* ctx[2] = {NULL, NULL};
    for (int c = 0; c < 2; c++)
        if (prof->init(&ctx[c], 0x7e10ad00ull + n * 2 + (uint64_t)c, &mask, c ? "internal" : "reload", 1, 1, 0,
                       NULL) != CI_NCCL_V5_RESULT_SUCCESS)
            fprintf(stderr, "cycle %llu: init failed\n", (unsigned long long)n);
    for (long i = 0; i < ops; i++)
        for (int c = 0; c < 2; c++)
            if (ctx[c]) collective(prof, ctx[c], (uint64_t)i);
    for (int c = 0; c < 2; c++)
        if (ctx[c]) prof->finalize(ctx[c]);
    dlclose(lib);
    void* still = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (still) {
        dlclose(still);
        fprintf(stderr, "cycle %llu: the plugin stayed loaded after dlclose\n", (unsigned long long)n);
        return 0;
    }
    return 1;
}

int main(int argc, char** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s PLUGIN.so CYCLES [OPS_PER_COMM [WARM]]\n", argv[0]);
        return 2;
    }
    long cycles = strtol(argv[2], NULL, 10);
    long ops = argc > 3 ? strtol(argv[3], NULL, 10) : 16;
    long warm = argc > 4 ? strtol(argv[4], NULL, 10) : 3;
    if (cycles < 1 || warm < 1 || ops < 0) {
        fprintf(stderr, "CYCLES and WARM must be at least 1, OPS_PER_COMM at least 0\n");
        return 2;
    }
    int unloaded = 1;
    uint64_t n = 0;
    for (long i = 0; i < warm; i++) unloaded &= cycle(argv[1], ops, n++);
    sample_t first = measure();
    for (long i = 0; i < cycles; i++) unloaded &= cycle(argv[1], ops, n++);
    sample_t last = measure();
    printf("{\"cycles\":%ld,\"unloaded\":%s,", cycles, unloaded ? "true" : "false");
    print_sample("first", &first);
    printf(",");
    print_sample("last", &last);
    printf("}\n");
    return 0;
}
