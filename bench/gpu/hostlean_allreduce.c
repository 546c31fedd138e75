/* Host-lean NCCL all-reduce loop: what a profiler plugin costs NCCL, with as little else as
 * possible around it.
 *
 * One process drives every GPU it is given: ncclCommInitAll makes one communicator per GPU
 * (ranks 0..ndev-1 of one clique), and each iteration is
 *     ncclGroupStart; ncclAllReduce(float, sum) on each GPU's stream; ncclGroupEnd
 * with nothing else on the host between iterations. CUDA events on every GPU's stream bracket
 * many iterations; the value is the longest of the GPUs' elapsed times divided by the
 * iteration count (GPU-side µs per iteration; for small sizes this is the host's issue rate,
 * which is where a plugin's cost shows). PyTorch's per-call dispatch (~40-50 µs) would hide
 * the few µs a plugin adds; this loop does not.
 *
 * Output: one JSON line per (size, round) on stdout, plus a start line (NCCL version), a
 * correctness-check line and a final "issued" line with the exact number of all-reduces each
 * communicator issued (per message size), which is what the plugin's logs must contain.
 * NCCL's own debug output also goes to stdout; readers keep lines starting with '{'.
 *
 * Build (on the GPU machine; see bench/gpu/run_overhead.sh):
 *   gcc -std=c11 -O2 -I$NCCL/include -I/usr/local/cuda/include hostlean_allreduce.c \
 *       -o hostlean_allreduce -L/usr/local/cuda/lib64 -lcudart $NCCL/lib/libnccl.so.2 \
 *       -Wl,-rpath,$NCCL/lib -Wl,-rpath,/usr/local/cuda/lib64
 *
 * Usage: hostlean_allreduce [--variant NAME] [--rounds R] [--target-s S] [--sizes B,B,...]
 *                           [--ndev N] [--warmup-frac F] [--procs P] [--user-tags 1]
 *                           [--model-us U] [--model-gbs G]
 *
 * --procs P (P > 1): P processes instead, one rank each on GPU rank % GPUs, each with its own
 * NCCL_HOSTID so that NCCL takes them for P hosts (two ranks can share one GPU that way; NCCL
 * then moves data over its socket transport: set NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1).
 * Rank 0 prints; "ncomms" is P. --user-tags 1 (NCCL 2.32+, ncclAllReduceConfig) gives each
 * all-reduce the profiler tag 1 + its index among the run's all-reduces, the check's first
 * (the profiler ABI v7 userTag).
 */
#define _GNU_SOURCE /* clock_gettime under -std=c11 */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_DEV 16
#define MAX_SIZES 32
#define CHECK_COUNT 1024 /* floats in the one-off correctness all-reduce */

#define CUDA_CHECK(call)                                                                       \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "hostlean_allreduce: %s:%d %s: %s\n", __FILE__, __LINE__, #call,   \
                    cudaGetErrorString(e_));                                                   \
            exit(2);                                                                           \
        }                                                                                      \
    } while (0)

#define NCCL_CHECK(call)                                                                       \
    do {                                                                                       \
        ncclResult_t r_ = (call);                                                              \
        if (r_ != ncclSuccess) {                                                               \
            fprintf(stderr, "hostlean_allreduce: %s:%d %s: %s\n", __FILE__, __LINE__, #call,   \
                    ncclGetErrorString(r_));                                                   \
            exit(3);                                                                           \
        }                                                                                      \
    } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* "8B", "64KiB", "1MiB", ... when exact, else the byte count. */
static void size_label(size_t bytes, char* out, size_t n) {
    if (bytes >= (1u << 20) && bytes % (1u << 20) == 0)
        snprintf(out, n, "%zuMiB", bytes >> 20);
    else if (bytes >= 1024 && bytes % 1024 == 0)
        snprintf(out, n, "%zuKiB", bytes >> 10);
    else
        snprintf(out, n, "%zuB", bytes);
}

