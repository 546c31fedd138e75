/* Opening what the Profiler reads and writes so that nobody else can choose it.
 *
 * Every directory and file is opened relative to a directory already checked (openat), never
 * through a symbolic link (O_NOFOLLOW), never blocking (O_NONBLOCK: a FIFO planted where a
 * file belongs must not stop training), and then checked with fstat on the descriptor itself:
 * the kind it should be, owned by this process's effective user (or root where that is
 * allowed), and not writable by group or others. A refusal says why in words a log reader
 * understands ("is a symbolic link", "owned by uid 65534", "mode 0777 writable by others").
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ci_internal.h"

static const char* kind_name(mode_t mode) {
    if (S_ISREG(mode)) return "a regular file";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISLNK(mode)) return "a symbolic link";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "of an unknown kind";
}

static bool is_kind(mode_t mode, ci_kind_t kind) {
    switch (kind) {
    case CI_KIND_DIR: return S_ISDIR(mode);
    case CI_KIND_FILE: return S_ISREG(mode);
    case CI_KIND_FIFO: return S_ISFIFO(mode);
    }
    return false;
}

static const char* wanted_name(ci_kind_t kind) {
    return kind == CI_KIND_DIR ? "a directory" : kind == CI_KIND_FIFO ? "a FIFO" : "a regular file";
}

bool ci_trusted_stat(const struct stat* st, ci_kind_t kind, bool root_ok, char* why, size_t why_len) {
    if (!is_kind(st->st_mode, kind)) {
        snprintf(why, why_len, "is %s, not %s", kind_name(st->st_mode), wanted_name(kind));
        return false;
    }
    uid_t me = geteuid();
    if (st->st_uid != me && !(root_ok && st->st_uid == 0)) {
        snprintf(why, why_len, "owned by uid %u, not by this process's uid %u", (unsigned)st->st_uid, (unsigned)me);
        return false;
    }
    mode_t loose = st->st_mode & (S_IWGRP | S_IWOTH);
    if (loose) {
        snprintf(why, why_len, "mode %04o writable by %s", (unsigned)(st->st_mode & 07777),
                 loose == (S_IWGRP | S_IWOTH) ? "group and others" : (loose & S_IWOTH) ? "others" : "group");
        return false;
    }
    return true;
}

/* The reason an openat(..., O_NOFOLLOW) failed, in words: ELOOP/ENOTDIR there mean "a link". */
static void open_failure(int dir_fd, const char* name, int err, char* why, size_t why_len) {
    struct stat st;
    if ((err == ELOOP || err == ENOTDIR || err == EMLINK) && fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
        snprintf(why, why_len, "is %s", kind_name(st.st_mode));
    else snprintf(why, why_len, "%s", strerror(err));
    errno = err;
}

int ci_check_fd(int fd, ci_kind_t kind, bool root_ok, char* why, size_t why_len) {
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(why, why_len, "%s", strerror(errno));
        return -1;
    }
    if (!ci_trusted_stat(&st, kind, root_ok, why, why_len)) {
        errno = EPERM;
        return -1;
    }
    return 0;
}

int ci_open_dir_at(int parent_fd, const char* name, bool create, char* why, size_t why_len) {
    if (create && mkdirat(parent_fd, name, 0700) != 0 && errno != EEXIST) {
        open_failure(parent_fd, name, errno, why, why_len);
        return -1;
    }
    int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        open_failure(parent_fd, name, errno, why, why_len);
        return -1;
    }
    if (ci_check_fd(fd, CI_KIND_DIR, true, why, why_len) != 0) {
        close(fd);
        errno = EPERM;
        return -1;
    }
    return fd;
}

