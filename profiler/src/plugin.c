/* NCCL entry points: ncclProfiler_v7, v6, v5 and v4 over one implementation.
 *
 * The two ABIs differ only in layout (descriptor type width, union members, init argument
 * order); each adapter reads its own generated descriptor type and calls the same core. Every
 * entry point returns success except init, which fails only when the plugin cannot work at all
 * (so NCCL disables it for that communicator and carries on).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ci_internal.h"
#include "comminsight/nccl_profiler_v4.h"
#include "comminsight/nccl_profiler_v5.h"
#include "comminsight/nccl_profiler_v6.h"
#include "comminsight/nccl_profiler_v7.h"

#define EXPORT __attribute__((visibility("default")))

ci_process_t ci_g = {.lock = PTHREAD_MUTEX_INITIALIZER, .table_lock = PTHREAD_MUTEX_INITIALIZER, .home_fd = -1, .node_home_fd = -1,
                      .shms_fd = -1, .region_fd = -1};

/* Context for communicators we could not track (comm table full): events are ignored. */
static ci_comm_t untracked;

/* What the process holds outside the library's own image: descriptors, the region's mapping,
 * heap. The library's static data goes with an unload, these would not: NCCL unloads the
 * plugin when a process's last communicator is destroyed and loads it afresh for the next,
 * and each cycle kept a region mapped, three directories open and the pool and buffers
 * allocated. Called with ci_g.lock held, the threads joined and the region closed; also when
 * no init succeeded, since one that failed part way holds what it had opened by then. */
static void process_release(void) {
    ci_g.initialized = false;
    ci_logwriter_reset();
    ci_evidence_attach(NULL, NULL, 0);
    ci_shm_unmap();
    ci_pool_destroy();
    free(ci_g.comms);
    ci_g.comms = NULL;
    ci_g.comm_capacity = 0;
    ci_g.nccl_mask = NULL;
    ci_mask_forget();
    ci_home_release();
}

/* Runs at process exit and when the library is unloaded (a destructor, not atexit(): an
 * atexit handler would outlive a dlclose'd library under some runtimes). The two cannot be
 * told apart here, so what is released depends on the communicators: with none live (always
 * so when NCCL unloads us) no NCCL thread can call in any more and everything goes; at an
 * exit with communicators still live, NCCL's threads may still be in the hot path, so the
 * region stays mapped and the exit itself reclaims it. */
__attribute__((destructor)) static void at_unload(void) {
    pthread_mutex_lock(&ci_g.lock);
    if (ci_g.initialized && ci_g.pid == getpid()) {
        ci_threads_stop("process_exit");
        ci_update_published_count();
        ci_shm_close(CI_SHM_V1_FILE_STATE_CLOSED);
        /* With an Agent running the closed region is its to retire (it reads what is left
         * and then removes it); without one the log writer's final pass has the records. */
        ci_shm_remove_if_unwatched();
    }
    ci_thread_unload(); /* no thread-exit callback into an unloaded library, nor into the pool */
    if (ci_g.live_comms == 0) process_release();
    pthread_mutex_unlock(&ci_g.lock);
}

static void after_fork_in_child(void) {
    /* Only this thread survives; the parent's threads, comms and SHM are not ours. */
    pthread_mutex_init(&ci_g.lock, NULL);
    pthread_mutex_init(&ci_g.table_lock, NULL);
    ci_threads_forget_after_fork();
    ci_gpu_timing_after_fork();
    ci_thread_after_fork();
    ci_logwriter_reset();
    ci_shm_detach_after_fork();
    ci_evidence_attach(NULL, NULL, 0); /* the parent's table went with its mapping */
    ci_home_after_fork();
    ci_pool_destroy();
    free(ci_g.comms);
    ci_g.comms = NULL;
    ci_g.initialized = false;
    ci_g.threads_running = false;
    ci_g.live_comms = 0;
    ci_g.autostart_done = false;
}

