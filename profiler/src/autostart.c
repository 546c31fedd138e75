/* Agent autostart: local rank 0 starts comminsight-agent when none runs for this home.
 *
 * "An agent runs" means someone holds an exclusive flock on <home>/metadata/agent.lock (the
 * Agent holds it for its lifetime). If we can take it, nobody does: we let go and spawn the
 * agent through /bin/sh with `&`, so it is re-parented to init (no zombie in the training
 * process) and detached into its own session. Several ranks racing here spawn at most a few
 * agents, and all but the one that takes the lock exit. Any failure is logged and ignored.
 */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ci_internal.h"

extern char** environ;

static bool is_local_rank_zero(void) {
    const char* v = getenv("LOCAL_RANK");
    return !v || !*v || strcmp(v, "0") == 0; /* unset: the lock decides */
}

void ci_autostart_agent(void) {
    if (!ci_g.cfg.agent_autostart || !is_local_rank_zero()) return;
    char dir[CI_DIR_MAX], lock_path[CI_PATH_MAX], log_path[CI_PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/metadata", ci_g.cfg.home);
    snprintf(lock_path, sizeof(lock_path), "%s/agent.lock", dir);
    if (ci_mkdirs(dir) != 0) {
        ci_warn("agent autostart: cannot create %s: %s", dir, strerror(errno));
        return;
    }
    int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        ci_warn("agent autostart: cannot open %s: %s", lock_path, strerror(errno));
        return;
    }
    bool free_lock = flock(fd, LOCK_EX | LOCK_NB) == 0;
    if (free_lock) flock(fd, LOCK_UN);
    close(fd);
    if (!free_lock) {
        ci_debug("agent autostart: an agent already holds %s", lock_path);
        return;
    }
    snprintf(dir, sizeof(dir), "%s/logs", ci_g.cfg.home);
    ci_mkdirs(dir);
    snprintf(log_path, sizeof(log_path), "%s/agent.log", dir);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID);
    char* argv[] = {"sh", "-c", "exec \"$0\" >>\"$1\" 2>&1 </dev/null &", ci_g.cfg.agent_bin, log_path, NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, "/bin/sh", NULL, &attr, argv, environ);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
        ci_warn("agent autostart: cannot spawn %s: %s", ci_g.cfg.agent_bin, strerror(rc));
        return;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    ci_debug("agent autostart: started %s (log %s)", ci_g.cfg.agent_bin, log_path);
}
