/* Hang evidence: while the watchdog suspects a hang, ask NCCL for network proxy events and
 * record the flagged communicator's progress per channel into the SHM evidence table.
 *
 * What a raised mask can and cannot deliver (NCCL 2.27-2.29 sources):
 * - NCCL reads the process-global mask once per API call (ncclProfilerStartGroupApiEvent,
 *   then taskAppend stores it in the task); uploadProxyOps copies the task's value into each
 *   proxy op and ncclProxyOpToArgs into the proxy's sub-args. ProxyOp starts
 *   (ncclProfilerStartProxyOpEvent) and ProxyStep starts test that copy, never the global.
 *   So the op that was in flight when the mask was raised gets no proxy events at all, even
 *   though its proxy work is still running: its per-channel view stays what KernelCh gave
 *   (comm_entry.inflight_channels_started/stopped).
 * - Ops of the communicator issued after the raise do carry the raised mask. NCCL appends
 *   their proxy ops at launch, so their ProxyOps start and their first steps are posted while
 *   the stuck op still holds the GPU: which channels are posted, which got data from the peer
 *   or the network, and where steps stop moving is what gets recorded here.
 * - Only ProxyCtrl re-reads the global mask per event; it describes the proxy thread, not a
 *   channel, and is not asked for.
 * If the host issues nothing on the communicator after the raise (typically it blocks in a
 * synchronization behind the stuck op), the entry shows the raise with no channel at all.
 *
 * Fail open: the mask is raised only once an evidence entry is bound and NCCL's mask pointer
 * is known, and every path that gives up leaves the normal mask. The normal path pays nothing:
 * no call here runs for a process that was never flagged, except a per-heartbeat compare of
 * NCCL's mask with the one we want (which repairs an init that raced with a raise or a lower).
 *
 * Concurrency: binding, lowering and the mask are changed only with ci_g.table_lock held (the
 * watchdog's scan and finalize). Counters are written by NCCL's proxy thread with relaxed
 * atomic adds; an event whose handle names an entry that was lowered or rebound since is
 * ignored (state and generation are checked at every event).
 */
#include <string.h>

#include "ci_internal.h"
#include "comminsight/nccl_profiler_v5.h"

#define LOAD(p) __atomic_load_n(p, __ATOMIC_RELAXED)
#define STORE(p, v) __atomic_store_n(p, v, __ATOMIC_RELAXED)
#define ADD(p, n) __atomic_add_fetch(p, n, __ATOMIC_RELAXED)

typedef ci_shm_evidence_entry_v1_t entry_t;
typedef ci_shm_channel_progress_v1_t channel_t;

static entry_t* table; /* CI_SHM_V1_EVIDENCE_SLOTS entries in the SHM region; NULL: off */
static ci_shm_header_v1_t* header;

size_t ci_evidence_region_size(void) {
    return ci_g.cfg.hang_evidence ? (size_t)CI_SHM_V1_EVIDENCE_SLOTS * sizeof(entry_t) : 0;
}

void ci_evidence_attach(ci_shm_header_v1_t* hdr, void* evidence, uint64_t offset) {
    __atomic_store_n(&ci_g.evidence_bits, 0, __ATOMIC_RELAXED);
    header = hdr;
    __atomic_store_n(&table, (entry_t*)evidence, __ATOMIC_RELEASE);
    if (!hdr || !evidence) return;
    hdr->evidence_offset = offset;
    hdr->evidence_capacity = CI_SHM_V1_EVIDENCE_SLOTS;
    hdr->evidence_entry_size = sizeof(entry_t);
    hdr->flags |= CI_SHM_V1_HEADER_FLAGS_HANG_EVIDENCE;
}

int32_t ci_mask_effective(void) {
    return __atomic_load_n(&ci_g.mask, __ATOMIC_RELAXED) | __atomic_load_n(&ci_g.evidence_bits, __ATOMIC_RELAXED);
}

/* ---- binding and lowering (ci_g.table_lock held) ---- */

static bool raised(const entry_t* ev) {
    return __atomic_load_n(&ev->state, __ATOMIC_ACQUIRE) == CI_SHM_V1_EVIDENCE_STATE_RAISED;
}

