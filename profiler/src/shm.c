/* The process's SHM region (shm v1): header, communicator table and op ring.
 *
 * One file per process under <home>/shms/, created 0600 in a 0700 directory. When it cannot be
 * created (no home, read-only disk, SHM disabled) the same layout lives in anonymous memory, so
 * the rest of the plugin (log writer, watchdog) works unchanged and only the Agent is blind.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ci_internal.h"

void ci_counter_add(uint64_t* counter, uint64_t n) { __atomic_add_fetch(counter, n, __ATOMIC_RELAXED); }

static int env_int(const char* name) {
    const char* v = getenv(name);
    if (!v || !*v) return CI_SHM_V1_NO_RANK;
    char* end;
    long x = strtol(v, &end, 10);
    return (*end || x < 0 || x > 0x7fffffff) ? CI_SHM_V1_NO_RANK : (int)x;
}

static void process_name(char* out, size_t size) {
    out[0] = '\0';
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, out, size - 1);
    close(fd);
    if (n <= 0) return;
    for (ssize_t i = 0; i < n - 1; i++)
        if (out[i] == '\0') out[i] = ' '; /* argv separators */
    if ((size_t)n == size - 1) n = (ssize_t)ci_utf8_trim_tail(out, (size_t)n); /* maybe cut */
    out[n] = '\0';
}

/* A Kubernetes Indexed Job names its pods' hosts <job>-<index> and gives the index in
 * JOB_COMPLETION_INDEX: the job's name is the host name without that suffix. Pods of other
 * controllers carry no job identity a process can read without the downward API (which is
 * what COMMINSIGHT_JOB_ID is for). */
static bool k8s_indexed_job(const char* host, char* out, size_t size) {
    const char* index = getenv("JOB_COMPLETION_INDEX");
    if (!index || !*index || strspn(index, "0123456789") != strlen(index)) return false;
    size_t n = strlen(host), k = strlen(index);
    if (n < k + 2 || host[n - k - 1] != '-' || strcmp(host + n - k, index) != 0) return false;
    size_t len = n - k - 1;
    if (len >= size) len = ci_utf8_trim_tail(host, size - 1);
    memcpy(out, host, len);
    out[len] = '\0';
    return true;
}

/* The job this process belongs to, from what its scheduler or launcher exports. torchrun
 * exports TORCHELASTIC_RUN_ID even when no --rdzv-id was given, as "none": every such job
 * would be one, so it does not count. */
static const char* job_id(char* buf, size_t size) {
    static const char* vars[] = {CI_CONFIG_V1_JOB_ID_KEY, "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "JOB_ID"};
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        const char* v = getenv(vars[i]);
        if (v && *v && !(i == 1 && strcmp(v, "none") == 0)) return v;
    }
    return k8s_indexed_job(ci_g.hostname, buf, size) ? buf : "";
}

static const char* env_text(const char* name) {
    const char* v = getenv(name);
    return v ? v : "";
}

/* mkdir -p with 0700 for the directories we create; existing ones are left as they are. */
int ci_mkdirs(const char* path) {
    char buf[CI_PATH_MAX];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char* p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0700) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return (mkdir(buf, 0700) != 0 && errno != EEXIST) ? -1 : 0;
}

/* The link the Agent finds this file by, as an absolute path: a later Profiler that finds the
 * file left by this process, dead, removes it only once that link is gone (stale_regions.c). */
static void fill_link_path(ci_shm_header_v1_t* h) {
    if (!ci_g.shm_path[0] || strcmp(ci_g.shm_target, ci_g.shm_path) == 0) return; /* not linked */
    char cwd[CI_PATH_MAX] = "";
    if (ci_g.shm_path[0] != '/' && !getcwd(cwd, sizeof(cwd))) return;
    int n = snprintf(h->link_path, sizeof(h->link_path), "%s%s%s", cwd, cwd[0] ? "/" : "", ci_g.shm_path);
    if (n < 0 || (size_t)n >= sizeof(h->link_path)) memset(h->link_path, 0, sizeof(h->link_path)); /* too long */
}

