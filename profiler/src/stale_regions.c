/* SHM regions left by dead processes: removed by the next Profiler on the host.
 *
 * A process that ends without its exit handlers (SIGKILL, OOM, os._exit) leaves its region in
 * the tmpfs directory, 17 MB each, for good. At init the Profiler looks at the regions there
 * that are its own user's and removes those whose producer is gone: same boot and pid
 * namespace (so the pid means what it says here), and either no such pid or a process with a
 * different start time under it (the pid was reused). A live producer's region is never
 * touched; a region that does not say who made it (older producers) is left alone; a dead
 * producer's region still linked from this home is left to its Agent when one runs (it
 * recovers what only SHM holds first). The work is bounded, and nothing opened can block.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ci_internal.h"

#define MAX_ENTRIES 4096 /* directory entries looked at per init */
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

/* A dead producer's region that this home's running Agent still lists: the Agent's to retire. */
static bool left_to_agent(const char* name, int agent_running) {
    if (agent_running == 0 || ci_g.shms_fd < 0) return false;
    struct stat st;
    return fstatat(ci_g.shms_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

static void remove_link_in_home(const char* name, const char* target) {
    if (ci_g.shms_fd < 0) return;
    char link[CI_PATH_MAX];
    ssize_t n = readlinkat(ci_g.shms_fd, name, link, sizeof(link) - 1);
    if (n <= 0) return;
    link[n] = '\0';
    if (strcmp(link, target) == 0) unlinkat(ci_g.shms_fd, name, 0);
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
    int agent_running = -2; /* asked only when a candidate needs it */
    uid_t euid = geteuid();
    unsigned looked = 0, removed = 0;
    unsigned long long freed = 0;
    struct dirent* de;
    while (looked < MAX_ENTRIES && removed < MAX_REMOVED && (de = readdir(dir)) != NULL) {
        looked++;
        if (!is_region_name(de->d_name) || strcmp(de->d_name, ci_g.shm_name) == 0) continue;
        int fd = openat(dir_fd, de->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0) continue;
        struct stat st;
        ci_shm_header_v1_t h;
        bool gone = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == euid &&
                    (size_t)st.st_size >= sizeof(h) && pread(fd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) &&
                    producer_gone(&h, &me);
        close(fd);
        if (!gone) continue;
        if (agent_running == -2) agent_running = ci_agent_running();
        if (left_to_agent(de->d_name, agent_running)) continue;
        if (unlinkat(dir_fd, de->d_name, 0) != 0) continue;
        char target[CI_PATH_MAX];
        snprintf(target, sizeof(target), "%.*s/%s", CI_DIR_MAX, dir_path, de->d_name);
        remove_link_in_home(de->d_name, target);
        removed++;
        freed += (unsigned long long)st.st_size;
        ci_debug("removed %s: its producer (pid %d) is gone", target, (int)h.pid);
    }
    closedir(dir);
    if (removed)
        ci_warn("removed %u SHM region(s) of dead processes from %s (%.1f MiB)", removed, dir_path,
                (double)freed / (1024.0 * 1024.0));
}