/* Called with ci_g.lock held. */
static int process_init(uint32_t abi) {
    if (ci_g.initialized) return 0;
    static bool hooks_installed;
    ci_g.pid = getpid();
    if (gethostname(ci_g.hostname, sizeof(ci_g.hostname)) != 0) strcpy(ci_g.hostname, "unknown");
    ci_g.hostname[sizeof(ci_g.hostname) - 1] = '\0';
    ci_home_open(); /* before the config: only a trusted home's file is read */
    ci_config_load(&ci_g.cfg, ci_g.node_home_fd);
    ci_home_adopt(&ci_g.cfg);
    ci_clock_init();
    ci_g.mask = ci_g.cfg.event_mask;
    ci_g.abi = abi;
    ci_g.gpu_timing = ci_gpu_timing_mode(abi);
    if (ci_pool_init(ci_g.cfg.event_pool) != 0 || ci_shm_open() != 0) {
        ci_warn("cannot allocate the event pool or the record ring; profiling disabled");
        ci_pool_destroy();
        return -1;
    }
    ci_agent_settings_reset(); /* the watchdog on this process's own threshold until the Agent's is read */
    ci_g.comm_capacity = ci_g.cfg.comm_slots;
    ci_g.comms = aligned_alloc(64, (size_t)ci_g.comm_capacity * sizeof(*ci_g.comms));
    if (ci_g.comms) memset(ci_g.comms, 0, (size_t)ci_g.comm_capacity * sizeof(*ci_g.comms));
    if (!ci_g.comms) {
        ci_pool_destroy();
        ci_shm_unmap();
        return -1;
    }
    for (uint32_t i = 0; i < ci_g.comm_capacity; i++) {
        ci_g.comms[i].index = i;
        ci_g.comms[i].entry = &ci_g.comm_table[i];
    }
    ci_stale_regions_sweep();
    if (!hooks_installed) {
        pthread_atfork(NULL, NULL, after_fork_in_child);
        hooks_installed = true;
    }
    ci_g.initialized = true;
    ci_debug("initialized: home %s, mask 0x%x, ring %u slots, SHM %s", ci_g.cfg.home, ci_g.mask,
             ci_g.cfg.ring_slots, ci_g.region_is_file ? ci_g.shm_path : "(in memory only)");
    return 0;
}

static uint32_t init_common(void** context, uint64_t comm_id, int* mask, const char* name, int nnodes,
                            int nranks, int rank, void* logfn, uint32_t abi) {
    if (context) *context = NULL;
    ci_log_set_nccl_logger(logfn);
    pthread_mutex_lock(&ci_g.lock);
    if (process_init(abi) != 0) {
        pthread_mutex_unlock(&ci_g.lock);
        return CI_NCCL_V5_RESULT_INTERNAL_ERROR; /* NCCL disables the plugin for this comm */
    }
    if (ci_g.hdr->nccl_abi_version == 0) {
        ci_g.hdr->nccl_abi_version = abi;
        ci_gpu_timing_learn_nccl(abi, logfn);
    }
    pthread_mutex_lock(&ci_g.table_lock);
    ci_comm_t* comm = ci_comm_open(comm_id, name, nnodes, nranks, rank, abi);
    pthread_mutex_unlock(&ci_g.table_lock);
    if (!comm) ci_warn("communicator %016llx not tracked: all %u comm slots in use", (unsigned long long)comm_id,
                       ci_g.comm_capacity);
    ci_g.live_comms++;
    ci_threads_start();
    pthread_mutex_unlock(&ci_g.lock);
    /* One process-global int that NCCL re-reads per task: ours from now on (until someone
     * else writes it), its address kept so the mask can change at run time: per op for GPU
     * timing samples, while a hang is suspected, on a configuration change (gpu_timing.c). */
    if (mask) ci_mask_first_write(mask, true);
    if (context) *context = comm ? comm : &untracked;
    return CI_NCCL_V5_RESULT_SUCCESS;
}

static uint32_t finalize_common(void* context) {
    ci_comm_t* comm = context;
    if (!comm) return CI_NCCL_V5_RESULT_SUCCESS;
    ci_hang_snapshot_t exiting;
    bool report_exit = false;
    pthread_mutex_lock(&ci_g.lock);
    if (ci_g.initialized && ci_g.live_comms > 0) {
        if (comm != &untracked) {
            pthread_mutex_lock(&ci_g.table_lock);
            report_exit = ci_g.live_comms == 1 && ci_exit_capture(comm, &exiting);
            ci_evidence_on_close(comm, ci_now_mono()); /* its raised mask ends with it */
            ci_comm_close(comm);
            pthread_mutex_unlock(&ci_g.table_lock);
        }
        if (--ci_g.live_comms == 0) ci_threads_stop("finalize"); /* drains and seals the log */
        ci_update_published_count();
    }
    pthread_mutex_unlock(&ci_g.lock);
    if (report_exit) ci_exit_report(&exiting); /* the FIFO write, outside every lock */
    return CI_NCCL_V5_RESULT_SUCCESS;
}

