/* Agent autostart: local rank 0 starts comminsight-agent when none runs for this home.
 *
 * "An agent runs" means someone holds an exclusive flock on <home>/metadata/agent.lock (the
 * Agent holds it for its lifetime). If we can take it, nobody does: we let go and spawn the
 * agent through /bin/sh with `&`, so it is re-parented to init (no zombie in the training
 * process) and detached into its own session. Several ranks racing here spawn at most a few
 * agents, and all but the one that takes the lock exit. Any failure is logged and ignored.
 *
 * What runs is COMMINSIGHT_PROFILER_AGENT_BIN from the environment or the installation's
 * default, never from a file in the home (config.c refuses that key there), and only if no
 * one but its owner can rewrite it. The lock and the agent's log are opened without following
 * links and must be this user's regular files: a link planted there is refused, not followed.
 */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ci_internal.h"

extern char** environ;

static bool is_local_rank_zero(void) {
    const char* v = getenv("LOCAL_RANK");
    return !v || !*v || strcmp(v, "0") == 0; /* unset: the lock decides */
}

/* <home>/metadata/agent.lock, opened safely; -1 if it cannot be (said once, by name). */
static int open_lock(bool create) {
    if (ci_g.home_private) return -1;
    int dir = ci_home_dir("metadata", create, false, NULL, 0);
    if (dir < 0) return -1;
    char why[160];
    int fd = ci_open_file_at(dir, "agent.lock", O_RDWR | (create ? O_CREAT : 0), CI_KIND_FILE, false, why,
                             sizeof(why));
    int err = errno;
    close(dir);
    if (fd < 0 && err != ENOENT) {
        static bool warned;
        if (!warned) ci_warn("%s/metadata/agent.lock refused: %s", ci_g.cfg.home, why);
        warned = true;
    }
    errno = err;
    return fd;
}

int ci_agent_running(void) {
    int fd = open_lock(false);
    if (fd < 0) return errno == ENOENT ? 0 : -1;
    bool held = flock(fd, LOCK_EX | LOCK_NB) != 0;
    if (!held) flock(fd, LOCK_UN);
    close(fd);
    return held ? 1 : 0;
}

/* The agent executable: a path as given, or the first match on PATH, as the shell would find
 * it. It must be a regular file that group and others cannot write. */
static bool resolve_agent_bin(const char* bin, char* out, size_t size) {
    out[0] = '\0';
    if (strchr(bin, '/')) {
        snprintf(out, size, "%s", bin);
    } else {
        const char* path = getenv("PATH");
        char dir[CI_PATH_MAX];
        for (const char* p = path ? path : "/usr/local/bin:/usr/bin:/bin"; *p;) {
            const char* colon = strchr(p, ':');
            size_t len = colon ? (size_t)(colon - p) : strlen(p);
            snprintf(dir, sizeof(dir), "%.*s", (int)(len ? len : 1), len ? p : ".");
            snprintf(out, size, "%.*s/%.*s", CI_DIR_MAX, dir, 512, bin);
            if (access(out, X_OK) == 0) break;
            out[0] = '\0';
            if (!colon) break;
            p = colon + 1;
        }
        if (!out[0]) {
            ci_warn("agent autostart: %s not found on PATH; not started", bin);
            return false;
        }
    }
    struct stat st;
    if (stat(out, &st) != 0) {
        ci_warn("agent autostart: cannot use %s: %s; not started", out, strerror(errno));
        return false;
    }
    if (!S_ISREG(st.st_mode) || (st.st_mode & (S_IWGRP | S_IWOTH))) {
        ci_warn("agent autostart: %s refused: %s (mode %04o); not started", out,
                S_ISREG(st.st_mode) ? "writable by group or others" : "not a regular file",
                (unsigned)(st.st_mode & 07777));
        return false;
    }
    return true;
}

/* <home>/logs/agent.log for the agent's output; /dev/null when it cannot be opened safely. */
static int open_agent_log(void) {
    char why[160] = "";
    int dir = ci_home_dir("logs", true, false, NULL, 0);
    int fd = dir >= 0 ? ci_open_file_at(dir, "agent.log", O_WRONLY | O_APPEND | O_CREAT, CI_KIND_FILE, false, why,
                                        sizeof(why))
                      : -1;
    if (dir >= 0) close(dir);
    if (fd >= 0) return fd;
    ci_warn("agent autostart: %s/logs/agent.log %s; the agent's output is discarded", ci_g.cfg.home,
            why[0] ? why : "cannot be opened");
    return open("/dev/null", O_WRONLY | O_CLOEXEC);
}

void ci_autostart_agent(void) {
    if (!ci_g.cfg.agent_autostart || ci_g.home_private || !is_local_rank_zero()) return;
    int fd = open_lock(true);
    if (fd < 0) {
        ci_warn("agent autostart: cannot open %s/metadata/agent.lock; not started", ci_g.cfg.home);
        return;
    }
    bool free_lock = flock(fd, LOCK_EX | LOCK_NB) == 0;
    if (free_lock) flock(fd, LOCK_UN);
    close(fd);
    if (!free_lock) {
        ci_debug("agent autostart: an agent already holds %s/metadata/agent.lock", ci_g.cfg.home);
        return;
    }
    char bin[CI_PATH_MAX];
    if (!resolve_agent_bin(ci_g.cfg.agent_bin, bin, sizeof(bin))) return;
    int log_fd = open_agent_log();
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (log_fd >= 0) {
        posix_spawn_file_actions_adddup2(&actions, log_fd, STDOUT_FILENO);
        posix_spawn_file_actions_adddup2(&actions, log_fd, STDERR_FILENO);
    }
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
    char* argv[] = {"sh", "-c", "exec \"$0\" </dev/null &", bin, NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, "/bin/sh", &actions, &attr, argv, environ);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&actions);
    if (log_fd >= 0) close(log_fd);
    if (rc != 0) {
        ci_warn("agent autostart: cannot spawn %s: %s", bin, strerror(rc));
        return;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    ci_debug("agent autostart: started %s (log %s/logs/agent.log)", bin, ci_g.cfg.home);
}