static void fill_header(ci_shm_header_v1_t* h, size_t comm_off, size_t ring_off, size_t total) {
    const ci_config_t* cfg = &ci_g.cfg;
    memset(h, 0, sizeof(*h));
    h->magic = CI_SHM_V1_MAGIC;
    h->abi_version = CI_SHM_V1_PROTOCOL_VERSION;
    h->header_size = sizeof(*h);
    h->file_size = total;
    h->state = CI_SHM_V1_FILE_STATE_CREATING;
    h->flags = (cfg->log_enable ? CI_SHM_V1_HEADER_FLAGS_LOGS_ENABLED : 0) |
               (cfg->hang_timeout_s > 0 ? CI_SHM_V1_HEADER_FLAGS_WATCHDOG_ENABLED : 0) |
               ((cfg->event_mask & CI_EV_KERNEL_CH) ? CI_SHM_V1_HEADER_FLAGS_GPU_TIMING : 0);
    h->comm_table_offset = comm_off;
    h->comm_capacity = cfg->comm_slots;
    h->comm_entry_size = sizeof(ci_shm_comm_entry_v1_t);
    h->ring_offset = ring_off;
    h->ring_capacity = cfg->ring_slots;
    h->ring_slots_configured = ci_g.ring_slots_configured;
    h->sizing_local_ranks = ci_g.sizing_processes;
    h->shm_dir_bytes = ci_g.shm_dir_bytes;
    h->shm_dir_free_bytes = ci_g.shm_dir_free_bytes;
    h->slot_size = sizeof(ci_shm_op_slot_v1_t);
    h->pid = ci_g.pid;
    h->uid = (uint32_t)getuid();
    h->rank = env_int("RANK");
    h->local_rank = env_int("LOCAL_RANK");
    h->world_size = env_int("WORLD_SIZE");
    h->local_world_size = env_int("LOCAL_WORLD_SIZE");
    h->cuda_device = CI_SHM_V1_NO_RANK;
    h->start_real_ns = ci_now_real();
    h->start_mono_ns = ci_now_mono();
    /* Who made this file, beyond a pid that the kernel will reuse: the next Profiler removes
     * it once this process is gone (stale_regions.c). */
    uint64_t ticks = 0;
    h->process_start_ticks = ci_proc_start_ticks(ci_g.pid, &ticks) == 0 ? ticks : 0;
    h->pid_namespace = ci_pid_namespace();
    ci_boot_id(h->boot_id, sizeof(h->boot_id));
    h->plugin_version = CI_PLUGIN_VERSION;
    h->event_mask = cfg->event_mask;
    h->normal_event_mask = cfg->event_mask;
    h->hang_threshold_ms = (uint32_t)(cfg->hang_timeout_s * 1000.0);
    ci_copy_name(h->hostname, sizeof(h->hostname), ci_g.hostname, NULL);
    char k8s_job[sizeof(h->job_id)];
    ci_copy_name(h->job_id, sizeof(h->job_id), job_id(k8s_job, sizeof(k8s_job)), NULL);
    process_name(h->process_name, sizeof(h->process_name));
    /* a SLURM job's step and array place, for the labels its site joins on */
    ci_copy_name(h->slurm_step_id, sizeof(h->slurm_step_id), env_text("SLURM_STEP_ID"), NULL);
    ci_copy_name(h->slurm_array_job_id, sizeof(h->slurm_array_job_id), env_text("SLURM_ARRAY_JOB_ID"), NULL);
    ci_copy_name(h->slurm_array_task_id, sizeof(h->slurm_array_task_id), env_text("SLURM_ARRAY_TASK_ID"), NULL);
    h->heartbeat_interval_ms = cfg->heartbeat_ms;
    h->heartbeat_mono_ns = h->start_mono_ns;
    h->heartbeat_real_ns = h->start_real_ns;
    fill_link_path(h);
}

