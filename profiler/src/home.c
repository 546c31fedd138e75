/* The home directory the Profiler writes into, and the private one it uses instead.
 *
 * A home another user owns, or one group or others can write, can hold anything its owner
 * planted: symbolic links to files the training user may write, a FIFO where the config file
 * belongs, a config that names a program to run. Such a home is refused at init with the
 * reason, once, and the Profiler carries on in a private directory of its own, created
 * exclusively (mkdtemp, 0700) under $XDG_RUNTIME_DIR or /tmp: inspector_logs and the SHM link
 * go there, the FIFO and the agent autostart (which serve the refused home) are off. The
 * same goes for one of the home's directories that is refused on its own, for the uses that
 * can move (inspector_logs, shms), and for one the Profiler cannot write at all: a home that is
 * ours but mounted read-only (EROFS) or closed to this user (EACCES, EPERM) would otherwise
 * lose every op. A relative COMMINSIGHT_HOME is refused the same way. Training always goes on.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ci_internal.h"

/* The private directory and the name sets below are shared by init, the log writer and the
 * background thread (never the hot path): one lock keeps them whole. */
static pthread_mutex_t home_lock = PTHREAD_MUTEX_INITIALIZER;
static int private_fd = -1;
static bool private_failed; /* tried once and said why: not tried again */
static char private_path[CI_HOME_MAX];
static char tenant_path[CI_HOME_MAX]; /* <home>/users/<uid> in a shared home */

/* A few subdirectory names, each remembered once: those already reported as refused (said
 * once per process), and those moved to the private directory (never moved twice). */
#define NAMES_MAX 8
typedef struct name_set {
    char names[NAMES_MAX][32];
    unsigned n;
} name_set_t;

static name_set_t warned, moved;

static bool name_in(const name_set_t* set, const char* sub) {
    for (unsigned i = 0; i < set->n; i++)
        if (strcmp(set->names[i], sub) == 0) return true;
    return false;
}

/* true when `sub` was not in the set yet */
static bool name_add(name_set_t* set, const char* sub) {
    if (name_in(set, sub)) return false;
    if (set->n < NAMES_MAX) snprintf(set->names[set->n++], sizeof(set->names[0]), "%s", sub);
    return true;
}

static bool warn_once(const char* sub) { return name_add(&warned, sub); }

bool ci_unwritable_errno(int err) { return err == EROFS || err == EACCES || err == EPERM; }

static const char* errno_name(int err) {
    switch (err) {
    case EROFS: return "EROFS";
    case EACCES: return "EACCES";
    case EPERM: return "EPERM";
    default: return "errno";
    }
}

bool ci_home_path(char* out, size_t size) {
    const char* env = getenv(CI_CONFIG_V1_HOME_KEY);
    const char* home = env && *env ? env : CI_CONFIG_V1_HOME_DEFAULT;
    if (strlen(home) >= CI_HOME_MAX || strlen(home) >= size) {
        out[0] = '\0';
        return false;
    }
    snprintf(out, size, "%s", home);
    return true;
}

/* Open the home named by `path` if it can be trusted; -1 with the reason otherwise. The path
 * may lead through links, but only links and directories that this user or root made and that
 * nobody else can change (a parent others can write lets them swap the home for their own). */
