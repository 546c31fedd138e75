/* SHM regions left by dead processes: removed by the next Profiler on the host, once nobody
 * will read them.
 *
 * A process that ends without its exit handlers (SIGKILL, OOM, os._exit) leaves its region in
 * the tmpfs directory, 17 MB each, for good. At init the Profiler looks at the regions there
 * that are its own user's and picks those whose producer is gone: same boot and pid namespace
 * (so the pid means what it says here), and either no such pid or a process with a different
 * start time under it (the pid was reused). A live producer's region is never touched; a
 * region that does not say who made it (older producers) is left alone.
 *
 * A dead producer's region may still hold records its logs never got: its home's Agent
 * recovers them, then retires the region by removing the home's link to it. So a region is
 * removed only when the link its header names is gone (whichever home it is in, with or
 * without an Agent running now), or when its last heartbeat is older than the grace period
 * (COMMINSIGHT_PROFILER_STALE_REGION_GRACE_S), which bounds what regions nobody will ever
 * read can take. The work is bounded, and nothing opened can block.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ci_internal.h"

/* Per init: regions of this user examined (opened and their header read), and directory
 * entries read at all. Only this user's regions count against the first bound, so files other
 * users create in a shared /dev/shm cannot starve the sweep; the second bounds what a
 * directory of millions of names costs (a name and an fstatat each). */
#define MAX_ENTRIES 4096
#define MAX_SCANNED (1u << 18)
#define MAX_REMOVED 256

typedef struct identity {
    uint64_t pid_namespace;
    char boot_id[sizeof(((ci_shm_header_v1_t*)0)->boot_id)];
} identity_t;

static bool is_region_name(const char* name) {
    size_t n = strlen(name);
    return strncmp(name, "ci-", 3) == 0 && n > 7 && strcmp(name + n - 4, ".shm") == 0;
}

/* Whether the producer named by this header is certainly gone. */
static bool producer_gone(const ci_shm_header_v1_t* h, const identity_t* me) {
    if (h->magic != CI_SHM_V1_MAGIC || h->abi_version != CI_SHM_V1_PROTOCOL_VERSION) return false;
    if (!h->process_start_ticks || !h->boot_id[0] || !h->pid_namespace || h->pid <= 0) return false;
    if (h->pid_namespace != me->pid_namespace) return false; /* its pids are not ours to judge */
    if (strncmp(h->boot_id, me->boot_id, sizeof(me->boot_id)) != 0) return me->boot_id[0] != '\0';
    uint64_t ticks = 0;
    if (ci_proc_start_ticks(h->pid, &ticks) == 0) return ticks != h->process_start_ticks;
    return errno == ENOENT && kill(h->pid, 0) != 0 && errno == ESRCH;
}