/* The tmpfs directory, when this process can write it and nobody else can take its entries
 * away: a directory another user owns, or others may write without the sticky bit (as
 * /dev/shm has), lets them rename or delete the region the Agent and a dead rank's recovery
 * read, or put their own file in its place. Refused by name; the region is then the file in
 * shms/ itself. */
static bool usable_dir(const char* dir) {
    struct stat st;
    if (!dir[0] || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || access(dir, W_OK | X_OK) != 0) return false;
    char why[PATH_MAX + 256] = "";
    if (dir[0] != '/') snprintf(why, sizeof(why), "not an absolute path");
    else if (st.st_uid != geteuid() && st.st_uid != 0)
        snprintf(why, sizeof(why), "owned by uid %u, not by this process's uid %u or root", (unsigned)st.st_uid,
                 (unsigned)geteuid());
    else if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
        snprintf(why, sizeof(why), "writable by group or others without the sticky bit (mode %04o)",
                 (unsigned)(st.st_mode & 07777));
    else if (ci_check_ancestors(dir, why, sizeof(why)) == 0) return true;
    ci_warn("%s=%s refused: %s; the SHM region is a file in %s/shms instead", CI_CONFIG_V1_PROFILER_SHM_DIR_KEY, dir,
            why, ci_g.cfg.home);
    return false;
}

/* The home's shms/ takes no entry (a read-only mount, a directory this user may not write):
 * the name goes to the private directory's shms/, as the logs do. */
static bool move_shms(int err, bool linked) {
    char dir[CI_DIR_MAX];
    int fd = ci_home_dir_unwritable(CI_HOME_V1_SHMS, err, dir, sizeof(dir));
    if (fd < 0) return false;
    close(ci_g.shms_fd);
    ci_g.shms_fd = fd;
    snprintf(ci_g.shm_path, sizeof(ci_g.shm_path), "%s/%s", dir, ci_g.shm_name);
    if (!linked) snprintf(ci_g.shm_target, sizeof(ci_g.shm_target), "%s", ci_g.shm_path);
    return true;
}

static size_t region_size(size_t fixed) { return fixed + (size_t)ci_g.cfg.ring_slots * sizeof(ci_shm_op_slot_v1_t); }

/* Whether a failure to create or size the region's file is its file system being full. */
static bool no_room(int err) { return err == ENOSPC || err == EDQUOT || err == EFBIG; }

/* The region's file system had no room (a container's 64 MiB /dev/shm, crowded by other
 * processes' regions): the region lives in a memfd instead, charged to this process's memory
 * like any allocation, at the ring size configured (the tmpfs it was fitted to is not used),
 * and <home>/shms/<name>.shm links to it as /proc/<pid>/fd/<fd>, which an Agent of this user
 * opens while the process lives. Without it the process is invisible to the Agent. */
static void* map_memfd(size_t fixed, const char* full, int why) {
    ci_g.cfg.ring_slots = ci_g.ring_slots_configured;
    size_t total = region_size(fixed);
    void* p = MAP_FAILED;
    int err = 0;
    int fd = memfd_create(CI_MEMFD_NAME, MFD_CLOEXEC);
    if (fd < 0) err = errno;
    else if (fchmod(fd, 0600) != 0 || ftruncate(fd, (off_t)total) != 0) err = errno;
    else if ((err = posix_fallocate(fd, 0, (off_t)total)) == 0) {
        p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
        if (p == MAP_FAILED) err = errno;
    }
    if (p != MAP_FAILED) {
        snprintf(ci_g.shm_target, sizeof(ci_g.shm_target), "/proc/%d/fd/%d", (int)ci_g.pid, fd);
        int rc = symlinkat(ci_g.shm_target, ci_g.shms_fd, ci_g.shm_name);
        if (rc != 0 && move_shms(errno, true)) rc = symlinkat(ci_g.shm_target, ci_g.shms_fd, ci_g.shm_name);
        if (rc != 0) {
            err = errno;
            munmap(p, total);
            p = MAP_FAILED;
        }
    }
    if (p == MAP_FAILED) {
        if (fd >= 0) close(fd);
        ci_warn("no room for the SHM region in %s (%s), and none in memory (%s): SHM disabled, the Agent "
                "will not see this process",
                full, strerror(why), strerror(err));
        return NULL;
    }
    ci_g.region_fd = fd;
    ci_warn("no room for the SHM region in %s (%s): it lives in this process's memory instead (%.1f MiB), "
            "linked from %s",
            full, strerror(why), (double)total / (1024.0 * 1024.0), ci_g.shm_path);
    return p;
}

