/* Communicators: their row in the SHM table (identity + live progress) and in-flight windows.
 *
 * Progress is what hang diagnosis reads. The hot path keeps it with plain (relaxed) stores of
 * single-writer fields: the enqueuing thread writes *_enqueued, the proxy thread *_started, the
 * completing thread *_completed, each a count with its time. The background thread derives the
 * rest once per heartbeat - the in-flight count and the oldest op in flight - and writes those
 * under the row's seqlock, as the only writer of them.
 */
#include <string.h>

#include "ci_internal.h"

#define LOAD(p) __atomic_load_n(p, __ATOMIC_RELAXED)
#define STORE(p, v) __atomic_store_n(p, v, __ATOMIC_RELAXED)

static bool reusable(const ci_comm_t* c) {
    if (__atomic_load_n(&c->in_use, __ATOMIC_ACQUIRE)) return false;
    uint32_t state = __atomic_load_n(&c->entry->state, __ATOMIC_ACQUIRE);
    if (state == CI_SHM_V1_COMM_STATE_FREE) return true;
    /* A finalized row stays readable until the log writer has passed its finalize record. */
    return state == CI_SHM_V1_COMM_STATE_FINALIZED && ci_logwriter_cursor() > c->finalize_ticket;
}

static void publish_comm_record(ci_comm_t* comm, uint8_t kind) {
    ci_shm_op_slot_v1_t r;
    memset(&r, 0, sizeof(r));
    r.kind = kind;
    r.comm_index = comm->index;
    r.comm_id = comm->comm_id;
    r.rank = comm->rank;
    r.nranks = comm->nranks;
    r.peer = CI_SHM_V1_NO_RANK;
    r.host_start_mono_ns = ci_now_mono();
    uint64_t ticket = ci_ring_publish(&r);
    if (kind == CI_SHM_V1_RECORD_KIND_COMM_FINALIZE) comm->finalize_ticket = ticket;
}

/* Called with ci_g.lock held (init/finalize are serialized). */
ci_comm_t* ci_comm_open(uint64_t comm_id, const char* name, int nnodes, int nranks, int rank,
                        uint32_t abi) {
    ci_comm_t* comm = NULL;
    for (uint32_t i = 0; i < ci_g.comm_capacity && !comm; i++)
        if (reusable(&ci_g.comms[i])) comm = &ci_g.comms[i];
    if (!comm) {
        ci_counter_add(&ci_g.hdr->comms_dropped, 1);
        return NULL;
    }
    ci_shm_comm_entry_v1_t* e = comm->entry;
    uint32_t generation = e->generation + 1;
    __atomic_store_n(&e->state, CI_SHM_V1_COMM_STATE_FREE, __ATOMIC_RELEASE);
    memset((char*)e + sizeof(e->state), 0, sizeof(*e) - sizeof(e->state));
    e->generation = generation;
    memset(comm->coll_inflight, 0, sizeof(comm->coll_inflight));
    memset(comm->untimed, 0, sizeof(comm->untimed));
    comm->proved_coll = comm->proved_p2p = 0;
    comm->base_group = comm->group_coll_base = comm->group_p2p_base = 0;
    memset(comm->p2p_inflight, 0, sizeof(comm->p2p_inflight));
    comm->comm_id = comm_id;
    comm->rank = rank;
    comm->nranks = nranks;
    comm->nnodes = nnodes;
    comm->abi = abi;
    comm->coll_counter = comm->p2p_counter = 0;
    comm->completions = 0;
    memset(comm->shape_left, 0, sizeof(comm->shape_left)); /* the first op of each shape is timed */
    comm->timing_due = 0;
    comm->timed_ops = comm->timed_ops_seen = 0;
    comm->timing_checked_mono_ns = ci_now_mono();
    comm->offset_window_start = ci_now_mono();
    comm->finalize_ticket = UINT64_MAX;
    e->comm_id = comm_id;
    e->rank = rank;
    e->nranks = nranks;
    e->nnodes = nnodes;
    e->local_rank = ci_g.hdr->local_rank;
    e->cuda_device = ci_cuda_device();
    ci_cuda_device_uuid(e->cuda_device, e->cuda_uuid);
    if (ci_g.hdr->cuda_device == CI_SHM_V1_NO_RANK) {
        memcpy(ci_g.hdr->cuda_uuid, e->cuda_uuid, sizeof(ci_g.hdr->cuda_uuid));
        ci_g.hdr->cuda_device = e->cuda_device;
    }
    e->nccl_abi_version = abi;
    e->init_real_ns = ci_now_real();
    e->init_mono_ns = ci_now_mono();
    ci_copy_name(e->name, sizeof(e->name), name, NULL);
    e->name_source = (name && *name) ? CI_SHM_V1_NAME_SOURCE_NCCL : CI_SHM_V1_NAME_SOURCE_NONE;
    e->hang_flagged_seq = UINT64_MAX;
    __atomic_store_n(&comm->in_use, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&e->state, CI_SHM_V1_COMM_STATE_ACTIVE, __ATOMIC_RELEASE);
    __atomic_add_fetch(&ci_g.hdr->comms_active, 1, __ATOMIC_RELAXED);
    publish_comm_record(comm, CI_SHM_V1_RECORD_KIND_COMM_INIT);
    return comm;
}

