/* Configuration: environment beats the KEY=VALUE file beats the generated defaults.
 *
 * Keys, types, limits and defaults come from the generated config_v1.h table, the same source
 * the Python side uses. A bad value never stops training: it is reported (naming the key and
 * where it came from) and the default is used instead.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ci_internal.h"

#define CI_VALUE_MAX 4096

typedef struct raw_value {
    char text[CI_VALUE_MAX];
    char origin[CI_PATH_MAX + 64];
    bool set;
} raw_value_t;

static bool parse_bool(const char* s, bool* out) {
    static const char* yes[] = {"1", "true", "yes", "on"};
    static const char* no[] = {"0", "false", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) return (*out = true), true;
        if (strcasecmp(s, no[i]) == 0) return (*out = false), true;
    }
    return false;
}

static bool matches_choice(const char* choices, const char* value) {
    size_t n = strlen(value);
    for (const char* p = choices; *p;) {
        const char* bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, value, n) == 0) return true;
        if (!bar) break;
        p = bar + 1;
    }
    return false;
}

static bool matches_pattern(const char* pattern, const char* value) {
    regex_t re;
    if (regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0) return true; /* not ours to judge */
    bool ok = regexec(&re, value, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

/* Check one raw value against its key; on success store the canonical text in `out`. */
static bool validate(const ci_config_v1_key_t* key, const char* text, char* why, size_t why_len) {
    char* end = NULL;
    errno = 0;
    switch (key->type) {
    case CI_CONFIG_V1_TYPE_BOOLEAN: {
        bool b;
        if (!parse_bool(text, &b)) return snprintf(why, why_len, "expected 1/0, true/false, yes/no or on/off"), false;
        return true;
    }
    case CI_CONFIG_V1_TYPE_INTEGER: {
        long long v = strtoll(text, &end, 0);
        if (errno || end == text || *end) return snprintf(why, why_len, "expected an integer"), false;
        if ((key->has_min && (double)v < key->min) || (key->has_max && (double)v > key->max))
            return snprintf(why, why_len, "out of range [%.0f, %.0f]", key->min, key->max), false;
        return true;
    }
    case CI_CONFIG_V1_TYPE_NUMBER: {
        double v = strtod(text, &end);
        if (errno || end == text || *end || isnan(v)) return snprintf(why, why_len, "expected a number"), false;
        if ((key->has_min && v < key->min) || (key->has_max && v > key->max))
            return snprintf(why, why_len, "out of range [%g, %g]", key->min, key->max), false;
        return true;
    }
    default:
        if (key->choices && !matches_choice(key->choices, text))
            return snprintf(why, why_len, "expected one of %s", key->choices), false;
        if (key->pattern && !matches_pattern(key->pattern, text))
            return snprintf(why, why_len, "does not match %s", key->pattern), false;
        return true;
    }
}

bool ci_config_valid(int index, const char* text, char* why, size_t why_len) {
    size_t n = 0;
    const ci_config_v1_key_t* keys = ci_config_v1_keys(&n);
    if (index < 0 || (size_t)index >= n) return snprintf(why, why_len, "no such key"), false;
    return validate(&keys[index], text, why, why_len);
}

static char* trim(char* s) {
    while (isspace((unsigned char)*s)) s++;
    char* e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
    return s;
}

static int key_index(const ci_config_v1_key_t* keys, size_t n, const char* name) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(keys[i].key, name) == 0) return (int)i;
    return -1;
}

/* Keys a configuration file must not set: where the home and the file are (they decide what
 * is trusted), and the program the Profiler starts (a file someone else could edit must never
 * choose what the training process executes). */
static bool environment_only(int index) {
    return index == CI_CONFIG_V1_HOME_INDEX || index == CI_CONFIG_V1_CONF_INDEX ||
           index == CI_CONFIG_V1_PROFILER_AGENT_BIN_INDEX || index == CI_CONFIG_V1_JOB_ID_INDEX;
}