/* A free entry, else the one lowered longest ago; NULL when every entry is recording. */
static entry_t* pick_entry(void) {
    entry_t* best = NULL;
    for (uint32_t i = 0; i < CI_SHM_V1_EVIDENCE_SLOTS; i++) {
        entry_t* ev = &table[i];
        uint32_t state = LOAD(&ev->state);
        if (state == CI_SHM_V1_EVIDENCE_STATE_FREE) return ev;
        if (state == CI_SHM_V1_EVIDENCE_STATE_LOWERED && (!best || ev->lowered_mono_ns < best->lowered_mono_ns))
            best = ev;
    }
    return best;
}

static void bind(entry_t* ev, const ci_comm_t* comm, uint64_t now) {
    const ci_shm_comm_entry_v1_t* e = comm->entry;
    /* readers drop a copy whose generation changed while they took it */
    __atomic_store_n(&ev->state, CI_SHM_V1_EVIDENCE_STATE_FREE, __ATOMIC_RELEASE);
    uint32_t generation = ev->generation + 1;
    __atomic_store_n(&ev->generation, generation, __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    memset((char*)ev + offsetof(entry_t, comm_index), 0, sizeof(*ev) - offsetof(entry_t, comm_index));
    for (uint32_t c = 0; c < CI_SHM_V1_EVIDENCE_CHANNELS; c++) ev->send[c].peer = ev->recv[c].peer = CI_SHM_V1_NO_RANK;
    ev->comm_index = comm->index;
    ev->comm_generation = e->generation;
    ev->comm_id = comm->comm_id;
    ev->rank = comm->rank;
    ev->evidence_mask = __atomic_load_n(&ci_g.mask, __ATOMIC_RELAXED) | CI_SHM_V1_HANG_EVIDENCE_BITS;
    ev->flagged_op_index = e->hang_flagged_seq;
    ev->flagged_op_kind = e->inflight_kind;
    ev->raised_mono_ns = now;
    ev->first_proxy_op_index = ev->last_proxy_op_index = CI_SHM_V1_NO_OP_INDEX;
    __atomic_store_n(&ev->state, CI_SHM_V1_EVIDENCE_STATE_RAISED, __ATOMIC_RELEASE);
}

static void lower(entry_t* ev, ci_comm_t* comm, uint8_t reason, uint64_t now) {
    if (comm) __atomic_store_n(&comm->evidence_slot, 0, __ATOMIC_RELEASE);
    ev->end_reason = reason;
    ev->lowered_mono_ns = now;
    __atomic_store_n(&ev->state, CI_SHM_V1_EVIDENCE_STATE_LOWERED, __ATOMIC_RELEASE);
}

/* NCCL's mask follows the entries recording: raised while any is, normal otherwise. Also puts
 * back a value an init wrote from a stale view (init stores without the table lock). */
static void apply_mask(uint32_t recording, uint64_t now) {
    int32_t bits = recording ? CI_SHM_V1_HANG_EVIDENCE_BITS : 0;
    int32_t before = __atomic_load_n(&ci_g.evidence_bits, __ATOMIC_RELAXED);
    __atomic_store_n(&ci_g.evidence_bits, bits, __ATOMIC_RELAXED);
    if (header) {
        STORE(&header->evidence_active, recording);
        if (bits && !before) {
            STORE(&header->evidence_raised_mono_ns, now);
            ci_counter_add(&header->evidence_raises, 1);
        }
    }
    int32_t want = ci_mask_effective();
    ci_mask_rewrite();
    if (header) STORE(&header->event_mask, want);
    if (bits != before)
        ci_warn("activation mask %s to 0x%x (%u communicator(s) suspected hung)", bits ? "raised" : "back", want,
                recording);
}

void ci_evidence_on_flag(ci_comm_t* comm, uint64_t now) {
    if (!table || !__atomic_load_n(&ci_g.nccl_mask, __ATOMIC_ACQUIRE)) return; /* nothing to raise */
    uint32_t slot = LOAD(&comm->evidence_slot);
    if (slot) { /* recording already: the next op of this communicator is stuck too */
        entry_t* ev = &table[slot - 1];
        STORE(&ev->flagged_op_index, comm->entry->hang_flagged_seq);
        STORE(&ev->flagged_op_kind, comm->entry->inflight_kind);
        return;
    }
    entry_t* ev = pick_entry();
    if (!ev) {
        ci_counter_add(&header->evidence_no_slot, 1);
        return;
    }
    bind(ev, comm, now);
    __atomic_store_n(&comm->evidence_slot, (uint32_t)(ev - table) + 1, __ATOMIC_RELEASE);
}

void ci_evidence_scan(uint64_t now) {
    if (!table) return;
    uint64_t bound_ns = (uint64_t)(ci_g.cfg.hang_evidence_max_s * 1e9);
    uint32_t recording = 0;
    for (uint32_t i = 0; i < CI_SHM_V1_EVIDENCE_SLOTS; i++) {
        entry_t* ev = &table[i];
        if (!raised(ev)) continue;
        ci_comm_t* comm = ev->comm_index < ci_g.comm_capacity ? &ci_g.comms[ev->comm_index] : NULL;
        bool same = comm && __atomic_load_n(&comm->in_use, __ATOMIC_ACQUIRE) &&
                    comm->entry->generation == ev->comm_generation;
        if (!same) { /* finalize lowers it itself; this only guards against a missed one */
            lower(ev, NULL, CI_SHM_V1_EVIDENCE_END_COMM_FINALIZED, now);
            continue;
        }
        const ci_shm_comm_entry_v1_t* e = comm->entry;
        uint64_t completed =
            ev->flagged_op_kind == CI_SHM_V1_RECORD_KIND_P2P ? LOAD(&e->p2p_completed) : LOAD(&e->coll_completed);
        if (completed > ev->flagged_op_index) lower(ev, comm, CI_SHM_V1_EVIDENCE_END_OP_COMPLETED, now);
        else if (now - ev->raised_mono_ns >= bound_ns) lower(ev, comm, CI_SHM_V1_EVIDENCE_END_BOUND_REACHED, now);
        else recording++;
    }
    apply_mask(recording, now);
}

void ci_evidence_on_close(ci_comm_t* comm, uint64_t now) {
    uint32_t slot = LOAD(&comm->evidence_slot);
    if (!table || !slot) return;
    lower(&table[slot - 1], comm, CI_SHM_V1_EVIDENCE_END_COMM_FINALIZED, now);
    uint32_t recording = 0;
    for (uint32_t i = 0; i < CI_SHM_V1_EVIDENCE_SLOTS; i++) recording += raised(&table[i]);
    apply_mask(recording, now);
}

/* ---- NCCL's proxy thread ---- */

/* A proxy handle: the entry (3 bits) and the direction (1 bit) as its index, the channel, and
 * the entry's generation when the ProxyOp started. */
static void* proxy_handle(uint32_t kind, uint32_t slot, bool is_send, uint32_t channel, uint32_t generation) {
    return ci_handle_make(kind, (slot << 1) | (is_send ? 1u : 0u), generation, channel);
}

/* The entry and channel a proxy handle names, if that entry still records the same binding. */
static entry_t* entry_of(const void* handle, channel_t** channel) {
    int64_t index = ci_handle_index(handle);
    entry_t* base = __atomic_load_n(&table, __ATOMIC_ACQUIRE);
    if (!base || index < 0 || (uint64_t)(index >> 1) >= CI_SHM_V1_EVIDENCE_SLOTS) return NULL;
    entry_t* ev = &base[index >> 1];
    uint32_t ch = (uint32_t)(((uintptr_t)handle >> 32) & 0xFFu);
    if (!raised(ev) || (LOAD(&ev->generation) & 0xFFFFFFu) != ci_handle_generation(handle) ||
        ch >= CI_SHM_V1_EVIDENCE_CHANNELS)
        return NULL;
    *channel = (index & 1) ? &ev->send[ch] : &ev->recv[ch];
    return ev;
}

static void note_event(entry_t* ev, bool stamp) {
    ADD(&ev->proxy_events, 1);
    if (stamp) STORE(&ev->last_event_mono_ns, ci_now_mono());
}

/* Which op the ProxyOp belongs to: its parent is the Coll/P2p handle we gave NCCL. */
static void note_parent(entry_t* ev, const void* parent) {
    if (ci_handle_kind(parent) != CI_HANDLE_OP) return;
    const ci_op_t* op = ci_op_from_handle(parent);
    if (!op) return;
    uint8_t kind = LOAD(&op->kind);
    uint64_t index = LOAD(&op->op_index);
    if (ci_op_from_handle(parent) != op || kind != LOAD(&ev->flagged_op_kind)) return; /* recycled, or other space */
    uint64_t first = LOAD(&ev->first_proxy_op_index), last = LOAD(&ev->last_proxy_op_index);
    if (first == CI_SHM_V1_NO_OP_INDEX || index < first) STORE(&ev->first_proxy_op_index, index);
    if (last == CI_SHM_V1_NO_OP_INDEX || index > last) STORE(&ev->last_proxy_op_index, index);
}

void* ci_evidence_proxy_op_start(ci_comm_t* comm, const void* parent, uint8_t channel, int32_t peer,
                                 int32_t n_steps, bool is_send) {
    uint32_t slot = __atomic_load_n(&comm->evidence_slot, __ATOMIC_ACQUIRE);
    entry_t* base = __atomic_load_n(&table, __ATOMIC_ACQUIRE);
    if (CI_LIKELY(slot == 0) || !base || slot > CI_SHM_V1_EVIDENCE_SLOTS) return NULL;
    entry_t* ev = &base[slot - 1];
    uint32_t generation = LOAD(&ev->generation);
    if (!raised(ev)) return NULL;
    if (channel >= CI_SHM_V1_EVIDENCE_CHANNELS) {
        ADD(&ev->events_dropped, 1);
        return NULL;
    }
    channel_t* ch = is_send ? &ev->send[channel] : &ev->recv[channel];
    STORE(&ch->peer, peer);
    ADD(&ch->ops_started, 1);
    if (n_steps > 0) ADD(&ch->steps_expected, (uint32_t)n_steps);
    note_parent(ev, parent);
    note_event(ev, true);
    return proxy_handle(CI_HANDLE_PROXY_OP, slot - 1, is_send, channel, generation);
}

void* ci_evidence_proxy_step_start(const void* parent) {
    channel_t* ch;
    if (ci_handle_kind(parent) != CI_HANDLE_PROXY_OP) return NULL;
    entry_t* ev = entry_of(parent, &ch);
    if (!ev) return NULL;
    ADD(&ch->steps_posted, 1);
    note_event(ev, false);
    uintptr_t h = (uintptr_t)parent;
    return ci_handle_make(CI_HANDLE_PROXY_STEP, (uint32_t)ci_handle_index(parent), ci_handle_generation(parent),
                          (uint32_t)((h >> 32) & 0xFFu));
}

void ci_evidence_proxy_state(const void* handle, uint32_t state) {
    channel_t* ch;
    if (ci_handle_kind(handle) != CI_HANDLE_PROXY_STEP) return; /* ProxyOp's InProgress says nothing new */
    entry_t* ev = entry_of(handle, &ch);
    if (!ev) return;
    switch (state) {
    case CI_NCCL_V5_EVENT_STATE_PROXY_STEP_SEND_PEER_WAIT: /* the GPU filled the buffer */
    case CI_NCCL_V5_EVENT_STATE_PROXY_STEP_RECV_FLUSH_WAIT: /* the network delivered the data */
        ADD(&ch->steps_arrived, 1);
        break;
    case CI_NCCL_V5_EVENT_STATE_PROXY_STEP_SEND_WAIT: /* handed to the network */
    case CI_NCCL_V5_EVENT_STATE_PROXY_STEP_RECV_GPU_WAIT: /* handed to the GPU */
        ADD(&ch->steps_transmitted, 1);
        break;
    default: /* SendGPUWait and RecvWait come with the step's start, already counted */
        break;
    }
    note_event(ev, false);
}

void ci_evidence_proxy_stop(const void* handle) {
    channel_t* ch;
    entry_t* ev = entry_of(handle, &ch);
    if (!ev) return;
    if (ci_handle_kind(handle) == CI_HANDLE_PROXY_OP) ADD(&ch->ops_stopped, 1);
    else ADD(&ch->steps_done, 1);
    note_event(ev, true);
}
