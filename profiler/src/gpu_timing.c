/* Which ops NCCL is asked to time on the GPU: the KernelCh bit of the activation mask, per op.
 *
 * NCCL's cost of GPU timing is its own, per op and on the GPU (the kernel reports every
 * channel's start and end to the proxy thread: +4.4 us on an 8-byte all-reduce on H200, where
 * the op takes 15 us). So by default only a sample of ops is timed, and every op whenever
 * something is off (COMMINSIGHT_PROFILER_GPU_TIMING).
 *
 * When NCCL reads the mask (enqueue.cc), on the enqueuing thread, once per call:
 * - from 2.28 on, at the start of the call's taskAppend, before its GroupApi and CollApi/P2pApi
 *   events (ncclProfilerStartGroupApiEvent keeps it for the call's task). So at the API event
 *   the mask already says whether this call's task is timed; the decision made there (by the
 *   shape of this op, which predicts the next) is written for the next call.
 * - in 2.26 and 2.27, in taskAppend right after the API event: the decision at the event is
 *   this call's own.
 * Which one is learned from ncclGetVersion at the first init (ABI v6 and v7 are 2.29 on).
 * - from 2.31 on, a sample cannot be taken at all: the KernelCh bit stays as init left it
 *   (ci_kernel_ch_fixed), and `sampled` times every op.
 * What this call's task got is kept with the API call (plugin.c's per-thread API ring), where
 * the task's Coll/P2p start finds it and knows whether channel events will come. Two threads
 * enqueuing at once may read each other's choice; ops.c's sweep settles an op that waited for
 * channels that never came, and channels that come unasked are ignored.
 *
 * The mask is written only under mask_lock, and only where it still holds the value this
 * plugin last wrote: any other value was put there by someone else (an operator, e.g. through
 * NCCL 2.31's `ncclras CONTROL PROFILER_MASK`). Such an override wins: from then on the plugin
 * never writes the mask again, decides nothing, and reports it (SHM header). The hot path only
 * ever tries the lock, so it never waits: if another thread holds it, the op takes the mask as
 * it is.
 */
#include <dlfcn.h>
#include <pthread.h>

#include "ci_internal.h"

#define LOAD(p) __atomic_load_n(p, __ATOMIC_RELAXED)
#define STORE(p, v) __atomic_store_n(p, v, __ATOMIC_RELAXED)

static pthread_mutex_t mask_lock = PTHREAD_MUTEX_INITIALIZER;
/* what this plugin last wrote into NCCL's mask: written under mask_lock, read without it by the
 * heartbeat's check */
static int32_t mask_written;

void ci_gpu_timing_after_fork(void) { pthread_mutex_init(&mask_lock, NULL); }

/* From the configuration and the ABI: OFF without KernelCh, ALL where NCCL gives no API events
 * to decide by (v4) or cannot time a sample (ci_kernel_ch_fixed), else what
 * COMMINSIGHT_PROFILER_GPU_TIMING says. */
uint8_t ci_gpu_timing_mode(uint32_t abi) {
    if (!(ci_g.cfg.event_mask & CI_EV_KERNEL_CH)) return CI_SHM_V1_GPU_TIMING_OFF;
    if (abi == 4 || ci_kernel_ch_fixed(abi) || ci_g.cfg.gpu_timing_all) return CI_SHM_V1_GPU_TIMING_ALL;
    return CI_SHM_V1_GPU_TIMING_SAMPLED;
}

/* Whether NCCL's KernelCh bit must stay as it was at init. From NCCL 2.31 on (where it offers
 * ABI v7) a dedicated profiler thread matches each channel's KernelCh events to tasks by a
 * per-channel work counter that the host advances only for tasks whose mask has KernelCh,
 * while the kernel advances its own for every work: once one task on a channel goes untimed,
 * every later task on that channel is matched to the slot of an earlier work. Its KernelCh
 * events then carry another op's GPU timestamps, or never come. (On 2.32.3 with every second
 * op asked, ops 6, 10, 14... got the times of ops 4, 8, 12..., and ops 4, 8, 12... none.) */
bool ci_kernel_ch_fixed(uint32_t abi) { return abi >= 7 || LOAD(&ci_g.nccl_version) >= 23100; }

/* The value the plugin wants NCCL to hold, its KernelCh bit as `kernel_ch` says. */
static int32_t wanted(bool kernel_ch) {
    int32_t m = ci_mask_effective();
    return kernel_ch ? m : m & ~(int32_t)CI_EV_KERNEL_CH;
}