static bool tracked(void* context) {
    return context && context != &untracked && CI_LIKELY(ci_g.initialized);
}

#define NO_V7 ((ci_op_v7_t){0, NULL, false})

static void* start_p2p(ci_comm_t* comm, const char* func, uint64_t count, const char* datatype, int peer,
                       int n_channels, ci_api_info_t api, uint64_t group_id, ci_op_v7_t v7) {
    /* NCCL gives P2P no sequence number: its seq is its index among the comm's P2P ops */
    uint64_t seq = __atomic_load_n(&comm->p2p_counter, __ATOMIC_RELAXED);
    return ci_op_start(comm, CI_SHM_V1_RECORD_KIND_P2P, func, seq, count, datatype, peer, n_channels, 0, NULL,
                       NULL, api, group_id, v7);
}

/* NCCL groups: which ops were launched together (one ncclGroupStart..End, or an op alone in
 * its implicit group), so that a grouped Send/Recv all-to-all reads as one operation.
 *
 * NCCL (2.27-2.29, src/plugin/profiler.cc) starts a Group event per kernel plan as soon as
 * the mask has Coll, P2p, KernelCh or a proxy bit, and names it as the parent of the plan's
 * tasks: v4's Coll/P2p parentObj, v5/v6's coll.parentGroup/p2p.parentGroup. v5/v6 also start
 * one GroupApi per outermost group, on the calling thread, at its first op (same gating), and
 * launch the group's plans on that thread before the next one. So the Profiler's default mask
 * (Coll|P2p|KernelCh) already brings both; asking for the Group/GroupApi bits would add no
 * event and is not done.
 *
 * A GroupApi start takes a new group id and makes it this thread's current group; every Group
 * started on the thread after it (one per communicator and plan of that group) carries it, in
 * its handle. The GroupApi itself gets no handle: nothing we read is its child, and a handle
 * would make NCCL call us three more times per group (two states and the stop), 70
 * instructions per op in bench/profiler_hot_path.py's count.
 * A Group on a thread that has seen no GroupApi (ABI v4, a plan launched from a CUDA host
 * callback, a graph replay or a non-blocking communicator's thread) takes a new id: its
 * plan's ops are still one group. Ops take the id from the Group handle they name, not
 * through their CollApi/P2pApi: the API ring below keeps a thread's last 16 calls, fewer than
 * an all-to-all over 8 peers makes before its first task. Ids are reserved from the process
 * counter a block at a time, so taking one is a thread-local increment, not an atomic one. */
#define GROUP_ID_BLOCK 256

static uint64_t new_group_id(ci_thread_t* t) {
    if (CI_UNLIKELY(t->shared)) return __atomic_add_fetch(&ci_g.group_counter, 1, __ATOMIC_RELAXED);
    if (CI_UNLIKELY(t->group_id_next == t->group_id_end)) {
        uint64_t first = __atomic_fetch_add(&ci_g.group_counter, GROUP_ID_BLOCK, __ATOMIC_RELAXED) + 1;
        t->group_id_next = first;
        t->group_id_end = first + GROUP_ID_BLOCK;
    }
    return t->group_id_next++;
}

static void start_group_api(void) {
    ci_thread_t* t = ci_thread();
    if (!t->shared) t->current_group_id = new_group_id(t);
}

/* A group begun on a communicator we do not track: its plans on tracked ones take new ids. */
static void start_untracked_group_api(void) {
    ci_thread_t* t = ci_thread();
    if (!t->shared) t->current_group_id = 0;
}

static void* start_group(void) {
    ci_thread_t* t = ci_thread();
    uint64_t id = !t->shared && t->current_group_id ? t->current_group_id : new_group_id(t);
    return ci_group_handle_make(id);
}

/* The API call behind a task (v5 CollApi/P2pApi events): NCCL starts it on the calling thread
 * before the task and names it as the task's parent. Its stream and graph flag are kept in a
 * small per-thread ring, found again through the handle; no allocation, no clock read (the
 * API start time is not recorded: it would cost a clock read per op). */