/* Create and map the region. The memory lives in the tmpfs directory (COMMINSIGHT_PROFILER_
 * SHM_DIR) and <home>/shms/<name>.shm links to it; without a usable tmpfs it is the file in
 * shms/ itself. The ring is sized for the file system it lands on (ring_fit.c): `fixed` is the
 * region without it. Pages are populated now so that the hot path never takes a first-touch
 * fault. Both names are created exclusively and without following links: nothing planted
 * there is opened. */
static void* map_file(size_t fixed) {
    char dir[CI_DIR_MAX];
    ci_g.shms_fd = ci_home_dir(CI_HOME_V1_SHMS, true, true, dir, sizeof(dir));
    if (ci_g.shms_fd < 0) {
        ci_warn("cannot use %s/shms (%s): SHM disabled, the Agent will not see this process", ci_g.cfg.home,
                strerror(errno));
        return NULL;
    }
    snprintf(ci_g.shm_name, sizeof(ci_g.shm_name), "ci-%s-%d-%llu.shm", ci_g.hostname, (int)ci_g.pid,
             (unsigned long long)ci_now_mono());
    const char* name = ci_g.shm_name;
    snprintf(ci_g.shm_path, sizeof(ci_g.shm_path), "%s/%s", dir, name);
    bool linked = usable_dir(ci_g.cfg.shm_dir);
    if (linked) snprintf(ci_g.shm_target, sizeof(ci_g.shm_target), "%s/%s", ci_g.cfg.shm_dir, name);
    else snprintf(ci_g.shm_target, sizeof(ci_g.shm_target), "%s", ci_g.shm_path);
    ci_ring_fit(linked ? ci_g.cfg.shm_dir : dir, linked ? -1 : ci_g.shms_fd, fixed);
    size_t total = region_size(fixed);
    int flags = O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    int fd = linked ? open(ci_g.shm_target, flags, 0600) : openat(ci_g.shms_fd, name, flags, 0600);
    if (fd < 0 && !linked && move_shms(errno, linked)) fd = openat(ci_g.shms_fd, name, flags, 0600);
    if (fd < 0) {
        int why = errno;
        if (no_room(why)) return map_memfd(fixed, linked ? ci_g.cfg.shm_dir : dir, why);
        ci_warn("cannot create %s (%s): SHM disabled", ci_g.shm_target, strerror(why));
        return NULL;
    }
    /* Allocate every page now: ftruncate alone leaves a sparse file, MAP_POPULATE ignores
     * allocation failures, and a full tmpfs would then SIGBUS the training process on its first
     * write to a missing page. posix_fallocate fails here instead (ENOSPC), and we fail open. */
    void* p = MAP_FAILED;
    int err = ftruncate(fd, (off_t)total) == 0 ? posix_fallocate(fd, 0, (off_t)total) : errno;
    if (err == 0) {
        p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
        if (p == MAP_FAILED) err = errno;
    }
    close(fd);
    if (p != MAP_FAILED && linked) {
        int rc = symlinkat(ci_g.shm_target, ci_g.shms_fd, name);
        if (rc != 0 && move_shms(errno, linked)) rc = symlinkat(ci_g.shm_target, ci_g.shms_fd, name);
        if (rc != 0) {
            err = errno;
            munmap(p, total);
            p = MAP_FAILED;
        }
    }
    if (p == MAP_FAILED) {
        if (linked) unlink(ci_g.shm_target);
        else unlinkat(ci_g.shms_fd, name, 0);
        if (no_room(err)) return map_memfd(fixed, linked ? ci_g.cfg.shm_dir : dir, err);
        ci_warn("cannot size, map or link %s (%s): SHM disabled", ci_g.shm_target, strerror(err));
        return NULL;
    }
    return p;
}