/* A fixed model of one iteration's cost (by default 2×H200 over NVLink: about 15 µs of host
 * issue plus ~300 GB/s of ring all-reduce; --model-us and --model-gbs for other links), so
 * every variant runs the SAME iteration counts: the counts must not depend on what is being
 * measured. */
static double g_model_us = 15.0, g_model_gbs = 300.0; /* --model-us, --model-gbs */

static long iters_for(size_t bytes, double target_s) {
    double est_us = g_model_us + (double)bytes / (g_model_gbs * 1000.0);
    long n = (long)(target_s * 1e6 / est_us + 0.5);
    return n < 20 ? 20 : n;
}

typedef struct {
    int ndev;
    ncclComm_t comms[MAX_DEV];
    cudaStream_t streams[MAX_DEV];
    float* send[MAX_DEV];
    float* recv[MAX_DEV];
    cudaEvent_t ev_start[MAX_DEV], ev_stop[MAX_DEV];
} ctx_t;

static int g_user_tags;      /* --user-tags */
static uint64_t g_next_tag; /* the tag of the next all-reduce, counted from 1 */

static void allreduce_one(ctx_t* c, int d, size_t count) {
#if NCCL_VERSION_CODE >= 23200
    if (g_user_tags) {
        ncclCollConfig_t config = NCCL_COLLCONFIG_INITIALIZER;
        config.userProfilerTag = ++g_next_tag;
        NCCL_CHECK(ncclAllReduceConfig(c->send[d], c->recv[d], count, ncclFloat, ncclSum, c->comms[d],
                                       c->streams[d], &config));
        return;
    }
#endif
    NCCL_CHECK(ncclAllReduce(c->send[d], c->recv[d], count, ncclFloat, ncclSum, c->comms[d], c->streams[d]));
}

/* One iteration: one all-reduce per GPU in one group. */
static void allreduce_once(ctx_t* c, size_t count) {
    NCCL_CHECK(ncclGroupStart());
    for (int d = 0; d < c->ndev; d++) allreduce_one(c, d, count);
    NCCL_CHECK(ncclGroupEnd());
}

/* --procs: this process's rank and the ranks' count (0 and 0 with one process for all GPUs),
 * and the device of local communicator 0 (local communicator d drives g_first_dev + d). */
static int g_rank, g_nranks, g_first_dev;

/* Forks `procs` ranks and waits for them; returns in each child with g_rank set, and exits in
 * the parent with the worst exit status. No CUDA or NCCL call has happened yet: both are
 * started in each child. The unique id goes from rank 0 to the others through a pipe. */
static int g_id_pipe[2];

static void fork_ranks(int procs) {
    if (pipe(g_id_pipe) != 0) exit(5);
    g_nranks = procs;
    for (int r = 0; r < procs; r++) {
        pid_t pid = fork();
        if (pid < 0) exit(5);
        if (pid == 0) {
            g_rank = r;
            char host[32];
            snprintf(host, sizeof(host), "host-%d", r);
            setenv("NCCL_HOSTID", host, 1);
            if (r != 0 && !freopen("/dev/null", "w", stdout)) exit(5); /* rank 0 reports */
            return;
        }
    }
    int worst = 0;
    for (int r = 0; r < procs; r++) {
        int status = 0;
        if (wait(&status) < 0) exit(5);
        int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (rc > worst) worst = rc;
    }
    exit(worst);
}

static void init_rank_comm(ctx_t* c, int have) {
    ncclUniqueId id;
    if (g_rank == 0) {
        NCCL_CHECK(ncclGetUniqueId(&id));
        for (int r = 1; r < g_nranks; r++)
            if (write(g_id_pipe[1], &id, sizeof(id)) != (ssize_t)sizeof(id)) exit(5);
    } else if (read(g_id_pipe[0], &id, sizeof(id)) != (ssize_t)sizeof(id)) {
        exit(5);
    }
    CUDA_CHECK(cudaSetDevice(g_rank % have));
    NCCL_CHECK(ncclCommInitRank(&c->comms[0], g_nranks, id, g_rank));
}