static const char* base_name(const char* path) {
    const char* slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

typedef enum link_state { LINK_GONE, LINK_PRESENT, LINK_UNKNOWN } link_state_t;

/* Whether the home link the header names still leads to the region `name`. Another home's link
 * counts as much as ours: its Agent may be the one to recover the region. */
static link_state_t home_link(const ci_shm_header_v1_t* h, const char* name, char* link, size_t link_len) {
    link[0] = '\0';
    const char* stored = h->link_path;
    if (!memchr(stored, '\0', sizeof(h->link_path)) || stored[0] != '/') {
        /* An older producer's region says nothing of its home: ours may still link it, another
         * home may too, so only the grace period may end it. */
        if (ci_g.shms_fd < 0) return LINK_UNKNOWN;
        struct stat st;
        return fstatat(ci_g.shms_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? LINK_PRESENT : LINK_UNKNOWN;
    }
    snprintf(link, link_len, "%s", stored);
    if (strcmp(base_name(stored), name) != 0) return LINK_UNKNOWN; /* not this region's link */
    char target[PATH_MAX];
    ssize_t n = readlink(stored, target, sizeof(target) - 1);
    if (n < 0) return errno == ENOENT || errno == ENOTDIR ? LINK_GONE : LINK_UNKNOWN;
    target[n] = '\0';
    return strcmp(base_name(target), name) == 0 ? LINK_PRESENT : LINK_GONE;
}

/* Whether the producer's last sign of life (its heartbeat, wall clock: its boot may be over)
 * is older than the grace period. A time in the future (the clock was set back) is not. */
static bool past_grace(const ci_shm_header_v1_t* h, const struct stat* st) {
    uint64_t last = h->heartbeat_real_ns;
    if (!last) last = (uint64_t)st->st_mtim.tv_sec * 1000000000ull + (uint64_t)st->st_mtim.tv_nsec;
    uint64_t now = ci_now_real();
    return now > last && now - last > ci_g.cfg.stale_region_grace_s * 1000000000ull;
}

/* The home's link to a region just removed, if it still leads there. */
static void remove_link(const char* link, const char* name) {
    if (link[0]) {
        char target[PATH_MAX];
        ssize_t n = readlink(link, target, sizeof(target) - 1);
        if (n <= 0) return;
        target[n] = '\0';
        if (strcmp(base_name(target), name) == 0) unlink(link);
        return;
    }
    if (ci_g.shms_fd < 0) return;
    char target[PATH_MAX];
    ssize_t n = readlinkat(ci_g.shms_fd, name, target, sizeof(target) - 1);
    if (n <= 0) return;
    target[n] = '\0';
    if (strcmp(base_name(target), name) == 0) unlinkat(ci_g.shms_fd, name, 0);
}

void ci_stale_regions_sweep(void) {
    const char* dir_path = ci_g.cfg.shm_dir;
    if (!ci_g.cfg.shm_enable || !dir_path[0]) return;
    int dir_fd = open(dir_path, O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);
    if (dir_fd < 0) return;
    DIR* dir = fdopendir(dir_fd);
    if (!dir) {
        close(dir_fd);
        return;
    }
    identity_t me = {.pid_namespace = ci_pid_namespace()};
    ci_boot_id(me.boot_id, sizeof(me.boot_id));
    uid_t euid = geteuid();
    unsigned looked = 0, removed = 0, kept = 0;
    unsigned long long freed = 0;
    static ci_shm_header_v1_t h; /* 4 KiB: init only, under ci_g.lock */
    char link[sizeof(h.link_path)];
    struct dirent* de;
    unsigned scanned = 0;
    while (looked < MAX_ENTRIES && scanned < MAX_SCANNED && removed < MAX_REMOVED && (de = readdir(dir)) != NULL) {
        scanned++;
        if (!is_region_name(de->d_name) || strcmp(de->d_name, ci_g.shm_name) == 0) continue;
        struct stat lst;
        if (fstatat(dir_fd, de->d_name, &lst, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(lst.st_mode) ||
            lst.st_uid != euid)
            continue;
        looked++;
        int fd = openat(dir_fd, de->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) continue;
        struct stat st;
        bool gone = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == euid &&
                    (size_t)st.st_size >= sizeof(h) && pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) &&
                    producer_gone(&h, &me);
        close(fd);
        if (!gone) continue;
        link_state_t state = home_link(&h, de->d_name, link, sizeof(link));
        bool expired = state != LINK_GONE && past_grace(&h, &st);
        if (state != LINK_GONE && !expired) {
            kept++;
            ci_debug("kept %s/%s of dead pid %d: %s%s", dir_path, de->d_name, (int)h.pid,
                     state == LINK_PRESENT ? "still linked from " : "its home is unknown",
                     state == LINK_PRESENT ? (link[0] ? link : "this home") : "");
            continue;
        }
        if (unlinkat(dir_fd, de->d_name, 0) != 0) continue;
        remove_link(link, de->d_name);
        removed++;
        freed += (unsigned long long)st.st_size;
        ci_debug("removed %s/%s: its producer (pid %d) is gone and %s", dir_path, de->d_name, (int)h.pid,
                 expired ? "its heartbeat is past the grace period" : "its home's link was removed");
    }
    closedir(dir);
    if (removed)
        ci_warn("removed %u SHM region(s) of dead processes from %s (%.1f MiB)", removed, dir_path,
                (double)freed / (1024.0 * 1024.0));
    if (kept)
        ci_debug("kept %u SHM region(s) of dead processes in %s for their Agent (grace %llu s)", kept, dir_path,
                 (unsigned long long)ci_g.cfg.stale_region_grace_s);
}