/* At a clean exit with no Agent running nobody will ever read the region: remove it, so that
 * memory-backed SHM does not accumulate on the node. With an Agent, it retires the file after
 * draining it. */
void ci_shm_remove_if_unwatched(void) {
    if (!ci_g.region_is_file || ci_g.shms_fd < 0) return;
    if (ci_agent_running() == 1) return;
    unlinkat(ci_g.shms_fd, ci_g.shm_name, 0);
    if (ci_g.region_fd < 0 && strcmp(ci_g.shm_target, ci_g.shm_path) != 0) unlink(ci_g.shm_target);
}

int ci_shm_open(void) {
    const ci_config_t* cfg = &ci_g.cfg;
    size_t comm_off = sizeof(ci_shm_header_v1_t);
    size_t ring_off = comm_off + (size_t)cfg->comm_slots * sizeof(ci_shm_comm_entry_v1_t);
    ci_g.ring_slots_configured = cfg->ring_slots;
    ci_g.shm_dir_bytes = ci_g.shm_dir_free_bytes = 0;
    ci_g.sizing_processes = 0;
    void* p = cfg->shm_enable ? map_file(ring_off + ci_evidence_region_size()) : NULL; /* sizes the ring */
    size_t evidence_off = ring_off + (size_t)cfg->ring_slots * sizeof(ci_shm_op_slot_v1_t);
    size_t total = evidence_off + ci_evidence_region_size();
    ci_g.region_is_file = p != NULL;
    if (!p) {
        ci_g.shm_path[0] = '\0';
        p = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return -1;
    }
    ci_g.region = p;
    ci_g.region_size = total;
    ci_g.hdr = (ci_shm_header_v1_t*)p;
    ci_g.comm_table = (ci_shm_comm_entry_v1_t*)((char*)p + comm_off);
    ci_g.ring = (ci_shm_op_slot_v1_t*)((char*)p + ring_off);
    ci_g.ring_mask = cfg->ring_slots - 1;
    fill_header(ci_g.hdr, comm_off, ring_off, total);
    /* Hang evidence only where an Agent can read it: raising the mask costs NCCL events. */
    if (ci_g.region_is_file && total > evidence_off)
        ci_evidence_attach(ci_g.hdr, (char*)p + evidence_off, evidence_off);
    else ci_evidence_attach(NULL, NULL, 0);
    /* Readers trust nothing until LIVE; the release orders every store above before it. */
    __atomic_store_n(&ci_g.hdr->state, CI_SHM_V1_FILE_STATE_LIVE, __ATOMIC_RELEASE);
    return 0;
}

void ci_shm_close(uint32_t final_state) {
    if (ci_g.hdr) __atomic_store_n(&ci_g.hdr->state, final_state, __ATOMIC_RELEASE);
    if (ci_g.region && ci_g.region_is_file) msync(ci_g.region, sizeof(ci_shm_header_v1_t), MS_ASYNC);
}

/* Unmap the region and close the shms/ directory; the file itself is left as it is (the
 * caller has closed it, and removed it or left it to the Agent). */
void ci_shm_unmap(void) {
    if (ci_g.region) munmap(ci_g.region, ci_g.region_size);
    if (ci_g.region_fd >= 0) {
        /* the link names this descriptor, which the next open() may reuse for another file;
         * an Agent that has opened the memfd keeps it (its records) */
        if (ci_g.shms_fd >= 0 && ci_g.pid == getpid()) unlinkat(ci_g.shms_fd, ci_g.shm_name, 0);
        close(ci_g.region_fd);
        ci_g.region_fd = -1;
    }
    if (ci_g.shms_fd >= 0) close(ci_g.shms_fd);
    ci_g.shms_fd = -1;
    ci_g.region = NULL;
    ci_g.region_size = 0;
    ci_g.hdr = NULL;
    ci_g.comm_table = NULL;
    ci_g.ring = NULL;
}

