/* CommInsight NCCL profiler plugin - internal declarations shared by its modules.
 *
 * Data flow: NCCL entry points (plugin.c) -> op assembly (ops.c, pool.c) -> the SHM ring and
 * communicator table (shm.c) -> the log writer thread (logwriter.c) and the background thread
 * (background.c: heartbeat, hang watchdog, FIFO events, agent autostart). Every layout that
 * leaves the process comes from the generated protocol headers.
 *
 * Concurrency rules: the hot path (start/stop/recordEventState) takes no lock except a
 * per-communicator spinlock held for a handful of stores, never across I/O; it does not
 * allocate and makes no syscall but a vDSO clock read. Shared fields use GCC __atomic builtins.
 */
#ifndef CI_INTERNAL_H
#define CI_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "comminsight/config_v1.h"
#include "comminsight/fifo_event_v1.h"
#include "comminsight/home_v1.h" /* every path of the home, by name */
#include "comminsight/shm_v1.h"

#define CI_PLUGIN_NAME "CommInsight"
/* The name of a region held in a memfd (shm.c); the Agent checks it when it opens one. */
#define CI_MEMFD_NAME "comminsight-region"
#define CI_VERSION_MAJOR 0
#define CI_VERSION_MINOR 1
#define CI_VERSION_PATCH 0
#define CI_VERSION_STRING "0.1.0"
#define CI_PLUGIN_VERSION ((CI_VERSION_MAJOR << 16) | (CI_VERSION_MINOR << 8) | CI_VERSION_PATCH)

/* NCCL's event-type bits (identical in ABI v4 and v5). */
#define CI_EV_COLL 0x2
#define CI_EV_P2P 0x4
#define CI_EV_PROXY_OP 0x8
#define CI_EV_PROXY_STEP 0x10
#define CI_EV_KERNEL_CH 0x40
#define CI_STATE_KERNEL_CH_STOP 22

#define CI_WINDOW 64 /* in-flight ops remembered per communicator and kind */
#define CI_SHAPE_FUNCS 16 /* op shapes for GPU timing samples: shm v1 func values ... */
#define CI_SHAPE_SIZES 16 /* ... times size classes of a power of four bytes */
/* Buffer sizes chosen so that every path we build provably fits (gcc checks, -Werror): a
 * home of up to CI_HOME_MAX - 1 bytes, its subdirectories, then file names inside them. */
#define CI_HOME_MAX 3072
#define CI_DIR_MAX 3200
#define CI_PATH_MAX 4096

#if defined(__x86_64__) || defined(__i386__)
#define ci_cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define ci_cpu_relax() __asm__ __volatile__("yield")
#else
#define ci_cpu_relax() ((void)0)
#endif

#define CI_LIKELY(x) __builtin_expect(!!(x), 1)
#define CI_UNLIKELY(x) __builtin_expect(!!(x), 0)

static inline uint64_t ci_clock_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts); /* vDSO for MONOTONIC/REALTIME: no syscall */
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
/* CLOCK_MONOTONIC in ns; through the TSC where that is safe (clock.c) */
uint64_t ci_now_mono(void);
void ci_clock_init(void);
void ci_clock_steer(uint64_t period_ns);
static inline uint64_t ci_now_real(void) { return ci_clock_ns(CLOCK_REALTIME); }

/* ---- configuration (config.c): environment > file > generated defaults ---- */
typedef struct ci_config {
    char home[CI_HOME_MAX];
    bool agent_autostart;
    int32_t event_mask;
    double hang_timeout_s;
    uint8_t hang_timeout_source; /* CI_SHM_V1_THRESHOLD_SOURCE_DEFAULT, _FILE or _ENVIRONMENT */
    uint32_t ring_slots;
    uint32_t comm_slots;
    uint32_t event_pool;
    uint32_t heartbeat_ms;
    bool shm_enable;
    char shm_dir[CI_DIR_MAX];
    bool log_enable;
    uint64_t log_segment_bytes;
    double log_segment_s;
    uint32_t log_flush_ms;
    uint32_t log_zstd_level; /* 0: sealed segments stay uncompressed */
    bool log_compact;        /* op lines in the compact form (kinds c, p), else the Inspector form */
    char agent_bin[CI_PATH_MAX];
    bool debug;
    uint64_t stale_region_grace_s; /* a dead process's region still linked is kept this long */
    bool hang_evidence;            /* raise the mask and record proxy progress on a suspected hang */
    bool gpu_timing_all;           /* COMMINSIGHT_PROFILER_GPU_TIMING=all: every op timed on the GPU */
    uint32_t gpu_timing_every;     /* sampled: one op in this many of each shape */
    uint32_t gpu_timing_period_ms; /* sampled: a communicator's next op after this long untimed */
    uint64_t gpu_timing_quiet_ns;  /* sampled: the ops on either side of a pause this long */
    double hang_evidence_max_s;    /* the longest the mask stays raised for one flagged op */
} ci_config_t;