int ci_open_file_at(int dir_fd, const char* name, int flags, ci_kind_t kind, bool root_ok, char* why,
                    size_t why_len) {
    int fd = openat(dir_fd, name, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
    if (fd < 0) {
        open_failure(dir_fd, name, errno, why, why_len);
        return -1;
    }
    if (ci_check_fd(fd, kind, root_ok, why, why_len) != 0) {
        close(fd);
        errno = EPERM;
        return -1;
    }
    return fd;
}

/* A directory the path passes through: another user (root aside) who owns it, or who may write
 * it without the sticky bit, can rename what follows away and put something else there. */
static bool trusted_ancestor(const char* dir, const struct stat* st, const char* path, char* why, size_t why_len) {
    if (st->st_uid != geteuid() && st->st_uid != 0) {
        snprintf(why, why_len, "%s (a parent of %s) is owned by uid %u, who could put another directory in its place",
                 dir, path, (unsigned)st->st_uid);
        return false;
    }
    if ((st->st_mode & (S_IWGRP | S_IWOTH)) && !(st->st_mode & S_ISVTX)) {
        snprintf(why, why_len,
                 "%s (a parent of %s) is writable by group or others without the sticky bit (mode %04o): they could "
                 "put another directory in its place",
                 dir, path, (unsigned)(st->st_mode & 07777));
        return false;
    }
    return true;
}

#define CI_MAX_LINKS 40 /* what the kernel follows in one path */

/* Whether what is left of a path names no further component ("", "/", "./", ...). */
static bool at_end(const char* rest) {
    for (const char* p = rest; *p; p++)
        if (*p != '/' && !(*p == '.' && (p[1] == '/' || p[1] == '\0') && (p == rest || p[-1] == '/'))) return false;
    return true;
}

int ci_check_ancestors(const char* path, char* why, size_t why_len) {
    char rest[2 * PATH_MAX], cur[PATH_MAX], cand[PATH_MAX], part[NAME_MAX + 1], target[PATH_MAX];
    rest[0] = '\0';
    if (path[0] != '/' && !getcwd(rest, PATH_MAX)) {
        snprintf(why, why_len, "%s: the working directory is unknown (%s)", path, strerror(errno));
        return -1;
    }
    size_t at = strlen(rest), n = strlen(path);
    if (at + 1 + n >= sizeof(rest)) {
        snprintf(why, why_len, "%s: path too long", path);
        return -1;
    }
    if (at) rest[at++] = '/';
    memcpy(rest + at, path, n + 1);
    snprintf(cur, sizeof(cur), "/");
    struct stat st;
    if (lstat("/", &st) != 0 || !trusted_ancestor("/", &st, path, why, why_len)) return -1;
    unsigned links = 0;
    for (;;) {
        const char* p = rest;
        while (*p == '/') p++;
        if (!*p) return 0;
        size_t len = strcspn(p, "/");
        if (len > NAME_MAX) {
            snprintf(why, why_len, "%s: a component is longer than %d bytes", path, NAME_MAX);
            return -1;
        }
        memcpy(part, p, len);
        part[len] = '\0';
        memmove(rest, p + len, strlen(p + len) + 1);
        if (strcmp(part, ".") == 0) continue;
        if (strcmp(part, "..") == 0) {
            char* slash = strrchr(cur, '/');
            if (slash == cur) cur[1] = '\0';
            else if (slash) *slash = '\0';
            continue;
        }
        if ((size_t)snprintf(cand, sizeof(cand), "%s%s%s", cur, strcmp(cur, "/") ? "/" : "", part) >= sizeof(cand)) {
            snprintf(why, why_len, "%s: path too long", path);
            return -1;
        }
        if (lstat(cand, &st) != 0) {
            if (errno == ENOENT) return 0; /* created by us from here on, 0700 */
            snprintf(why, why_len, "%s (a parent of %s) cannot be examined: %s", cand, path, strerror(errno));
            return -1;
        }
        if (S_ISLNK(st.st_mode)) {
            if (st.st_uid != geteuid() && st.st_uid != 0) {
                if (strcmp(cand, path) == 0)
                    snprintf(why, why_len, "is a symbolic link owned by uid %u; not followed", (unsigned)st.st_uid);
                else
                    snprintf(why, why_len, "%s (on the way to %s) is a symbolic link owned by uid %u; not followed",
                             cand, path, (unsigned)st.st_uid);
                return -1;
            }
            ssize_t t = readlink(cand, target, sizeof(target) - 1);
            if (++links > CI_MAX_LINKS || t < 0 || (size_t)t + strlen(rest) + 2 > sizeof(rest)) {
                snprintf(why, why_len, "%s: cannot follow the symbolic link %s", path, cand);
                return -1;
            }
            target[t] = '\0';
            if (target[0] == '/') snprintf(cur, sizeof(cur), "/");
            memmove(rest + t + 1, rest, strlen(rest) + 1);
            memcpy(rest, target, (size_t)t);
            rest[t] = '/';
            continue;
        }
        /* a file: opening the path fails there, with its own error; the end: the caller's */
        if (!S_ISDIR(st.st_mode) || at_end(rest)) return 0;
        if (!trusted_ancestor(cand, &st, path, why, why_len)) return -1;
        memcpy(cur, cand, strlen(cand) + 1);
    }
}