static void parse_line(char* line, const char* path, int lineno, const ci_config_v1_key_t* keys, size_t n,
                       raw_value_t* raw) {
    char* s = trim(line);
    if (!*s || *s == '#') return;
    if (strncmp(s, "export ", 7) == 0) s = trim(s + 7);
    char* eq = strchr(s, '=');
    if (!eq) {
        ci_warn("%s:%d: expected KEY=VALUE; line ignored", path, lineno);
        return;
    }
    *eq = '\0';
    char* name = trim(s);
    char* value = trim(eq + 1);
    size_t len = strlen(value);
    if (len >= 2 && (value[0] == '"' || value[0] == '\'') && value[len - 1] == value[0]) {
        value[len - 1] = '\0';
        value++;
    }
    int i = key_index(keys, n, name);
    if (i < 0) {
        ci_warn("%s:%d: unknown key %s; ignored", path, lineno, name);
        return;
    }
    if (environment_only(i)) {
        ci_warn("%s:%d: %s is taken only from the environment; the file's value is ignored", path, lineno, name);
        return;
    }
    snprintf(raw[i].text, sizeof(raw[i].text), "%s", value);
    snprintf(raw[i].origin, sizeof(raw[i].origin), "%.*s:%d", CI_PATH_MAX, path, lineno);
    raw[i].set = true;
}

/* A bounded read: a huge file costs no more than this at init. */
#define CONF_MAX_BYTES (256u * 1024u)

static size_t count_newlines(const char* text, size_t len) {
    size_t n = 0;
    for (const char* p = text; (p = memchr(p, '\n', (size_t)(text + len - p))) != NULL; p++) n++;
    return n;
}

static void read_fd(int fd, const char* path, const ci_config_v1_key_t* keys, size_t n, raw_value_t* raw) {
    char* text = malloc(CONF_MAX_BYTES + 1);
    if (!text) return;
    size_t len = 0;
    while (len < CONF_MAX_BYTES) {
        ssize_t got = read(fd, text + len, CONF_MAX_BYTES - len);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        len += (size_t)got;
    }
    char probe;
    bool cut = len == CONF_MAX_BYTES && read(fd, &probe, 1) == 1;
    if (cut) {
        /* the line the bound cuts through would be applied half-read: it goes with the rest */
        char* last_nl = memrchr(text, '\n', len);
        size_t kept = last_nl ? (size_t)(last_nl - text) + 1 : 0;
        ci_warn("%s is larger than %u bytes; the rest is ignored (from byte %zu, line %zu on)", path, CONF_MAX_BYTES,
                kept, (size_t)1 + (size_t)(kept ? count_newlines(text, kept) : 0));
        len = kept;
    }
    text[len] = '\0';
    int lineno = 1;
    for (char* line = text; line < text + len; lineno++) {
        char* nl = memchr(line, '\n', (size_t)(text + len - line));
        size_t line_len = (size_t)((nl ? nl : text + len) - line);
        if (nl) *nl = '\0';
        /* A NUL would cut the line short and apply what comes before it: not what the file says. */
        if (memchr(line, '\0', line_len)) ci_warn("%s:%d: line contains a NUL byte; ignored", path, lineno);
        else if (line_len > CI_VALUE_MAX + 256)
            ci_warn("%s:%d: line longer than %d bytes; ignored", path, lineno, CI_VALUE_MAX + 256);
        else parse_line(line, path, lineno, keys, n, raw);
        if (!nl) break;
        line = nl + 1;
    }
    free(text);
}

/* The file named by COMMINSIGHT_CONF: the operator chose the path (links along it, a mounted
 * ConfigMap's among them, are theirs or root's), but what it leads to must be a regular file
 * that only this user or root can change, reached through directories nobody else can write. Never blocks: a FIFO or device there is refused, not read. */
static void read_explicit(const char* path, const ci_config_v1_key_t* keys, size_t n, raw_value_t* raw) {
    char why[PATH_MAX + 256];
    if (ci_check_ancestors(path, why, sizeof(why)) != 0) {
        ci_warn("configuration file %s refused: %s; using the environment and defaults", path, why);
        return;
    }
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        ci_warn("cannot read configuration file %s: %s", path, strerror(errno));
        return;
    }
    if (ci_check_fd(fd, CI_KIND_FILE, true, why, sizeof(why)) != 0)
        ci_warn("configuration file %s refused: %s; using the environment and defaults", path, why);
    else read_fd(fd, path, keys, n, raw);
    close(fd);
}