/* home_fd: the trusted home, whose etc/comminsight.conf is read; -1: read no file in a home */
void ci_config_load(ci_config_t* cfg, int home_fd);
void ci_config_file(char* path, size_t size); /* the KEY=VALUE file config_load reads */
/* Whether `text` is a valid value of the key at `index` (CI_CONFIG_V1_*_INDEX); else why. */
bool ci_config_valid(int index, const char* text, char* why, size_t why_len);

/* ---- the Agent's published settings (agent_settings.c): one hang threshold per job ---- */
void ci_agent_settings_reset(void); /* at process init: the watchdog on this process's own value */
void ci_agent_settings_poll(void);  /* background thread, each heartbeat: follow the Agent's value */
static inline uint64_t ci_hang_threshold_ns(void); /* what the watchdog uses now; 0: off */

/* ---- trusted file access (safefs.c): no links followed, no blocking, kind and owner checked ---- */
typedef enum { CI_KIND_DIR, CI_KIND_FILE, CI_KIND_FIFO } ci_kind_t;
struct stat;
/* Of the kind wanted, owned by the effective uid (or root, when root_ok), not writable by
 * group or others; otherwise false with the reason in `why`. */
bool ci_trusted_stat(const struct stat* st, ci_kind_t kind, bool root_ok, char* why, size_t why_len);
int ci_check_fd(int fd, ci_kind_t kind, bool root_ok, char* why, size_t why_len);
/* Each returns a descriptor, or -1 with errno (EPERM: refused, ELOOP: a link) and `why`. */
int ci_open_dir_at(int parent_fd, const char* name, bool create, char* why, size_t why_len);
int ci_open_file_at(int dir_fd, const char* name, int flags, ci_kind_t kind, bool root_ok, char* why,
                    size_t why_len);
/* Every directory and link a path passes through, resolved as the kernel does (a last
 * component that is a link too): owned by this user or root, and a directory others can write
 * only with the sticky bit. The directory it ends in is the caller's to check. 0, or -1 with
 * the place and reason in `why`. Missing components end the walk. A relative path is taken
 * from the working directory. */
int ci_check_ancestors(const char* path, char* why, size_t why_len);

/* ---- the home (home.c): trusted, or a private directory in its place ---- */
bool ci_home_path(char* out, size_t size); /* COMMINSIGHT_HOME, from the environment only; false: too long */
void ci_home_open(void);                   /* sets ci_g.home_fd / home_private; says why once */
void ci_home_adopt(ci_config_t* cfg);      /* after config load: the home in use, by name */
/* A directory of the home, opened (created 0700 when `create`). `movable`: if the home's own is
 * refused, or cannot be created or opened (EROFS, EACCES, EPERM), the private directory's is
 * used instead, from then on. -1 if none; refusals and moves are said once. */
int ci_home_dir(const char* sub, bool create, bool movable, char* path, size_t path_len);
/* The home's `sub` opened but takes no new entry (err: one ci_unwritable_errno accepts): the
 * private directory's `sub` from now on, said once naming the path and the errno. -1 (errno =
 * err) when there is nowhere better: the home is already the private one, `sub` already moved,
 * or no private directory can be made. */
int ci_home_dir_unwritable(const char* sub, int err, char* path, size_t path_len);
bool ci_unwritable_errno(int err); /* EROFS, EACCES, EPERM: a home we cannot write, not a full one */
int ci_private_home(void);
const char* ci_private_home_path(void);
void ci_home_after_fork(void);
void ci_home_release(void); /* close the home's and the private directory's descriptors */