/* *counter = max(*counter, value), for the once-per-op completion counts: their writer is the
 * thread that completes ops, NCCL's proxy thread in practice, and a plain store keeps the hot
 * path free of a locked instruction. */
static void raise_to(uint64_t* counter, uint64_t value) {
    if (value > LOAD(counter)) STORE(counter, value);
}

/* The same where another thread may raise the counter at once (a kernel start proving earlier
 * ops done): a compare-and-swap, and only when the value grows, so it is never lowered. */
static void raise_shared(uint64_t* counter, uint64_t value) {
    uint64_t cur = LOAD(counter);
    while (value > cur &&
           !__atomic_compare_exchange_n(counter, &cur, value, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}

/* Called with ci_g.lock held. */
void ci_comm_close(ci_comm_t* comm) {
    ci_shm_comm_entry_v1_t* e = comm->entry;
    /* FINALIZED before the counters move: a reader must never see an active row that
     * completed what its peers still wait in (a divergence that never happened) */
    e->finalize_mono_ns = ci_now_mono();
    __atomic_store_n(&e->state, CI_SHM_V1_COMM_STATE_FINALIZED, __ATOMIC_RELEASE);
    ci_ops_sweep(comm, ci_now_mono(), 0); /* ops NCCL will never finish for this comm */
    /* and those recorded untimed (GPU timing sampled) that nothing proved: over as well */
    raise_shared(&e->coll_completed, LOAD(&e->coll_enqueued));
    raise_shared(&e->p2p_completed, LOAD(&e->p2p_enqueued));
    publish_comm_record(comm, CI_SHM_V1_RECORD_KIND_COMM_FINALIZE);
    __atomic_sub_fetch(&ci_g.hdr->comms_active, 1, __ATOMIC_RELAXED);
    __atomic_store_n(&comm->in_use, 0, __ATOMIC_RELEASE);
}

void ci_comm_note_enqueued(ci_comm_t* comm, ci_op_t* op, void* handle) {
    ci_shm_comm_entry_v1_t* e = comm->entry;
    uint64_t now = op->host_start_mono_ns;
    if (op->kind == CI_SHM_V1_RECORD_KIND_COLL) {
        STORE(&e->coll_enqueued, op->op_index + 1);
        STORE(&e->coll_enqueued_mono_ns, now);
        STORE(&comm->coll_inflight[op->op_index % CI_WINDOW], (uint64_t)(uintptr_t)handle);
    } else {
        STORE(&e->p2p_enqueued, op->op_index + 1);
        STORE(&e->p2p_enqueued_mono_ns, now);
        STORE(&comm->p2p_inflight[op->op_index % CI_WINDOW], (uint64_t)(uintptr_t)handle);
    }
}

void ci_comm_note_started(ci_comm_t* comm, const ci_op_t* op) {
    ci_shm_comm_entry_v1_t* e = comm->entry;
    uint64_t* started = op->kind == CI_SHM_V1_RECORD_KIND_COLL ? &e->coll_started : &e->p2p_started;
    raise_to(started, op->op_index + 1);
    /* its kernel started, so every op issued before its group ran to the end */
    raise_shared(&comm->proved_coll, op->coll_before);
    raise_shared(&comm->proved_p2p, op->p2p_before);
    if (LOAD(&ci_g.gpu_timing) != CI_SHM_V1_GPU_TIMING_SAMPLED) return; /* every op has its own */
    /* the ones the GPU timing sample left untimed are done now */
    raise_shared(&e->coll_started, op->coll_before);
    raise_shared(&e->p2p_started, op->p2p_before);
    raise_shared(&e->coll_completed, op->coll_before);
    raise_shared(&e->p2p_completed, op->p2p_before);
}

/* An op recorded before it is known done: kept for the hang view until something proves it. */
static void note_unproven(ci_comm_t* comm, const ci_op_t* op) {
    bool coll = op->kind == CI_SHM_V1_RECORD_KIND_COLL;
    ci_untimed_view_t* v = &comm->untimed[coll ? 0 : 1][op->op_index % CI_WINDOW];
    uint32_t guard = LOAD(&v->guard);
    STORE(&v->guard, guard + 1);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    STORE(&v->op_seq, op->op_seq);
    STORE(&v->op_index, op->op_index);
    STORE(&v->count, op->count);
    STORE(&v->bytes, op->bytes);
    STORE(&v->host_start_mono_ns, op->host_start_mono_ns);
    STORE(&v->peer, op->peer);
    STORE(&v->kind, op->kind);
    STORE(&v->func, op->func);
    STORE(&v->datatype, op->datatype);
    STORE(&v->algo, op->algo);
    STORE(&v->proto, op->proto);
    STORE(&v->n_channels, op->n_channels);
    __atomic_store_n(&v->guard, guard + 2, __ATOMIC_RELEASE);
}

void ci_comm_note_completed(ci_comm_t* comm, const ci_op_t* op, uint64_t now) {
    ci_shm_comm_entry_v1_t* e = comm->entry;
    bool coll = op->kind == CI_SHM_V1_RECORD_KIND_COLL;
    uint64_t* slot = &(coll ? comm->coll_inflight : comm->p2p_inflight)[op->op_index % CI_WINDOW];
    uint64_t expected = LOAD(slot);
    if (ci_op_from_handle((void*)(uintptr_t)expected) == op)
        __atomic_compare_exchange_n(slot, &expected, 0, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    __atomic_add_fetch(&e->bytes_total, op->bytes, __ATOMIC_RELAXED);
    if (LOAD(&op->unproven)) {
        note_unproven(comm, op);
        return;
    }
    uint64_t* completed = coll ? &e->coll_completed : &e->p2p_completed;
    /* Ops of one communicator complete in order (one stream), so the count is the last seq + 1;
     * a forced completion out of order must not move it backwards. */
    raise_to(completed, op->op_index + 1);
    STORE(coll ? &e->coll_completed_mono_ns : &e->p2p_completed_mono_ns, now);
}

void ci_comm_note_clock(ci_comm_t* comm, uint64_t host_mono_ns, uint64_t gpu_ticks) {
    /* host - GPU at a channel stop: the proxy thread sees the stop a little after the GPU
     * wrote it, so the smallest difference is the best estimate of the true offset */
    int64_t offset = (int64_t)(host_mono_ns - gpu_ticks);
    int64_t cur = LOAD(&comm->entry->gpu_clock_offset_ns);
    if (offset && (cur == 0 || offset < cur)) STORE(&comm->entry->gpu_clock_offset_ns, offset);
}

/* A copy of the in-flight op's fields, taken while NCCL's threads may recycle its entry;
 * valid only if the handle still names the same op afterwards. */
typedef struct inflight_view {
    uint64_t op_seq, op_index, count, bytes, host_start_mono_ns, gpu_start_ticks;
    uint32_t ch_started, ch_stopped;
    int32_t peer;
    uint8_t kind, func, datatype, algo, proto, n_channels;
    bool unproven; /* not GPU-timed, and no later kernel has started: maybe done already */
} inflight_view_t;

static bool view_of(uint64_t handle, inflight_view_t* v) {
    const ci_op_t* op = ci_op_from_handle((void*)(uintptr_t)handle);
    if (!op) return false;
    (void)__atomic_load_n(&op->gate, __ATOMIC_ACQUIRE); /* pairs with ci_op_start's release */
    v->op_seq = LOAD(&op->op_seq);
    v->op_index = LOAD(&op->op_index);
    v->count = LOAD(&op->count);
    v->bytes = LOAD(&op->bytes);
    v->host_start_mono_ns = LOAD(&op->host_start_mono_ns);
    v->gpu_start_ticks = LOAD(&op->gpu_start_ticks);
    v->ch_started = LOAD(&op->ch_started);
    v->ch_stopped = LOAD(&op->ch_stopped);
    v->peer = LOAD(&op->peer);
    v->kind = LOAD(&op->kind);
    v->func = LOAD(&op->func);
    v->datatype = LOAD(&op->datatype);
    v->algo = LOAD(&op->algo);
    v->proto = LOAD(&op->proto);
    v->n_channels = LOAD(&op->n_channels);
    v->unproven = LOAD(&op->unproven);
    return ci_op_from_handle((void*)(uintptr_t)handle) == op; /* not recycled meanwhile */
}

static void show_inflight(ci_shm_comm_entry_v1_t* e, const inflight_view_t* op, uint64_t now) {
    if (!op->ch_started || e->inflight_kind != op->kind || e->inflight_op_index != op->op_index)
        e->inflight_start_mono_ns = 0;
    if (op->ch_started && e->inflight_start_mono_ns == 0) {
        /* the GPU's own start tick in host time when the clock offset is known, else now */
        int64_t offset = LOAD(&e->gpu_clock_offset_ns);
        e->inflight_start_mono_ns =
            (op->gpu_start_ticks && offset) ? (uint64_t)((int64_t)op->gpu_start_ticks + offset) : now;
    }
    e->inflight_seq = op->op_seq;
    e->inflight_op_index = op->op_index;
    e->inflight_n_channels = op->n_channels;
    e->inflight_unproven = op->unproven;
    e->inflight_kind = op->kind;
    e->inflight_func = op->func;
    e->inflight_datatype = op->datatype;
    e->inflight_algo = op->algo;
    e->inflight_proto = op->proto;
    e->inflight_peer = op->peer;
    e->inflight_channels_started = (uint16_t)(op->ch_started > 0xFFFF ? 0xFFFF : op->ch_started);
    e->inflight_channels_stopped = (uint16_t)(op->ch_stopped > 0xFFFF ? 0xFFFF : op->ch_stopped);
    e->inflight_count_elems = op->count;
    e->inflight_bytes = op->bytes;
    e->inflight_enqueue_mono_ns = op->host_start_mono_ns;
}

/* A recorded op that nothing has proved done yet (GPU timing sampled), as the hang view shows
 * it; false if its entry holds another op now, or was being written. */
static bool unproven_view(const ci_untimed_view_t* u, uint64_t completed, uint64_t enqueued, inflight_view_t* v) {
    uint32_t guard = __atomic_load_n(&u->guard, __ATOMIC_ACQUIRE);
    if (guard == 0 || (guard & 1)) return false;
    *v = (inflight_view_t){.op_seq = LOAD(&u->op_seq),
                           .op_index = LOAD(&u->op_index),
                           .count = LOAD(&u->count),
                           .bytes = LOAD(&u->bytes),
                           .host_start_mono_ns = LOAD(&u->host_start_mono_ns),
                           .peer = LOAD(&u->peer),
                           .kind = LOAD(&u->kind),
                           .func = LOAD(&u->func),
                           .datatype = LOAD(&u->datatype),
                           .algo = LOAD(&u->algo),
                           .proto = LOAD(&u->proto),
                           .n_channels = LOAD(&u->n_channels),
                           .unproven = true};
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (LOAD(&u->guard) != guard) return false;
    return v->op_index >= completed && v->op_index < enqueued;
}

/* The op the hang view shows, collectives first (they are what peers wait on together): the
 * oldest live op; where there is none, the newest op recorded without GPU timing that no later
 * op has proved done. Untimed ops may all be done already, and a communicator's ops complete
 * in order: if the newest is done, all are, and it is the one a peer that stopped early never
 * joined. Showing the oldest would name an op every peer joined and hide the one they did not. */
static bool oldest_inflight(const ci_comm_t* comm, inflight_view_t* best) {
    const ci_shm_comm_entry_v1_t* e = comm->entry;
    for (int pass = 0; pass < 2; pass++) {
        const uint64_t* window = pass == 0 ? comm->coll_inflight : comm->p2p_inflight;
        uint64_t completed = LOAD(pass == 0 ? &e->coll_completed : &e->p2p_completed);
        uint64_t enqueued = LOAD(pass == 0 ? &e->coll_enqueued : &e->p2p_enqueued);
        bool live = false, untimed = false;
        inflight_view_t newest_untimed;
        for (int i = 0; i < CI_WINDOW; i++) {
            uint64_t h = LOAD(&window[i]);
            inflight_view_t v;
            if (h && view_of(h, &v) && (!live || v.op_index < best->op_index)) {
                *best = v;
                live = true;
            }
            if (unproven_view(&comm->untimed[pass][i], completed, enqueued, &v) &&
                (!untimed || v.op_index > newest_untimed.op_index)) {
                newest_untimed = v;
                untimed = true;
            }
        }
        if (live) return true;
        if (untimed) {
            *best = newest_untimed;
            return true;
        }
    }
    return false;
}

/* GPU starts are noted without a clock read; stamp them here, at heartbeat resolution. */
static void stamp_starts(ci_comm_t* comm, uint64_t now) {
    ci_shm_comm_entry_v1_t* e = comm->entry;
    uint64_t coll = LOAD(&e->coll_started), p2p = LOAD(&e->p2p_started);
    if (coll != comm->seen_coll_started) {
        comm->seen_coll_started = coll;
        STORE(&e->coll_started_mono_ns, now);
    }
    if (p2p != comm->seen_p2p_started) {
        comm->seen_p2p_started = p2p;
        STORE(&e->p2p_started_mono_ns, now);
    }
}

#define CLOCK_OFFSET_WINDOW_NS 60000000000ull

void ci_comm_refresh(ci_comm_t* comm, uint64_t now) {
    ci_shm_comm_entry_v1_t* e = comm->entry;
    /* The offset is the minimum seen; restart it now and then so slow drift between the GPU
     * and host clocks cannot leave it stale (the next sampled completion measures it again). */
    if (now - comm->offset_window_start > CLOCK_OFFSET_WINDOW_NS) {
        comm->offset_window_start = now;
        STORE(&e->gpu_clock_offset_ns, 0);
    }
    stamp_starts(comm, now);
    uint64_t colls = LOAD(&e->coll_enqueued) - LOAD(&e->coll_completed);
    uint64_t p2ps = LOAD(&e->p2p_enqueued) - LOAD(&e->p2p_completed);
    inflight_view_t oldest = {0};
    bool any = (colls + p2ps) && oldest_inflight(comm, &oldest);
    __atomic_add_fetch(&e->progress_seqlock, 1, __ATOMIC_ACQ_REL); /* odd: being updated */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    e->inflight_count = (uint32_t)((int64_t)(colls + p2ps) > 0 ? colls + p2ps : 0);
    e->ops_total = LOAD(&e->coll_completed) + LOAD(&e->p2p_completed);
    if (any) show_inflight(e, &oldest, now);
    else {
        e->inflight_kind = CI_SHM_V1_RECORD_KIND_NONE;
        e->inflight_unproven = 0;
    }
    __atomic_add_fetch(&e->progress_seqlock, 1, __ATOMIC_RELEASE); /* even: consistent */
}