static void* start_api(ci_comm_t* comm, uint64_t stream, bool graph_captured, const char* func, uint64_t count,
                       const char* datatype) {
    ci_thread_t* t = ci_thread();
    uint32_t i = t->api_next++ & 0xFFFFFu;
    void* handle = ci_handle_make(CI_HANDLE_API, i, 0, 0);
    /* NCCL appends this call's task next, reading the mask: decide its GPU timing now */
    bool timed = ci_gpu_timing_decide(t, comm, func, count, datatype);
    if (!t->shared) {
        t->api_ring[i % CI_API_RING].handle = (uintptr_t)handle;
        t->api_ring[i % CI_API_RING].info = (ci_api_info_t){stream, graph_captured, timed};
    }
    return handle;
}

#define NO_API_INFO ((ci_api_info_t){0, false, -1})

static ci_api_info_t api_of(const void* parent) {
    if (parent && ci_handle_kind(parent) == CI_HANDLE_API) {
        ci_thread_t* t = ci_thread();
        uint32_t i = (uint32_t)ci_handle_index(parent) % CI_API_RING;
        if (!t->shared && t->api_ring[i].handle == (uintptr_t)parent) return t->api_ring[i].info;
    }
    return NO_API_INFO;
}

/* Event types we know and deliberately do not track: no handle, no counting. (ProxyOp and
 * ProxyStep have their own cases: recorded while hang evidence is raised, else no handle.) */
#define KNOWN_UNTRACKED_V5 0x0EA0ull /* ProxyCtrl, NetPlugin, CollApi, P2pApi, KernelLaunch */
#define KNOWN_UNTRACKED_V4 0xA0u     /* ProxyCtrl, NetPlugin */

static void on_unknown_event(void) {
    if (ci_g.hdr) ci_counter_add(&ci_g.hdr->events_unknown, 1);
}

/* ---------------------------------------------------------------------------------------- v5 */

static uint32_t init_v5(void** context, uint64_t comm_id, int32_t* mask, const char* name, int32_t nnodes,
                        int32_t nranks, int32_t rank, ci_nccl_debug_logger_v5_fn logfn) {
    return init_common(context, comm_id, mask, name, nnodes, nranks, rank, (void*)logfn, 5);
}

/* Every event but KernelCh. */
static __attribute__((noinline)) uint32_t start_other_v5(void* context, void** handle, ci_nccl_event_descr_v5_t* d) {
    if (!handle) return CI_NCCL_V5_RESULT_SUCCESS;
    *handle = NULL;
    if (CI_UNLIKELY(!d || !tracked(context))) {
        if (d && d->type == CI_NCCL_V5_EVENT_TYPE_GROUP_API) start_untracked_group_api();
        return CI_NCCL_V5_RESULT_SUCCESS;
    }
    ci_comm_t* comm = context;
    switch (d->type) {
    case CI_EV_COLL:
        *handle = ci_op_start(comm, CI_SHM_V1_RECORD_KIND_COLL, d->u.coll.func, d->u.coll.seqNumber,
                              d->u.coll.count, d->u.coll.datatype, d->u.coll.root, d->u.coll.nChannels,
                              d->u.coll.nWarps, d->u.coll.algo, d->u.coll.proto, api_of(d->parentObj),
                              ci_group_of(d->u.coll.parentGroup), NO_V7);
        break;
    case CI_EV_P2P:
        *handle = start_p2p(comm, d->u.p2p.func, d->u.p2p.count, d->u.p2p.datatype, d->u.p2p.peer,
                            d->u.p2p.nChannels, api_of(d->parentObj), ci_group_of(d->u.p2p.parentGroup), NO_V7);
        break;
    case CI_NCCL_V5_EVENT_TYPE_GROUP_API:
        start_group_api(); /* no handle: see start_group_api */
        break;
    case CI_NCCL_V5_EVENT_TYPE_GROUP:
        *handle = start_group();
        break;
    case CI_NCCL_V5_EVENT_TYPE_COLL_API:
        *handle = start_api(comm, (uint64_t)(uintptr_t)d->u.collApi.stream, d->u.collApi.graphCaptured,
                            d->u.collApi.func, d->u.collApi.count, d->u.collApi.datatype);
        break;
    case CI_NCCL_V5_EVENT_TYPE_P2P_API:
        *handle = start_api(comm, (uint64_t)(uintptr_t)d->u.p2pApi.stream, d->u.p2pApi.graphCaptured,
                            d->u.p2pApi.func, d->u.p2pApi.count, d->u.p2pApi.datatype);
        break;
    case CI_EV_PROXY_OP:
        *handle = ci_evidence_proxy_op_start(comm, d->parentObj, d->u.proxyOp.channelId, d->u.proxyOp.peer,
                                             d->u.proxyOp.nSteps, d->u.proxyOp.isSend != 0);
        break;
    case CI_EV_PROXY_STEP:
        *handle = ci_evidence_proxy_step_start(d->parentObj);
        break;
    default:
        if (!(d->type & KNOWN_UNTRACKED_V5) || (d->type & (d->type - 1))) on_unknown_event();
        break;
    }
    return CI_NCCL_V5_RESULT_SUCCESS;
}