/* <home>/etc/comminsight.conf of a trusted home, opened without following links. */
static void read_home_file(int home_fd, const char* path, const ci_config_v1_key_t* keys, size_t n,
                           raw_value_t* raw) {
    char why[160];
    int etc = ci_open_dir_at(home_fd, CI_HOME_V1_ETC, false, why, sizeof(why));
    if (etc < 0) {
        if (errno != ENOENT) ci_warn("configuration file %s refused: its directory %s", path, why);
        return;
    }
    int fd = ci_open_file_at(etc, CI_HOME_V1_COMMINSIGHT_CONF, O_RDONLY, CI_KIND_FILE, true, why, sizeof(why));
    close(etc);
    if (fd < 0) {
        if (errno != ENOENT) ci_warn("configuration file %s refused: %s; using the environment and defaults", path, why);
        return;
    }
    read_fd(fd, path, keys, n, raw);
    close(fd);
}

/* The text each key resolves to, after validation (default on error). */
static const char* resolved(const ci_config_v1_key_t* keys, raw_value_t* raw, int i) {
    if (!raw[i].set) return keys[i].default_text;
    char why[256];
    if (validate(&keys[i], raw[i].text, why, sizeof(why))) return raw[i].text;
    ci_warn("%s='%s' (%s): %s; using the default '%s'", keys[i].key, raw[i].text, raw[i].origin, why,
            keys[i].default_text);
    raw[i].set = false;
    return keys[i].default_text;
}

static long long as_int(const char* s) { return strtoll(s, NULL, 0); }
static bool as_bool(const char* s) {
    bool b = false;
    parse_bool(s, &b);
    return b;
}

void ci_config_file(char* path, size_t size) {
    const char* conf = getenv(CI_CONFIG_V1_CONF_KEY);
    const char* home_env = getenv(CI_CONFIG_V1_HOME_KEY);
    const char* home = home_env && *home_env ? home_env : CI_CONFIG_V1_HOME_DEFAULT;
    if (conf && *conf) snprintf(path, size, "%s", conf);
    else snprintf(path, size, "%.*s/" CI_HOME_V1_ETC "/" CI_HOME_V1_COMMINSIGHT_CONF, CI_HOME_MAX, home);
}

