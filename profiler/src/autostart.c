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
 * one but this user or root could have put it there or can rewrite it (resolve_agent_bin). The lock and the agent's log are opened without following
 * links and must be this user's regular files: a link planted there is refused, not followed.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
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
    int dir = ci_home_dir(CI_HOME_V1_METADATA, create, false, NULL, 0);
    if (dir < 0) return -1;
    char why[160];
    int fd = ci_open_file_at(dir, CI_HOME_V1_AGENT_LOCK, O_RDWR | (create ? O_CREAT : 0), CI_KIND_FILE, false, why,
                             sizeof(why));
    int err = errno;
    close(dir);
    if (fd < 0 && err != ENOENT) {
        static bool warned;
        if (!warned) ci_warn("%s/" CI_HOME_V1_METADATA "/" CI_HOME_V1_AGENT_LOCK " refused: %s", ci_g.cfg.home, why);
        warned = true;
    }
    errno = err;
    return fd;
}

/* A shared home's node Agent: whether it listens on its socket, <home>/agent.sock. Its lock
 * is closed to users (anyone who could open it could hold it and keep the Agent out), and the
 * socket is in the home's root-owned directory, where nobody else can make one. */
static int node_agent_running(void) {
    char home[CI_HOME_MAX];
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (!ci_home_path(home, sizeof(home)) ||
        (size_t)snprintf(addr.sun_path, sizeof(addr.sun_path), "%s/agent.sock", home) >= sizeof(addr.sun_path))
        return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int rc = connect(fd, (struct sockaddr*)&addr, sizeof(addr));
    int err = errno;
    close(fd);
    if (rc == 0 || err == EAGAIN) return 1; /* EAGAIN: it listens, its backlog is full */
    return err == ECONNREFUSED || err == ENOENT ? 0 : -1;
}

int ci_agent_running(void) {
    if (ci_g.home_tenant) return node_agent_running();
    int fd = open_lock(false);
    if (fd < 0) return errno == ENOENT ? 0 : -1;
    bool held = flock(fd, LOCK_EX | LOCK_NB) != 0;
    if (!held) flock(fd, LOCK_UN);
    close(fd);
    return held ? 1 : 0;
}

/* Whether `dir` and every directory above it could only have been changed by this user or
 * root: each owned by one of them, and writable by no one else unless it is a root-owned
 * sticky directory (/tmp), where others may add entries but not replace ours. */
static bool trusted_dir_chain(const char* dir, char* why, size_t why_len) {
    char path[CI_PATH_MAX];
    snprintf(path, sizeof(path), "%s", dir);
    uid_t me = geteuid();
    for (;;) {
        struct stat st;
        if (stat(path, &st) != 0) {
            snprintf(why, why_len, "its directory %s: %s", path, strerror(errno));
            return false;
        }
        bool sticky_root = (st.st_mode & S_ISVTX) && st.st_uid == 0;
        if (st.st_uid != me && st.st_uid != 0) {
            snprintf(why, why_len, "its directory %s is owned by uid %u", path, (unsigned)st.st_uid);
            return false;
        }
        if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !sticky_root) {
            snprintf(why, why_len, "its directory %s is writable by group or others (mode %04o)", path,
                     (unsigned)(st.st_mode & 07777));
            return false;
        }
        char* slash = strrchr(path, '/');
        if (!slash || slash == path) {
            if (strcmp(path, "/") == 0) return true;
            snprintf(path, sizeof(path), "/");
            continue;
        }
        *slash = '\0';
    }
}

/* The first PATH entry holding an executable `bin`, as the shell would find it, except that
 * empty and relative entries (the working directory, which anyone may have chosen) are
 * skipped. */
static bool search_path(const char* bin, char* out, size_t size) {
    const char* path = getenv("PATH");
    for (const char* p = path ? path : "/usr/local/bin:/usr/bin:/bin"; *p;) {
        const char* colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        if (len > 0 && p[0] == '/' && len < CI_DIR_MAX) {
            snprintf(out, size, "%.*s/%.*s", (int)len, p, 512, bin);
            if (access(out, X_OK) == 0) return true;
        }
        if (!colon) break;
        p = colon + 1;
    }
    out[0] = '\0';
    return false;
}

/* The agent executable, resolved to the real file that will run: a path as given, or found
 * on PATH. It runs as this user (root, often), so it must be a regular file that only this
 * user or root owns and can write, in directories only they can change, both where its name
 * is and where it leads. Any other: refused by name, not started. */