/* ---- regions of dead processes (stale_regions.c) and process identity (proc_identity.c) ---- */
int ci_proc_start_ticks(int pid, uint64_t* ticks); /* 0, or -1 with errno (ENOENT: no such process) */
uint64_t ci_pid_namespace(void);
void ci_boot_id(char* out, size_t size);
void ci_stale_regions_sweep(void);
/* ---- the ring sized for the SHM file system (ring_fit.c) ---- */
/* Lowers ci_g.cfg.ring_slots where the region (`fixed` bytes without its ring) would not fit
 * this process's share of the file system holding `dir` (dir_fd when >= 0); says so once. */
void ci_ring_fit(const char* dir, int dir_fd, size_t fixed);
uint32_t ci_ring_slots_to_fit(uint64_t fs_bytes, uint64_t fs_free, uint32_t processes, size_t fixed,
                              uint32_t slots);
int ci_agent_running(void); /* 1: an Agent holds this home's lock, 0: none, -1: cannot tell */

/* ---- logging (log.c): NCCL's logger when it gave one, else stderr ---- */
void ci_log_set_nccl_logger(void* logfn);
void ci_warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void ci_debug(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- the CUDA device, from a runtime already loaded (device.c); NO_RANK if none ---- */
int ci_cuda_device(void);
void ci_cuda_device_uuid(int device, uint8_t out[16]); /* all zero if unknown */

/* ---- names (names.c): NCCL's strings -> shm v1 enums ---- */
uint8_t ci_func_of(const char* name);
uint8_t ci_datatype_of(const char* name);
uint8_t ci_algo_of(const char* name);
uint8_t ci_proto_of(const char* name);
uint32_t ci_datatype_size(uint8_t datatype);
void ci_copy_name(char* dst, size_t size, const char* src, bool* truncated);
size_t ci_utf8_trim_tail(const char* s, size_t n);

/* ---- per-thread state (thread.c): one initial-exec TLS pointer, blocks preallocated ---- */
#define CI_POOL_CACHE 64
#define CI_API_RING 16

/* What the API call behind a task told (v5 CollApi/P2pApi events); zero when not seen. */
typedef struct ci_api_info {
    uint64_t stream;
    bool graph_captured;
    int8_t gpu_timed; /* whether NCCL was asked to time the call's task on the GPU; -1: not known */
} ci_api_info_t;

typedef struct ci_thread {
    struct ci_thread* next; /* free list */
    bool shared;            /* the fallback block: no caching through it */
    uint32_t tid;
    /* pool.c: free op entries kept by this thread */
    uint64_t pool_epoch;
    bool pool_cached; /* this thread holds a share of the pool cache allowance */
    uint32_t pool_n;
    uint32_t pool_items[CI_POOL_CACHE];
    /* plugin.c: the NCCL group of the last GroupApi (v5/v6) started on this thread, 0 if none,
     * and the group ids this thread has reserved: [group_id_next, group_id_end) */
    uint64_t current_group_id;
    uint64_t group_id_next, group_id_end;
    /* plugin.c: the last API calls (v5 CollApi/P2pApi) made on this thread */
    uint32_t api_next;
    struct {
        uintptr_t handle;
        ci_api_info_t info;
    } api_ring[CI_API_RING];
    /* gpu_timing.c: this thread's runs of calls between pauses (the last call's time, the
     * place of the current call in its run, the length of the run before it) */
    uint64_t last_call_mono_ns;
    uint32_t run_pos, run_len;
} ci_thread_t;

extern __thread ci_thread_t* ci_tls __attribute__((tls_model("initial-exec")));
ci_thread_t* ci_thread_attach(void);
void ci_thread_unload(void);
void ci_thread_after_fork(void);
static inline ci_thread_t* ci_thread(void) { return CI_LIKELY(ci_tls != NULL) ? ci_tls : ci_thread_attach(); }

/* ---- ops and their pool (pool.c) ---- */
enum { CI_OP_FREE = 0, CI_OP_LIVE = 1 };
struct ci_comm;

/* Laid out by writer, a cache line each, so NCCL's enqueuing thread and its proxy thread never
 * write the same line (false sharing cost more than the whole budget in measurements). */
typedef struct ci_op {
    /* written by the enqueuing thread at start; read by whoever publishes */
    struct ci_comm* comm;
    uint64_t op_seq;   /* NCCL's seqNumber (per comm and function) or the P2P counter */
    uint64_t op_index; /* the comm's own count of its collectives (or P2P ops), issue order */
    uint64_t count, bytes, stream, group_id;
    uint64_t host_start_mono_ns;
    int32_t peer;
    uint32_t tid;
    uint32_t expect_channels; /* KernelCh events expected (0: KernelCh off at start) */
    uint16_t flags;           /* ci_shm slot_flags */
    uint8_t kind, func, datatype, algo, proto, n_channels, n_warps;
    char raw_name[32];
    uint64_t user_tag;       /* ABI v7: the call's userProfilerTag, 0 = none */
    /* ops of each kind the communicator had issued before this op's NCCL group: all done
     * once this op's kernel starts (a communicator's kernels run in order) */
    uint64_t coll_before, p2p_before;
    bool unproven; /* not timed by choice (GPU timing sampled): done only once a later op starts */
    char kernel_variant[32]; /* ABI v7: the kernel variant's name, else empty */
    /* written by the proxy thread's channel events (single writer, relaxed atomics) */
    _Alignas(64) uint64_t gpu_start_ticks; /* min over channels */
    uint64_t gpu_end_ticks;                /* max over channels */
    uint32_t ch_started, ch_stopped;
    uint64_t complete_mono_ns;
    /* written by either side, or by the background sweep, or by the pool */
    _Alignas(64) uint64_t host_stop_mono_ns;
    uint32_t gate; /* GATE_* bits: host done, channels done, forced (see ops.c) */
    uint32_t sweep_events;
    uint64_t sweep_seen_mono_ns;
    uint32_t state;      /* CI_OP_FREE / CI_OP_LIVE */
    uint32_t generation; /* bumped on every reuse; part of every handle */
    uint32_t index;
    uint32_t next_free;
} ci_op_t;

int ci_pool_init(uint32_t size);
void ci_pool_destroy(void);
ci_op_t* ci_pool_get(void); /* NULL when exhausted (counted by the caller) */
void ci_pool_put(ci_op_t* op);
void ci_pool_flush_thread(ci_thread_t* t); /* give a thread's cached entries back */
ci_op_t* ci_pool_at(uint32_t index);
uint32_t ci_pool_size(void);

/* Handles given to NCCL: kind, pool index, channel and generation packed into a pointer-sized
 * value, so a late child event naming a parent that was already recycled is recognised. */
enum {
    CI_HANDLE_OP = 1,
    CI_HANDLE_CHANNEL = 2,
    CI_HANDLE_API = 3,
    CI_HANDLE_GROUP = 4,
    CI_HANDLE_PROXY_OP = 5,   /* hang_evidence.c: evidence slot, direction, channel, binding */
    CI_HANDLE_PROXY_STEP = 6, /* the same, for a step of that ProxyOp */
};
static inline void* ci_handle_make(uint32_t kind, uint32_t index, uint32_t generation,
                                   uint32_t channel) {
    uint64_t v = ((uint64_t)(generation & 0xFFFFFFu) << 40) | ((uint64_t)(channel & 0xFFu) << 32) |
                 ((uint64_t)(kind & 0xFFu) << 24) | (uint64_t)((index + 1) & 0xFFFFFFu);
    return (void*)(uintptr_t)v;
}
static inline uint32_t ci_handle_kind(const void* h) { return (uint32_t)(((uintptr_t)h >> 24) & 0xFF); }
static inline uint32_t ci_handle_generation(const void* h) { return (uint32_t)((uintptr_t)h >> 40); }
static inline int64_t ci_handle_index(const void* h) { return (int64_t)((uintptr_t)h & 0xFFFFFFu) - 1; }

/* A Group handle carries its NCCL group's id itself (56 bits: bits 0-23 and 32-63), so the
 * ops below it read the id straight from the handle they name, on any thread, with no table
 * to look it up in. */
static inline void* ci_group_handle_make(uint64_t group_id) {
    uint64_t v = (group_id & 0xFFFFFFu) | ((uint64_t)CI_HANDLE_GROUP << 24) | ((group_id >> 24) << 32);
    return (void*)(uintptr_t)v;
}
/* The group id a Group handle carries; 0 (unknown) for NULL and any other handle. */
static inline uint64_t ci_group_of(const void* h) {
    if (ci_handle_kind(h) != CI_HANDLE_GROUP) return 0;
    uint64_t v = (uint64_t)(uintptr_t)h;
    return (v & 0xFFFFFFu) | ((v >> 32) << 24);
}

/* ---- communicators (comm.c) ---- */
/* An op that is recorded but not known done, as the hang view shows it. `guard` is odd while
 * the entry is written (a seqlock of its own). */
typedef struct ci_untimed_view {
    uint32_t guard;
    int32_t peer;
    uint64_t op_seq, op_index, count, bytes, host_start_mono_ns;
    uint8_t kind, func, datatype, algo, proto, n_channels;
} ci_untimed_view_t;

typedef struct ci_comm {
    /* identity: written at open (under ci_g.table_lock), read everywhere */
    uint32_t index;
    uint32_t in_use;
    ci_shm_comm_entry_v1_t* entry; /* its row of the SHM communicator table */
    uint64_t comm_id;
    int32_t rank, nranks, nnodes;
    uint32_t abi;
    uint64_t finalize_ticket; /* ring ticket of the COMM_FINALIZE record (entry reuse) */
    /* 1 + its evidence slot while the mask is raised for it (hang_evidence.c), else 0: set and
     * cleared under ci_g.table_lock, read by NCCL's proxy thread at each ProxyOp start */
    uint32_t evidence_slot;
    /* enqueue side. Op indices: NCCL numbers collectives per function; these count each kind
     * in issue order, the same on every rank. One thread at a time enqueues on a communicator
     * (NCCL's rule). */
    _Alignas(64) uint64_t coll_counter;
    uint64_t p2p_counter;
    /* gpu_timing.c, enqueue side: ops of each shape (operation x size class) left before the
     * next one is timed; whether the next op is timed whatever its shape; ops timed so far */
    uint16_t shape_left[CI_SHAPE_FUNCS * CI_SHAPE_SIZES];
    uint32_t timing_due;
    uint64_t timed_ops;
    /* ops.c: the NCCL group of the last op, and the ops of each kind issued before it */
    uint64_t base_group, group_coll_base, group_p2p_base;
    /* comm.c: ops of each kind that a kernel start proved done (all issued before its group) */
    uint64_t proved_coll, proved_p2p;
    /* comm.c: what the hang view needs of ops recorded before anything proved them done (GPU
     * timing sampled), by index % CI_WINDOW per kind; written where they are recorded */
    ci_untimed_view_t untimed[2][CI_WINDOW];
    /* completion side */
    _Alignas(64) uint64_t completions; /* sampling counter for completion clock reads */
    /* background thread */
    _Alignas(64) uint64_t seen_coll_started, seen_p2p_started; /* last values stamped */
    uint64_t offset_window_start;                               /* clock offset restarts */
    uint64_t timing_checked_mono_ns, timed_ops_seen;            /* gpu_timing.c's periods */
    /* in-flight ops by index % CI_WINDOW: set at enqueue, cleared at completion */
    _Alignas(64) uint64_t coll_inflight[CI_WINDOW];
    uint64_t p2p_inflight[CI_WINDOW];
} ci_comm_t;

ci_comm_t* ci_comm_open(uint64_t comm_id, const char* name, int nnodes, int nranks, int rank,
                        uint32_t abi);
void ci_comm_close(ci_comm_t* comm);
void ci_comm_note_enqueued(ci_comm_t* comm, ci_op_t* op, void* handle);
void ci_comm_note_started(ci_comm_t* comm, const ci_op_t* op);
void ci_comm_note_completed(ci_comm_t* comm, const ci_op_t* op, uint64_t now);
void ci_comm_note_clock(ci_comm_t* comm, uint64_t host_mono_ns, uint64_t gpu_ticks);
/* Background thread: derive in-flight count and the oldest in-flight op into the SHM row. */
void ci_comm_refresh(ci_comm_t* comm, uint64_t now);

/* ---- op life cycle (ops.c) ---- */
/* What ABI v7 adds to a Coll or P2p event (all zero before v7). */
typedef struct ci_op_v7 {
    uint64_t user_tag;
    const char* kernel_variant;
    bool sym_coll;
} ci_op_v7_t;

void* ci_op_start(ci_comm_t* comm, uint8_t kind, const char* func, uint64_t seq, uint64_t count,
                  const char* datatype, int peer, int n_channels /* < 0: unknown */, uint8_t n_warps,
                  const char* algo, const char* proto, ci_api_info_t api, uint64_t group_id /* 0: unknown */,
                  ci_op_v7_t v7);
void ci_op_stop(ci_op_t* op);
void ci_channels_complete(ci_op_t* op); /* out of line: the last channel of an op stopped */
/* The op a handle names, or NULL if the handle is not ours or its op has been recycled since:
 * the pool bumps an entry's generation when it is freed, so a stale handle never matches. */
extern ci_op_t* ci_pool_ops;
extern uint32_t ci_pool_n;
static inline ci_op_t* ci_op_from_handle(const void* handle) {
    uint32_t index = (uint32_t)((uintptr_t)handle & 0xFFFFFFu) - 1u;
    if (CI_UNLIKELY(index >= ci_pool_n)) return NULL;
    ci_op_t* op = &ci_pool_ops[index];
    if (CI_UNLIKELY((__atomic_load_n(&op->generation, __ATOMIC_ACQUIRE) & 0xFFFFFFu) != ci_handle_generation(handle)))
        return NULL;
    return op;
}
/* KernelCh events are 72 of a 24-channel collective's ~80 calls, so their work is inline and
 * the least correctness needs: find the op (one bounds test, one generation compare), fold the
 * GPU tick in, count. Channel fields have one writer, NCCL's proxy thread (ops.c). */
static inline void ci_channel_fold_start(ci_op_t* op, uint32_t started, uint64_t ptimer) {
    __atomic_store_n(&op->ch_started, started + 1, __ATOMIC_RELAXED);
    uint64_t cur = __atomic_load_n(&op->gpu_start_ticks, __ATOMIC_RELAXED);
    if (ptimer && (cur == 0 || ptimer < cur)) __atomic_store_n(&op->gpu_start_ticks, ptimer, __ATOMIC_RELAXED);
}

/* the parent's handle with the channel's kind and number: same index, same generation */
static inline void* ci_channel_handle(const void* parent, uint8_t channel) {
    return (void*)((uintptr_t)parent + ((uintptr_t)(CI_HANDLE_CHANNEL - CI_HANDLE_OP) << 24) +
                   ((uintptr_t)channel << 32));
}

/* A channel's start: *handle set, 0 returned (NCCL's success), so that a caller can return it
 * as a tail call and need no stack frame; the first channel of an op goes out of line. */
uint32_t ci_channel_start_first(void** handle, ci_op_t* op, const void* parent, uint8_t channel, uint64_t ptimer);

static inline uint32_t ci_channel_start_into(void** handle, const void* parent, uint8_t channel, uint64_t ptimer) {
    uint32_t index = (uint32_t)((uintptr_t)parent & 0xFFFFFFu) - 1u;
    if (CI_UNLIKELY(index >= ci_pool_n)) {
        *handle = NULL; /* not an op of ours */
        return 0;
    }
    ci_op_t* op = &ci_pool_ops[index];
    /* a recycled entry, or an op NCCL was not asked to time (published at its host stop, its
     * entry maybe reused already): no handle, so nothing of it reaches another op */
    if (CI_UNLIKELY((__atomic_load_n(&op->generation, __ATOMIC_ACQUIRE) & 0xFFFFFFu) != ci_handle_generation(parent) ||
                    __atomic_load_n(&op->expect_channels, __ATOMIC_RELAXED) == 0)) {
        *handle = NULL;
        return 0;
    }
    uint32_t started = __atomic_load_n(&op->ch_started, __ATOMIC_RELAXED);
    if (CI_UNLIKELY(started == 0)) return ci_channel_start_first(handle, op, parent, channel, ptimer);
    ci_channel_fold_start(op, started, ptimer);
    *handle = ci_channel_handle(parent, channel);
    return 0;
}

static inline void* ci_channel_start(const void* parent, uint8_t channel, uint64_t ptimer) {
    void* handle;
    (void)ci_channel_start_into(&handle, parent, channel, ptimer);
    return handle;
}

static inline void ci_channel_record_stop(ci_op_t* op, uint64_t ptimer) {
    if (ptimer > __atomic_load_n(&op->gpu_end_ticks, __ATOMIC_RELAXED))
        __atomic_store_n(&op->gpu_end_ticks, ptimer, __ATOMIC_RELAXED);
}

static inline void ci_channel_stop(ci_op_t* op) {
    uint32_t stopped = __atomic_load_n(&op->ch_stopped, __ATOMIC_RELAXED) + 1;
    __atomic_store_n(&op->ch_stopped, stopped, __ATOMIC_RELAXED);
    if (CI_UNLIKELY(stopped == op->expect_channels)) ci_channels_complete(op);
}

/* Complete ops that will get no more events: quiescent ones (all started channels stopped for
 * a while) and, when `comm` is given, every op of that communicator (finalize). */
void ci_ops_sweep(ci_comm_t* finalizing, uint64_t now, uint64_t quiet_ns);

/* ---- SHM region (shm.c) ---- */
int ci_mkdirs(const char* path); /* mkdir -p, new directories 0700 */
int ci_shm_open(void);
void ci_shm_close(uint32_t final_state);
void ci_shm_remove_if_unwatched(void);
void ci_shm_detach_after_fork(void);
void ci_shm_unmap(void); /* the mapping and the shms/ descriptor; the file stays */
uint64_t ci_ring_publish(const ci_shm_op_slot_v1_t* record); /* returns the ticket */
ci_shm_op_slot_v1_t* ci_ring_claim(uint64_t* ticket); /* NULL: dropped (counted) */
void ci_ring_commit(ci_shm_op_slot_v1_t* slot, uint64_t ticket);
void ci_update_published_count(void);
void ci_seqlock_write_slot(ci_shm_op_slot_v1_t* slot, const ci_shm_op_slot_v1_t* record);
void ci_seqlock_read_slot(ci_shm_op_slot_v1_t* dst, const ci_shm_op_slot_v1_t* slot);
void ci_seqlock_read_comm(ci_shm_comm_entry_v1_t* dst, const ci_shm_comm_entry_v1_t* e);
void ci_counter_add(uint64_t* counter, uint64_t n);

/* ---- threads ---- */
int ci_threads_start(void);
void ci_threads_stop(const char* seal_reason);
void ci_threads_forget_after_fork(void);
void ci_logwriter_run_once(bool final, const char* seal_reason); /* writer thread's step */
uint64_t ci_logwriter_cursor(void);
void ci_logwriter_reset(void); /* close its files and free its buffer, the segment left as it is */
/* Sealed segments compressed in slices on the writer thread (segment_zstd.c). */
void ci_zstd_enqueue(const char* sealed_name);
void ci_zstd_work(int dir_fd, uint64_t budget_ns, bool final);
void ci_zstd_reset(void); /* in a forked child: forget the parent's compression */
void ci_watchdog_scan(uint64_t now);

/* What the watchdog (or a finalize) saw of one communicator, copied under a lock so that the
 * FIFO write and logging happen after it is released. */
typedef struct ci_hang_snapshot {
    uint32_t comm_index;
    uint64_t comm_id;
    int32_t rank, nranks;
    uint16_t event_type;
    ci_shm_comm_entry_v1_t entry;
} ci_hang_snapshot_t;

/* ---- hang evidence (hang_evidence.c): the mask raised while a hang is suspected ---- */
size_t ci_evidence_region_size(void); /* bytes the SHM region reserves for it; 0: off */
void ci_evidence_attach(ci_shm_header_v1_t* hdr, void* table, uint64_t offset);
int32_t ci_mask_effective(void); /* the mask NCCL should hold now: normal, or raised */
/* With ci_g.table_lock held: the watchdog flagged `comm`'s oldest op; each scan; a finalize. */
void ci_evidence_on_flag(ci_comm_t* comm, uint64_t now);
void ci_evidence_scan(uint64_t now);
void ci_evidence_on_close(ci_comm_t* comm, uint64_t now);
/* NCCL's proxy thread: ProxyOp/ProxyStep events; NULL when nothing is recorded for them. */
void* ci_evidence_proxy_op_start(ci_comm_t* comm, const void* parent, uint8_t channel, int32_t peer,
                                 int32_t n_steps, bool is_send);
void* ci_evidence_proxy_step_start(const void* parent);
void ci_evidence_proxy_state(const void* handle, uint32_t state);
void ci_evidence_proxy_stop(const void* handle);

/* Finalize of the last communicator with ops still in flight (fifo-event PROCESS_EXIT): capture
 * with ci_g.table_lock held, before the comm is closed; report once every lock is released. */
bool ci_exit_capture(const ci_comm_t* comm, ci_hang_snapshot_t* out);
void ci_exit_report(const ci_hang_snapshot_t* snap);
void ci_autostart_agent(void);

/* ---- process-wide state (plugin.c) ---- */
typedef struct ci_process {
    pthread_mutex_t lock;       /* init/finalize/thread control only - never the hot path */
    pthread_mutex_t table_lock; /* the comm table: open/close vs. the watchdog's scan */
    bool initialized;
    ci_config_t cfg;
    int32_t mask;       /* the activation mask the configuration asks for (the normal mask) */
    int32_t evidence_bits; /* bits added to it while hang evidence is raised, else 0 */
    int32_t* nccl_mask; /* NCCL's one process-global int, re-read per task (from init) */
    uint32_t abi;       /* the ABI of the first init: 4, 5, 6 or 7 */
    uint8_t gpu_timing; /* CI_SHM_V1_GPU_TIMING_*: which ops are timed on the GPU (gpu_timing.c) */
    /* NCCL reads the mask for a call's task before the call's API event (2.28 on), not after
     * it (2.26-2.27): a decision at the event is then the next call's (gpu_timing.c) */
    uint8_t mask_read_before_api;
    uint32_t nccl_version; /* ncclGetVersion's code (2.31.0: 23100), 0 where it does not say */
    uint64_t last_call_mono_ns; /* sampled: the last API call of any thread (gpu_timing.c) */
    uint32_t mask_overridden; /* 1 once someone else wrote NCCL's mask: it is theirs from then on */
    int32_t overriding_mask;  /* the value they wrote */
    /* the SHM region (file-backed, or anonymous memory when the file cannot be made) */
    void* region;
    size_t region_size;
    bool region_is_file;
    char shm_path[CI_PATH_MAX];    /* the name the Agent finds: <home>/shms/<name>.shm */
    char shm_target[CI_PATH_MAX];  /* where the memory lives when that name is a link */
    int region_fd; /* a memfd holding the region when its file system had no room; -1: none */
    ci_shm_header_v1_t* hdr;
    ci_shm_comm_entry_v1_t* comm_table;
    ci_shm_op_slot_v1_t* ring;
    uint64_t ring_mask;
    /* how the ring was sized (ring_fit.c), published in the header */
    uint32_t ring_slots_configured;
    uint32_t sizing_processes;
    uint64_t shm_dir_bytes;
    uint64_t shm_dir_free_bytes;
    ci_comm_t* comms;
    uint32_t comm_capacity;
    uint32_t live_comms;
    pid_t pid;
    char hostname[64];
    int home_fd;       /* the home in use (trusted, this user's in a shared one, or the private one); -1: none */
    int node_home_fd;  /* the configured home, whose etc/ and metadata/ are read; -1: refused */
    bool home_private; /* the configured home was refused: FIFO and autostart are off */
    bool home_tenant;  /* the configured home is a node's shared one: home_fd is its users/<uid>/ */
    int shms_fd;       /* the directory holding shm_path's link (or file); -1: none */
    char shm_name[256];
    uint64_t group_counter; /* the last NCCL group id a thread reserved (plugin.c); ids start at 1 */
    uint64_t hang_threshold_ns; /* the watchdog's threshold now (agent_settings.c); 0: off */
    bool threads_running;
    bool autostart_done;
} ci_process_t;

extern ci_process_t ci_g;

static inline uint64_t ci_hang_threshold_ns(void) { return __atomic_load_n(&ci_g.hang_threshold_ns, __ATOMIC_RELAXED); }

/* ---- GPU timing sampled through the activation mask (gpu_timing.c) ---- */
uint8_t ci_gpu_timing_mode(uint32_t abi); /* CI_SHM_V1_GPU_TIMING_* for this configuration */
/* At a CollApi/P2pApi start: whether the task NCCL appends next is timed (mask written so). */
bool ci_gpu_timing_decide(ci_thread_t* t, ci_comm_t* comm, const char* func, uint64_t count, const char* datatype);
void ci_gpu_timing_learn_nccl(uint32_t abi, void* logfn); /* NCCL's version, at the first init */
bool ci_kernel_ch_fixed(uint32_t abi); /* NCCL 2.31 on: the KernelCh bit never changes (gpu_timing.c) */
void ci_gpu_timing_tick(ci_comm_t* comm, uint64_t now); /* background, each heartbeat */
void ci_gpu_timing_taken(ci_comm_t* comm);                /* a timed task has started */
void ci_gpu_timing_pause_check(uint64_t now);             /* background, each heartbeat */
void ci_mask_first_write(int32_t* nccl_mask, bool kernel_ch); /* init: NCCL hands its mask over */
void ci_mask_rewrite(void); /* the wanted mask changed (configuration, hang evidence) */
void ci_mask_forget(void);  /* the process lets go of NCCL (unload) */
void ci_mask_check(void);   /* background, each heartbeat: has someone else written the mask? */
void ci_gpu_timing_after_fork(void);

#endif /* CI_INTERNAL_H */
