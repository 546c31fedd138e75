/* Op life cycle: one Coll/P2p event plus its KernelCh children -> one ring record.
 *
 * NCCL stops a Coll on the host microseconds after starting it (at enqueue); the GPU finishes
 * later, which only the KernelCh children tell (their start/stop carry GPU globaltimer ticks).
 * Those come from NCCL's proxy thread, one thread per op, before or after the Coll stop. So an
 * op is published when both sides are done: the host side (Coll stop) and the channel side (as
 * many channel stops as the nChannels NCCL announced; nothing to wait for when KernelCh was off
 * at start). Each side sets its bit in `gate` with one atomic OR; the side that finds the other
 * bit already set publishes the record and returns the entry to the pool.
 *
 * Budget (architecture §8): <= 150 ns per collective with 24 channels, so per channel event there is
 * no atomic read-modify-write and no clock read: channel fields have a single writer (the
 * proxy thread) and are read by others only after the gate's acquire. Ops whose channels fall
 * short (NCCL sent fewer KernelCh events) are completed by the background sweep once nothing
 * has happened to them for a while; late events for a recycled entry are recognised by the
 * generation in their handle and ignored.
 */
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ci_internal.h"

enum { GATE_HOST = 1, GATE_CHANNELS = 2, GATE_FORCED = 4 };

static uint32_t thread_id(void) {
    ci_thread_t* t = ci_thread();
    return CI_LIKELY(!t->shared) ? t->tid : (uint32_t)syscall(SYS_gettid);
}

#define LOAD(p) __atomic_load_n(p, __ATOMIC_RELAXED)
#define STORE(p, v) __atomic_store_n(p, v, __ATOMIC_RELAXED)

/* Whether NCCL times the op on the GPU: as decided at its API call, else (ABI v4, a call the
 * thread's API ring no longer holds) as NCCL's mask says now. */
static bool gpu_timed(ci_api_info_t api) {
    if (CI_LIKELY(api.gpu_timed >= 0)) return api.gpu_timed != 0;
    const int32_t* nccl_mask = __atomic_load_n(&ci_g.nccl_mask, __ATOMIC_ACQUIRE);
    return ((nccl_mask ? LOAD(nccl_mask) : LOAD(&ci_g.mask)) & CI_EV_KERNEL_CH) != 0;
}