/* KernelCh first, in a function small enough to need no stack frame: 24 of a collective's
 * ~28 starts. A channel's parent names the op, so no context test is needed: a parent that is
 * not a live op of ours (an untracked communicator's NULL, a recycled entry, no pool) gives
 * no handle. */
static uint32_t start_v5(void* context, void** handle, ci_nccl_event_descr_v5_t* d) {
    if (CI_LIKELY(handle && d && d->type == CI_EV_KERNEL_CH))
        return ci_channel_start_into(handle, d->parentObj, d->u.kernelCh.channelId, d->u.kernelCh.pTimer);
    return start_other_v5(context, handle, d);
}

/* Every handle but a channel's. */
static __attribute__((noinline)) uint32_t stop_other(void* handle) {
    /* API and Group handles hold nothing, proxy handles name evidence */
    uint32_t kind = ci_handle_kind(handle);
    if (CI_UNLIKELY(kind - CI_HANDLE_API <= CI_HANDLE_PROXY_STEP - CI_HANDLE_API)) {
        if (kind >= CI_HANDLE_PROXY_OP) ci_evidence_proxy_stop(handle);
        return CI_NCCL_V5_RESULT_SUCCESS;
    }
    ci_op_t* op = ci_op_from_handle(handle); /* NULL for NULL, foreign and stale handles */
    if (CI_LIKELY(op && kind == CI_HANDLE_OP)) ci_op_stop(op);
    else if (handle) on_unknown_event();
    return CI_NCCL_V5_RESULT_SUCCESS;
}

static inline __attribute__((always_inline)) uint32_t stop_common(void* handle) {
    if (CI_LIKELY(ci_handle_kind(handle) == CI_HANDLE_CHANNEL)) {
        ci_op_t* op = ci_op_from_handle(handle); /* NULL once its op is recycled */
        if (CI_LIKELY(op != NULL)) ci_channel_stop(op);
        else on_unknown_event();
        return CI_NCCL_V5_RESULT_SUCCESS;
    }
    return stop_other(handle);
}

/* GroupApi states come with NULL args, and we hand out no handle for those; ProxyStep states
 * are hang evidence. */
static __attribute__((noinline)) void record_other(void* handle, uint32_t state) {
    if (state != CI_STATE_KERNEL_CH_STOP && ci_handle_kind(handle) == CI_HANDLE_PROXY_STEP)
        ci_evidence_proxy_state(handle, state);
}

static inline __attribute__((always_inline)) void record_state(void* handle, uint32_t state, const uint64_t* ptimer) {
    if (CI_LIKELY(state == CI_STATE_KERNEL_CH_STOP && ptimer && ci_handle_kind(handle) == CI_HANDLE_CHANNEL)) {
        ci_op_t* op = ci_op_from_handle(handle);
        if (CI_LIKELY(op != NULL)) ci_channel_record_stop(op, *ptimer);
        return;
    }
    record_other(handle, state);
}

static uint32_t record_v5(void* handle, uint32_t state, ci_nccl_state_args_v5_t* args) {
    record_state(handle, state, args ? &args->kernelCh.pTimer : NULL);
    return CI_NCCL_V5_RESULT_SUCCESS;
}