static int open_trusted_home(const char* path, char* why, size_t why_len) {
    struct stat lst;
    if (ci_check_ancestors(path, why, why_len) != 0) return -1;
    if (lstat(path, &lst) != 0) {
        if (errno != ENOENT || ci_mkdirs(path) != 0 || lstat(path, &lst) != 0) {
            snprintf(why, why_len, "cannot be created: %s", strerror(errno));
            return -1;
        }
    }
    if (S_ISLNK(lst.st_mode) && lst.st_uid != geteuid() && lst.st_uid != 0) {
        snprintf(why, why_len, "is a symbolic link owned by uid %u", (unsigned)lst.st_uid);
        return -1;
    }
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, why_len, "%s", strerror(errno));
        return -1;
    }
    if (ci_check_fd(fd, CI_KIND_DIR, true, why, why_len) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A node's shared home: one node Agent serves every user's Profilers. The home belongs to
 * another user (root, who runs that Agent) and holds users/, a directory its owner made sticky
 * so that each user may create an entry but not remove or rename another's. This process then
 * writes under users/<euid>/, a directory of its own that nobody else can write, made here if
 * it is missing; the Agent knows whose it is from its owner. Returns the directory's fd and
 * its path in `path`; -2 when the home is not shared (no users/, or the home is ours); -1 with
 * the reason when it is shared but its users/ or our entry cannot be trusted. */
static int open_tenant_home(int home_fd, const char* home, char* path, size_t path_len, char* why,
                            size_t why_len) {
    struct stat home_st, st;
    uid_t me = geteuid();
    if (fstat(home_fd, &home_st) != 0 || home_st.st_uid == me) return -2;
    /* O_PATH: users/ lets others in (x) but not list it (r), so that nobody sees who else
     * runs on the node */
    int users = openat(home_fd, "users", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (users < 0) {
        if (errno == ENOENT || errno == ENOTDIR) return -2;
        snprintf(why, why_len, "its users/ cannot be opened: %s", strerror(errno));
        return -1;
    }
    /* users/ may let others write only with the sticky bit, and only its home's owner or root
     * may own it: anyone else could remove or swap our entry */
    if (fstat(users, &st) != 0 || !S_ISDIR(st.st_mode) || (st.st_uid != 0 && st.st_uid != home_st.st_uid) ||
        ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))) {
        snprintf(why, why_len, "its users/ (uid %u, mode %04o) is not its owner's sticky directory",
                 (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
        close(users);
        return -1;
    }
    char name[16];
    snprintf(name, sizeof(name), "%u", (unsigned)me);
    if (mkdirat(users, name, 0700) != 0 && errno != EEXIST) {
        snprintf(why, why_len, "users/%s cannot be created: %s", name, strerror(errno));
        close(users);
        return -1;
    }
    int fd = openat(users, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int err = errno;
    char checked[160];
    if (fd < 0) {
        /* say whose it is: another user may have made it before we ever ran here */
        if (fstatat(users, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_uid != me)
            snprintf(why, why_len, "users/%s is owned by uid %u, not by this process's uid %u", name,
                     (unsigned)st.st_uid, (unsigned)me);
        else
            snprintf(why, why_len, "users/%s: %s", name,
                     err == ELOOP || err == ENOTDIR ? "not a directory (a link?)" : strerror(err));
        close(users);
        return -1;
    }
    close(users);
    /* ours alone: root may have made it for us (a SLURM prolog), but then gave it to us */
    if (ci_check_fd(fd, CI_KIND_DIR, false, checked, sizeof(checked)) != 0) {
        snprintf(why, why_len, "users/%s %s", name, checked);
        close(fd);
        return -1;
    }
    if ((size_t)snprintf(path, path_len, "%s/users/%s", home, name) >= path_len) {
        snprintf(why, why_len, "users/%s: the path is longer than %zu bytes", name, path_len - 1);
        close(fd);
        return -1;
    }
    return fd;
}

static int private_home_locked(void) {
    if (private_fd >= 0 || private_failed) return private_fd;
    const char* xdg = getenv("XDG_RUNTIME_DIR");
    const char* base = "/tmp";
    if (xdg && xdg[0] == '/' && strlen(xdg) < CI_HOME_MAX - 64) {
        char why[160];
        int fd = open_trusted_home(xdg, why, sizeof(why));
        if (fd >= 0) {
            close(fd);
            base = xdg;
        }
    }
    snprintf(private_path, sizeof(private_path), "%s/comminsight-%u-XXXXXX", base, (unsigned)geteuid());
    if (!mkdtemp(private_path)) { /* creates it 0700, failing if the name exists */
        ci_warn("cannot create a private directory under %s (%s): inspector_logs off", base, strerror(errno));
        private_path[0] = '\0';
        private_failed = true;
        return -1;
    }
    char why[160];
    private_fd = open_trusted_home(private_path, why, sizeof(why));
    if (private_fd < 0) ci_warn("private directory %s refused: %s; inspector_logs off", private_path, why);
    private_failed = private_fd < 0;
    return private_fd;
}

int ci_private_home(void) {
    pthread_mutex_lock(&home_lock);
    int fd = private_home_locked();
    pthread_mutex_unlock(&home_lock);
    return fd;
}

const char* ci_private_home_path(void) { return private_path; }

/* The trusted home in home_fd: keep it as the node's (its etc/ and metadata/ are read), and
 * write into this user's directory when it is a shared one; a shared home whose entry for us
 * is refused is said once, and the private directory takes the writing. */
static void adopt_tenant_home(const char* path) {
    char why[2 * CI_HOME_MAX];
    int tenant = open_tenant_home(ci_g.home_fd, path, tenant_path, sizeof(tenant_path), why, sizeof(why));
    ci_g.node_home_fd = tenant == -2 ? dup(ci_g.home_fd) : ci_g.home_fd;
    if (tenant >= 0) {
        ci_g.home_fd = tenant;
        ci_g.home_tenant = true;
        /* The node's Agent cannot make our FIFO (it would be root's, closed to us): made now,
         * so that it reads it before our first event rather than after */
        char ignored[160];
        int fifos = ci_open_dir_at(tenant, CI_HOME_V1_FIFOS, true, ignored, sizeof(ignored));
        if (fifos >= 0) {
            (void)mkfifoat(fifos, CI_HOME_V1_HANG_EVENTS_FIFO, 0600);
            close(fifos);
        }
        return;
    }
    if (tenant == -2) return;
    /* the node's configuration is still its own, trusted; only where to write moves */
    int fd = ci_private_home();
    ci_warn("shared home %s: %s; nothing is written to it (its Agent does not see this process); inspector_logs "
            "go to %s",
            path, why, fd >= 0 ? private_path : "nowhere (off)");
    ci_g.home_fd = fd >= 0 ? dup(fd) : -1;
    ci_g.home_private = ci_g.home_fd >= 0;
}

void ci_home_open(void) {
    char path[CI_HOME_MAX], why[2 * CI_HOME_MAX];
    if (ci_g.home_fd >= 0) close(ci_g.home_fd); /* an earlier init that failed */
    if (ci_g.node_home_fd >= 0) close(ci_g.node_home_fd);
    ci_g.home_private = false;
    ci_g.home_tenant = false;
    ci_g.home_fd = -1;
    ci_g.node_home_fd = -1;
    /* A home too long to name in full is not another home: the default would be one the
     * operator never chose, so it is refused like an untrusted one. */
    if (!ci_home_path(path, sizeof(path))) {
        snprintf(path, sizeof(path), "%s (%zu bytes)", CI_CONFIG_V1_HOME_KEY, strlen(getenv(CI_CONFIG_V1_HOME_KEY)));
        snprintf(why, sizeof(why), "longer than %d bytes", CI_HOME_MAX - 1);
    } else if (path[0] != '/') {
        /* Each rank would resolve it against its own working directory: ranks of one job (and
         * their Agent) would not share a home, and a rank that changes directory writes into
         * whatever is there. */
        snprintf(why, sizeof(why), "%s is a relative path (each rank would resolve it against its own working "
                 "directory); give an absolute one", CI_CONFIG_V1_HOME_KEY);
    } else {
        ci_g.home_fd = open_trusted_home(path, why, sizeof(why));
        if (ci_g.home_fd >= 0) {
            adopt_tenant_home(path);
            return;
        }
    }
    int fd = ci_private_home();
    ci_warn("home %s refused: %s; nothing is read from or written to it (no config file, FIFO events or agent "
            "autostart); inspector_logs go to %s",
            path, why, fd >= 0 ? private_path : "nowhere (off)");
    if (fd >= 0) {
        ci_g.home_fd = dup(fd);
        ci_g.home_private = ci_g.home_fd >= 0;
    }
}

/* After the configuration is read: the home every module writes into, by name. */
void ci_home_adopt(ci_config_t* cfg) {
    if (ci_g.home_private) snprintf(cfg->home, sizeof(cfg->home), "%s", private_path);
    if (ci_g.home_tenant) snprintf(cfg->home, sizeof(cfg->home), "%s", tenant_path);
    /* a private directory has no Agent; a shared home has the node's, which nobody starts */
    if (ci_g.home_private || ci_g.home_tenant) cfg->agent_autostart = false;
}

/* The private directory's `sub`, or -1 with the reason; `path` gets its name. */
static int private_dir(const char* sub, bool create, char* path, size_t path_len, char* why, size_t why_len) {
    int base = private_home_locked();
    if (base < 0) {
        snprintf(why, why_len, "no private directory");
        return -1;
    }
    int fd = ci_open_dir_at(base, sub, create, why, why_len);
    if (fd < 0) return -1;
    if (path) snprintf(path, path_len, "%.*s/%s", CI_HOME_MAX, private_path, sub);
    name_add(&moved, sub);
    return fd;
}

static int home_dir_unwritable_locked(const char* sub, int err, char* path, size_t path_len) {
    if (ci_g.home_private || ci_g.home_fd < 0 || name_in(&moved, sub) || !ci_unwritable_errno(err)) {
        errno = err;
        return -1;
    }
    char why[256];
    int fd = private_dir(sub, true, path, path_len, why, sizeof(why));
    if (warn_once(sub)) {
        if (fd >= 0)
            ci_warn("%s/%s cannot be written (%s: %s); %s go to %s/%s instead", ci_g.cfg.home, sub, errno_name(err),
                    strerror(err), sub, private_path, sub);
        else
            ci_warn("%s/%s cannot be written (%s: %s), nor a private directory's (%s): %s off", ci_g.cfg.home, sub,
                    errno_name(err), strerror(err), why, sub);
    }
    if (fd < 0) errno = err;
    return fd;
}

int ci_home_dir_unwritable(const char* sub, int err, char* path, size_t path_len) {
    pthread_mutex_lock(&home_lock);
    int fd = home_dir_unwritable_locked(sub, err, path, path_len);
    err = errno;
    pthread_mutex_unlock(&home_lock);
    errno = err;
    return fd;
}

static int home_dir_locked(const char* sub, bool create, bool movable, char* path, size_t path_len) {
    char why[256];
    if (movable && name_in(&moved, sub)) return private_dir(sub, create, path, path_len, why, sizeof(why));
    int fd = ci_g.home_fd >= 0 ? ci_open_dir_at(ci_g.home_fd, sub, create, why, sizeof(why)) : -1;
    if (fd >= 0) {
        if (path) snprintf(path, path_len, "%.*s/%s", CI_HOME_MAX, ci_g.cfg.home, sub);
        return fd;
    }
    if (ci_g.home_fd < 0) {
        errno = ENOENT;
        return -1;
    }
    int err = errno;
    /* EPERM is also what refusing an existing directory returns: that one keeps its reason */
    struct stat st;
    bool cannot_write = err == EROFS || err == EACCES ||
                        (err == EPERM && fstatat(ci_g.home_fd, sub, &st, AT_SYMLINK_NOFOLLOW) != 0);
    if (movable && cannot_write) return home_dir_unwritable_locked(sub, err, path, path_len);
    bool refused = err == EPERM || err == ELOOP || err == ENOTDIR || err == EMLINK;
    if (!refused || !movable || ci_g.home_private) {
        if (refused && warn_once(sub)) ci_warn("%s/%s refused: %s", ci_g.cfg.home, sub, why);
        errno = err;
        return -1;
    }
    char why2[256];
    fd = private_dir(sub, create, path, path_len, why2, sizeof(why2));
    if (warn_once(sub))
        ci_warn("%s/%s refused: %s; using %s/%s instead", ci_g.cfg.home, sub, why,
                fd >= 0 ? private_path : "(none)", sub);
    if (fd < 0) errno = err;
    return fd;
}

int ci_home_dir(const char* sub, bool create, bool movable, char* path, size_t path_len) {
    pthread_mutex_lock(&home_lock);
    int fd = home_dir_locked(sub, create, movable, path, path_len);
    int err = errno;
    pthread_mutex_unlock(&home_lock);
    errno = err;
    return fd;
}

void ci_home_after_fork(void) {
    pthread_mutex_init(&home_lock, NULL); /* another thread may have held it at the fork */
    /* the private directory stays the parent's: the child makes its own if it needs one */
    ci_home_release();
}

/* The descriptors go; the directories and what is in them stay. A later init (the child of a
 * fork, or the plugin loaded again) opens the home afresh and makes a private directory of its
 * own if it needs one. */
void ci_home_release(void) {
    if (ci_g.home_fd >= 0) close(ci_g.home_fd);
    if (ci_g.node_home_fd >= 0) close(ci_g.node_home_fd);
    ci_g.home_fd = -1;
    ci_g.node_home_fd = -1;
    ci_g.home_private = false;
    ci_g.home_tenant = false;
    tenant_path[0] = '\0';
    if (private_fd >= 0) close(private_fd);
    private_fd = -1;
    private_failed = false;
    private_path[0] = '\0';
    warned.n = 0;
    moved.n = 0;
}
