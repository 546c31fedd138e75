/* What names a process beyond its pid, which the kernel reuses: its start time (clock ticks
 * since boot, /proc/<pid>/stat field 22), its pid namespace and the boot it runs in. Recorded
 * in every SHM header; compared by the next Profiler to tell a dead producer from a live one.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ci_internal.h"

static ssize_t read_small(const char* path, char* buf, size_t size) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, size - 1);
    int err = errno;
    close(fd);
    if (n < 0) {
        errno = err;
        return -1;
    }
    buf[n] = '\0';
    return n;
}

int ci_proc_start_ticks(int pid, uint64_t* ticks) {
    char path[64], stat_line[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    if (read_small(path, stat_line, sizeof(stat_line)) < 0) return -1;
    /* "pid (comm) state ppid ...": comm may hold spaces and parentheses, so count from the
     * last ')'; starttime is the 20th field after it. */
    char* p = strrchr(stat_line, ')');
    if (!p) {
        errno = EINVAL;
        return -1;
    }
    p++;
    for (int field = 0; field < 19; field++) {
        p = strchr(p + 1, ' ');
        if (!p) {
            errno = EINVAL;
            return -1;
        }
    }
    char* end = NULL;
    unsigned long long v = strtoull(p + 1, &end, 10);
    if (end == p + 1) {
        errno = EINVAL;
        return -1;
    }
    *ticks = v;
    return 0;
}

uint64_t ci_pid_namespace(void) {
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

void ci_boot_id(char* out, size_t size) {
    char buf[64];
    out[0] = '\0';
    if (read_small("/proc/sys/kernel/random/boot_id", buf, sizeof(buf)) <= 0) return;
    buf[strcspn(buf, "\n")] = '\0';
    snprintf(out, size, "%s", buf);
}