static uint32_t stop_v5(void* handle) { return stop_common(handle); }
static uint32_t finalize_v5(void* context) { return finalize_common(context); }

EXPORT ci_nccl_profiler_v5_t ncclProfiler_v5 = {
    .name = CI_PLUGIN_NAME,
    .init = init_v5,
    .startEvent = start_v5,
    .stopEvent = stop_v5,
    .recordEventState = record_v5,
    .finalize = finalize_v5,
};

/* ---------------------------------------------------------------------------------------- v4 */

static uint32_t init_v4(void** context, int32_t* mask, const char* name, uint64_t comm_hash, int32_t nnodes,
                        int32_t nranks, int32_t rank, ci_nccl_debug_logger_v4_fn logfn) {
    return init_common(context, comm_hash, mask, name, nnodes, nranks, rank, (void*)logfn, 4);
}

static uint32_t start_v4(void* context, void** handle, ci_nccl_event_descr_v4_t* d) {
    if (!handle) return CI_NCCL_V4_RESULT_SUCCESS;
    *handle = NULL;
    if (!d || !tracked(context)) return CI_NCCL_V4_RESULT_SUCCESS;
    ci_comm_t* comm = context;
    /* v4's tasks name their Group as parentObj */
    switch (d->type) {
    case CI_EV_COLL:
        *handle = ci_op_start(comm, CI_SHM_V1_RECORD_KIND_COLL, d->u.coll.func, d->u.coll.seqNumber,
                              d->u.coll.count, d->u.coll.datatype, d->u.coll.root, d->u.coll.nChannels,
                              d->u.coll.nWarps, d->u.coll.algo, d->u.coll.proto, NO_API_INFO,
                              ci_group_of(d->parentObj), NO_V7);
        break;
    case CI_EV_P2P:
        /* NCCL leaves p2p.nChannels unset for v4 plugins: the channel count is unknown */
        *handle = start_p2p(comm, d->u.p2p.func, d->u.p2p.count, d->u.p2p.datatype, d->u.p2p.peer, -1,
                            NO_API_INFO, ci_group_of(d->parentObj), NO_V7);
        break;
    case CI_EV_KERNEL_CH:
        *handle = ci_channel_start(d->parentObj, d->u.kernelCh.channelId, d->u.kernelCh.pTimer);
        break;
    case CI_NCCL_V4_EVENT_TYPE_GROUP:
        *handle = start_group();
        break;
    case CI_EV_PROXY_OP:
        *handle = ci_evidence_proxy_op_start(comm, d->parentObj, d->u.proxyOp.channelId, d->u.proxyOp.peer,
                                             d->u.proxyOp.nSteps, d->u.proxyOp.isSend != 0);
        break;
    case CI_EV_PROXY_STEP:
        *handle = ci_evidence_proxy_step_start(d->parentObj);
        break;
    default:
        if (!(d->type & KNOWN_UNTRACKED_V4) || (d->type & (d->type - 1))) on_unknown_event();
        break;
    }
    return CI_NCCL_V4_RESULT_SUCCESS;
}

static uint32_t record_v4(void* handle, uint32_t state, ci_nccl_state_args_v4_t* args) {
    record_state(handle, state, args ? &args->kernelCh.pTimer : NULL);
    return CI_NCCL_V4_RESULT_SUCCESS;
}

static uint32_t stop_v4(void* handle) { return stop_common(handle); }
static uint32_t finalize_v4(void* context) { return finalize_common(context); }

EXPORT ci_nccl_profiler_v4_t ncclProfiler_v4 = {
    .name = CI_PLUGIN_NAME,
    .init = init_v4,
    .startEvent = start_v4,
    .stopEvent = stop_v4,
    .recordEventState = record_v4,
    .finalize = finalize_v4,
};

/* ---------------------------------------------------------------------------------------- v6 */
/* v6 (NCCL 2.29+) adds copy-engine events and moves nothing: every field the v5 adapter reads is
 * at the same offset (asserted for each descriptor type T that goes through it: v6, v7), so v6
 * events go through it. CE events are not tracked. */