static void note_override(int32_t found) {
    STORE(&ci_g.overriding_mask, found);
    STORE(&ci_g.mask_overridden, 1u);
}

/* With mask_lock held: false (and the override noted) where NCCL's mask holds a value this
 * plugin did not write. */
static bool still_ours(const int32_t* nccl_mask) {
    int32_t found = LOAD(nccl_mask);
    if (found == mask_written) return true;
    note_override(found);
    return false;
}

/* With mask_lock held: NCCL's mask from what this plugin last wrote to `want`, in one
 * compare-and-swap, so that an operator's write between our read and our write is never
 * lost (it fails the swap, and is their override). An override equal to mask_written cannot
 * be told from our own value. */
static bool write_mask(int32_t* nccl_mask, int32_t want) {
    int32_t expected = mask_written;
    if (__atomic_compare_exchange_n(nccl_mask, &expected, want, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        STORE(&mask_written, want);
        return true;
    }
    note_override(expected);
    return false;
}

void ci_mask_first_write(int32_t* nccl_mask, bool kernel_ch) {
    pthread_mutex_lock(&mask_lock);
    if (!LOAD(&ci_g.mask_overridden)) {
        /* the first communicator's init: NCCL's initial value is not an override */
        int32_t* known = __atomic_load_n(&ci_g.nccl_mask, __ATOMIC_ACQUIRE);
        if (known != nccl_mask) {
            STORE(&mask_written, wanted(kernel_ch));
            STORE(nccl_mask, mask_written);
        } else {
            (void)write_mask(nccl_mask, wanted(kernel_ch));
        }
    }
    __atomic_store_n(&ci_g.nccl_mask, nccl_mask, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&mask_lock);
}

void ci_mask_rewrite(void) {
    int32_t* nccl_mask = __atomic_load_n(&ci_g.nccl_mask, __ATOMIC_ACQUIRE);
    if (!nccl_mask) return;
    pthread_mutex_lock(&mask_lock);
    if (!LOAD(&ci_g.mask_overridden)) {
        /* keep the KernelCh bit the last op's decision left: the next op decides it again */
        int32_t want = wanted(ci_gpu_timing_mode(ci_g.abi) != CI_SHM_V1_GPU_TIMING_SAMPLED ||
                              (mask_written & CI_EV_KERNEL_CH));
        if (want != mask_written) (void)write_mask(nccl_mask, want);
        else (void)still_ours(nccl_mask);
    }
    pthread_mutex_unlock(&mask_lock);
}

void ci_mask_check(void) {
    int32_t* nccl_mask = __atomic_load_n(&ci_g.nccl_mask, __ATOMIC_ACQUIRE);
    if (!nccl_mask || LOAD(&ci_g.mask_overridden)) return;
    /* the lock only when the two differ (someone wrote, or a write is under way), so that the
     * hot path's trylock almost never meets it */
    if (LOAD(nccl_mask) == LOAD(&mask_written)) return;
    pthread_mutex_lock(&mask_lock);
    if (!LOAD(&ci_g.mask_overridden)) (void)still_ours(nccl_mask);
    pthread_mutex_unlock(&mask_lock);
}

void ci_mask_forget(void) {
    STORE(&mask_written, 0);
    STORE(&ci_g.mask_overridden, 0u);
    STORE(&ci_g.overriding_mask, 0);
}

/* Whether NCCL's mask has KernelCh for the task the calling thread is about to append: the
 * bit set as asked where the mask is this plugin's and its lock free now, else as found. */
static bool set_kernel_ch(bool on) {
    int32_t* nccl_mask = __atomic_load_n(&ci_g.nccl_mask, __ATOMIC_ACQUIRE);
    if (CI_UNLIKELY(!nccl_mask)) return on;
    int32_t found = LOAD(nccl_mask);
    if (((found & CI_EV_KERNEL_CH) != 0) == on || LOAD(&ci_g.mask_overridden) ||
        pthread_mutex_trylock(&mask_lock) != 0)
        return (found & CI_EV_KERNEL_CH) != 0;
    int32_t want = on ? mask_written | CI_EV_KERNEL_CH : mask_written & ~(int32_t)CI_EV_KERNEL_CH;
    bool result = write_mask(nccl_mask, want) ? on : (LOAD(nccl_mask) & CI_EV_KERNEL_CH) != 0;
    pthread_mutex_unlock(&mask_lock);
    return result;
}

/* Size classes of a power of four bytes: 0 (< 4 B), 1 (4 B..), ... up to 15 (>= 1 GiB). */
static inline uint32_t size_class(uint64_t bytes) {
    if (bytes < 4) return 0;
    uint32_t c = (uint32_t)(63 - __builtin_clzll(bytes)) / 2;
    return c > CI_SHAPE_SIZES - 1 ? CI_SHAPE_SIZES - 1 : c;
}

/* NCCL's ncclGetVersion: from the library that holds NCCL's logger (`logfn`, handed over at
 * init), else from the global scope. In a PyTorch process libnccl is a dependency of an
 * extension module loaded RTLD_LOCAL, so its symbols are not global; the library that
 * loaded this plugin is found by an address in it instead. */
static int (*nccl_get_version(void* logfn))(int*) {
    int (*fn)(int*) = NULL;
    Dl_info info;
    if (logfn && dladdr(logfn, &info) && info.dli_fname) {
        void* lib = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
        if (lib) {
            *(void**)(&fn) = dlsym(lib, "ncclGetVersion");
            dlclose(lib); /* NOLOAD took a reference; NCCL's own keeps it loaded */
        }
    }
    if (!fn) *(void**)(&fn) = dlsym(RTLD_DEFAULT, "ncclGetVersion");
    return fn;
}

void ci_gpu_timing_learn_nccl(uint32_t abi, void* logfn) {
    int (*get_version)(int*) = nccl_get_version(logfn);
    int version = 0;
    if (!get_version || get_version(&version) != 0 || version < 0) version = 0;
    STORE(&ci_g.nccl_version, (uint32_t)version);
    /* NCCL 2.28 on, and any NCCL that does not say; ABI v6 and v7 are 2.29 on */
    bool before = abi != 5 || version == 0 || version >= 22800;
    STORE(&ci_g.mask_read_before_api, (uint8_t)before);
    uint8_t mode = ci_gpu_timing_mode(abi);
    if (ci_kernel_ch_fixed(abi) && !ci_g.cfg.gpu_timing_all && mode == CI_SHM_V1_GPU_TIMING_ALL)
        ci_warn("GPU timing sampled needs NCCL before 2.31 (this is %d, profiler ABI v%u): every op is timed "
                "on the GPU instead, since NCCL 2.31 on gives an untimed op's channels' later timings to "
                "other ops",
                version, abi);
    STORE(&ci_g.gpu_timing, mode);
}

/* Whether NCCL's mask has KernelCh now. */
static bool mask_has_kernel_ch(bool otherwise) {
    const int32_t* nccl_mask = __atomic_load_n(&ci_g.nccl_mask, __ATOMIC_ACQUIRE);
    return nccl_mask ? (LOAD(nccl_mask) & CI_EV_KERNEL_CH) != 0 : otherwise;
}

/* Whether the call whose task reads NCCL's mask next is at the edge of a pause: the first call
 * after one, or the last before the next one as predicted by the length of the run of calls
 * between the last two pauses (a training loop issues the same calls Step after Step, and the
 * optimizer, data loading or a host sync pause the host between them). A Step's first and last
 * op are then timed on the GPU, which gives its time and the GPU's idle time before it. At most
 * two ops per pause are timed this way: NCCL's GPU cost of a few microseconds each against a
 * pause of at least quiet_ns. One clock read per call, taken only while sampling.
 * `next`: the mask is read before this call's API event (NCCL 2.28 on), so the decision made
 * now is the next call's. A thread sharing the fallback block keeps no runs. */
static bool at_pause_edge(ci_thread_t* t, bool next) {
    uint64_t quiet = LOAD(&ci_g.cfg.gpu_timing_quiet_ns); /* the config file may change it */
    if (quiet == 0 || t->shared) return false;
    uint64_t now = ci_now_mono();
    /* signed: a clock read a little behind the last (ci_now_mono's fallback) is no pause */
    bool paused = (int64_t)(now - t->last_call_mono_ns) >= (int64_t)quiet;
    t->last_call_mono_ns = now;
    /* the process-wide time only when it moved by a quarter pause: every thread's store would
     * bounce the cache line the hot path reads NCCL's mask from */
    if (now - LOAD(&ci_g.last_call_mono_ns) > quiet / 4) STORE(&ci_g.last_call_mono_ns, now);
    if (paused) {
        t->run_len = t->run_pos;
        t->run_pos = 0;
    }
    uint32_t place = t->run_pos++ + (next ? 1u : 0u);
    if (place == 0) return true; /* this call, the first after a pause (NCCL before 2.28) */
    uint32_t n = t->run_len;
    /* the predicted last call of this run, or the one after it: the next run's first */
    return n != 0 && (place == n - 1 || place == n);
}

bool ci_gpu_timing_decide(ci_thread_t* t, ci_comm_t* comm, const char* func, uint64_t count,
                          const char* datatype) {
    uint8_t mode = LOAD(&ci_g.gpu_timing);
    if (CI_UNLIKELY(mode != CI_SHM_V1_GPU_TIMING_SAMPLED)) {
        /* nothing to decide: the task is timed as NCCL's mask says (an operator may have
         * taken KernelCh out of it, or put it in) */
        return mask_has_kernel_ch(mode == CI_SHM_V1_GPU_TIMING_ALL);
    }
    /* NCCL 2.28 on: this call's task read the mask already */
    bool before = LOAD(&ci_g.mask_read_before_api);
    bool read = before && mask_has_kernel_ch(true);
    bool timed;
    uint8_t f = ci_func_of(func);
    bool edge = at_pause_edge(t, before);
    if (CI_UNLIKELY(LOAD(&ci_g.evidence_bits) != 0)) {
        timed = true; /* a hang is suspected: every op */
    } else if (f == CI_SHM_V1_FUNC_SEND || f == CI_SHM_V1_FUNC_RECV || f == CI_SHM_V1_FUNC_SEND_RECV) {
        /* A point-to-point op always asks (for the next call, on NCCL 2.28 on): they run on a
         * channel or two (little to save), and a pair's hang has no shared op index that peers
         * could vouch for, so only their own kernel can say whether they finished. */
        timed = true;
    } else {
        uint64_t bytes = count * ci_datatype_size(ci_datatype_of(datatype));
        uint16_t* left = &comm->shape_left[(f % CI_SHAPE_FUNCS) * CI_SHAPE_SIZES + size_class(bytes)];
        /* one enqueuing thread per communicator at a time (NCCL's rule): plain counters */
        timed = *left == 0 || edge || LOAD(&comm->timing_due);
        *left = *left == 0 ? (uint16_t)(ci_g.cfg.gpu_timing_every - 1) : (uint16_t)(*left - 1);
    }
    bool set = set_kernel_ch(timed);
    return before ? read : set;
}

/* A task NCCL was asked to time has started: the sample is taken (a call that yields no task,
 * a copy-engine collective or an empty one, takes none, and the next op is asked again). */
void ci_gpu_timing_taken(ci_comm_t* comm) {
    STORE(&comm->timing_due, 0u);
    STORE(&comm->timed_ops, LOAD(&comm->timed_ops) + 1);
}

/* Background thread, each heartbeat: a communicator with no op timed for a period has its
 * next op timed (the first op after a quiet spell, or one op of a long busy one). */
void ci_gpu_timing_tick(ci_comm_t* comm, uint64_t now) {
    uint64_t period = (uint64_t)ci_g.cfg.gpu_timing_period_ms * 1000000ull;
    if (period == 0 || now - comm->timing_checked_mono_ns < period) return;
    comm->timing_checked_mono_ns = now;
    uint64_t timed = LOAD(&comm->timed_ops);
    if (timed == comm->timed_ops_seen) STORE(&comm->timing_due, 1u);
    comm->timed_ops_seen = timed;
}

/* Background thread, each heartbeat: a process none of whose threads made an NCCL call for a
 * pause has its next call timed, whatever the runs foretold (a checkpoint, an evaluation, a
 * Step of another length). Only pauses that a heartbeat falls in are seen this way. */
void ci_gpu_timing_pause_check(uint64_t now) {
    uint64_t quiet = LOAD(&ci_g.cfg.gpu_timing_quiet_ns);
    uint64_t last = LOAD(&ci_g.last_call_mono_ns);
    if (quiet == 0 || last == 0 || LOAD(&ci_g.gpu_timing) != CI_SHM_V1_GPU_TIMING_SAMPLED) return;
    /* the stored time may be a quarter pause older than the last call (at_pause_edge) */
    if (now > last && now - last >= quiet + quiet / 4) (void)set_kernel_ch(true);
}