void* ci_op_start(ci_comm_t* comm, uint8_t kind, const char* func, uint64_t seq, uint64_t count,
                  const char* datatype, int peer, int n_channels, uint8_t n_warps, const char* algo,
                  const char* proto, ci_api_info_t api, uint64_t group_id, ci_op_v7_t v7) {
    ci_op_t* op = ci_pool_get();
    if (CI_UNLIKELY(!op)) {
        ci_counter_add(&ci_g.hdr->events_dropped_pool, 1);
        return NULL;
    }
    /* Fields the background thread may read while this entry is being reused are written
     * with relaxed atomic stores (plain moves on x86); it re-checks the generation after. */
    uint8_t func_id = ci_func_of(func), datatype_id = ci_datatype_of(datatype);
    STORE(&op->comm, comm);
    STORE(&op->kind, kind);
    STORE(&op->func, func_id);
    op->flags = api.graph_captured ? CI_SHM_V1_SLOT_FLAGS_GRAPH_CAPTURED : 0;
    if (CI_UNLIKELY(func_id == CI_SHM_V1_FUNC_UNKNOWN)) {
        bool truncated;
        ci_copy_name(op->raw_name, sizeof(op->raw_name), func, &truncated);
        if (truncated) op->flags |= CI_SHM_V1_SLOT_FLAGS_NAME_TRUNCATED;
    } else {
        op->raw_name[0] = '\0';
    }
    STORE(&op->datatype, datatype_id);
    STORE(&op->algo, ci_algo_of(algo));
    STORE(&op->proto, ci_proto_of(proto));
    STORE(&op->op_seq, seq);
    /* the first op of a group notes what the communicator had issued before the group (ops
     * of one group share a kernel, so one of them starting proves none of the others done) */
    if (group_id == 0 || group_id != comm->base_group) {
        comm->base_group = group_id;
        comm->group_coll_base = LOAD(&comm->coll_counter);
        comm->group_p2p_base = LOAD(&comm->p2p_counter);
    }
    STORE(&op->coll_before, comm->group_coll_base);
    STORE(&op->p2p_before, comm->group_p2p_base);
    uint64_t* counter = kind == CI_SHM_V1_RECORD_KIND_COLL ? &comm->coll_counter : &comm->p2p_counter;
    uint64_t index = LOAD(counter);
    STORE(counter, index + 1);
    STORE(&op->op_index, index);
    STORE(&op->count, count);
    STORE(&op->bytes, count * ci_datatype_size(datatype_id));
    STORE(&op->peer, peer);
    STORE(&op->n_channels, (uint8_t)(n_channels < 0 ? 0 : n_channels));
    op->n_warps = n_warps;
    op->stream = api.stream;
    op->group_id = group_id;
    op->tid = thread_id();
    op->user_tag = v7.user_tag;
    if (CI_UNLIKELY(v7.kernel_variant != NULL))
        ci_copy_name(op->kernel_variant, sizeof(op->kernel_variant), v7.kernel_variant, NULL);
    else
        op->kernel_variant[0] = '\0';
    if (v7.sym_coll) op->flags |= CI_SHM_V1_SLOT_FLAGS_SYM_COLL;
    /* n_channels < 0: NCCL did not say (v4 P2P); the background sweep completes such ops once
     * their channels have gone quiet. */
    uint32_t expect = n_channels < 0 ? UINT32_MAX : (uint32_t)n_channels;
    bool timed = gpu_timed(api);
    if (api.gpu_timed > 0) ci_gpu_timing_taken(comm);
    STORE(&op->expect_channels, timed ? expect : 0u);
    /* left untimed by the sample: done when a later op of the communicator starts on the GPU,
     * not when NCCL stops it on the host (otherwise the watchdog could not see it hang) */
    STORE(&op->unproven,
          !timed && LOAD(&ci_g.gpu_timing) == CI_SHM_V1_GPU_TIMING_SAMPLED && !LOAD(&ci_g.mask_overridden));
    STORE(&op->host_start_mono_ns, ci_now_mono());
    STORE(&op->host_stop_mono_ns, 0);
    STORE(&op->gpu_start_ticks, 0);
    STORE(&op->gpu_end_ticks, 0);
    STORE(&op->complete_mono_ns, 0);
    STORE(&op->ch_started, 0);
    STORE(&op->ch_stopped, 0);
    STORE(&op->sweep_events, 0);
    STORE(&op->sweep_seen_mono_ns, 0);
    uint32_t generation = LOAD(&op->generation);
    __atomic_store_n(&op->gate, 0, __ATOMIC_RELEASE); /* everything above is visible with it */
    void* handle = ci_handle_make(CI_HANDLE_OP, op->index, generation, 0);
    ci_comm_note_enqueued(comm, op, handle);
    return handle;
}

/* Write an op's record straight into its claimed ring slot (every byte: the slot holds the
 * previous lap's record). Readers may copy the slot meanwhile and discard the copy (seqlock). */
__attribute__((noinline)) void ci_seqlock_fill_op_slot(ci_shm_op_slot_v1_t* s, const ci_op_t* op, uint16_t flags,
                                                       uint8_t timing, uint32_t started, uint32_t stopped,
                                                       uint64_t host_stop, uint64_t complete, uint64_t gpu_start,
                                                       uint64_t gpu_end) {
    s->kind = op->kind;
    s->func = op->func;
    s->datatype = op->datatype;
    s->algo = op->algo;
    s->proto = op->proto;
    s->timing_source = timing;
    s->n_channels = op->n_channels;
    s->n_warps = op->n_warps;
    s->flags = flags;
    s->kernel_ch_count = (uint16_t)stopped;
    s->comm_index = op->comm->index;
    s->comm_id = op->comm->comm_id;
    s->rank = op->comm->rank;
    s->peer = op->peer;
    s->op_seq = op->op_seq;
    s->count = op->count;
    s->bytes = op->bytes;
    s->stream = op->stream;
    s->tid = op->tid;
    s->nranks = op->comm->nranks;
    s->host_start_mono_ns = op->host_start_mono_ns;
    s->host_stop_mono_ns = host_stop;
    s->complete_mono_ns = complete;
    s->gpu_start_ticks = gpu_start;
    s->gpu_end_ticks = gpu_end;
    s->api_start_mono_ns = 0;
    s->group_id = op->group_id;
    memcpy(s->raw_name, op->raw_name, sizeof(s->raw_name));
    s->channels_started = (uint16_t)started;
    s->hang_op_kind = CI_SHM_V1_RECORD_KIND_NONE;
    s->reserved0 = 0;
    s->hang_threshold_ms = 0;
    s->comm_op_index = op->op_index;
    s->user_tag = op->user_tag;
    memcpy(s->kernel_variant, op->kernel_variant, sizeof(s->kernel_variant));
    memset(s->reserved, 0, sizeof(s->reserved));
}