static void sync_all(ctx_t* c) {
    for (int d = 0; d < c->ndev; d++) {
        CUDA_CHECK(cudaSetDevice(g_first_dev + d));
        CUDA_CHECK(cudaStreamSynchronize(c->streams[d]));
    }
}

static size_t parse_sizes(const char* text, size_t* out) {
    size_t n = 0;
    const char* p = text;
    while (*p && n < MAX_SIZES) {
        char* end = NULL;
        unsigned long long v = strtoull(p, &end, 10);
        if (end == p) break;
        out[n++] = (size_t)v;
        p = (*end == ',') ? end + 1 : end;
    }
    return n;
}

int main(int argc, char** argv) {
    const char* variant = "unnamed";
    int rounds = 3;
    double target_s = 0.25;
    double warmup_frac = 0.05;
    int ndev = 0;
    int procs = 0;
    size_t sizes[MAX_SIZES] = {8, 64u << 10, 1u << 20, 16u << 20, 256u << 20};
    size_t nsizes = 5;

    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* v = (i + 1 < argc) ? argv[i + 1] : NULL;
        if (v == NULL) {
            fprintf(stderr, "hostlean_allreduce: %s needs a value\n", a);
            return 1;
        }
        if (!strcmp(a, "--variant")) variant = v;
        else if (!strcmp(a, "--rounds")) rounds = atoi(v);
        else if (!strcmp(a, "--target-s")) target_s = atof(v);
        else if (!strcmp(a, "--warmup-frac")) warmup_frac = atof(v);
        else if (!strcmp(a, "--ndev")) ndev = atoi(v);
        else if (!strcmp(a, "--sizes")) nsizes = parse_sizes(v, sizes);
        else if (!strcmp(a, "--procs")) procs = atoi(v);
        else if (!strcmp(a, "--user-tags")) g_user_tags = atoi(v);
        else if (!strcmp(a, "--model-us")) g_model_us = atof(v);
        else if (!strcmp(a, "--model-gbs")) g_model_gbs = atof(v);
        else {
            fprintf(stderr, "hostlean_allreduce: unknown option %s\n", a);
            return 1;
        }
        i++;
    }
    if (rounds < 1 || nsizes == 0 || target_s <= 0 || g_model_us <= 0 || g_model_gbs <= 0) {
        fprintf(stderr, "hostlean_allreduce: bad --rounds/--sizes/--target-s\n");
        return 1;
    }

#if NCCL_VERSION_CODE < 23200
    if (g_user_tags) {
        fprintf(stderr, "hostlean_allreduce: --user-tags needs NCCL 2.32+ (ncclAllReduceConfig)\n");
        return 1;
    }
