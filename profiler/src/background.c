/* The plugin's two threads, started at the first init and stopped at the last finalize:
 *
 * - the log writer (logwriter.c), woken every COMMINSIGHT_PROFILER_LOG_FLUSH_MS: disk I/O
 *   lives here, so a slow disk delays nothing else;
 * - the background thread, every COMMINSIGHT_PROFILER_HEARTBEAT_MS: SHM heartbeat, in-flight
 *   summaries of each communicator, the hang watchdog (FIFO event + hang record), completion of
 *   ops whose channel events fell short, and the one-time agent autostart.
 *
 * Both block every signal, so the application's handlers never run on them and a write to a
 * FIFO whose reader left returns EPIPE here instead of killing the process.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ci_internal.h"

static pthread_t writer_thread, bg_thread;
static bool writer_started, bg_started;
static pthread_mutex_t wake_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake; /* made by make_wake(): it waits on CLOCK_MONOTONIC */
static bool stopping;
static uint64_t fifo_event_seq;

/* The threads' periods are measured on CLOCK_MONOTONIC: a deadline on the wall clock moves
 * with it, and NTP stepping it back 15 s stalled the log writer 15 s while the ring wrapped. */
static bool wake_made; /* under ci_g.lock, or in a forked child's only thread */

static void make_wake(void) {
    wake_made = true;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&wake, &attr);
    pthread_condattr_destroy(&attr);
}

static void sleep_ms(uint32_t ms) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += ms / 1000;
    until.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&wake_lock);
    if (!stopping) pthread_cond_timedwait(&wake, &wake_lock, &until);
    pthread_mutex_unlock(&wake_lock);
}

static bool should_stop(void) {
    pthread_mutex_lock(&wake_lock);
    bool s = stopping;
    pthread_mutex_unlock(&wake_lock);
    return s;
}

static void* writer_main(void* arg) {
    (void)arg;
    while (!should_stop()) {
        ci_logwriter_run_once(false, NULL);
        sleep_ms(ci_g.cfg.log_flush_ms);
    }
    return NULL;
}

/* ---- hang events ---- */

/* The FIFO is the Agent's door into this process's evidence: write only into one this user
 * made, that nobody else can write into (a forged event) or swap for a link to a file. */
static int open_fifo(void) {
    if (ci_g.home_private) return -1; /* no Agent reads a private directory */
    int dir = ci_home_dir(CI_HOME_V1_FIFOS, true, false, NULL, 0);
    if (dir < 0) return -1;
    if (mkfifoat(dir, CI_HOME_V1_HANG_EVENTS_FIFO, 0600) != 0 && errno != EEXIST) {
        close(dir);
        return -1;
    }
    char why[160];
    int fd = ci_open_file_at(dir, CI_HOME_V1_HANG_EVENTS_FIFO, O_WRONLY, CI_KIND_FIFO, false, why, sizeof(why));
    int err = errno;
    close(dir);
    static bool warned;
    if (fd < 0 && err != ENXIO && !warned) { /* ENXIO: nobody reads, the usual case */
        warned = true;
        ci_warn("%s/" CI_HOME_V1_FIFOS "/" CI_HOME_V1_HANG_EVENTS_FIFO " refused: %s; hang events are dropped and counted", ci_g.cfg.home, why);
    }
    return fd;
}

static bool write_fifo_event(const ci_fifo_event_v1_t* ev) {
    int fd = open_fifo();
    if (fd < 0) return false;
    ssize_t n = write(fd, ev, sizeof(*ev)); /* <= PIPE_BUF: all or nothing */
    int err = errno;
    close(fd);
    if (n < 0 && err == EPIPE) { /* reader left after our open: consume the pending SIGPIPE */
        sigset_t pipe_set;
        sigemptyset(&pipe_set);
        sigaddset(&pipe_set, SIGPIPE);
        struct timespec zero = {0, 0};
        sigtimedwait(&pipe_set, NULL, &zero);
    }
    return n == (ssize_t)sizeof(*ev);
}

typedef ci_hang_snapshot_t hang_snapshot_t;