static void publish(ci_op_t* op, uint16_t extra_flags) {
    uint32_t started = LOAD(&op->ch_started);
    uint32_t stopped = LOAD(&op->ch_stopped);
    uint64_t gpu_start = LOAD(&op->gpu_start_ticks);
    uint64_t gpu_end = LOAD(&op->gpu_end_ticks);
    uint64_t host_stop = LOAD(&op->host_stop_mono_ns);
    uint64_t complete = LOAD(&op->complete_mono_ns);
    uint16_t flags = op->flags | extra_flags;
    if (started != stopped || stopped < op->expect_channels) flags |= CI_SHM_V1_SLOT_FLAGS_CHANNELS_INCOMPLETE;
    uint8_t timing = CI_SHM_V1_TIMING_SOURCE_COLLECTIVE_CPU;
    /* NCCL occasionally reports a channel stop tick older than the op's start ticks (seen on
     * H200: ~1 in 15,000 ops); such a span is not a GPU time, so fall back to host times. */
    if (gpu_start && gpu_end >= gpu_start) timing = CI_SHM_V1_TIMING_SOURCE_KERNEL_GPU;
    else if (stopped && complete) timing = CI_SHM_V1_TIMING_SOURCE_KERNEL_CPU;
    uint64_t complete_ns = complete ? complete : ci_now_mono();
    uint64_t ticket;
    ci_shm_op_slot_v1_t* slot = ci_ring_claim(&ticket);
    if (CI_LIKELY(slot != NULL)) {
        ci_seqlock_fill_op_slot(slot, op, flags, timing, started, stopped, host_stop, complete_ns, gpu_start, gpu_end);
        ci_ring_commit(slot, ticket);
    }
    ci_comm_note_completed(op->comm, op, complete_ns);
    ci_pool_put(op);
}

void ci_op_stop(ci_op_t* op) {
    STORE(&op->host_stop_mono_ns, ci_now_mono());
    uint32_t old = __atomic_fetch_or(&op->gate, GATE_HOST, __ATOMIC_ACQ_REL);
    if (CI_UNLIKELY(old & (GATE_HOST | GATE_FORCED))) return; /* stopped twice, or swept */
    if (op->expect_channels == 0) {
        STORE(&op->complete_mono_ns, LOAD(&op->host_stop_mono_ns));
        publish(op, 0);
    } else if (old & GATE_CHANNELS) {
        publish(op, 0);
    }
}

/* The first channel of an op: the GPU has started it. No clock read here (a clock read costs
 * ~20 ns of the 150 ns budget); the background thread stamps the time when it sees it. */
__attribute__((noinline)) uint32_t ci_channel_start_first(void** handle, ci_op_t* op, const void* parent,
                                                           uint8_t channel, uint64_t ptimer) {
    /* the entry must still be this op when its proof is taken (a forced completion may have
     * recycled it since the caller's test) */
    if ((__atomic_load_n(&op->generation, __ATOMIC_ACQUIRE) & 0xFFFFFFu) != ci_handle_generation(parent)) {
        *handle = NULL;
        return 0;
    }
    ci_comm_note_started(op->comm, op);
    ci_channel_fold_start(op, 0, ptimer);
    *handle = ci_channel_handle(parent, channel);
    return 0;
}

/* When the op completed, in host time. A clock read costs ~20 ns of the budget, so with GPU
 * ticks and a measured GPU-to-host offset it is derived from the last stop tick; one op in 64
 * (and any op without an offset) reads the clock, which also keeps the offset measured. */
static uint64_t completion_time(ci_op_t* op) {
    ci_comm_t* comm = op->comm;
    uint64_t n = LOAD(&comm->completions) + 1;
    STORE(&comm->completions, n); /* a lost increment only shifts the sampling */
    int64_t offset = LOAD(&comm->entry->gpu_clock_offset_ns);
    uint64_t end = LOAD(&op->gpu_end_ticks);
    if (offset && end && (n & 63) && end >= LOAD(&op->gpu_start_ticks)) {
        /* an offset measured before the clocks drifted apart could place the end before the
         * host even issued the op: then read the clock, which also measures the offset again */
        uint64_t derived = (uint64_t)((int64_t)end + offset);
        if (CI_LIKELY(derived >= op->host_start_mono_ns)) return derived;
    }
    uint64_t now = ci_now_mono();
    if (end) ci_comm_note_clock(comm, now, end);
    return now;
}

