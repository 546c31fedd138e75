/* hot_path: what an NCCL profiler plugin costs per collective, measured without NCCL or a GPU.
 *
 * Loads a plugin .so, initialises one communicator per driver thread through ncclProfiler_v5,
 * and replays the event tree NCCL 2.28 issues for one implicit-group AllReduce (RING/SIMPLE,
 * 24 channels), collective after collective, timing the CPU spent on the calling threads.
 * Run it once against an empty plugin and once against the plugin under test: the difference
 * is the plugin's own hot-path cost (architecture §8: <= 150 ns per collective incl. 24 channels).
 *
 * Facts mirrored from NCCL 2.28.9 (src/plugin/profiler.cc, enqueue.cc, group.cc,
 * transport/profiler.cc), so the plugin sees the calls it will see in production:
 *   - An event is started when its own bit, or the bit of any event that hangs below it, is in
 *     the mask (e.g. mask Coll|KernelCh still yields GroupApi, CollApi and Group events).
 *   - The mask is read (relaxed) once per call, at the start of taskAppend, before the
 *     GroupApi and CollApi events, and kept for the call's task: its Group, Coll and KernelCh
 *     events follow it (so a plugin that sets the mask at CollApi start sets the next call's).
 *   - On the user's thread: GroupApi start, GroupApi GROUP_START_API_STOP, CollApi start and
 *     stop, GroupApi GROUP_END_API_START, KernelLaunch start/stop, then (host work after the
 *     launch) Group start, Coll start (parentObj = CollApi handle, coll.parentGroup = Group
 *     handle), proxy ops uploaded, Coll stop, Group stop, and last GroupApi stop.
 *   - KernelCh events come from the proxy thread once the GPU reports progress: first every
 *     channel's start (parentObj = Coll handle, pTimer = GPU start tick), then per channel
 *     recordEventState(KERNEL_CH_STOP, pTimer = GPU end tick) immediately followed by stop.
 *     They usually arrive after the Coll has stopped on the host.
 *   - stop/recordEventState are only issued for handles the plugin returned non-NULL.
 *
 * Without --kernelch-thread the KernelCh events are issued inline, after the host-side tree
 * (so the same thread pays them); with it a second thread per communicator issues them,
 * fed through a bounded queue filled where NCCL uploads proxy ops, which exercises the
 * plugin's cross-thread handoff of the Coll handle.
 *
 * Prints one JSON object to stdout. cpu_ns_per_collective is the hot-path time per collective
 * and communicator: inline, the user thread's CPU time over the measured loop; with
 * --kernelch-thread, the user thread's wall time less its waits for queue space plus the
 * proxy thread's busy time (wall clock: keep threads x 2 <= cores). process_cpu_ns adds the
 * plugin's own background threads (meaningful inline only: proxy-mode threads spin).
 */
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comminsight/nccl_profiler_v5.h"

#define N_CHANNELS 24
#define MAX_THREADS 64
#define MAX_DEPTH 4096
#define KERNEL_NS 15000u     /* synthetic GPU time of one channel */
#define GPU_STRIDE_NS 20000u /* synthetic GPU time between collectives */

/* ---- NCCL's gating: which mask bits make NCCL issue each event type ---- */

#define T_GROUP CI_NCCL_V5_EVENT_TYPE_GROUP
#define T_COLL CI_NCCL_V5_EVENT_TYPE_COLL
#define T_P2P CI_NCCL_V5_EVENT_TYPE_P2P
#define T_PROXY_OP CI_NCCL_V5_EVENT_TYPE_PROXY_OP
#define T_PROXY_STEP CI_NCCL_V5_EVENT_TYPE_PROXY_STEP
#define T_KERNEL_CH CI_NCCL_V5_EVENT_TYPE_KERNEL_CH
#define T_NET_PLUGIN CI_NCCL_V5_EVENT_TYPE_NET_PLUGIN
#define T_GROUP_API CI_NCCL_V5_EVENT_TYPE_GROUP_API
#define T_COLL_API CI_NCCL_V5_EVENT_TYPE_COLL_API
#define T_P2P_API CI_NCCL_V5_EVENT_TYPE_P2P_API
#define T_KERNEL_LAUNCH CI_NCCL_V5_EVENT_TYPE_KERNEL_LAUNCH