static void report_hang(const hang_snapshot_t* snap, uint64_t now, uint64_t threshold_ns) {
    const ci_shm_comm_entry_v1_t* e = &snap->entry;
    uint16_t event_type = snap->event_type;
    ci_fifo_event_v1_t ev;
    memset(&ev, 0, sizeof(ev));
    ev.magic = CI_FIFO_V1_MAGIC;
    ev.abi_version = CI_FIFO_V1_PROTOCOL_VERSION;
    ev.event_size = CI_FIFO_V1_EVENT_SIZE;
    ev.event_type = event_type;
    ev.op_kind = e->inflight_kind;
    ev.func = e->inflight_func;
    ev.pid = ci_g.pid;
    ev.event_seq = __atomic_add_fetch(&fifo_event_seq, 1, __ATOMIC_RELAXED); /* watchdog, finalize */
    ev.detect_mono_ns = now;
    ev.detect_real_ns = ci_now_real();
    ev.comm_id = snap->comm_id;
    ev.rank = snap->rank;
    ev.nranks = snap->nranks;
    ev.datatype = e->inflight_datatype;
    ev.channels_started = (uint8_t)(e->inflight_channels_started > 255 ? 255 : e->inflight_channels_started);
    ev.channels_stopped = (uint8_t)(e->inflight_channels_stopped > 255 ? 255 : e->inflight_channels_stopped);
    ev.peer = e->inflight_peer;
    ev.op_seq = e->inflight_seq;
    ev.op_index = e->inflight_op_index;
    ev.count = e->inflight_count_elems;
    ev.bytes = e->inflight_bytes;
    ev.enqueue_mono_ns = e->inflight_enqueue_mono_ns;
    ev.age_ns = now - e->inflight_enqueue_mono_ns;
    ev.threshold_ns = threshold_ns;
    ev.coll_enqueued = e->coll_enqueued;
    ev.coll_completed = e->coll_completed;
    ev.p2p_enqueued = e->p2p_enqueued;
    ev.p2p_completed = e->p2p_completed;
    ev.inflight_count = e->inflight_count;
    ev.local_rank = e->local_rank;
    ev.cuda_device = e->cuda_device;
    ci_copy_name(ev.hostname, sizeof(ev.hostname), ci_g.hostname, NULL);
    ci_copy_name(ev.comm_name, sizeof(ev.comm_name), e->name, NULL);
    bool written = write_fifo_event(&ev);
    ci_counter_add(written ? &ci_g.hdr->fifo_events_written : &ci_g.hdr->fifo_events_dropped, 1);
    if (event_type != CI_FIFO_V1_EVENT_TYPE_HANG_SUSPECTED) return;

    /* The same evidence, durably: a HANG record the log writer turns into hang_evidence. */
    ci_shm_op_slot_v1_t r;
    memset(&r, 0, sizeof(r));
    r.kind = CI_SHM_V1_RECORD_KIND_HANG;
    r.hang_op_kind = e->inflight_kind;
    r.func = e->inflight_func;
    r.datatype = e->inflight_datatype;
    r.algo = e->inflight_algo;
    r.proto = e->inflight_proto;
    r.flags = written ? CI_SHM_V1_SLOT_FLAGS_FIFO_WRITTEN : 0;
    r.kernel_ch_count = e->inflight_channels_stopped;
    r.channels_started = e->inflight_channels_started;
    r.comm_index = snap->comm_index;
    r.comm_id = snap->comm_id;
    r.rank = snap->rank;
    r.nranks = snap->nranks;
    r.peer = e->inflight_peer;
    r.op_seq = e->inflight_seq;
    r.comm_op_index = e->inflight_op_index;
    r.n_channels = e->inflight_n_channels;
    r.count = e->inflight_count_elems;
    r.bytes = e->inflight_bytes;
    r.host_start_mono_ns = e->inflight_enqueue_mono_ns;
    r.host_stop_mono_ns = e->inflight_start_mono_ns; /* when its kernel was seen starting */
    r.complete_mono_ns = now;                        /* when it was flagged */
    r.hang_threshold_ms = (uint32_t)(threshold_ns / 1000000ull);
    ci_ring_publish(&r);
    ci_counter_add(&ci_g.hdr->hangs_flagged, 1);
    ci_warn("communicator %016llx rank %d: %s seq %llu in flight for %.1f s (threshold %.1f s)",
            (unsigned long long)snap->comm_id, snap->rank,
            ci_shm_v1_func_label(e->inflight_func) ? ci_shm_v1_func_label(e->inflight_func) : "op",
            (unsigned long long)e->inflight_seq, (double)(now - e->inflight_enqueue_mono_ns) / 1e9,
            (double)threshold_ns / 1e9);
}