static bool resolve_agent_bin(const char* bin, char* out, size_t size) {
    char found[CI_PATH_MAX];
    if (strchr(bin, '/')) snprintf(found, sizeof(found), "%s", bin);
    else if (!search_path(bin, found, sizeof(found))) {
        ci_warn("agent autostart: %s not found in an absolute PATH directory; not started", bin);
        return false;
    }
    char real[PATH_MAX];
    if (!realpath(found, real)) {
        ci_warn("agent autostart: cannot use %s: %s; not started", found, strerror(errno));
        return false;
    }
    struct stat st;
    char why[CI_PATH_MAX + 128] = "";
    if (stat(real, &st) != 0) snprintf(why, sizeof(why), "%s", strerror(errno));
    else if (!S_ISREG(st.st_mode)) snprintf(why, sizeof(why), "not a regular file");
    else if (st.st_uid != geteuid() && st.st_uid != 0)
        snprintf(why, sizeof(why), "owned by uid %u, not by this process's uid %u or root", (unsigned)st.st_uid,
                 (unsigned)geteuid());
    else if (st.st_mode & (S_IWGRP | S_IWOTH))
        snprintf(why, sizeof(why), "writable by group or others (mode %04o)", (unsigned)(st.st_mode & 07777));
    if (!why[0]) {
        /* where the name is (it may be a link someone could repoint) and where it leads */
        char dir[CI_PATH_MAX];
        snprintf(dir, sizeof(dir), "%s", found);
        char* slash = strrchr(dir, '/');
        if (slash == dir) dir[1] = '\0';
        else if (slash) *slash = '\0';
        char real_dir[PATH_MAX];
        if (!realpath(dir, real_dir)) snprintf(why, sizeof(why), "its directory %s: %s", dir, strerror(errno));
        else if (trusted_dir_chain(real_dir, why, sizeof(why))) {
            snprintf(dir, sizeof(dir), "%s", real);
            slash = strrchr(dir, '/');
            if (slash == dir) dir[1] = '\0';
            else if (slash) *slash = '\0';
            trusted_dir_chain(dir, why, sizeof(why));
        }
    }
    if (why[0]) {
        ci_warn("agent autostart: %s refused: %s; not started", found, why);
        return false;
    }
    snprintf(out, size, "%s", real);
    return true;
}

/* The agent inherits no descriptor of the training process but stdin/stdout/stderr: a
 * listening socket or a pipe opened without O_CLOEXEC would otherwise stay open in the agent
 * after training ends (its port taken from the next job, a launcher never seeing end-of-file). */
static void close_inherited_fds(posix_spawn_file_actions_t* actions) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    posix_spawn_file_actions_addclosefrom_np(actions, STDERR_FILENO + 1);
#else
    DIR* d = opendir("/proc/self/fd");
    if (!d) return;
    int own = dirfd(d);
    for (struct dirent* e; (e = readdir(d)) != NULL;) {
        char* end;
        long fd = strtol(e->d_name, &end, 10);
        if (*end == '\0' && end != e->d_name && fd > STDERR_FILENO && fd != own)
            posix_spawn_file_actions_addclose(actions, (int)fd);
    }
    closedir(d);
#endif
}

/* <home>/logs/agent.log for the agent's output; /dev/null when it cannot be opened safely. */
static int open_agent_log(void) {
    char why[160] = "";
    int dir = ci_home_dir(CI_HOME_V1_LOGS, true, false, NULL, 0);
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
        ci_warn("agent autostart: cannot open %s/" CI_HOME_V1_METADATA "/" CI_HOME_V1_AGENT_LOCK "; not started", ci_g.cfg.home);
        return;
    }
    bool free_lock = flock(fd, LOCK_EX | LOCK_NB) == 0;
    if (free_lock) flock(fd, LOCK_UN);
    close(fd);
    if (!free_lock) {
        ci_debug("agent autostart: an agent already holds %s/" CI_HOME_V1_METADATA "/" CI_HOME_V1_AGENT_LOCK, ci_g.cfg.home);
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
    close_inherited_fds(&actions);
    /* the agent starts with no signal blocked and every signal at its default: this runs on
     * the background thread, which blocks all signals (a blocked SIGTERM would leave an agent
     * only SIGKILL can stop, with no final flush), and the training process may ignore some */
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
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