#define SAME_OFFSET(T, member)                                                                   \
    _Static_assert(offsetof(T, member) == offsetof(ci_nccl_event_descr_v5_t, member), #T " moved " #member)
#define READS_AS_V5(T)                                                                           \
    SAME_OFFSET(T, type);                                                                        \
    SAME_OFFSET(T, parentObj);                                                                   \
    SAME_OFFSET(T, u.coll.seqNumber);                                                            \
    SAME_OFFSET(T, u.coll.func);                                                                 \
    SAME_OFFSET(T, u.coll.count);                                                                \
    SAME_OFFSET(T, u.coll.root);                                                                 \
    SAME_OFFSET(T, u.coll.datatype);                                                             \
    SAME_OFFSET(T, u.coll.nChannels);                                                            \
    SAME_OFFSET(T, u.coll.nWarps);                                                               \
    SAME_OFFSET(T, u.coll.algo);                                                                 \
    SAME_OFFSET(T, u.coll.proto);                                                                \
    SAME_OFFSET(T, u.coll.parentGroup);                                                          \
    SAME_OFFSET(T, u.p2p.func);                                                                  \
    SAME_OFFSET(T, u.p2p.datatype);                                                              \
    SAME_OFFSET(T, u.p2p.count);                                                                 \
    SAME_OFFSET(T, u.p2p.peer);                                                                  \
    SAME_OFFSET(T, u.p2p.nChannels);                                                             \
    SAME_OFFSET(T, u.p2p.parentGroup);                                                           \
    SAME_OFFSET(T, u.kernelCh.channelId);                                                        \
    SAME_OFFSET(T, u.kernelCh.pTimer);                                                           \
    SAME_OFFSET(T, u.collApi.func);                                                              \
    SAME_OFFSET(T, u.collApi.count);                                                             \
    SAME_OFFSET(T, u.collApi.datatype);                                                          \
    SAME_OFFSET(T, u.collApi.stream);                                                            \
    SAME_OFFSET(T, u.collApi.graphCaptured);                                                     \
    SAME_OFFSET(T, u.p2pApi.func);                                                               \
    SAME_OFFSET(T, u.p2pApi.count);                                                              \
    SAME_OFFSET(T, u.p2pApi.datatype);                                                           \
    SAME_OFFSET(T, u.p2pApi.stream);                                                             \
    SAME_OFFSET(T, u.p2pApi.graphCaptured);                                                      \
    SAME_OFFSET(T, u.proxyOp.channelId);                                                         \
    SAME_OFFSET(T, u.proxyOp.peer);                                                              \
    SAME_OFFSET(T, u.proxyOp.nSteps);                                                            \
    SAME_OFFSET(T, u.proxyOp.isSend)
READS_AS_V5(ci_nccl_event_descr_v6_t);
_Static_assert(sizeof(ci_nccl_state_args_v6_t) == sizeof(ci_nccl_state_args_v5_t), "v6 state args differ");
_Static_assert(offsetof(ci_nccl_state_args_v6_t, kernelCh.pTimer) == offsetof(ci_nccl_state_args_v5_t, kernelCh.pTimer),
               "v6 moved kernelCh.pTimer");

#define CE_EVENTS (CI_NCCL_V6_EVENT_TYPE_CE_COLL | CI_NCCL_V6_EVENT_TYPE_CE_SYNC | CI_NCCL_V6_EVENT_TYPE_CE_BATCH)

static uint32_t start_v6(void* context, void** handle, ci_nccl_event_descr_v6_t* d) {
    if (CI_LIKELY(handle && d && d->type == CI_EV_KERNEL_CH))
        return ci_channel_start_into(handle, d->parentObj, d->u.kernelCh.channelId, d->u.kernelCh.pTimer);
    if (d && (d->type & CE_EVENTS) && !(d->type & (d->type - 1))) { /* known, not tracked */
        if (handle) *handle = NULL;
        return CI_NCCL_V6_RESULT_SUCCESS;
    }
    return start_other_v5(context, handle, (ci_nccl_event_descr_v5_t*)(void*)d);
}

static uint32_t record_v6(void* handle, uint32_t state, ci_nccl_state_args_v6_t* args) {
    return record_v5(handle, state, (ci_nccl_state_args_v5_t*)(void*)args);
}

static uint32_t init_v6(void** context, uint64_t comm_id, int32_t* mask, const char* name, int32_t nnodes,
                        int32_t nranks, int32_t rank, ci_nccl_debug_logger_v6_fn logfn) {
    return init_common(context, comm_id, mask, name, nnodes, nranks, rank, (void*)logfn, 6);
}

EXPORT ci_nccl_profiler_v6_t ncclProfiler_v6 = {
    .name = CI_PLUGIN_NAME,
    .init = init_v6,
    .startEvent = start_v6,
    .stopEvent = stop_v5,
    .recordEventState = record_v6,
    .finalize = finalize_v5,
};

/* ---------------------------------------------------------------------------------------- v7 */
/* v7 (NCCL 2.31+) appends to v6's descriptors and moves nothing: the v5 adapter reads v7 events
 * at the same offsets (asserted by READS_AS_V5). What v7 adds that we keep: the call's userTag
 * on Coll and P2p, and a Coll's kernelVariant and isSymColl. KernelPhase events (a KernelCh's
 * children) are never asked for; any that come get no handle. */
READS_AS_V5(ci_nccl_event_descr_v7_t);
_Static_assert(sizeof(ci_nccl_state_args_v7_t) == sizeof(ci_nccl_state_args_v5_t), "v7 state args differ");
_Static_assert(offsetof(ci_nccl_state_args_v7_t, kernelCh.pTimer) == offsetof(ci_nccl_state_args_v5_t, kernelCh.pTimer),
               "v7 moved kernelCh.pTimer");

#define NOT_TRACKED_V7 (CE_EVENTS | CI_NCCL_V7_EVENT_TYPE_KERNEL_PHASE)

static __attribute__((noinline)) void* start_task_v7(ci_comm_t* comm, const ci_nccl_event_descr_v7_t* d) {
    if (d->type == CI_EV_COLL) {
        ci_op_v7_t v7 = {d->u.coll.userTag, d->u.coll.kernelVariant, d->u.coll.isSymColl};
        return ci_op_start(comm, CI_SHM_V1_RECORD_KIND_COLL, d->u.coll.func, d->u.coll.seqNumber, d->u.coll.count,
                           d->u.coll.datatype, d->u.coll.root, d->u.coll.nChannels, d->u.coll.nWarps, d->u.coll.algo,
                           d->u.coll.proto, api_of(d->parentObj), ci_group_of(d->u.coll.parentGroup), v7);
    }
    return start_p2p(comm, d->u.p2p.func, d->u.p2p.count, d->u.p2p.datatype, d->u.p2p.peer, d->u.p2p.nChannels,
                     api_of(d->parentObj), ci_group_of(d->u.p2p.parentGroup), (ci_op_v7_t){d->u.p2p.userTag, NULL, false});
}

static uint32_t start_v7(void* context, void** handle, ci_nccl_event_descr_v7_t* d) {
    if (CI_LIKELY(handle && d && d->type == CI_EV_KERNEL_CH))
        return ci_channel_start_into(handle, d->parentObj, d->u.kernelCh.channelId, d->u.kernelCh.pTimer);
    if (handle && d && (d->type == CI_EV_COLL || d->type == CI_EV_P2P)) {
        *handle = tracked(context) ? start_task_v7(context, d) : NULL;
        return CI_NCCL_V7_RESULT_SUCCESS;
    }
    if (d && (d->type & NOT_TRACKED_V7) && !(d->type & (d->type - 1))) { /* known, not tracked */
        if (handle) *handle = NULL;
        return CI_NCCL_V7_RESULT_SUCCESS;
    }
    return start_other_v5(context, handle, (ci_nccl_event_descr_v5_t*)(void*)d);
}

static uint32_t record_v7(void* handle, uint32_t state, ci_nccl_state_args_v7_t* args) {
    return record_v5(handle, state, (ci_nccl_state_args_v5_t*)(void*)args);
}

static uint32_t init_v7(void** context, uint64_t comm_id, int32_t* mask, const char* name, int32_t nnodes,
                        int32_t nranks, int32_t rank, ci_nccl_debug_logger_v7_fn logfn) {
    return init_common(context, comm_id, mask, name, nnodes, nranks, rank, (void*)logfn, 7);
}

EXPORT ci_nccl_profiler_v7_t ncclProfiler_v7 = {
    .name = CI_PLUGIN_NAME,
    .init = init_v7,
    .startEvent = start_v7,
    .stopEvent = stop_v5,
    .recordEventState = record_v7,
    .finalize = finalize_v5,
};