#define MAX_REPORTS_PER_SCAN 64

bool ci_exit_capture(const ci_comm_t* comm, ci_hang_snapshot_t* out) {
    const ci_shm_comm_entry_v1_t* e = comm->entry;
    if (!e->inflight_count || e->inflight_kind == CI_SHM_V1_RECORD_KIND_NONE) return false;
    out->comm_index = comm->index;
    out->comm_id = comm->comm_id;
    out->rank = comm->rank;
    out->nranks = comm->nranks;
    out->event_type = CI_FIFO_V1_EVENT_TYPE_PROCESS_EXIT;
    ci_seqlock_read_comm(&out->entry, e);
    return true;
}

void ci_exit_report(const ci_hang_snapshot_t* snap) {
    report_hang(snap, ci_now_mono(), ci_hang_threshold_ns());
}

void ci_watchdog_scan(uint64_t now) {
    static hang_snapshot_t reports[MAX_REPORTS_PER_SCAN]; /* only the background thread scans */
    uint32_t n = 0;
    uint64_t threshold_ns = ci_hang_threshold_ns(); /* the Agent's, or this process's own */
    pthread_mutex_lock(&ci_g.table_lock); /* against init/finalize changing the table; no I/O inside */
    /* The caller's clock reading predates the clock steer and a stat() of the config file; ops
     * enqueued since then would look younger than zero. Read it again, as close as we can. */
    uint64_t fresh = ci_now_mono();
    if (fresh > now) now = fresh;
    for (uint32_t i = 0; i < ci_g.comm_capacity && n < MAX_REPORTS_PER_SCAN; i++) {
        ci_comm_t* comm = &ci_g.comms[i];
        if (!__atomic_load_n(&comm->in_use, __ATOMIC_ACQUIRE)) continue;
        ci_comm_refresh(comm, now);
        ci_gpu_timing_tick(comm, now);
        if (threshold_ns == 0) continue;
        ci_shm_comm_entry_v1_t* e = comm->entry;
        /* An op enqueued after `now` (on another core, a few ns later) is young, not 584 years
         * old as an unsigned difference would make it. */
        uint64_t enqueued = e->inflight_enqueue_mono_ns;
        /* An op NCCL did not time (GPU timing sampled) may be long done: only peers can tell
         * (the Agent's diagnosis), and a flag here would put hang evidence on a rank that
         * merely stopped after it, the very rank the others wait for. */
        bool stuck = e->inflight_count > 0 && e->inflight_kind != CI_SHM_V1_RECORD_KIND_NONE &&
                     !e->inflight_unproven && enqueued < now && now - enqueued > threshold_ns;
        uint16_t type = 0;
        if (stuck && e->hang_flagged_seq != e->inflight_op_index) {
            e->hang_flagged_seq = e->inflight_op_index;
            e->hang_flagged_mono_ns = now;
            type = CI_FIFO_V1_EVENT_TYPE_HANG_SUSPECTED;
            ci_evidence_on_flag(comm, now);
        } else if (!stuck && e->hang_flagged_seq != UINT64_MAX && e->hang_flagged_mono_ns &&
                   (e->inflight_count == 0 || e->inflight_op_index != e->hang_flagged_seq)) {
            /* the flagged op finished after all: say so once (a threshold raised since, the
             * Agent's taking over, finishes nothing) */
            e->hang_flagged_mono_ns = 0;
            type = CI_FIFO_V1_EVENT_TYPE_HANG_CLEARED;
        }
        if (!type) continue;
        hang_snapshot_t* snap = &reports[n++];
        snap->comm_index = comm->index;
        snap->comm_id = comm->comm_id;
        snap->rank = comm->rank;
        snap->nranks = comm->nranks;
        snap->event_type = type;
        ci_seqlock_read_comm(&snap->entry, e);
    }
    ci_evidence_scan(now); /* raise, keep or lower the mask by what the flags say now */
    pthread_mutex_unlock(&ci_g.table_lock);
    for (uint32_t i = 0; i < n; i++) report_hang(&reports[i], now, threshold_ns);
}