#define GATE_COLL (T_COLL | T_PROXY_OP | T_PROXY_STEP | T_KERNEL_CH | T_NET_PLUGIN)
#define GATE_GROUP (GATE_COLL | T_GROUP | T_P2P)
#define GATE_COLL_API (GATE_COLL | T_COLL_API)
#define GATE_GROUP_API (GATE_GROUP | T_GROUP_API | T_COLL_API | T_P2P_API | T_KERNEL_LAUNCH)
#define GATE_KERNEL_LAUNCH T_KERNEL_LAUNCH
#define GATE_KERNEL_CH T_KERNEL_CH

/* NCCL's process-global mask: the plugin writes it in init and may change it at any time. */
static int32_t g_event_mask;

static int32_t read_mask(void) { return __atomic_load_n(&g_event_mask, __ATOMIC_RELAXED); }

/* ---- clocks ---- */

static uint64_t now_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One step of a spin-wait. Mostly a CPU hint; every 64th step gives the core away, as NCCL's
 * idle proxy thread does, so a waiting thread does not starve the one it waits for when
 * threads outnumber cores. */
static void cpu_relax(unsigned* spins) {
    if ((++*spins & 63u) == 0) {
        sched_yield();
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __asm__ __volatile__("pause");
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* ---- options ---- */

struct options {
    const char* plugin_path;
    long n;         /* measured collectives per communicator */
    long warmup;    /* collectives before measuring (pools, caches, branch predictors) */
    int threads;    /* communicators, each driven by its own thread */
    bool kernelch_thread;
    unsigned depth; /* collectives in flight between user and proxy thread */
    long rate;      /* collectives per second per communicator; 0: as fast as possible */
};

static void usage(const char* argv0) {
    fprintf(stderr,
            "usage: %s PLUGIN.so [--n N] [--warmup W] [--threads T] [--kernelch-thread]"
            " [--depth D] [--rate R]\n"
            "  Replays NCCL 2.28 profiler event trees (AllReduce, 24 channels) against PLUGIN's\n"
            "  ncclProfiler_v5 and prints CPU ns per collective as one JSON line.\n"
            "  --rate paces each communicator to R collectives/s (a steady producer for the\n"
            "  Agent's ingest benchmark) instead of running flat out.\n",
            argv0);
}

static bool parse_long(const char* text, long lo, long hi, long* out) {
    char* end = NULL;
    long v = strtol(text, &end, 10);
    if (end == text || *end != '\0' || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static bool parse_options(int argc, char** argv, struct options* o) {
    *o = (struct options){NULL, 200000, 20000, 1, false, 16, 0};
    for (int i = 1; i < argc; i++) {
        const char* a = argv[i];
        const char* v = i + 1 < argc ? argv[i + 1] : NULL;
        long x;
        if (strcmp(a, "--kernelch-thread") == 0) {
            o->kernelch_thread = true;
        } else if (strcmp(a, "--n") == 0 && v && parse_long(v, 1, 1L << 40, &x)) {
            o->n = x, i++;
        } else if (strcmp(a, "--warmup") == 0 && v && parse_long(v, 0, 1L << 40, &x)) {
            o->warmup = x, i++;
        } else if (strcmp(a, "--threads") == 0 && v && parse_long(v, 1, MAX_THREADS, &x)) {
            o->threads = (int)x, i++;
        } else if (strcmp(a, "--depth") == 0 && v && parse_long(v, 1, MAX_DEPTH, &x)) {
            o->depth = (unsigned)x, i++;
        } else if (strcmp(a, "--rate") == 0 && v && parse_long(v, 1, 1L << 30, &x)) {
            o->rate = x, i++;
        } else if (a[0] != '-' && o->plugin_path == NULL) {
            o->plugin_path = a;
        } else {
            return false;
        }
    }
    return o->plugin_path != NULL;
}

/* ---- per-communicator state ---- */

/* What the proxy thread needs to issue one collective's KernelCh events. */
struct kernelch_work {
    void* coll;         /* the Coll handle: parentObj of every channel */
    int32_t mask;       /* the task's mask, read at API time */
    uint64_t gpu_start; /* synthetic globaltimer tick of the first channel's start */
};

/* Single-producer (user thread) single-consumer (proxy thread) queue. Its bound stands for
 * NCCL's bounded in-flight work: the user thread waits when the proxy falls behind. */
struct handoff {
    struct kernelch_work slots[MAX_DEPTH];
    unsigned depth;
    _Alignas(64) atomic_uint_fast64_t head; /* next slot to fill (user thread) */
    _Alignas(64) atomic_uint_fast64_t tail; /* next slot to drain (proxy thread) */
    _Alignas(64) atomic_bool closing;
    atomic_uint_fast64_t busy_ns; /* proxy wall time spent on batches of work */
    atomic_uint_fast64_t calls;   /* plugin calls made by the proxy thread */
};

struct comm {
    const ci_nccl_profiler_v5_t* prof;
    void* ctx;
    int rank;
    uint64_t seq;       /* Coll seqNumber: per communicator, from 0 */
    uint64_t gpu_clock; /* synthetic globaltimer */
    uint64_t calls;     /* plugin calls made by the user thread */
    uint64_t wait_ns;   /* user thread time spent waiting for queue space */
    bool kernelch_thread;
    long rate; /* see options.rate */
    struct handoff* queue;
    pthread_t proxy;
    /* measured results */
    uint64_t cpu_ns;  /* user thread: CPU time of the loop (inline KernelCh) */
    uint64_t wall_ns; /* user thread: wall time of the loop */
    uint64_t busy_ns; /* what the report counts as this thread's hot-path time */
    uint64_t proxy_busy_ns, proxy_calls, measured_calls, measured_wait_ns;
    uint64_t gpu_timed, measured_gpu_timed; /* collectives whose task mask had KernelCh */
};

/* Stand-ins for NCCL's static strings and for user pointers: constant per communicator, as
 * in a training loop. */
static const char k_func[] = "AllReduce";
static const char k_dtype[] = "ncclFloat32";
static const char k_algo[] = "RING";
static const char k_proto[] = "SIMPLE";
static char k_fake_stream, k_fake_send, k_fake_recv;

/* ---- the KernelCh part (proxy thread, or inline) ---- */

static uint64_t replay_kernel_channels(const struct comm* c, const struct kernelch_work* w) {
    if (!(w->mask & GATE_KERNEL_CH)) return 0;
    uint64_t calls = 0;
    void* handles[N_CHANNELS];
    /* NCCL's proxy starts every channel whose kernel has begun, then stops them as they end */
    for (int ch = 0; ch < N_CHANNELS; ch++) {
        ci_nccl_event_descr_v5_t d = {0};
        d.type = T_KERNEL_CH;
        d.parentObj = w->coll;
        d.u.kernelCh.channelId = (uint8_t)ch;
        d.u.kernelCh.pTimer = w->gpu_start + (uint64_t)ch * 32u;
        handles[ch] = NULL;
        c->prof->startEvent(c->ctx, &handles[ch], &d);
        calls++;
    }
    for (int ch = 0; ch < N_CHANNELS; ch++) {
        if (handles[ch] == NULL) continue;
        ci_nccl_state_args_v5_t a = {0};
        a.kernelCh.pTimer = w->gpu_start + KERNEL_NS + (uint64_t)ch * 32u;
        c->prof->recordEventState(handles[ch], CI_NCCL_V5_EVENT_STATE_KERNEL_CH_STOP, &a);
        c->prof->stopEvent(handles[ch]);
        calls += 2;
    }
    return calls;
}

/* Drains whatever the user thread has queued; the bracket around each batch is the proxy's
 * busy time (its idle spinning is not the plugin's cost). */
static void* proxy_main(void* arg) {
    struct comm* c = arg;
    struct handoff* q = c->queue;
    unsigned spins = 0;
    for (;;) {
        uint64_t tail = atomic_load_explicit(&q->tail, memory_order_relaxed);
        uint64_t head = atomic_load_explicit(&q->head, memory_order_acquire);
        if (tail == head) {
            if (atomic_load_explicit(&q->closing, memory_order_acquire) &&
                atomic_load_explicit(&q->head, memory_order_acquire) == tail)
                break;
            cpu_relax(&spins);
            continue;
        }
        uint64_t t0 = now_ns(CLOCK_MONOTONIC), calls = 0;
        for (; tail != head; tail++) calls += replay_kernel_channels(c, &q->slots[tail % q->depth]);
        atomic_store_explicit(&q->tail, tail, memory_order_release);
        atomic_fetch_add_explicit(&q->busy_ns, now_ns(CLOCK_MONOTONIC) - t0, memory_order_relaxed);
        atomic_fetch_add_explicit(&q->calls, calls, memory_order_relaxed);
    }
    return NULL;
}

/* Waiting for queue space is NCCL back-pressure, not plugin cost: timed (wall clock) so it can
 * be taken out of the user thread's wall time. */
static void handoff_push(struct comm* c, const struct kernelch_work* w) {
    struct handoff* q = c->queue;
    uint64_t head = atomic_load_explicit(&q->head, memory_order_relaxed);
    if (head - atomic_load_explicit(&q->tail, memory_order_acquire) >= q->depth) {
        uint64_t t0 = now_ns(CLOCK_MONOTONIC);
        unsigned spins = 0;
        while (head - atomic_load_explicit(&q->tail, memory_order_acquire) >= q->depth)
            cpu_relax(&spins);
        c->wait_ns += now_ns(CLOCK_MONOTONIC) - t0;
    }
    q->slots[head % q->depth] = *w;
    atomic_store_explicit(&q->head, head + 1, memory_order_release);
}

static void handoff_drain(struct comm* c) {
    struct handoff* q = c->queue;
    unsigned spins = 0;
    while (atomic_load_explicit(&q->tail, memory_order_acquire) !=
           atomic_load_explicit(&q->head, memory_order_relaxed))
        cpu_relax(&spins);
}

/* ---- the user-thread part: one ncclAllReduce in NCCL's implicit group ---- */

static void* start_group_api(struct comm* c, int32_t mask) {
    if (!(mask & GATE_GROUP_API)) return NULL;
    ci_nccl_event_descr_v5_t d = {0};
    d.type = T_GROUP_API;
    d.u.groupApi.graphCaptured = false;
    d.u.groupApi.groupDepth = 1; /* implicit group */
    void* h = NULL;
    c->prof->startEvent(c->ctx, &h, &d);
    c->calls++;
    if (h) {
        c->prof->recordEventState(h, CI_NCCL_V5_EVENT_STATE_GROUP_START_API_STOP, NULL);
        c->calls++;
    }
    return h;
}

static void* coll_api(struct comm* c, int32_t mask, void* group_api) {
    if (!(mask & GATE_COLL_API)) return NULL;
    ci_nccl_event_descr_v5_t d = {0};
    d.type = T_COLL_API;
    d.parentObj = group_api;
    d.u.collApi.func = k_func;
    d.u.collApi.count = 262144;
    d.u.collApi.datatype = k_dtype;
    d.u.collApi.root = 0;
    d.u.collApi.stream = &k_fake_stream;
    d.u.collApi.graphCaptured = false;
    void* h = NULL;
    c->prof->startEvent(c->ctx, &h, &d);
    c->calls++;
    /* the task is queued in between; NCCL stops CollApi before ncclGroupEnd */
    if (h) c->prof->stopEvent(h), c->calls++;
    return h;
}

static void kernel_launch(struct comm* c, int32_t mask, void* group_api) {
    if (!(mask & GATE_KERNEL_LAUNCH)) return;
    ci_nccl_event_descr_v5_t d = {0};
    d.type = T_KERNEL_LAUNCH;
    d.parentObj = group_api;
    d.u.kernelLaunch.stream = &k_fake_stream;
    void* h = NULL;
    c->prof->startEvent(c->ctx, &h, &d);
    c->calls++;
    if (h) c->prof->stopEvent(h), c->calls++;
}

static void* start_group(struct comm* c, int32_t mask) {
    if (!(mask & GATE_GROUP)) return NULL;
    ci_nccl_event_descr_v5_t d = {0};
    d.type = T_GROUP;
    void* h = NULL;
    c->prof->startEvent(c->ctx, &h, &d);
    c->calls++;
    return h;
}

static void* start_coll(struct comm* c, int32_t mask, void* coll_api_h, void* group) {
    if (!(mask & GATE_COLL)) return NULL;
    ci_nccl_event_descr_v5_t d = {0};
    d.type = T_COLL;
    d.parentObj = coll_api_h;
    d.rank = c->rank;
    d.u.coll.seqNumber = c->seq;
    d.u.coll.func = k_func;
    d.u.coll.sendBuff = &k_fake_send;
    d.u.coll.recvBuff = &k_fake_recv;
    d.u.coll.count = 262144;
    d.u.coll.root = 0;
    d.u.coll.datatype = k_dtype;
    d.u.coll.nChannels = N_CHANNELS;
    d.u.coll.nWarps = 17;
    d.u.coll.algo = k_algo;
    d.u.coll.proto = k_proto;
    d.u.coll.parentGroup = group;
    void* h = NULL;
    c->prof->startEvent(c->ctx, &h, &d);
    c->calls++;
    return h;
}

static void stop_if(struct comm* c, void* h) {
    if (h) c->prof->stopEvent(h), c->calls++;
}

static void replay_collective(struct comm* c) {
    int32_t mask = read_mask(); /* taskAppend: the API events and the task follow this value */
    void* group_api = start_group_api(c, mask);
    void* coll_api_h = coll_api(c, mask, group_api);
    int32_t task_mask = mask;
    if (group_api) {
        c->prof->recordEventState(group_api, CI_NCCL_V5_EVENT_STATE_GROUP_END_API_START, NULL);
        c->calls++;
    }
    kernel_launch(c, mask, group_api);
    void* group = start_group(c, task_mask);
    void* coll = start_coll(c, task_mask, coll_api_h, group);
    c->seq++; /* NCCL bumps seqNumber whether or not the plugin is on */
    struct kernelch_work w = {coll, task_mask, c->gpu_clock};
    if (task_mask & GATE_KERNEL_CH) c->gpu_timed++;
    c->gpu_clock += GPU_STRIDE_NS;
    /* here NCCL uploads the proxy ops that will produce the KernelCh events */
    if (c->kernelch_thread && (mask & GATE_KERNEL_CH)) handoff_push(c, &w);
    stop_if(c, coll);
    stop_if(c, group);
    stop_if(c, group_api);
    if (!c->kernelch_thread) c->calls += replay_kernel_channels(c, &w);
}

/* Paced runs sleep in bursts of PACE_BATCH collectives so the sleeps stay coarse. */
#define PACE_BATCH 256

static void run_collectives(struct comm* c, long n) {
    if (c->rate <= 0) {
        for (long i = 0; i < n; i++) replay_collective(c);
        return;
    }
    uint64_t t0 = now_ns(CLOCK_MONOTONIC);
    for (long i = 0; i < n; i++) {
        replay_collective(c);
        if ((i + 1) % PACE_BATCH) continue;
        uint64_t due = t0 + (uint64_t)((double)(i + 1) * 1e9 / (double)c->rate);
        uint64_t now = now_ns(CLOCK_MONOTONIC);
        if (due > now) {
            struct timespec ts = {(time_t)((due - now) / 1000000000u), (long)((due - now) % 1000000000u)};
            nanosleep(&ts, NULL);
        }
    }
}

/* Kept out of line so valgrind --toggle-collect / callgrind_annotate can find it by name. */
__attribute__((noinline)) void measured_loop(struct comm* c, long n) { run_collectives(c, n); }

/* ---- threads ---- */

struct worker {
    struct comm comm;
    const struct options* opt;
    pthread_barrier_t* start;
    pthread_t thread;
};

static bool proxy_start(struct comm* c, unsigned depth) {
    c->queue = calloc(1, sizeof *c->queue);
    if (c->queue == NULL) return false;
    c->queue->depth = depth;
    return pthread_create(&c->proxy, NULL, proxy_main, c) == 0;
}

static void proxy_stop(struct comm* c) {
    atomic_store_explicit(&c->queue->closing, true, memory_order_release);
    pthread_join(c->proxy, NULL);
}

static void* worker_main(void* arg) {
    struct worker* w = arg;
    struct comm* c = &w->comm;
    run_collectives(c, w->opt->warmup);
    uint64_t busy0 = 0, pcalls0 = 0;
    if (c->kernelch_thread) {
        handoff_drain(c);
        busy0 = atomic_load(&c->queue->busy_ns);
        pcalls0 = atomic_load(&c->queue->calls);
    }
    uint64_t calls0 = c->calls, wait0 = c->wait_ns, timed0 = c->gpu_timed;
    pthread_barrier_wait(w->start);
    uint64_t cpu0 = now_ns(CLOCK_THREAD_CPUTIME_ID), wall0 = now_ns(CLOCK_MONOTONIC);
    measured_loop(c, w->opt->n);
    c->cpu_ns = now_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
    c->wall_ns = now_ns(CLOCK_MONOTONIC) - wall0;
    c->measured_calls = c->calls - calls0;
    c->measured_gpu_timed = c->gpu_timed - timed0;
    c->measured_wait_ns = c->wait_ns - wait0;
    /* Inline: thread CPU time, immune to preemption. With a proxy thread the user thread also
     * waits, and a wait is known only in wall time, so both sides are counted in wall time:
     * the loop less its waits, plus the proxy's busy brackets. */
    c->busy_ns = c->kernelch_thread ? c->wall_ns - c->measured_wait_ns : c->cpu_ns;
    if (c->kernelch_thread) {
        handoff_drain(c);
        c->proxy_busy_ns = atomic_load(&c->queue->busy_ns) - busy0;
        c->proxy_calls = atomic_load(&c->queue->calls) - pcalls0;
        proxy_stop(c);
    }
    return NULL;
}

/* ---- plugin and communicators ---- */

static const ci_nccl_profiler_v5_t* load_plugin(const char* path) {
    void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "hot_path: cannot load %s: %s\n", path, dlerror());
        return NULL;
    }
    const ci_nccl_profiler_v5_t* prof = dlsym(lib, "ncclProfiler_v5");
    if (prof == NULL) fprintf(stderr, "hot_path: %s exports no ncclProfiler_v5\n", path);
    return prof;
}

static bool init_comm(struct comm* c, const ci_nccl_profiler_v5_t* prof, int index) {
    memset(c, 0, sizeof *c);
    c->prof = prof;
    c->rank = index;
    /* distinct, hash-like ids, as NCCL's commHash */
    uint64_t comm_id = 0x9e3779b97f4a7c15ull * (uint64_t)(index + 1);
    uint32_t rc = prof->init(&c->ctx, comm_id, &g_event_mask, NULL, 1, 8, index, NULL);
    if (rc != CI_NCCL_V5_RESULT_SUCCESS) {
        fprintf(stderr, "hot_path: init of communicator %d failed (%u)\n", index, rc);
        return false;
    }
    return true;
}

/* ---- report ---- */

struct totals {
    uint64_t busy_ns, cpu_ns, wait_ns, proxy_busy_ns, calls, wall_max_ns, gpu_timed;
};

static struct totals sum_workers(const struct worker* w, int n) {
    struct totals t = {0};
    for (int i = 0; i < n; i++) {
        const struct comm* c = &w[i].comm;
        t.busy_ns += c->busy_ns;
        t.cpu_ns += c->cpu_ns;
        t.wait_ns += c->measured_wait_ns;
        t.proxy_busy_ns += c->proxy_busy_ns;
        t.calls += c->measured_calls + c->proxy_calls;
        t.gpu_timed += c->measured_gpu_timed;
        if (c->wall_ns > t.wall_max_ns) t.wall_max_ns = c->wall_ns;
    }
    return t;
}

static void print_json(const struct options* o, const char* name, const struct totals* t,
                       uint64_t process_cpu_ns) {
    double colls = (double)o->n * (double)o->threads;
    double host = (double)t->busy_ns / colls;
    double proxy = (double)t->proxy_busy_ns / colls;
    printf("{\"plugin\":\"%s\",\"plugin_name\":\"%s\",\"mask\":%d,\"threads\":%d,"
           "\"kernelch_thread\":%s,\"n\":%ld,\"warmup\":%ld,\"calls_per_collective\":%.2f,"
           "\"cpu_ns_per_collective\":%.2f,\"user_thread_ns_per_collective\":%.2f,"
           "\"user_thread_cpu_ns_per_collective\":%.2f,"
           "\"proxy_busy_ns_per_collective\":%.2f,\"wait_ns_per_collective\":%.2f,"
           "\"wall_ns_per_collective\":%.2f,\"process_cpu_ns_per_collective\":%.2f,"
           "\"gpu_timed_fraction\":%.4f}\n",
           o->plugin_path, name ? name : "", read_mask(), o->threads,
           o->kernelch_thread ? "true" : "false", o->n, o->warmup, (double)t->calls / colls,
           host + proxy, host, (double)t->cpu_ns / colls, proxy, (double)t->wait_ns / colls,
           (double)t->wall_max_ns / (double)o->n, (double)process_cpu_ns / colls, (double)t->gpu_timed / colls);
}

/* ---- main ---- */

/* Wall-clock busy times (--kernelch-thread) include preemption: say so when threads outnumber
 * cores. */
static void warn_if_oversubscribed(const struct options* o) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long wanted = (long)o->threads * (o->kernelch_thread ? 2 : 1);
    if (o->kernelch_thread && cpus > 0 && wanted > cpus)
        fprintf(stderr, "hot_path: %ld threads on %ld CPUs: proxy-mode times include preemption\n",
                wanted, cpus);
}

static int run(const struct options* o, const ci_nccl_profiler_v5_t* prof) {
    warn_if_oversubscribed(o);
    static struct worker workers[MAX_THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)o->threads + 1);
    for (int i = 0; i < o->threads; i++) {
        struct worker* w = &workers[i];
        if (!init_comm(&w->comm, prof, i)) return 1;
        w->opt = o;
        w->start = &start;
        w->comm.kernelch_thread = o->kernelch_thread;
        w->comm.rate = o->rate;
    }
    for (int i = 0; i < o->threads; i++) {
        struct comm* c = &workers[i].comm;
        if (c->kernelch_thread && !proxy_start(c, o->depth)) return 1;
        if (pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]) != 0) return 1;
    }
    pthread_barrier_wait(&start); /* every worker has warmed up */
    uint64_t proc0 = now_ns(CLOCK_PROCESS_CPUTIME_ID);
    for (int i = 0; i < o->threads; i++) pthread_join(workers[i].thread, NULL);
    uint64_t process_cpu_ns = now_ns(CLOCK_PROCESS_CPUTIME_ID) - proc0;
    struct totals t = sum_workers(workers, o->threads);
    print_json(o, prof->name, &t, process_cpu_ns);
    fflush(stdout);
    /* finalize after printing: flushing the plugin's outputs is not hot-path cost */
    for (int i = 0; i < o->threads; i++) prof->finalize(workers[i].comm.ctx);
    pthread_barrier_destroy(&start);
    return 0;
}

int main(int argc, char** argv) {
    struct options o;
    if (!parse_options(argc, argv, &o)) {
        usage(argv[0]);
        return 2;
    }
    const ci_nccl_profiler_v5_t* prof = load_plugin(o.plugin_path);
    if (prof == NULL) return 1;
    return run(&o, prof);
}
