/* One hang threshold per job: the watchdog follows the Agent's.
 *
 * The Agent decides every verdict with its own COMMINSIGHT_PROFILER_HANG_TIMEOUT_S and
 * publishes it in <home>/metadata/agent-settings (KEY=VALUE, the configuration file's format),
 * written atomically at its start and removed when it stops. The background thread looks at
 * the file once per heartbeat with one fstatat (a stat never blocks) and reads it only when it
 * changed: opened without following links, a regular file of this user or root that nobody
 * else can write, at most AGENT_SETTINGS_MAX bytes. The watchdog then uses the Agent's value,
 * unless this process has the key in its own environment (config.c's hang_timeout_source):
 * that value is the user's word for this process, and the Agent's health says it differs.
 *
 * Fails open: a file refused, too long, or without a valid value changes nothing (counted in
 * the header's agent_settings_refused, said once); a file gone (the Agent stopped) puts the
 * watchdog back on this process's own value. The header shows what the watchdog uses
 * (hang_threshold_ms, hang_threshold_source) beside the process's own value, for the Agent.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ci_internal.h"

#define AGENT_SETTINGS CI_HOME_V1_AGENT_SETTINGS
#define AGENT_SETTINGS_MAX 4096

/* What the last look found (background thread only). */
static struct {
    bool present;
    struct stat st;
} seen;

static void publish(double seconds, uint8_t source) {
    uint64_t ns = (uint64_t)(seconds * 1e9);
    uint64_t was = __atomic_exchange_n(&ci_g.hang_threshold_ns, ns, __ATOMIC_RELAXED);
    ci_shm_header_v1_t* h = ci_g.hdr;
    if (h) {
        __atomic_store_n(&h->hang_threshold_ms, (uint32_t)(seconds * 1000.0), __ATOMIC_RELAXED);
        __atomic_store_n(&h->hang_threshold_source, source, __ATOMIC_RELAXED);
    }
    if (was != ns)
        ci_debug("hang threshold %.3f s (%s), was %.3f s", seconds,
                 source == CI_SHM_V1_THRESHOLD_SOURCE_AGENT ? "the Agent's" : "this process's own", (double)was / 1e9);
}

void ci_agent_settings_reset(void) {
    memset(&seen, 0, sizeof(seen));
    ci_shm_header_v1_t* h = ci_g.hdr;
    if (h) {
        h->own_hang_threshold_ms = (uint32_t)(ci_g.cfg.hang_timeout_s * 1000.0);
        h->own_hang_threshold_source = ci_g.cfg.hang_timeout_source;
    }
    publish(ci_g.cfg.hang_timeout_s, ci_g.cfg.hang_timeout_source);
}

static bool same_file(const struct stat* a, const struct stat* b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
           a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* The value of the hang threshold key in the file's text; false with why when there is none or
 * it is not valid. Other keys are the Agent's business and left alone. */
static bool threshold_in(char* text, double* out, char* why, size_t why_len) {
    const char* key = CI_CONFIG_V1_PROFILER_HANG_TIMEOUT_S_KEY;
    size_t key_len = strlen(key);
    bool found = false;
    for (char* line = text; line && *line;) {
        char* nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        while (*line == ' ' || *line == '\t') line++;
        if (strncmp(line, key, key_len) == 0 && line[key_len] == '=') {
            char* value = line + key_len + 1;
            char* end = value + strlen(value);
            while (end > value && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r')) *--end = '\0';
            char reason[160];
            if (!ci_config_valid(CI_CONFIG_V1_PROFILER_HANG_TIMEOUT_S_INDEX, value, reason, sizeof(reason))) {
                snprintf(why, why_len, "%s='%.32s': %s", key, value, reason);
                return false;
            }
            *out = strtod(value, NULL);
            found = true; /* the last line wins, as in a configuration file */
        }
        line = nl ? nl + 1 : NULL;
    }
    if (!found) snprintf(why, why_len, "it holds no %s", key);
    return found;
}

/* 1: the Agent's value in *out; 0: no file (any more); -1: refused or invalid, why said. */
static int read_threshold(double* out, char* why, size_t why_len) {
    /* the node's home: in a shared one, its Agent publishes there for every user */
    char dir_why[160];
    int dir = ci_open_dir_at(ci_g.node_home_fd, CI_HOME_V1_METADATA, false, dir_why, sizeof(dir_why));
    if (dir < 0) {
        if (errno == ENOENT) return 0;
        snprintf(why, why_len, "its directory metadata/ is refused or unreadable (%s)", dir_why);
        return -1;
    }
    int fd = ci_open_file_at(dir, AGENT_SETTINGS, O_RDONLY, CI_KIND_FILE, true, why, why_len);
    int err = errno;
    close(dir);
    if (fd < 0) return err == ENOENT ? 0 : -1;
    char text[AGENT_SETTINGS_MAX + 1];
    size_t len = 0;
    ssize_t got;
    while (len < sizeof(text) && ((got = read(fd, text + len, sizeof(text) - len)) > 0 || (got < 0 && errno == EINTR)))
        if (got > 0) len += (size_t)got;
    close(fd);
    if (len > AGENT_SETTINGS_MAX) {
        snprintf(why, why_len, "larger than %d bytes", AGENT_SETTINGS_MAX);
        return -1;
    }
    text[len] = '\0';
    if (memchr(text, '\0', len)) {
        snprintf(why, why_len, "it holds a NUL byte");
        return -1;
    }
    return threshold_in(text, out, why, why_len) ? 1 : -1;
}

void ci_agent_settings_poll(void) {
    if (ci_g.cfg.hang_timeout_source == CI_SHM_V1_THRESHOLD_SOURCE_ENVIRONMENT) return;
    if (ci_g.home_private || ci_g.node_home_fd < 0) return; /* no Agent publishes into a private directory */
    struct stat st;
    if (fstatat(ci_g.node_home_fd, CI_HOME_V1_METADATA "/" AGENT_SETTINGS, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (seen.present) ci_agent_settings_reset(); /* the Agent stopped: our own value again */
        return;
    }
    if (seen.present && same_file(&st, &seen.st)) return;
    seen.present = true;
    seen.st = st;
    double seconds = 0;
    char why[256] = "";
    int got = read_threshold(&seconds, why, sizeof(why));
    if (got > 0) publish(seconds, CI_SHM_V1_THRESHOLD_SOURCE_AGENT);
    else if (got == 0) ci_agent_settings_reset();
    else {
        ci_counter_add(&ci_g.hdr->agent_settings_refused, 1);
        static bool warned;
        if (!warned)
            ci_warn("%s/" CI_HOME_V1_METADATA "/%s refused: %s; the hang watchdog keeps %.3f s", ci_g.cfg.home, AGENT_SETTINGS, why,
                    (double)ci_hang_threshold_ns() / 1e9);
        warned = true;
    }
}