/* Someone else wrote NCCL's activation mask: theirs wins (gpu_timing.c); say so once per value. */
static void report_override(ci_shm_header_v1_t* h) {
    if (!__atomic_load_n(&ci_g.mask_overridden, __ATOMIC_RELAXED)) return;
    int32_t* nccl_mask = __atomic_load_n(&ci_g.nccl_mask, __ATOMIC_ACQUIRE);
    if (nccl_mask) __atomic_store_n(&ci_g.overriding_mask, __atomic_load_n(nccl_mask, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
    int32_t theirs = __atomic_load_n(&ci_g.overriding_mask, __ATOMIC_RELAXED);
    bool first = !__atomic_load_n(&h->mask_overridden, __ATOMIC_RELAXED);
    if (first || __atomic_load_n(&h->overriding_event_mask, __ATOMIC_RELAXED) != theirs)
        ci_warn("NCCL's activation mask was set to 0x%x by someone else (an operator's override, e.g. ncclras): "
                "it is left as it is, and ops are timed on the GPU as it says",
                theirs);
    __atomic_store_n(&h->overriding_event_mask, theirs, __ATOMIC_RELAXED);
    __atomic_store_n(&h->mask_overridden, 1, __ATOMIC_RELAXED);
}

static void heartbeat(uint64_t now) {
    ci_shm_header_v1_t* h = ci_g.hdr;
    __atomic_store_n(&h->heartbeat_real_ns, ci_now_real(), __ATOMIC_RELAXED);
    __atomic_store_n(&h->heartbeat_mono_ns, now, __ATOMIC_RELAXED);
    __atomic_add_fetch(&h->heartbeat_count, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&h->event_mask, ci_mask_effective(), __ATOMIC_RELAXED);
    __atomic_store_n(&h->normal_event_mask, __atomic_load_n(&ci_g.mask, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
    __atomic_store_n(&h->gpu_timing, __atomic_load_n(&ci_g.gpu_timing, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
    ci_mask_check();
    report_override(h);
    ci_update_published_count();
}

/* Run-time GPU timing changes: the sample settings take effect from the next op. */
static void follow_gpu_timing(const ci_config_t* fresh, const char* path) {
    ci_config_t* cfg = &ci_g.cfg;
    if (fresh->gpu_timing_all == cfg->gpu_timing_all && fresh->gpu_timing_every == cfg->gpu_timing_every &&
        fresh->gpu_timing_period_ms == cfg->gpu_timing_period_ms &&
        fresh->gpu_timing_quiet_ns == cfg->gpu_timing_quiet_ns)
        return;
    __atomic_store_n(&cfg->gpu_timing_every, fresh->gpu_timing_every, __ATOMIC_RELAXED);
    __atomic_store_n(&cfg->gpu_timing_quiet_ns, fresh->gpu_timing_quiet_ns, __ATOMIC_RELAXED);
    __atomic_store_n(&cfg->gpu_timing_period_ms, fresh->gpu_timing_period_ms, __ATOMIC_RELAXED);
    cfg->gpu_timing_all = fresh->gpu_timing_all;
    __atomic_store_n(&ci_g.gpu_timing, ci_gpu_timing_mode(ci_g.abi), __ATOMIC_RELAXED);
    ci_mask_rewrite();
    if (__atomic_load_n(&ci_g.gpu_timing, __ATOMIC_RELAXED) == CI_SHM_V1_GPU_TIMING_SAMPLED)
        ci_warn("GPU timing now sampled, one op in %u of each shape (%s)", fresh->gpu_timing_every, path);
    else
        ci_warn("GPU timing now %s (%s)", __atomic_load_n(&ci_g.gpu_timing, __ATOMIC_RELAXED) == CI_SHM_V1_GPU_TIMING_ALL ? "all" : "off", path);
}

/* Run-time mask changes: an operator edits COMMINSIGHT_PROFILER_EVENT_MASK in the config file
 * (the environment, which beats the file, cannot change under a running process); the new
 * value reaches NCCL at its next task. Checked once per heartbeat: one stat(). */
static void watch_config(void) {
    static struct timespec seen;
    static bool primed;
    char path[CI_PATH_MAX];
    ci_config_file(path, sizeof(path));
    const char* conf = getenv(CI_CONFIG_V1_CONF_KEY);
    bool explicit_path = conf && *conf;
    int home_fd = ci_g.node_home_fd;
    struct stat st; /* a stat, never an open: nothing here can block */
    if (explicit_path ? stat(path, &st) != 0
                      : home_fd < 0 || fstatat(home_fd, "etc/comminsight.conf", &st, AT_SYMLINK_NOFOLLOW) != 0)
        return;
    bool changed = primed && (st.st_mtim.tv_sec != seen.tv_sec || st.st_mtim.tv_nsec != seen.tv_nsec);
    seen = st.st_mtim;
    primed = true;
    if (!changed) return;
    ci_config_t fresh;
    ci_config_load(&fresh, home_fd);
    follow_gpu_timing(&fresh, path);
    if (getenv(CI_CONFIG_V1_PROFILER_EVENT_MASK_KEY)) return;
    int32_t old = __atomic_load_n(&ci_g.mask, __ATOMIC_RELAXED);
    if (ci_kernel_ch_fixed(ci_g.abi) && ((fresh.event_mask ^ old) & CI_EV_KERNEL_CH)) {
        fresh.event_mask = (fresh.event_mask & ~(int32_t)CI_EV_KERNEL_CH) | (old & CI_EV_KERNEL_CH);
        ci_warn("GPU timing stays %s: NCCL 2.31 on cannot change it in a running process (%s)",
                (old & CI_EV_KERNEL_CH) ? "on" : "off", path);
    }
    if (fresh.event_mask == old) return;
    __atomic_store_n(&ci_g.mask, fresh.event_mask, __ATOMIC_RELAXED);
    ci_g.cfg.event_mask = fresh.event_mask;
    __atomic_store_n(&ci_g.gpu_timing, ci_gpu_timing_mode(ci_g.abi), __ATOMIC_RELAXED);
    ci_mask_rewrite(); /* raised bits stay */
    ci_warn("activation mask changed from 0x%x to 0x%x (%s)", old, fresh.event_mask, path);
}

static void* bg_main(void* arg) {
    (void)arg;
    uint64_t quiet_ns = 2ull * ci_g.cfg.heartbeat_ms * 1000000ull;
    if (quiet_ns < 2000000000ull) quiet_ns = 2000000000ull;
    while (!should_stop()) {
        uint64_t now = ci_now_mono();
        heartbeat(now);
        ci_clock_steer((uint64_t)ci_g.cfg.heartbeat_ms * 1000000ull);
        watch_config();
        ci_agent_settings_poll();
        ci_ops_sweep(NULL, now, quiet_ns);
        ci_watchdog_scan(now);
        ci_gpu_timing_pause_check(now);
        if (!ci_g.autostart_done) {
            ci_g.autostart_done = true;
            ci_autostart_agent();
        }
        sleep_ms(ci_g.cfg.heartbeat_ms);
    }
    return NULL;
}

static int start_blocked(pthread_t* t, void* (*fn)(void*)) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the new thread inherits this mask */
    int rc = pthread_create(t, NULL, fn, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* Called with ci_g.lock held. */
int ci_threads_start(void) {
    if (ci_g.threads_running) return 0;
    if (!wake_made) make_wake();
    pthread_mutex_lock(&wake_lock);
    stopping = false;
    pthread_mutex_unlock(&wake_lock);
    writer_started = ci_g.cfg.log_enable && start_blocked(&writer_thread, writer_main) == 0;
    bg_started = start_blocked(&bg_thread, bg_main) == 0;
    if (!bg_started) ci_warn("cannot start the background thread: no heartbeat or hang watchdog");
    ci_g.threads_running = true;
    return 0;
}

/* Called with ci_g.lock held: join both threads, then drain the ring and seal the segment. */
void ci_threads_stop(const char* seal_reason) {
    if (!ci_g.threads_running) return;
    pthread_mutex_lock(&wake_lock);
    stopping = true;
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&wake_lock);
    if (bg_started) pthread_join(bg_thread, NULL);
    if (writer_started) pthread_join(writer_thread, NULL);
    bg_started = writer_started = false;
    ci_g.threads_running = false;
    if (ci_g.cfg.log_enable) ci_logwriter_run_once(true, seal_reason);
}

/* In a forked child only the forking thread exists: forget the parent's threads. */
void ci_threads_forget_after_fork(void) {
    bg_started = writer_started = false;
    stopping = false;
    pthread_mutex_init(&wake_lock, NULL);
    make_wake();
}