void ci_config_load(ci_config_t* cfg, int home_fd) {
    size_t n = 0;
    const ci_config_v1_key_t* keys = ci_config_v1_keys(&n);
    raw_value_t* raw = calloc(n, sizeof(*raw));
    if (!raw) return;
    /* The home and the file location come from the environment only. */
    const char* conf = getenv(CI_CONFIG_V1_CONF_KEY);
    char conf_path[CI_PATH_MAX];
    ci_config_file(conf_path, sizeof(conf_path));
    if (conf && *conf) read_explicit(conf_path, keys, n, raw);
    else if (home_fd >= 0) read_home_file(home_fd, conf_path, keys, n, raw);
    for (size_t i = 0; i < n; i++) {
        const char* v = getenv(keys[i].key);
        if (!v) continue;
        snprintf(raw[i].text, sizeof(raw[i].text), "%s", v);
        snprintf(raw[i].origin, sizeof(raw[i].origin), "environment");
        raw[i].set = true;
    }
#define TEXT(name) resolved(keys, raw, CI_CONFIG_V1_##name##_INDEX)
    /* A home too long to hold is refused at open (home.c says so and uses a private one); the
     * default is never put in its place. */
    const char* home_text = TEXT(HOME);
    if (strlen(home_text) >= sizeof(cfg->home)) home_text = "";
    snprintf(cfg->home, sizeof(cfg->home), "%s", home_text);
    cfg->agent_autostart = as_bool(TEXT(AGENT_AUTOSTART));
    cfg->event_mask = (int32_t)as_int(TEXT(PROFILER_EVENT_MASK));
    cfg->hang_timeout_s = strtod(TEXT(PROFILER_HANG_TIMEOUT_S), NULL);
    /* Where it came from decides whether the watchdog follows the Agent's (agent_settings.c):
     * only a value in this process's own environment is kept against it. */
    const raw_value_t* timeout = &raw[CI_CONFIG_V1_PROFILER_HANG_TIMEOUT_S_INDEX];
    cfg->hang_timeout_source = !timeout->set                               ? CI_SHM_V1_THRESHOLD_SOURCE_DEFAULT
                               : strcmp(timeout->origin, "environment") == 0 ? CI_SHM_V1_THRESHOLD_SOURCE_ENVIRONMENT
                                                                             : CI_SHM_V1_THRESHOLD_SOURCE_FILE;
    cfg->ring_slots = (uint32_t)as_int(TEXT(PROFILER_RING_SLOTS));
    cfg->comm_slots = (uint32_t)as_int(TEXT(PROFILER_COMM_SLOTS));
    cfg->event_pool = (uint32_t)as_int(TEXT(PROFILER_EVENT_POOL));
    cfg->heartbeat_ms = (uint32_t)as_int(TEXT(PROFILER_HEARTBEAT_MS));
    cfg->shm_enable = as_bool(TEXT(PROFILER_SHM_ENABLE));
    snprintf(cfg->shm_dir, sizeof(cfg->shm_dir), "%.*s", (int)sizeof(cfg->shm_dir) - 1, TEXT(PROFILER_SHM_DIR));
    cfg->log_enable = as_bool(TEXT(PROFILER_LOG_ENABLE));
    cfg->log_segment_bytes = (uint64_t)as_int(TEXT(PROFILER_LOG_SEGMENT_BYTES));
    cfg->log_segment_s = strtod(TEXT(PROFILER_LOG_SEGMENT_S), NULL);
    cfg->log_flush_ms = (uint32_t)as_int(TEXT(PROFILER_LOG_FLUSH_MS));
    cfg->log_zstd_level = (uint32_t)as_int(TEXT(PROFILER_LOG_ZSTD_LEVEL));
    cfg->log_compact = strcmp(TEXT(PROFILER_LOG_FORMAT), "inspector") != 0;
    snprintf(cfg->agent_bin, sizeof(cfg->agent_bin), "%s", TEXT(PROFILER_AGENT_BIN));
    cfg->debug = as_bool(TEXT(PROFILER_DEBUG));
    cfg->stale_region_grace_s = (uint64_t)as_int(TEXT(PROFILER_STALE_REGION_GRACE_S));
    cfg->hang_evidence = as_bool(TEXT(PROFILER_HANG_EVIDENCE));
    cfg->hang_evidence_max_s = strtod(TEXT(PROFILER_HANG_EVIDENCE_MAX_S), NULL);
    cfg->gpu_timing_all = strcmp(TEXT(PROFILER_GPU_TIMING), "all") == 0;
    cfg->gpu_timing_every = (uint32_t)as_int(TEXT(PROFILER_GPU_TIMING_EVERY));
    cfg->gpu_timing_period_ms = (uint32_t)as_int(TEXT(PROFILER_GPU_TIMING_PERIOD_MS));
    cfg->gpu_timing_quiet_ns = (uint64_t)as_int(TEXT(PROFILER_GPU_TIMING_QUIET_US)) * 1000u;
#undef TEXT
    /* The ring index is a mask: round a non-power-of-two up, and say so. */
    uint32_t slots = 1;
    while (slots < cfg->ring_slots && slots < (1u << 24)) slots <<= 1;
    if (slots != cfg->ring_slots)
        ci_warn("%s=%u is not a power of two; using %u", CI_CONFIG_V1_PROFILER_RING_SLOTS_KEY, cfg->ring_slots,
                slots);
    cfg->ring_slots = slots;
    if (cfg->event_pool > 0xFFFFFEu) cfg->event_pool = 0xFFFFFEu; /* handles carry a 24-bit index */
    free(raw);
}