#endif
    if (procs > 1) fork_ranks(procs); /* before CUDA starts: each rank starts its own */

    int have = 0;
    CUDA_CHECK(cudaGetDeviceCount(&have));
    if (g_nranks) ndev = 1;
    if (ndev <= 0) ndev = have;
    if (ndev > have || ndev > MAX_DEV || ndev < 1) {
        fprintf(stderr, "hostlean_allreduce: %d GPUs asked, %d present\n", ndev, have);
        return 1;
    }

    int nccl_version = 0;
    NCCL_CHECK(ncclGetVersion(&nccl_version));
    const char* plugin = getenv("NCCL_PROFILER_PLUGIN");
    const char* mask = getenv("COMMINSIGHT_PROFILER_EVENT_MASK");
    printf("{\"bench\":\"hostlean_allreduce\",\"event\":\"start\",\"variant\":\"%s\","
           "\"nccl_version\":%d,\"ndev\":%d,\"rounds\":%d,\"target_s\":%g,"
           "\"profiler_plugin\":\"%s\",\"event_mask\":\"%s\"}\n",
           variant, nccl_version, g_nranks ? g_nranks : ndev, rounds, target_s, plugin ? plugin : "",
           mask ? mask : "");
    fflush(stdout);

    size_t max_bytes = CHECK_COUNT * sizeof(float);
    for (size_t s = 0; s < nsizes; s++)
        if (sizes[s] > max_bytes) max_bytes = sizes[s];

    static ctx_t c;
    c.ndev = ndev;
    int devlist[MAX_DEV];
    for (int d = 0; d < ndev; d++) devlist[d] = d;
    double t0 = now_s();
    if (g_nranks) init_rank_comm(&c, have);
    else NCCL_CHECK(ncclCommInitAll(c.comms, ndev, devlist));
    double t_init = now_s() - t0;
    g_first_dev = g_nranks ? g_rank % have : 0;
    for (int d = 0; d < ndev; d++) {
        CUDA_CHECK(cudaSetDevice(g_first_dev + d));
        CUDA_CHECK(cudaStreamCreateWithFlags(&c.streams[d], cudaStreamNonBlocking));
        CUDA_CHECK(cudaMalloc((void**)&c.send[d], max_bytes));
        CUDA_CHECK(cudaMalloc((void**)&c.recv[d], max_bytes));
        CUDA_CHECK(cudaMemset(c.send[d], 0, max_bytes));
        CUDA_CHECK(cudaMemset(c.recv[d], 0, max_bytes));
        CUDA_CHECK(cudaEventCreate(&c.ev_start[d]));
        CUDA_CHECK(cudaEventCreate(&c.ev_stop[d]));
    }
    CUDA_CHECK(cudaDeviceSynchronize());

    /* Per message size: how many all-reduces each communicator issued (the log must agree). */
    size_t issued_bytes[MAX_SIZES + 1];
    long issued_count[MAX_SIZES + 1];
    size_t nissued = 0;
    size_t slot_of_size[MAX_SIZES];

    /* One correctness all-reduce: GPU d contributes d+1, so every element must be the sum. */
    {
        float host[CHECK_COUNT];
        for (int d = 0; d < ndev; d++) {
            for (int k = 0; k < CHECK_COUNT; k++) host[k] = (float)((g_nranks ? g_rank : d) + 1);
            CUDA_CHECK(cudaSetDevice(g_first_dev + d));
            CUDA_CHECK(cudaMemcpy(c.send[d], host, sizeof(host), cudaMemcpyHostToDevice));
        }
        allreduce_once(&c, CHECK_COUNT);
        sync_all(&c);
        int world = g_nranks ? g_nranks : ndev;
        float want = (float)(world * (world + 1) / 2);
        int ok = 1;
        for (int d = 0; d < ndev; d++) {
            CUDA_CHECK(cudaSetDevice(g_first_dev + d));
            CUDA_CHECK(cudaMemcpy(host, c.recv[d], sizeof(host), cudaMemcpyDeviceToHost));
            for (int k = 0; k < CHECK_COUNT; k++)
                if (host[k] != want) ok = 0;
            CUDA_CHECK(cudaMemset(c.send[d], 0, max_bytes));
        }
        issued_bytes[nissued] = CHECK_COUNT * sizeof(float);
        issued_count[nissued++] = 1;
        printf("{\"bench\":\"hostlean_allreduce\",\"event\":\"check\",\"variant\":\"%s\","
               "\"ok\":%s,\"init_s\":%.3f}\n",
               variant, ok ? "true" : "false", t_init);
        fflush(stdout);
        if (!ok) return 4;
    }

    /* One slot per distinct message size (the check's size may also be a benchmark size). */
    for (size_t s = 0; s < nsizes; s++) {
        size_t count = sizes[s] / sizeof(float);
        size_t bytes = (count ? count : 1) * sizeof(float); /* what NCCL is asked to move */
        size_t k = 0;
        while (k < nissued && issued_bytes[k] != bytes) k++;
        if (k == nissued) {
            issued_bytes[nissued] = bytes;
            issued_count[nissued++] = 0;
        }
        slot_of_size[s] = k;
    }

    int nworld = g_nranks ? g_nranks : ndev;
    for (int r = 0; r < rounds; r++) {
        for (size_t s = 0; s < nsizes; s++) {
            size_t bytes = sizes[s];
            size_t count = bytes / sizeof(float);
            if (count == 0) count = 1;
            long iters = iters_for(bytes, target_s);
            long warmup = (long)(iters * warmup_frac);
            if (warmup < 5) warmup = 5;

            for (long i = 0; i < warmup; i++) allreduce_once(&c, count);
            sync_all(&c);

            double h0 = now_s();
            for (int d = 0; d < ndev; d++) {
                CUDA_CHECK(cudaSetDevice(g_first_dev + d));
                CUDA_CHECK(cudaEventRecord(c.ev_start[d], c.streams[d]));
            }
            for (long i = 0; i < iters; i++) allreduce_once(&c, count);
            for (int d = 0; d < ndev; d++) {
                CUDA_CHECK(cudaSetDevice(g_first_dev + d));
                CUDA_CHECK(cudaEventRecord(c.ev_stop[d], c.streams[d]));
            }
            float worst_ms = 0.f;
            for (int d = 0; d < ndev; d++) {
                CUDA_CHECK(cudaSetDevice(g_first_dev + d));
                CUDA_CHECK(cudaEventSynchronize(c.ev_stop[d]));
                float ms = 0.f;
                CUDA_CHECK(cudaEventElapsedTime(&ms, c.ev_start[d], c.ev_stop[d]));
                if (ms > worst_ms) worst_ms = ms;
            }
            double host_s = now_s() - h0;
            issued_count[slot_of_size[s]] += warmup + iters;

            char label[32];
            size_label(bytes, label, sizeof(label));
            double us = (double)worst_ms * 1000.0 / (double)iters;
            double algbw = (double)(count * sizeof(float)) / (us * 1e-6) / 1e9;
            printf("{\"bench\":\"hostlean_allreduce\",\"event\":\"sample\",\"variant\":\"%s\","
                   "\"size\":\"%s\",\"size_bytes\":%zu,\"round\":%d,\"iters\":%ld,"
                   "\"warmup\":%ld,\"us_per_iter\":%.4f,\"host_us_per_iter\":%.4f,"
                   "\"algbw_gbs\":%.3f,\"busbw_gbs\":%.3f}\n",
                   variant, label, bytes, r, iters, warmup, us, host_s * 1e6 / (double)iters,
                   algbw, algbw * 2.0 * (nworld - 1) / nworld);
            fflush(stdout);
        }
    }

    long total = 0;
    printf("{\"bench\":\"hostlean_allreduce\",\"event\":\"issued\",\"variant\":\"%s\","
           "\"ncomms\":%d,\"per_size\":{",
           variant, nworld);
    for (size_t k = 0; k < nissued; k++) {
        printf("%s\"%zu\":%ld", k ? "," : "", issued_bytes[k], issued_count[k]);
        total += issued_count[k];
    }
    printf("},\"allreduce_per_comm\":%ld}\n", total);
    fflush(stdout);

    /* Destroying the communicators is what makes a profiler plugin finalize and seal. */
    for (int d = 0; d < ndev; d++) {
        CUDA_CHECK(cudaSetDevice(g_first_dev + d));
        CUDA_CHECK(cudaFree(c.send[d]));
        CUDA_CHECK(cudaFree(c.recv[d]));
        CUDA_CHECK(cudaEventDestroy(c.ev_start[d]));
        CUDA_CHECK(cudaEventDestroy(c.ev_stop[d]));
        CUDA_CHECK(cudaStreamDestroy(c.streams[d]));
    }
    for (int d = 0; d < ndev; d++) NCCL_CHECK(ncclCommDestroy(c.comms[d]));
    return 0;
}