__attribute__((noinline)) void ci_channels_complete(ci_op_t* op) {
    STORE(&op->complete_mono_ns, completion_time(op));
    uint32_t old = __atomic_fetch_or(&op->gate, GATE_CHANNELS, __ATOMIC_ACQ_REL);
    if ((old & GATE_HOST) && !(old & (GATE_CHANNELS | GATE_FORCED))) publish(op, 0);
}

/* Claim an op for a forced publication; false if either side already published it. */
static bool force_claim(ci_op_t* op) {
    uint32_t old = __atomic_fetch_or(&op->gate, GATE_HOST | GATE_CHANNELS | GATE_FORCED, __ATOMIC_ACQ_REL);
    if (old & GATE_FORCED) return false;
    if ((old & GATE_HOST) && (old & GATE_CHANNELS)) return false;
    if ((old & GATE_HOST) && op->expect_channels == 0) return false; /* published at its stop */
    return true;
}

/* An op that waited quietly for channels while NCCL's mask has no KernelCh for good (an
 * operator took it out between the op's decision and NCCL's read): none will come. Not while
 * sampling, where the bit comes and goes op by op and a quiet timed op may be a stuck one. */
static bool untimed_now(const ci_op_t* op, uint64_t now, uint64_t quiet_ns) {
    const int32_t* nccl_mask = __atomic_load_n(&ci_g.nccl_mask, __ATOMIC_ACQUIRE);
    bool sampling = LOAD(&ci_g.gpu_timing) == CI_SHM_V1_GPU_TIMING_SAMPLED && !LOAD(&ci_g.mask_overridden);
    uint64_t stopped = LOAD(&op->host_stop_mono_ns);
    return !sampling && nccl_mask && !(LOAD(nccl_mask) & CI_EV_KERNEL_CH) && stopped && now > stopped &&
           now - stopped >= quiet_ns;
}

/* Whether a later kernel of its communicator, of another NCCL group, has started. */
static bool passed_on_gpu(const ci_op_t* op) {
    const ci_comm_t* comm = LOAD(&op->comm);
    bool coll = LOAD(&op->kind) == CI_SHM_V1_RECORD_KIND_COLL;
    uint64_t proved = LOAD(coll ? &comm->proved_coll : &comm->proved_p2p);
    return proved > LOAD(&op->op_index);
}

void ci_ops_sweep(ci_comm_t* finalizing, uint64_t now, uint64_t quiet_ns) {
    uint32_t n = ci_pool_size();
    for (uint32_t i = 0; i < n; i++) {
        ci_op_t* op = ci_pool_at(i);
        if (__atomic_load_n(&op->state, __ATOMIC_ACQUIRE) != CI_OP_LIVE) continue;
        uint32_t gate = __atomic_load_n(&op->gate, __ATOMIC_ACQUIRE);
        if (finalizing) {
            if (LOAD(&op->comm) == finalizing && force_claim(op))
                publish(op, CI_SHM_V1_SLOT_FLAGS_FORCED_COMPLETE);
            continue;
        }
        /* Only the background thread runs this branch, so the sweep_* fields are its own. */
        if (!(gate & GATE_HOST) || LOAD(&op->expect_channels) == 0) continue;
        uint32_t started = LOAD(&op->ch_started), stopped = LOAD(&op->ch_stopped);
        if (started == 0 && (passed_on_gpu(op) || untimed_now(op, now, quiet_ns))) {
            /* NCCL was not asked to time it after all (another thread's op, or an operator,
             * changed the mask between the decision and NCCL's read): a later op of its
             * communicator began on the GPU, which runs a communicator's kernels in order, so
             * this one is done; or no channel will come while the mask lacks KernelCh */
            if (!force_claim(op)) continue;
            STORE(&op->expect_channels, 0u);
            STORE(&op->unproven, false); /* the later op proved it */
            STORE(&op->complete_mono_ns, LOAD(&op->host_stop_mono_ns));
            publish(op, 0);
            continue;
        }
        uint32_t events = started + stopped;
        if (events != LOAD(&op->sweep_events) || LOAD(&op->sweep_seen_mono_ns) == 0) {
            STORE(&op->sweep_events, events);
            STORE(&op->sweep_seen_mono_ns, now);
            continue;
        }
        /* fewer channels than announced, all of them done, and quiet since */
        if (started > 0 && started == stopped && now - LOAD(&op->sweep_seen_mono_ns) >= quiet_ns &&
            force_claim(op))
            publish(op, 0);
    }
}