/* In a forked child the mapping is shared with the parent: writing to it would corrupt the
 * parent's records. Drop it; the child starts afresh if it initializes NCCL itself. */
void ci_shm_detach_after_fork(void) { ci_shm_unmap(); }

/* The payload copy into a claimed slot. Readers copy slots concurrently and discard what
 * changed under them (seqlock): a race by design, named so sanitizers can be told. */
__attribute__((noinline)) void ci_seqlock_write_slot(ci_shm_op_slot_v1_t* slot, const ci_shm_op_slot_v1_t* record) {
    memcpy((char*)slot + sizeof(slot->seq), (const char*)record + sizeof(record->seq), sizeof(*slot) - sizeof(slot->seq));
}

__attribute__((noinline)) void ci_seqlock_read_slot(ci_shm_op_slot_v1_t* dst, const ci_shm_op_slot_v1_t* slot) {
    memcpy(dst, slot, sizeof(*dst));
}

/* A comm-table row copied while NCCL's threads update its counters: each field is a single
 * aligned word, the copy may mix moments (readers use it as a snapshot, not an invariant). */
__attribute__((noinline)) void ci_seqlock_read_comm(ci_shm_comm_entry_v1_t* dst, const ci_shm_comm_entry_v1_t* e) {
    memcpy(dst, e, sizeof(*dst));
}

/* Every claimed ticket is either published or dropped as busy: derive the count (heartbeat,
 * finalize) instead of paying an atomic per record. Tickets still being written may be counted
 * a moment early. */
void ci_update_published_count(void) {
    ci_shm_header_v1_t* h = ci_g.hdr;
    uint64_t head = __atomic_load_n(&h->ring_head, __ATOMIC_ACQUIRE);
    uint64_t dropped = __atomic_load_n(&h->records_dropped_busy, __ATOMIC_RELAXED);
    __atomic_store_n(&h->records_published, head - dropped, __ATOMIC_RELAXED);
}

/* Multi-producer publish, in two steps so the record is written once, in place: claim a
 * ticket and mark its slot busy (ci_ring_claim), fill it, then release it (ci_ring_commit). A
 * slot still being written by a producer one full lap behind is not touched: the record is
 * dropped and counted (readers see the ticket as lost). */
ci_shm_op_slot_v1_t* ci_ring_claim(uint64_t* ticket_out) {
    ci_shm_header_v1_t* h = ci_g.hdr;
    uint64_t ticket = __atomic_fetch_add(&h->ring_head, 1, __ATOMIC_RELAXED);
    ci_shm_op_slot_v1_t* slot = &ci_g.ring[ticket & ci_g.ring_mask];
    uint64_t prev = __atomic_load_n(&slot->seq, __ATOMIC_RELAXED);
    uint64_t busy = (ticket + 1) | CI_SHM_V1_SLOT_BUSY_BIT;
    *ticket_out = ticket;
    if (CI_UNLIKELY((prev & CI_SHM_V1_SLOT_BUSY_BIT) ||
                    !__atomic_compare_exchange_n(&slot->seq, &prev, busy, false, __ATOMIC_ACQUIRE,
                                                 __ATOMIC_RELAXED))) {
        ci_counter_add(&h->records_dropped_busy, 1);
        return NULL;
    }
    __atomic_thread_fence(__ATOMIC_RELEASE); /* busy mark visible before the payload changes */
    return slot;
}

void ci_ring_commit(ci_shm_op_slot_v1_t* slot, uint64_t ticket) {
    __atomic_store_n(&slot->seq, ticket + 1, __ATOMIC_RELEASE);
}

uint64_t ci_ring_publish(const ci_shm_op_slot_v1_t* record) {
    uint64_t ticket;
    ci_shm_op_slot_v1_t* slot = ci_ring_claim(&ticket);
    if (slot) {
        ci_seqlock_write_slot(slot, record);
        ci_ring_commit(slot, ticket);
    }
    return ticket; /* records_published is derived by the heartbeat: not one more atomic here */
}
