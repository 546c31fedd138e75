/* The Semantic Engine's per-op work, in C: what Python cannot do a million times a second.
 *
 * 1. ci_scan: inspector_logs lines -> one fixed-size row per line. A line is walked as JSON
 *    (strings, numbers, literals, nesting all checked) and its op fields are taken when it is
 *    a Coll/P2P line whose fields have exactly the types the Python decoder requires. Any
 *    other line (segment_start, gap, seal, NVIDIA Inspector lines, anything unusual: escapes,
 *    non-ASCII bytes, a float where an int belongs, malformed JSON) is marked CI_LINE_OTHER
 *    and decoded by the Python (msgspec) path, which also names what is wrong with it. So C
 *    only ever takes lines that Python would take the same way.
 *    Both forms of op line are taken: the Inspector form (header, coll_perf / p2p_perf, ci)
 *    and the compact form (one ci object of kind c or p with short keys).
 *    The communicator identity (the Inspector form's header object, or the same object made
 *    from a compact line's keys) and the function name repeat on every line: they are
 *    interned (an index into a table of distinct byte strings) and Python decodes each
 *    distinct one once.
 * 2. ci_reorder: the reorder window's releases (a min-heap on (issue time, arrival); the
 *    rule is in semantic/ops.py).
 * 3. ci_decide: a runner's decision per op from a (state, role, where-in-cycle) table, with
 *    the cycle tracker (semantic/recovery.py, cycle.py give the meaning).
 * 4. ci_place: ops into Steps and each Step's totals, in op order with the same sequence of
 *    float operations as step_builder.OpenStep.add (built with -ffp-contract=off), so the
 *    summaries are the same bytes whichever path made them.
 * 5. ci_cut_decide, ci_spans: a job cut's Steps as decision bits, and each Step's seq spans
 *    per communicator (step_builder, cut_runner give the meaning).
 */
#define _GNU_SOURCE /* memmem */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "comminsight/engine_core_v1.h" /* the column structs, Step rows and every prototype below */
#include "comminsight/inspector_log_v1.h"
#include "comminsight/shm_v1.h"

#define NONE INT64_MIN
/* The schema's spelling of a property name (F) and of a string value (V), from the header the
 * Profiler's log writer uses too: the scanner reads exactly what the schema says is written. */
#define F(name) CI_INSPECTOR_LOG_V1_F_##name
#define V(name) CI_INSPECTOR_LOG_V1_V_##name

/* ---- interned byte strings --------------------------------------------------------------- */

struct ci_engine_intern_v1 {
    int32_t cap, count;
    uint32_t mask;       /* open addressing over 2 * cap (a power of two) slots */
    int32_t* slots;      /* entry index + 1, 0 when free */
    uint64_t* hashes;
    int64_t* offs;
    int32_t* lens;
    char* arena;
    int64_t arena_cap, arena_used;
};

void ci_intern_free(ci_engine_intern_v1_t* t) {
    if (!t) return;
    free(t->slots);
    free(t->hashes);
    free(t->offs);
    free(t->lens);
    free(t->arena);
    free(t);
}

ci_engine_intern_v1_t* ci_intern_new(int32_t cap, int64_t arena_cap) {
    ci_engine_intern_v1_t* t = calloc(1, sizeof *t);
    if (!t) return NULL;
    uint32_t slots = 1;
    while (slots < 2u * (uint32_t)cap) slots <<= 1;
    t->cap = cap;
    t->mask = slots - 1;
    t->slots = calloc(slots, sizeof *t->slots);
    t->hashes = calloc((size_t)cap, sizeof *t->hashes);
    t->offs = calloc((size_t)cap, sizeof *t->offs);
    t->lens = calloc((size_t)cap, sizeof *t->lens);
    t->arena = malloc((size_t)arena_cap);
    t->arena_cap = arena_cap;
    if (!t->slots || !t->hashes || !t->offs || !t->lens || !t->arena) {
        ci_intern_free(t);
        return NULL;
    }
    return t;
}

int32_t ci_intern_count(const ci_engine_intern_v1_t* t) { return t->count; }

const char* ci_intern_bytes(const ci_engine_intern_v1_t* t, int32_t i, int32_t* len) {
    *len = t->lens[i];
    return t->arena + t->offs[i];
}

/* FNV-1a over 8-byte words (then the tail) of at most the first 48 bytes and the length:
 * equality is checked by memcmp anyway, and interned strings (headers) differ early. */
static uint64_t fnv1a(const char* s, int64_t n) {
    uint64_t h = 1469598103934665603ull ^ (uint64_t)n;
    int64_t i = 0;
    if (n > 48) n = 48;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 1099511628211ull;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

/* The index of the byte string s[0..n); -1 when the table is full. */
static int32_t intern(ci_engine_intern_v1_t* t, const char* s, int64_t n) {
    uint64_t h = fnv1a(s, n);
    for (uint32_t k = (uint32_t)h & t->mask;; k = (k + 1) & t->mask) {
        int32_t e = t->slots[k];
        if (!e) break;
        e--;
        if (t->hashes[e] == h && t->lens[e] == n && memcmp(t->arena + t->offs[e], s, (size_t)n) == 0)
            return e;
    }
    if (t->count >= t->cap || t->arena_used + n > t->arena_cap) return -1;
    int32_t e = t->count++;
    t->hashes[e] = h;
    t->offs[e] = t->arena_used;
    t->lens[e] = (int32_t)n;
    memcpy(t->arena + t->arena_used, s, (size_t)n);
    t->arena_used += n;
    uint32_t k = (uint32_t)h & t->mask;
    while (t->slots[k]) k = (k + 1) & t->mask;
    t->slots[k] = e + 1;
    return e;
}

/* ---- a strict JSON walker over one line ------------------------------------------------- */

typedef struct {
    const char* p;
    const char* end;
    int depth;
} cur_t;

enum { MAX_DEPTH = 64 };

static inline void ws(cur_t* c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r' || *c->p == '\n')) c->p++;
}

static inline int eat(cur_t* c, char ch) {
    ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

static int hexdigit(char ch) {
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
}

/* Bytes a string scan must stop at: the quote, the backslash, control and non-ASCII bytes. */
static const uint8_t STRING_STOP[256] = {
    [0 ... 0x1f] = 1, ['"'] = 1, ['\\'] = 1, [0x80 ... 0xff] = 1,
};

/* A string at c->p (after whitespace). Its raw bytes are s[0..n); *plain says it has no escape.
 * Non-ASCII bytes are refused: UTF-8 checking is left to the Python decoder. */
static int string(cur_t* c, const char** s, int64_t* n, int* plain) {
    ws(c);
    if (c->p >= c->end || *c->p != '"') return 0;
    const char* q = ++c->p;
    int escaped = 0;
    for (;;) {
#ifdef __SSE2__
        /* 16 bytes at a time: a quote, a backslash, or a byte < 0x20 as signed (control
         * and non-ASCII bytes) stops the scan */
        const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'),
                      space = _mm_set1_epi8(0x20);
        while (q + 16 <= c->end) {
            __m128i v = _mm_loadu_si128((const __m128i*)q);
            __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                                        _mm_cmplt_epi8(v, space));
            int mask = _mm_movemask_epi8(stop);
            if (mask) {
                q += __builtin_ctz((unsigned)mask);
                goto found;
            }
            q += 16;
        }
#endif
        while (q < c->end && !STRING_STOP[(uint8_t)*q]) q++;
#ifdef __SSE2__
    found:
#endif
        if (q >= c->end) return 0;
        unsigned char ch = (unsigned char)*q;
        if (ch == '"') {
            *s = c->p;
            *n = q - c->p;
            *plain = !escaped;
            c->p = q + 1;
            return 1;
        }
        if (ch != '\\') return 0; /* a control or non-ASCII byte */
        escaped = 1;
        if (q + 1 >= c->end) return 0;
        char e = q[1];
        if (e == 'u') {
            if (q + 6 > c->end || !hexdigit(q[2]) || !hexdigit(q[3]) || !hexdigit(q[4]) || !hexdigit(q[5]))
                return 0;
            q += 6;
            continue;
        }
        if (e == 0 || !strchr("\"\\/bfnrt", e)) return 0;
        q += 2;
    }
}

enum { NUM_INT = 1, NUM_FLOAT = 2 };

static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                               1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                               1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* A JSON number. *iv holds it when it is an integer that fits int64. With dv, *dv is the
 * nearest double (as strtod, which a decimal with few digits does not need: digits < 2^53
 * divided by an exact power of ten is one correctly rounded operation). */
static int number(cur_t* c, int64_t* iv, double* dv) {
    ws(c);
    const char* s = c->p;
    const char* q = s;
    int neg = 0;
    if (q < c->end && *q == '-') {
        neg = 1;
        q++;
    }
    if (q >= c->end || *q < '0' || *q > '9') return 0;
    uint64_t mag = 0;
    int overflow = 0;
    if (*q == '0') {
        q++;
    } else {
        while (q < c->end && *q >= '0' && *q <= '9') {
            unsigned d = (unsigned)(*q - '0');
            if (mag > (UINT64_MAX - d) / 10) overflow = 1;
            mag = mag * 10 + d;
            q++;
        }
    }
    int is_int = 1, frac_digits = 0;
    uint64_t mant = mag;
    if (q < c->end && *q == '.') {
        is_int = 0;
        q++;
        if (q >= c->end || *q < '0' || *q > '9') return 0;
        while (q < c->end && *q >= '0' && *q <= '9') {
            if (mant <= (UINT64_MAX - 9) / 10) {
                mant = mant * 10 + (unsigned)(*q - '0');
                frac_digits++;
            } else {
                overflow = 1;
            }
            q++;
        }
    }
    int has_exp = 0;
    if (q < c->end && (*q == 'e' || *q == 'E')) {
        is_int = 0;
        has_exp = 1;
        q++;
        if (q < c->end && (*q == '+' || *q == '-')) q++;
        if (q >= c->end || *q < '0' || *q > '9') return 0;
        while (q < c->end && *q >= '0' && *q <= '9') q++;
    }
    c->p = q;
    if (dv) {
        if (!has_exp && !overflow && mant < (1ull << 53) && frac_digits <= 22) {
            double v = (double)mant / POW10[frac_digits];
            *dv = neg ? -v : v;
        } else {
            char tmp[64];
            if (q - s >= (int64_t)sizeof tmp) return 0;
            memcpy(tmp, s, (size_t)(q - s));
            tmp[q - s] = 0;
            *dv = strtod(tmp, NULL);
            if (*dv > DBL_MAX || *dv < -DBL_MAX) return 0; /* out of range: Python names it */
        }
    }
    if (!is_int) return NUM_FLOAT;
    if (overflow || mag > (uint64_t)INT64_MAX + (uint64_t)neg) return NUM_FLOAT; /* not an int64 */
    *iv = neg ? (int64_t)(0 - mag) : (int64_t)mag;
    return NUM_INT;
}

static int literal_n(cur_t* c, const char* word, size_t n) {
    ws(c);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, word, n) == 0) {
        c->p += n;
        return 1;
    }
    return 0;
}

#define literal(c, word) literal_n((c), (word), sizeof(word) - 1)

static int skip_value(cur_t* c);

static int skip_object(cur_t* c) {
    if (!eat(c, '{')) return 0;
    if (++c->depth > MAX_DEPTH) return 0;
    if (eat(c, '}')) {
        c->depth--;
        return 1;
    }
    for (;;) {
        const char* s;
        int64_t n;
        int plain;
        if (!string(c, &s, &n, &plain) || !eat(c, ':') || !skip_value(c)) return 0;
        if (eat(c, ',')) continue;
        if (eat(c, '}')) break;
        return 0;
    }
    c->depth--;
    return 1;
}

static int skip_array(cur_t* c) {
    if (!eat(c, '[')) return 0;
    if (++c->depth > MAX_DEPTH) return 0;
    if (eat(c, ']')) {
        c->depth--;
        return 1;
    }
    for (;;) {
        if (!skip_value(c)) return 0;
        if (eat(c, ',')) continue;
        if (eat(c, ']')) break;
        return 0;
    }
    c->depth--;
    return 1;
}

static int skip_value(cur_t* c) {
    ws(c);
    if (c->p >= c->end) return 0;
    switch (*c->p) {
    case '{': return skip_object(c);
    case '[': return skip_array(c);
    case '"': {
        const char* s;
        int64_t n;
        int plain;
        return string(c, &s, &n, &plain);
    }
    case 't': return literal(c, "true");
    case 'f': return literal(c, "false");
    case 'n': return literal(c, "null");
    default: {
        int64_t iv;
        return number(c, &iv, NULL) != 0;
    }
    }
}

static inline int key_n(const char* s, int64_t n, const char* k, int64_t kn) {
    return kn == n && memcmp(s, k, (size_t)n) == 0;
}
/* k is a string literal: its length is known at compile time */
#define key_is(s, n, k) key_n((s), (n), (k), (int64_t)sizeof(k) - 1)

/* int | None field: *v = the int, or NONE for null. */
static int opt_int(cur_t* c, int64_t* v) {
    ws(c);
    if (c->p < c->end && *c->p == 'n') {
        *v = NONE;
        return literal(c, "null");
    }
    return number(c, v, NULL) == NUM_INT;
}

static int req_int(cur_t* c, int64_t* v) { return number(c, v, NULL) == NUM_INT; }

/* A call's userProfilerTag as the engine keeps it (log_input._user_tag): the integer, or 0 for
 * one NCCL reserves (the top bit set: above INT64_MAX, up to UINT64_MAX). Anything else (a
 * sign, a fraction, more than 64 bits) is not read here: the line is Python's. */
static int tag_int(cur_t* c, int64_t* v) {
    ws(c);
    const char* q = c->p;
    uint64_t mag = 0;
    if (q >= c->end || *q < '0' || *q > '9') return 0;
    if (*q == '0' && q + 1 < c->end && q[1] >= '0' && q[1] <= '9') return 0;
    while (q < c->end && *q >= '0' && *q <= '9') {
        unsigned d = (unsigned)(*q - '0');
        if (mag > (UINT64_MAX - d) / 10) return 0;
        mag = mag * 10 + d;
        q++;
    }
    if (q < c->end && (*q == '.' || *q == 'e' || *q == 'E')) return 0;
    c->p = q;
    *v = mag > (uint64_t)INT64_MAX ? 0 : (int64_t)mag;
    return 1;
}

/* ---- one line -> one row ---------------------------------------------------------------- */

enum { CI_LINE_OP = CI_ENGINE_V1_LINE_KIND_OP, CI_LINE_OTHER = CI_ENGINE_V1_LINE_KIND_OTHER };
enum { KIND_COLL = 0, KIND_P2P = 1 };

typedef struct ci_line {
    int64_t start, end; /* the line's first byte, and the byte after its '\n' */
    int64_t seq, size, peer, ring_seq;
    int64_t host_start, host_complete, gpu_start, gpu_stop;
    int64_t group_id; /* the op's NCCL group, 0 when the line has none */
    int64_t user_tag; /* the call's userProfilerTag (ABI v7), 0 when the line has none */
    double exec_us, busbw;
    int32_t status, kind, header, func, kernel_timing;
    int32_t datatype; /* the shm protocol's datatype code; UNKNOWN when the line names none */
} ci_line_t;

typedef struct {
    int present;
    const char* func;
    int64_t func_n;
    int64_t seq, size, peer;
    double exec_us, busbw;
    int kernel_timing;
} perf_t;

typedef struct {
    const char* s;
    int64_t n;
} json_key_t;
#define K(lit) {lit, sizeof(lit) - 1}
typedef struct {
    json_key_t func, sn, size, exec, bw, timing, peer;
} perf_keys_t;
#define KEYS(P) K(F(P)), K(F(P##_SN)), K(F(P##_MSG_SIZE_BYTES)), K(F(P##_EXEC_TIME_US)), \
                K(F(P##_BUSBW_GBS)), K(F(P##_TIMING_SOURCE))
static const perf_keys_t COLL_KEYS = {KEYS(COLL), {NULL, 0}}; /* a collective has no peer */
static const perf_keys_t P2P_KEYS = {KEYS(P2P), K(F(P2P_PEER))};

static inline int key_s(const char* s, int64_t n, json_key_t k) { return key_n(s, n, k.s, k.n); }

/* coll_perf / p2p_perf (their keys are prefixed "coll" or "p2p"). */
static int perf(cur_t* c, perf_t* out, int p2p_keys) {
    ws(c);
    if (c->p < c->end && *c->p == 'n') return literal(c, "null"); /* None: not present */
    if (!eat(c, '{')) return 0;
    int have_func = 0, have_sn = 0, have_size = 0;
    out->peer = NONE;
    out->exec_us = 0.0;
    out->busbw = 0.0;
    out->kernel_timing = 0;
    const perf_keys_t* K = p2p_keys ? &P2P_KEYS : &COLL_KEYS;
    int is_p2p = p2p_keys;
    if (!eat(c, '}')) {
        for (;;) {
            const char* k;
            int64_t kn;
            int plain;
            if (!string(c, &k, &kn, &plain) || !plain || !eat(c, ':')) return 0;
            if (key_s(k, kn, K->func)) {
                if (have_func || !string(c, &out->func, &out->func_n, &plain) || !plain) return 0;
                have_func = 1;
            } else if (key_s(k, kn, K->sn)) {
                if (have_sn || !req_int(c, &out->seq)) return 0;
                have_sn = 1;
            } else if (key_s(k, kn, K->size)) {
                if (have_size || !req_int(c, &out->size)) return 0;
                have_size = 1;
            } else if (key_s(k, kn, K->exec)) {
                int64_t iv;
                if (!number(c, &iv, &out->exec_us)) return 0;
            } else if (key_s(k, kn, K->bw)) {
                ws(c);
                if (c->p < c->end && *c->p == 'n') {
                    if (!literal(c, "null")) return 0;
                    out->busbw = 0.0;
                } else {
                    int64_t iv;
                    if (!number(c, &iv, &out->busbw)) return 0; /* a string ("nan"): Python */
                }
            } else if (key_s(k, kn, K->timing)) {
                ws(c);
                if (c->p < c->end && *c->p == 'n') {
                    if (!literal(c, "null")) return 0;
                    out->kernel_timing = 0;
                } else {
                    const char* s;
                    int64_t n;
                    if (!string(c, &s, &n, &plain) || !plain) return 0;
                    out->kernel_timing = key_is(s, n, "kernel_gpu");
                }
            } else if (is_p2p && key_s(k, kn, K->peer)) {
                if (!opt_int(c, &out->peer)) return 0;
            } else if (!is_p2p && key_is(k, kn, F(EVENT_TRACE_TS))) {
                ws(c);
                if (!literal(c, "null")) return 0; /* an object: Python */
            } else if (!skip_value(c)) {
                return 0;
            }
            if (eat(c, ',')) continue;
            if (eat(c, '}')) break;
            return 0;
        }
    }
    if (!have_func || !have_sn || !have_size) return 0;
    out->present = 1;
    return 1;
}

static int metadata(cur_t* c) {
    ws(c);
    if (c->p < c->end && *c->p == 'n') return literal(c, "null");
    if (!eat(c, '{')) return 0;
    if (eat(c, '}')) return 1;
    for (;;) {
        const char* k;
        int64_t kn;
        int plain;
        int64_t iv;
        if (!string(c, &k, &kn, &plain) || !plain || !eat(c, ':')) return 0;
        if (key_is(k, kn, F(DUMP_TIMESTAMP_US))) {
            if (!req_int(c, &iv)) return 0;
        } else if (key_is(k, kn, F(PID))) {
            if (!opt_int(c, &iv)) return 0;
        } else if (key_is(k, kn, F(HOSTNAME))) {
            ws(c);
            if (c->p < c->end && *c->p == 'n') {
                if (!literal(c, "null")) return 0;
            } else {
                const char* s;
                int64_t n;
                if (!string(c, &s, &n, &plain)) return 0;
            }
        } else if (!skip_value(c)) {
            return 0;
        }
        if (eat(c, ',')) continue;
        if (eat(c, '}')) return 1;
        return 0;
    }
}

/* A raw JSON token of a line: a string's body (between its quotes) or a number's text. */
typedef struct {
    const char* s;
    int64_t n;
} span_t;

/* The keys of a compact op line that the engine reads, one bit each. */
enum {
    CK_COMM = 1 << 0, CK_NAME = 1 << 1, CK_RANK = 1 << 2, CK_NRANKS = 1 << 3, CK_NNODES = 1 << 4, CK_FUNC = 1 << 5,
    CK_SEQ = 1 << 6, CK_SIZE = 1 << 7, CK_PEER = 1 << 8, CK_TIMING = 1 << 9, CK_BW = 1 << 10, CK_START = 1 << 11,
    CK_COMPLETE = 1 << 12, CK_G0 = 1 << 13, CK_GD = 1 << 14, CK_GROUP = 1 << 15, CK_DATATYPE = 1 << 16,
    CK_USER_TAG = 1 << 17,
};

/* What a compact op line (kinds c and p) holds beside the fields ci_obj_t shares with the
 * Inspector form; `seen` has a bit per key read (a key met twice is left to Python). */
typedef struct {
    uint32_t seen;
    span_t comm, name, rank, nranks, nnodes, func, datatype;
    int64_t ring_seq, seq, size, peer, start, complete_after, gpu_start, gpu_length, group, user_tag;
    double busbw;
    int kernel_timing;
} compact_t;

typedef struct {
    int present;
    const char* kind;
    int64_t kind_n;
    int64_t ring_seq, host_start, host_complete, gpu_start, gpu_stop, group_id, user_tag;
    span_t datatype;
    compact_t compact;
} ci_obj_t;

static const json_key_t CI_INT_KEYS[] = {K(F(SEGMENT_INDEX)),  K(F(LOST_COUNT)),     K(F(RECORD_COUNT)),
                                         K(F(BYTE_COUNT)),     K(F(CRC32)),          K(F(FIRST_RING_SEQ)),
                                         K(F(LAST_RING_SEQ)), {NULL, 0}};

/* An integer (not null) and the text it was read from. */
static int int_span(cur_t* c, int64_t* v, span_t* text) {
    ws(c);
    text->s = c->p;
    if (!req_int(c, v)) return 0;
    text->n = c->p - text->s;
    return 1;
}

/* A plain string (no escape): the engine compares its bytes. */
static int plain_string(cur_t* c, span_t* out) {
    int plain;
    return string(c, &out->s, &out->n, &plain) && plain;
}

/* One key of a compact op line, k[0..kn) with kn <= 2: 1 read, 0 not readable here (the line
 * goes to Python), -1 not a key the engine reads (skipped by the caller). Every value must
 * have the type the lean Python struct gives its field, or the line is Python's. */
static int compact_key(cur_t* c, const char* k, int64_t kn, compact_t* o) {
    uint32_t bit;
    int64_t iv;
    span_t text;
    char k0 = k[0], k1 = kn > 1 ? k[1] : 0;
#define IS(lit) (kn == (int64_t)sizeof(lit) - 1 && k0 == (lit)[0] && k1 == (lit)[1])
    if (IS(F(C))) bit = CK_COMM;
    else if (IS(F(CN))) bit = CK_NAME;
    else if (IS(F(R))) bit = CK_RANK;
    else if (IS(F(N))) bit = CK_NRANKS;
    else if (IS(F(NN))) bit = CK_NNODES;
    else if (IS(F(F))) bit = CK_FUNC;
    else if (IS(F(S))) bit = CK_SEQ;
    else if (IS(F(B))) bit = CK_SIZE;
    else if (IS(F(PE))) bit = CK_PEER;
    else if (IS(F(TS))) bit = CK_TIMING;
    else if (IS(F(BW))) bit = CK_BW;
    else if (IS(F(H))) bit = CK_START;
    else if (IS(F(HC))) bit = CK_COMPLETE;
    else if (IS(F(G0))) bit = CK_G0;
    else if (IS(F(GD))) bit = CK_GD;
    else if (IS(F(GR))) bit = CK_GROUP;
    else if (IS(F(D))) bit = CK_DATATYPE;
    else if (IS(F(UT))) bit = CK_USER_TAG;
    else return -1;
#undef IS
    if (o->seen & bit) return 0;
    o->seen |= bit;
    ws(c);
    int null = c->p < c->end && *c->p == 'n';
    if (null) return 0; /* absent by another name: Python tells what that means */
    switch (bit) {
    case CK_COMM: return plain_string(c, &o->comm);
    case CK_NAME: {
        int plain; /* escapes stay as written: the identity is JSON text */
        return string(c, &o->name.s, &o->name.n, &plain);
    }
    case CK_RANK: return int_span(c, &iv, &o->rank);
    case CK_NRANKS: return int_span(c, &iv, &o->nranks);
    case CK_NNODES: return int_span(c, &iv, &o->nnodes);
    case CK_FUNC: return plain_string(c, &o->func);
    case CK_SEQ: return req_int(c, &o->seq);
    case CK_SIZE: return req_int(c, &o->size);
    case CK_PEER: return req_int(c, &o->peer);
    case CK_TIMING:
        if (!plain_string(c, &text)) return 0;
        o->kernel_timing = key_is(text.s, text.n, V(KERNEL_GPU));
        return 1;
    case CK_BW: return number(c, &iv, &o->busbw) != 0;
    case CK_START: return req_int(c, &o->start);
    case CK_COMPLETE: return req_int(c, &o->complete_after);
    case CK_G0: return req_int(c, &o->gpu_start);
    case CK_GD: return req_int(c, &o->gpu_length);
    case CK_DATATYPE: return plain_string(c, &o->datatype);
    case CK_USER_TAG: return tag_int(c, &o->user_tag);
    default: return req_int(c, &o->group);
    }
}

static int ci_object(cur_t* c, ci_obj_t* o) {
    ws(c);
    if (c->p < c->end && *c->p == 'n') return literal(c, "null");
    if (!eat(c, '{')) return 0;
    o->ring_seq = o->host_start = o->host_complete = o->gpu_start = o->gpu_stop = NONE;
    o->group_id = o->user_tag = 0;
    memset(&o->compact, 0, sizeof o->compact);
    o->compact.ring_seq = NONE;
    int have_kind = 0;
    if (!eat(c, '}')) {
        for (;;) {
            const char* k;
            int64_t kn;
            int plain;
            int64_t iv;
            if (!string(c, &k, &kn, &plain) || !plain || !eat(c, ':')) return 0;
            int short_key = kn <= 2 && kn > 0 ? compact_key(c, k, kn, &o->compact) : -1;
            if (short_key == 0) return 0;
            if (short_key == 1) {
                /* read */
            } else if (key_is(k, kn, F(Q))) {
                if (!opt_int(c, &o->compact.ring_seq)) return 0;
            } else if (key_is(k, kn, F(KIND))) {
                if (have_kind || !string(c, &o->kind, &o->kind_n, &plain) || !plain) return 0;
                have_kind = 1;
            } else if (key_is(k, kn, F(RING_SEQ))) {
                if (!opt_int(c, &o->ring_seq)) return 0;
            } else if (key_is(k, kn, F(HOST_START_MONO_NS))) {
                if (!opt_int(c, &o->host_start)) return 0;
            } else if (key_is(k, kn, F(HOST_COMPLETE_MONO_NS))) {
                if (!opt_int(c, &o->host_complete)) return 0;
            } else if (key_is(k, kn, F(GPU_START_GLOBALTIMER_NS))) {
                if (!opt_int(c, &o->gpu_start)) return 0;
            } else if (key_is(k, kn, F(GPU_STOP_GLOBALTIMER_NS))) {
                if (!opt_int(c, &o->gpu_stop)) return 0;
            } else if (key_is(k, kn, F(DATATYPE))) {
                if (o->datatype.s || !plain_string(c, &o->datatype)) return 0;
            } else if (key_is(k, kn, F(GROUP_ID))) {
                if (!opt_int(c, &o->group_id)) return 0;
                if (o->group_id < 0) o->group_id = 0; /* null: unknown */
            } else if (key_is(k, kn, F(USER_TAG))) {
                ws(c);
                if (c->p < c->end && *c->p == 'n') {
                    if (!literal(c, "null")) return 0;
                } else if (!tag_int(c, &o->user_tag)) {
                    return 0;
                }
            } else if (key_is(k, kn, F(PROCESS)) || key_is(k, kn, F(CLOCK))) {
                if (!literal(c, "null")) return 0; /* segment_start: Python */
            } else {
                int typed = 0;
                for (const json_key_t* t = CI_INT_KEYS; t->s; t++) {
                    if (key_s(k, kn, *t)) {
                        typed = 1;
                        break;
                    }
                }
                if (typed ? !opt_int(c, &iv) : !skip_value(c)) return 0;
            }
            if (eat(c, ',')) continue;
            if (eat(c, '}')) break;
            return 0;
        }
    }
    if (!have_kind) return 0;
    o->present = 1;
    return 1;
}

/* The shm protocol's code of a datatype name as the writer spells it (its label), UNKNOWN for
 * a name it has none for or no name: the engine tells counts from values by it. */
static int32_t datatype_code(const char* s, int64_t n) {
    /* a run's ops mostly share a few types: the one found last is tried first */
    static _Thread_local int32_t last = CI_SHM_V1_DATATYPE_FLOAT32;
    if (!s) return CI_SHM_V1_DATATYPE_UNKNOWN;
    const char* label = ci_shm_v1_datatype_label((uint8_t)last);
    if (label && key_n(s, n, label, (int64_t)strlen(label))) return last;
    for (int32_t v = CI_SHM_V1_DATATYPE_INT8; v <= CI_SHM_V1_DATATYPE_FLOAT8_E5M2; v++) {
        label = ci_shm_v1_datatype_label((uint8_t)v);
        if (label && key_n(s, n, label, (int64_t)strlen(label))) return last = v;
    }
    return CI_SHM_V1_DATATYPE_UNKNOWN;
}

/* Bytes appended at *at, if they fit before end. */
static int append(char** at, const char* end, const char* s, int64_t n) {
    if (n < 0 || n > end - *at) return 0;
    memcpy(*at, s, (size_t)n);
    *at += n;
    return 1;
}
#define APPEND(at, end, lit) append((at), (end), (lit), (int64_t)sizeof(lit) - 1)

/* A compact op line's row. Its communicator identity is interned as the Inspector form's
 * header object would be (`{"id":..,"rank":..,"n_ranks":..,"nnodes":..,"comm_name":..}`, from
 * the line's own text), so Python decodes each distinct one once, whichever form it came in.
 * Host and GPU times are put back from their offsets; a sum out of int64 leaves the time out,
 * as Python's reading does. */
static int32_t compact_row(const compact_t* o, int kind, ci_line_t* row, ci_engine_intern_v1_t* headers,
                           ci_engine_intern_v1_t* funcs) {
    /* what the Python reader needs too */
    const uint32_t needed = CK_COMM | CK_RANK | CK_NRANKS | CK_FUNC | CK_SEQ | CK_SIZE;
    if ((o->seen & needed) != needed) return CI_LINE_OTHER;
    char identity[512], *at = identity, *end = identity + sizeof identity;
    int ok = APPEND(&at, end, "{\"" F(ID) "\":\"") && append(&at, end, o->comm.s, o->comm.n) &&
             APPEND(&at, end, "\",\"" F(RANK) "\":") && append(&at, end, o->rank.s, o->rank.n) &&
             APPEND(&at, end, ",\"" F(N_RANKS) "\":") && append(&at, end, o->nranks.s, o->nranks.n);
    if (ok && o->nnodes.s)
        ok = APPEND(&at, end, ",\"" F(NNODES) "\":") && append(&at, end, o->nnodes.s, o->nnodes.n);
    if (ok && o->name.s)
        ok = APPEND(&at, end, ",\"" F(COMM_NAME) "\":\"") && append(&at, end, o->name.s, o->name.n) &&
             APPEND(&at, end, "\"");
    if (!ok || !APPEND(&at, end, "}")) return CI_LINE_OTHER; /* a very long name: Python */
    row->kind = kind;
    row->header = intern(headers, identity, at - identity);
    row->func = intern(funcs, o->func.s, o->func.n);
    if (row->header < 0 || row->func < 0) return CI_LINE_OTHER;
    row->seq = o->seq;
    row->size = o->size;
    row->peer = kind == KIND_P2P && (o->seen & CK_PEER) ? o->peer : NONE;
    row->exec_us = 0.0; /* no execution time: the GPU span, else the host span */
    row->busbw = o->busbw;
    row->kernel_timing = o->kernel_timing;
    row->ring_seq = o->ring_seq;
    if ((o->seen & CK_START) && o->start < 0) return CI_LINE_OTHER; /* the schema's minimum */
    int64_t start = (o->seen & CK_START) ? o->start : 0;
    row->host_start = (o->seen & CK_START) ? o->start : NONE;
    row->host_complete = NONE;
    int64_t sum;
    if ((o->seen & CK_COMPLETE) && !__builtin_add_overflow(start, o->complete_after, &sum) && sum >= 0)
        row->host_complete = sum;
    row->gpu_start = row->gpu_stop = NONE;
    /* the span's length is negative where the GPU's clock reads disagree (the Inspector form
     * writes such ticks as they are, and so does this) */
    if ((o->seen & (CK_G0 | CK_GD)) == (CK_G0 | CK_GD) && o->gpu_start >= 0 &&
        !__builtin_add_overflow(o->gpu_start, o->gpu_length, &sum) && sum >= 0) {
        row->gpu_start = o->gpu_start;
        row->gpu_stop = sum;
    }
    row->group_id = (o->seen & CK_GROUP) ? o->group : 0;
    row->user_tag = (o->seen & CK_USER_TAG) ? o->user_tag : 0;
    row->datatype = (o->seen & CK_DATATYPE) ? datatype_code(o->datatype.s, o->datatype.n) : CI_SHM_V1_DATATYPE_UNKNOWN;
    return CI_LINE_OP;
}

static int32_t scan_line(const char* s, const char* e, ci_line_t* row, ci_engine_intern_v1_t* headers,
                         ci_engine_intern_v1_t* funcs) {
    cur_t c = {s, e, 0};
    perf_t coll = {0}, p2p = {0};
    ci_obj_t ci = {0};
    const char* header = NULL;
    int64_t header_n = 0;
    int seen_header = 0, seen_meta = 0;
    if (!eat(&c, '{') || eat(&c, '}')) return CI_LINE_OTHER;
    for (;;) {
        const char* k;
        int64_t kn;
        int plain;
        if (!string(&c, &k, &kn, &plain) || !plain || !eat(&c, ':')) return CI_LINE_OTHER;
        if (key_is(k, kn, F(HEADER))) {
            ws(&c);
            if (seen_header++ || c.p >= c.end || *c.p != '{') return CI_LINE_OTHER;
            header = c.p;
            if (!skip_object(&c)) return CI_LINE_OTHER;
            header_n = c.p - header;
        } else if (key_is(k, kn, F(METADATA))) {
            if (seen_meta++ || !metadata(&c)) return CI_LINE_OTHER;
        } else if (key_is(k, kn, F(COLL_PERF))) {
            if (coll.present || !perf(&c, &coll, 0)) return CI_LINE_OTHER;
        } else if (key_is(k, kn, F(P2P_PERF))) {
            if (p2p.present || !perf(&c, &p2p, 1)) return CI_LINE_OTHER;
        } else if (key_is(k, kn, F(CI))) {
            if (ci.present || !ci_object(&c, &ci)) return CI_LINE_OTHER;
        } else if (!skip_value(&c)) {
            return CI_LINE_OTHER;
        }
        if (eat(&c, ',')) continue;
        if (eat(&c, '}')) break;
        return CI_LINE_OTHER;
    }
    ws(&c);
    if (c.p != c.end || !ci.present) return CI_LINE_OTHER;
    int compact_kind = key_is(ci.kind, ci.kind_n, V(C))   ? KIND_COLL
                       : key_is(ci.kind, ci.kind_n, V(P)) ? KIND_P2P
                                                          : -1;
    if (compact_kind >= 0) {
        /* a compact line carries no Inspector object: one that does is Python's to name */
        if (seen_header || seen_meta || coll.present || p2p.present) return CI_LINE_OTHER;
        return compact_row(&ci.compact, compact_kind, row, headers, funcs);
    }
    if (!header) return CI_LINE_OTHER;
    const perf_t* p;
    if (key_is(ci.kind, ci.kind_n, V(COLL)) && coll.present) {
        p = &coll;
        row->kind = KIND_COLL;
    } else if (key_is(ci.kind, ci.kind_n, V(P2P)) && p2p.present) {
        p = &p2p;
        row->kind = KIND_P2P;
    } else {
        return CI_LINE_OTHER;
    }
    row->header = intern(headers, header, header_n);
    row->func = intern(funcs, p->func, p->func_n);
    if (row->header < 0 || row->func < 0) return CI_LINE_OTHER;
    row->seq = p->seq;
    row->size = p->size;
    row->peer = p->peer;
    row->exec_us = p->exec_us;
    row->busbw = p->busbw;
    row->kernel_timing = p->kernel_timing;
    row->ring_seq = ci.ring_seq;
    row->host_start = ci.host_start;
    row->host_complete = ci.host_complete;
    row->gpu_start = ci.gpu_start;
    row->gpu_stop = ci.gpu_stop;
    row->group_id = ci.group_id;
    row->user_tag = ci.user_tag;
    row->datatype = datatype_code(ci.datatype.s, ci.datatype.n);
    return CI_LINE_OP;
}

/* ---- the writer's own lines, in a segment whose seal checksum matched -------------------- *
 *
 * Such a line is byte for byte what profiler/src/logwriter.c wrote through the encoders
 * generated from the inspector-log schema: valid JSON with its keys in the schema's order. It
 * is read by the decoders generated from the same schema (layout_line), which compare the
 * literal text between values and read only the values the engine uses, instead of walking
 * every token. Searches are only for sequences that begin with a raw quote after a '}' or
 * ',', which cannot occur inside a JSON string (a quote there is escaped), so the first match
 * is the structural one. Anything unexpected returns 0 and the line is walked as any other. */

/* Whether the n bytes at a are those at b, in word-sized compares (n is a constant at every
 * use: unrolled, no call). */
static inline __attribute__((always_inline)) int same(const char* a, const char* b, size_t n) {
    for (; n >= 8; a += 8, b += 8, n -= 8) {
        uint64_t x, y;
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        if (x != y) return 0;
    }
    if (n >= 4) {
        uint32_t x, y;
        memcpy(&x, a, 4);
        memcpy(&y, b, 4);
        if (x != y) return 0;
        a += 4, b += 4, n -= 4;
    }
    for (; n; a++, b++, n--)
        if (*a != *b) return 0;
    return 1;
}

#define LIT(p, e, lit) ((e) - (p) >= (int64_t)sizeof(lit) - 1 && same((p), (lit), sizeof(lit) - 1))

/* The first `needle` (n >= 2 bytes) in [p, e), for needles whose first byte is frequent in
 * JSON (a comma): candidates are positions whose first and last bytes both match, sixteen
 * at a time (SSE2), and only those are compared. */
static inline __attribute__((always_inline)) const char* find_pair(const char* p, const char* e,
                                                                   const char* needle, size_t n) {
    if (e - p < (int64_t)n) return NULL;
    const char* stop = e - n + 1; /* candidates begin before it */
#ifdef __SSE2__
    const __m128i first = _mm_set1_epi8(needle[0]), last = _mm_set1_epi8(needle[n - 1]);
    for (; stop - p >= 16; p += 16) {
        __m128i a = _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i*)p), first);
        __m128i b = _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i*)(p + n - 1)), last);
        unsigned mask = (unsigned)_mm_movemask_epi8(_mm_and_si128(a, b));
        while (mask) {
            int i = __builtin_ctz(mask);
            if (same(p + i + 1, needle + 1, n - 2)) return p + i;
            mask &= mask - 1;
        }
    }
#endif
    for (; p < stop; p++)
        if (*p == needle[0] && same(p + 1, needle + 1, n - 1)) return p;
    return NULL;
}

/* How many of the 8 bytes at p are digits before the first non-digit (8: all are), and
 * their value (SWAR: eight digits in three multiplications). */
static inline int digits8(const char* p, uint64_t* value) {
    uint64_t w;
    memcpy(&w, p, 8);
    uint64_t d = w - 0x3030303030303030ull;
    /* a byte's high bit is set where it is not a digit ('0'..'9') */
    uint64_t not_digit = (d | (d + 0x7676767676767676ull)) & 0x8080808080808080ull;
    int k = not_digit ? __builtin_ctzll(not_digit) >> 3 : 8;
    if (k == 0) return 0;
    d <<= 8 * (8 - k); /* the k digits become the low-order end of eight, zeros before */
    d = d * 10 + (d >> 8);
    d = (((d & 0x000000FF000000FFull) * (100 + (1000000ull << 32))) +
         (((d >> 16) & 0x000000FF000000FFull) * (1 + (10000ull << 32)))) >> 32;
    *value = d;
    return k;
}

static const uint64_t POW10_INT[] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};

/* A non-negative integer as the writer prints it (%llu: digits, no sign, no leading zero),
 * up to INT64_MAX; anything else is left to number() (which may still take it). */
static const char* layout_int(const char* p, const char* e, int64_t* v) {
    const char* q = p;
    uint64_t mag = 0;
    if (e - p >= 24) { /* room for 19 digits and a byte after them: eight at a time */
        uint64_t part;
        int k;
        while ((k = digits8(q, &part)) != 0) {
            mag = mag * POW10_INT[k] + part;
            q += k;
            if (k < 8 || q - p >= 19) break;
        }
        if (q - p > 19) { /* more digits than the slow loop reads: as it leaves them */
            q = p;
            mag = 0;
        }
    }
    if (q == p)
        while (q < e && (unsigned)(*q - '0') < 10 && q - p < 19) mag = mag * 10 + (unsigned)(*q++ - '0');
    int64_t digits = q - p;
    if (digits == 0 || (digits > 1 && *p == '0') || mag > (uint64_t)INT64_MAX ||
        (q < e && ((unsigned)(*q - '0') < 10 || *q == '.' || *q == 'e' || *q == 'E'))) {
        cur_t c = {p, e, 0};
        if (number(&c, v, NULL) != NUM_INT) return NULL;
        return c.p;
    }
    *v = (int64_t)mag;
    return q;
}

/* A number as the writer prints it (%llu, or digits '.' digits), eight digits a part at
 * most: the value number() gives, computed the same way; anything else goes to number(). */
/* Past a non-negative integer layout_int would take, when its value is not needed: fewer
 * than 19 digits are counted, not converted (they cannot pass INT64_MAX). */
static const char* layout_skip_int(const char* p, const char* e) {
    if (e - p >= 24) {
        uint64_t w, not_digit = 0;
        const char* q = p;
        for (int chunk = 0; chunk < 3 && !not_digit; chunk++, q += 8) {
            memcpy(&w, q, 8);
            uint64_t d = w - 0x3030303030303030ull;
            not_digit = (d | (d + 0x7676767676767676ull)) & 0x8080808080808080ull;
        }
        if (not_digit) {
            q += (__builtin_ctzll(not_digit) >> 3) - 8;
            int64_t digits = q - p;
            if (digits > 0 && digits < 19 && (digits == 1 || *p != '0') && *q != '.' && *q != 'e' &&
                *q != 'E')
                return q;
        }
    }
    int64_t v;
    return layout_int(p, e, &v);
}

static const char* layout_num(const char* p, const char* e, double* v) {
    if (e - p >= 24) {
        uint64_t whole, frac = 0;
        int k = digits8(p, &whole), f = 0;
        const char* q = p + k;
        if (k > 0 && k < 8 && (k == 1 || *p != '0')) {
            if (*q == '.') {
                f = digits8(q + 1, &frac);
                q += 1 + f;
            }
            if (f < 8 && q[-1] != '.' && *q != 'e' && *q != 'E') {
                /* at most 7 + 7 digits: below 2^53, exactly a double */
                *v = (double)(whole * POW10_INT[f] + frac) / POW10[f];
                return q;
            }
        }
    }
    cur_t c = {p, e, 0};
    int64_t iv;
    if (!number(&c, &iv, v)) return NULL;
    return c.p;
}

/* A plain string's body at p (after its opening quote): its end (the closing quote). The
 * strings read this way are short names: a byte loop beats two library calls. */
static const char* layout_str(const char* p, const char* e) {
    for (; p < e; p++) {
        if (*p == '"') return p;
        if (*p == '\\') return NULL;
    }
    return NULL;
}

/* the literal is next: step over it (1), or stay (0) */
#define ACCEPT(lit) (LIT(p, e, lit) ? (p += sizeof(lit) - 1, 1) : 0)

#define EXPECT(lit)                    \
    do {                               \
        if (!LIT(p, e, lit)) return 0; \
        p += sizeof(lit) - 1;          \
    } while (0)

/* A signed integer as the writer prints it (%lld): layout_int's digits after an optional
 * minus sign. */
static const char* layout_signed(const char* p, const char* e, int64_t* v) {
    if (p < e && *p == '-') {
        /* a digit next: layout_int's fallback would take a second sign */
        if (p + 1 >= e || (unsigned)(p[1] - '0') >= 10 || !(p = layout_int(p + 1, e, v))) return NULL;
        *v = -*v; /* a value layout_int takes after digits is at most INT64_MAX */
        return p;
    }
    return layout_int(p, e, v);
}

/* The first `needle` in [p, e), for needles whose first byte is rare (a closing brace):
 * memchr (vectorized) for it, then a compare. */
static inline __attribute__((always_inline)) const char* find_rare(const char* p, const char* e,
                                                                   const char* needle, size_t n) {
    while (e - p >= (int64_t)n) {
        const char* q = memchr(p, needle[0], (size_t)(e - p) - n + 1);
        if (!q) return NULL;
        if (same(q + 1, needle + 1, n - 1)) return q;
        p = q + 1;
    }
    return NULL;
}

/* Past an object with no object or array in it, at p: its end, or NULL. Followed by a key,
 * its end is the first '}' before `,"`, which no string holds (a quote in one is escaped);
 * else its strings are stepped over to their closing quote (one that an odd run of
 * backslashes escapes is not). */
static const char* layout_skip_flat(const char* p, const char* e) {
    if (p >= e || *p != '{') return NULL;
    const char* end = find_rare(p, e, "},\"", 3);
    if (end) return end + 1;
    for (p++; p < e; p++) {
        if (*p == '}') return p + 1;
        if (*p == '{' || *p == '[') return NULL;
        if (*p != '"') continue;
        const char* open = p;
        for (;;) {
            const char* q = memchr(p + 1, '"', (size_t)(e - p - 1));
            if (!q) return NULL;
            const char* b = q;
            while (b > open + 1 && b[-1] == '\\') b--;
            p = q;
            if (((q - b) & 1) == 0) break;
        }
    }
    return NULL;
}

/* The generated decoders of an op line (inspector_log_v1_codec.h) read in the writer's
 * layout, through the layout readers above; inlined into layout_line, so that the values it
 * uses stay in registers. */
#define CI_TAKE_INLINE static inline __attribute__((always_inline))
#define CI_TAKE(lit) EXPECT(lit)
#define CI_TRY(lit) ACCEPT(lit)
/* layout_int's fallback (number()) takes a sign: a negative value is not the schema's */
#define CI_TAKE_UINT(v)                                         \
    do {                                                        \
        if (!(p = layout_int(p, e, &(v))) || (v) < 0) return 0; \
    } while (0)
#define CI_TAKE_INT(v)                                   \
    do {                                                 \
        if (!(p = layout_signed(p, e, &(v)))) return 0;  \
    } while (0)
#define CI_SKIP_UINT()                              \
    do {                                            \
        if (!(p = layout_skip_int(p, e))) return 0; \
    } while (0)
#define CI_SKIP_INT()                                      \
    do {                                                   \
        int64_t skipped;                                   \
        if (!(p = layout_signed(p, e, &skipped))) return 0; \
    } while (0)
#define CI_TAKE_NUM(v)                                \
    do {                                              \
        if (!(p = layout_num(p, e, &(v)))) return 0;  \
    } while (0)
#define CI_SKIP_OBJECT()                                  \
    do {                                                  \
        if (!(p = layout_skip_flat(p, e))) return 0;      \
    } while (0)
#define CI_TAKE_TEXT(span)                        \
    do {                                          \
        (span).s = p;                             \
        if (!(p = layout_str(p, e))) return 0;    \
        (span).n = p - (span).s;                  \
        p++;                                      \
    } while (0)
#include "comminsight/inspector_log_v1_codec.h"

/* The integers the engine reads of each object of an op line (the rest it steps over): for
 * the compact kinds exactly those COMPACT_FIELDS reads, for the Inspector form those
 * inspector_row reads, since a decoder leaves an integer it was not asked for unset. */
#define WANT(OBJECT, KEY) CI_INSPECTOR_LOG_V1_WANT_##OBJECT##_##KEY
#define COMPACT_WANTED(KIND)                                                                     \
    (WANT(CI_##KIND##_COMPACT, Q) | WANT(CI_##KIND##_COMPACT, R) | WANT(CI_##KIND##_COMPACT, N) |    \
     WANT(CI_##KIND##_COMPACT, NN) | WANT(CI_##KIND##_COMPACT, S) | WANT(CI_##KIND##_COMPACT, B) |   \
     WANT(CI_##KIND##_COMPACT, GR) | WANT(CI_##KIND##_COMPACT, UT) | WANT(CI_##KIND##_COMPACT, H) |  \
     WANT(CI_##KIND##_COMPACT, HC) | WANT(CI_##KIND##_COMPACT, G0) | WANT(CI_##KIND##_COMPACT, GD))
#define CI_WANTED(KIND)                                                                             \
    (WANT(CI_##KIND, RING_SEQ) | WANT(CI_##KIND, GROUP_ID) | WANT(CI_##KIND, USER_TAG) |            \
     WANT(CI_##KIND, HOST_START_MONO_NS) | WANT(CI_##KIND, HOST_COMPLETE_MONO_NS) |                 \
     WANT(CI_##KIND, GPU_START_GLOBALTIMER_NS) | WANT(CI_##KIND, GPU_STOP_GLOBALTIMER_NS))
static const ci_inspector_log_v1_inspector_log_record_wants_t OP_LINE_WANTS = {
    .header = CI_INSPECTOR_LOG_V1_SKIP_OBJECT, /* kept as its text */
    .metadata = CI_INSPECTOR_LOG_V1_SKIP_OBJECT,
    .coll_perf = WANT(COLL_PERF, COLL_SN) | WANT(COLL_PERF, COLL_MSG_SIZE_BYTES) | WANT(COLL_PERF, COLL_EXEC_TIME_US),
    .p2p_perf = WANT(P2P_PERF, P2P_SN) | WANT(P2P_PERF, P2P_PEER) | WANT(P2P_PERF, P2P_MSG_SIZE_BYTES) |
                WANT(P2P_PERF, P2P_EXEC_TIME_US),
    .ci_coll = CI_WANTED(COLL),
    .ci_p2p = CI_WANTED(P2P),
    .ci_coll_compact = COMPACT_WANTED(COLL),
    .ci_p2p_compact = COMPACT_WANTED(P2P) | WANT(CI_P2P_COMPACT, PE),
};

static span_t span(ci_inspector_log_v1_span_t s) {
    span_t out = {s.s, s.n};
    return out;
}

/* What both compact kinds give the engine, as the walker would have read it (compact_t). */
#define COMPACT_FIELDS(o, v)                                                                \
    do {                                                                                    \
        (o).ring_seq = (v).q;                                                               \
        (o).comm = span((v).c);                                                             \
        if ((v).has_cn) (o).name = span((v).cn), (o).seen |= CK_NAME;                       \
        (o).rank = span((v).r_text);                                                        \
        (o).nranks = span((v).n_text);                                                      \
        (o).nnodes = span((v).nn_text);                                                     \
        (o).func = span((v).f);                                                             \
        (o).seq = (v).s;                                                                    \
        (o).size = (v).b;                                                                   \
        (o).datatype = span((v).d);                                                         \
        (o).seen |= CK_COMM | CK_RANK | CK_NRANKS | CK_NNODES | CK_FUNC | CK_SEQ | CK_SIZE | \
                    CK_DATATYPE | CK_TIMING | CK_START;                                     \
        if ((v).has_gr) (o).group = (v).gr, (o).seen |= CK_GROUP;                           \
        if ((v).has_ut) (o).user_tag = (v).ut, (o).seen |= CK_USER_TAG;                     \
        (o).kernel_timing = key_is((v).ts.s, (v).ts.n, V(KERNEL_GPU));                      \
        if ((v).has_bw) (o).busbw = (v).bw, (o).seen |= CK_BW;                              \
        (o).start = (v).h;                                                                  \
        if ((v).has_hc) (o).complete_after = (v).hc, (o).seen |= CK_COMPLETE;               \
        if ((v).has_g0) (o).gpu_start = (v).g0, (o).seen |= CK_G0;                          \
        if ((v).has_gd) (o).gpu_length = (v).gd, (o).seen |= CK_GD;                         \
    } while (0)

/* What an Inspector-form op line gives the engine, as scan_line would have read it: its
 * perf object (`P`: coll_perf or p2p_perf, keys prefixed COLL or P2P) and its ci object. */
#define INSPECTOR_FIELDS(row, P, PREFIX, ci)                                                       \
    do {                                                                                           \
        (row)->seq = (P).PREFIX##_sn;                                                              \
        (row)->size = (P).PREFIX##_msg_size_bytes;                                                 \
        (row)->exec_us = (double)(P).PREFIX##_exec_time_us;                                        \
        (row)->busbw = (P).PREFIX##_busbw_gbs;                                                     \
        (row)->kernel_timing =                                                                     \
            (P).has_##PREFIX##_timing_source &&                                                    \
            key_is((P).PREFIX##_timing_source.s, (P).PREFIX##_timing_source.n, V(KERNEL_GPU));     \
        (row)->ring_seq = (ci).ring_seq;                                                           \
        (row)->host_start = (ci).host_start_mono_ns;                                               \
        (row)->host_complete = (ci).has_host_complete_mono_ns ? (ci).host_complete_mono_ns : NONE; \
        (row)->gpu_start = (ci).has_gpu_start_globaltimer_ns ? (ci).gpu_start_globaltimer_ns : NONE; \
        (row)->gpu_stop = (ci).has_gpu_stop_globaltimer_ns ? (ci).gpu_stop_globaltimer_ns : NONE;  \
        (row)->group_id = (ci).has_group_id ? (ci).group_id : 0;                                   \
        (row)->user_tag = (ci).has_user_tag ? (ci).user_tag : 0;                                   \
        (row)->datatype = datatype_code((ci).datatype.s, (ci).datatype.n);                         \
    } while (0)

/* An op line of either form in the writer's layout, read by the decoders generated from the
 * schema into the row scan_line would have made (a compact one through compact_t and the same
 * compact_row); anything else returns 0 and the line is walked. */
static int layout_line(const char* s, const char* e, ci_line_t* row, ci_engine_intern_v1_t* headers,
                       ci_engine_intern_v1_t* funcs) {
    const char* p = s;
    ci_inspector_log_v1_inspector_log_record_in_t v;
    if (!ci_inspector_log_v1_take_inspector_log_record(&p, e, &OP_LINE_WANTS, &v) || p != e) return 0;
    const int inspector_objects = v.has_header || v.has_metadata || v.has_coll_perf || v.has_p2p_perf;
    compact_t o;
    const ci_inspector_log_v1_span_t* func;
    switch (v.ci_took) {
    case CI_INSPECTOR_LOG_V1_TOOK_CI_COLL_COMPACT:
    case CI_INSPECTOR_LOG_V1_TOOK_CI_P2P_COMPACT:
        /* a compact line carries no Inspector object: one that does is Python's to name */
        if (inspector_objects) return 0;
        memset(&o, 0, sizeof o);
        if (v.ci_took == CI_INSPECTOR_LOG_V1_TOOK_CI_COLL_COMPACT) {
            COMPACT_FIELDS(o, v.ci_coll_compact);
        } else {
            COMPACT_FIELDS(o, v.ci_p2p_compact);
            if (v.ci_p2p_compact.has_pe) o.peer = v.ci_p2p_compact.pe, o.seen |= CK_PEER;
        }
        /* NCCL's reserved tags (or garbage): Python */
        if ((o.seen & CK_USER_TAG) && o.user_tag < 0) return 0;
        return compact_row(&o, v.ci_took == CI_INSPECTOR_LOG_V1_TOOK_CI_COLL_COMPACT ? KIND_COLL : KIND_P2P,
                           row, headers, funcs) == CI_LINE_OP;
    case CI_INSPECTOR_LOG_V1_TOOK_CI_COLL:
        if (!v.has_header || !v.has_coll_perf) return 0;
        row->kind = KIND_COLL;
        row->peer = NONE;
        func = &v.coll_perf.coll;
        INSPECTOR_FIELDS(row, v.coll_perf, coll, v.ci_coll);
        break;
    case CI_INSPECTOR_LOG_V1_TOOK_CI_P2P:
        if (!v.has_header || !v.has_p2p_perf) return 0;
        row->kind = KIND_P2P;
        row->peer = v.p2p_perf.p2p_peer;
        func = &v.p2p_perf.p2p;
        INSPECTOR_FIELDS(row, v.p2p_perf, p2p, v.ci_p2p);
        break;
    default:
        return 0;
    }
    row->header = intern(headers, v.header_text.s, v.header_text.n);
    row->func = intern(funcs, func->s, func->n);
    return row->header >= 0 && row->func >= 0;
}

/* Where `needle` (n >= 2 bytes) occurs in buf[pos..len), without overlaps: at most max
 * offsets into out; returns how many were written (max: there may be more after the last). */
int64_t ci_find_all(const char* buf, int64_t len, int64_t pos, const char* needle, int64_t n,
                    int64_t* out, int64_t max) {
    int64_t k = 0;
    if (n < 2) return 0;
    const char* e = buf + len;
    for (const char* p = buf + pos; k < max && (p = find_pair(p, e, needle, (size_t)n)); p += n)
        out[k++] = p - buf;
    return k;
}

/* The lines of buf[pos..len), at most max_lines, into `cols`; a last line without its '\n' is
 * left (*next_pos is where it begins). With `trusted` (the segment's seal matched), lines are
 * first read by the writer's layout. Returns the number of lines. */
int64_t ci_scan(const char* buf, int64_t len, int64_t pos, const ci_engine_columns_v1_t* cols,
                int64_t max_lines, ci_engine_intern_v1_t* headers, ci_engine_intern_v1_t* funcs, int32_t trusted,
                int64_t* next_pos) {
    int64_t n = 0;
    ci_line_t row;
    while (pos < len && n < max_lines) {
        const char* nl = memchr(buf + pos, '\n', (size_t)(len - pos));
        if (!nl) break;
        memset(&row, 0, sizeof row);
        row.start = pos;
        row.end = nl - buf + 1;
        if (trusted && layout_line(buf + pos, nl, &row, headers, funcs)) {
            row.status = CI_LINE_OP;
        } else {
            memset(&row, 0, sizeof row);
            row.start = pos;
            row.end = nl - buf + 1;
            row.status = scan_line(buf + pos, nl, &row, headers, funcs);
        }
        cols->start[n] = row.start;
        cols->end[n] = row.end;
        cols->seq[n] = row.seq;
        cols->size[n] = row.size;
        cols->peer[n] = row.peer;
        cols->ring_seq[n] = row.ring_seq;
        cols->host_start[n] = row.host_start;
        cols->host_complete[n] = row.host_complete;
        cols->gpu_start[n] = row.gpu_start;
        cols->gpu_stop[n] = row.gpu_stop;
        cols->group_id[n] = row.group_id;
        cols->user_tag[n] = row.user_tag;
        cols->exec_us[n] = row.exec_us;
        cols->busbw[n] = row.busbw;
        cols->status[n] = row.status;
        cols->kind[n] = row.kind;
        cols->header[n] = row.header;
        cols->func[n] = row.func;
        cols->kernel_timing[n] = row.kernel_timing;
        cols->datatype[n] = row.datatype;
        pos = row.end;
        n++;
    }
    *next_pos = pos;
    return n;
}

/* ---- scanned lines -> op columns --------------------------------------------------------- */

/* Wrapping int64 arithmetic, as numpy's. */
static inline int64_t wsub(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static inline int64_t wadd(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static inline int kernel_timed(int32_t timing, int64_t g0, int64_t g1) {
    return timing != 0 && g0 != NONE && g0 != 0 && g1 != NONE && g1 != 0 && g1 >= g0;
}

/* The GPU-minus-host clock offset of semantic/op_times.py over lines idx[0..n) of `in`: 1 and
 * *offset when one of them is kernel-timed, else 0. */
int32_t ci_gpu_offset(int64_t n, const int64_t* idx, const ci_engine_columns_v1_t* in, int64_t* offset) {
    int found = 0;
    int64_t best = 0;
    for (int64_t k = 0; k < n; k++) {
        int64_t i = idx[k], c = in->host_complete[i];
        if (!kernel_timed(in->kernel_timing[i], in->gpu_start[i], in->gpu_stop[i]) || c == NONE || c == 0)
            continue;
        int64_t d = wsub(in->gpu_stop[i], c);
        if (!found || d > best) best = d;
        found = 1;
    }
    *offset = best;
    return found;
}

/* The ops of scanned op lines idx[0..n) (line numbers first_record + idx), as
 * log_input._SegmentReader._columns defines them: host times with absent ones filled in,
 * the duration (GPU span, else the exec time, else the host span), start and end on the host
 * clock (op_times.py; `offset` used when has_offset), real-time ones through to_real. */
void ci_op_columns(int64_t n, const int64_t* idx, const ci_engine_columns_v1_t* in, const int64_t* comm_of_header,
                   const int64_t* code_of_func, int64_t first_record, int64_t to_real, int32_t has_offset,
                   int64_t offset, int64_t seg, int64_t order_base, const ci_engine_ops_v1_t* out) {
    for (int64_t k = 0; k < n; k++) {
        int64_t i = idx[k];
        int64_t issue = in->host_start[i] == NONE ? 0 : in->host_start[i];
        int64_t complete = in->host_complete[i];
        if (complete == NONE || complete == 0) complete = issue;
        int64_t g0 = in->gpu_start[i], g1 = in->gpu_stop[i];
        int kernel = kernel_timed(in->kernel_timing[i], g0, g1);
        double exec_us = in->exec_us[i];
        int64_t duration;
        if (kernel) {
            duration = wsub(g1, g0);
        } else if (exec_us != 0.0) {
            /* max(0, trunc(us * 1000)) as an int64: a C cast truncates; numpy's cast of a
             * value out of range gives the smallest int64 (x86) */
            double t = exec_us * 1000.0;
            duration = !(t >= 1.0) ? 0 : t < 9223372036854775808.0 ? (int64_t)t : NONE;
        } else {
            duration = max64(0, wsub(complete, issue));
        }
        int64_t start = max64(issue, wsub(complete, duration)), end = complete;
        if (has_offset && kernel) {
            start = max64(issue, wsub(g0, offset));
            end = max64(start, wsub(g1, offset));
        }
        double bw = in->busbw[i];
        out->kind[k] = in->kind[i];
        out->func[k] = code_of_func[in->func[i]];
        out->comm[k] = comm_of_header[in->header[i]];
        out->peer[k] = in->kind[i] == KIND_COLL ? NONE : in->peer[i];
        out->seq[k] = in->seq[i];
        out->size[k] = in->size[i];
        out->issue[k] = issue;
        out->start[k] = start;
        out->end[k] = end;
        out->start_real[k] = max64(0, wadd(start, to_real));
        out->end_real[k] = max64(0, wadd(end, to_real));
        out->end_mono[k] = end;
        out->duration[k] = duration;
        out->busbw[k] = bw - bw == 0.0 ? bw : 0.0; /* not finite (inf, nan): 0 */
        out->ring_seq[k] = in->ring_seq[i];
        out->lost_before[k] = 0;
        out->pos_seg[k] = seg;
        out->pos_offset[k] = in->start[i];
        out->pos_record[k] = first_record + i;
        out->pos_end[k] = in->end[i];
        out->order[k] = order_base | in->start[i];
        out->arrival[k] = 0;
        out->group_id[k] = max64(in->group_id[i], 0);
        out->datatype[k] = in->datatype[i];
        out->user_tag[k] = in->user_tag[i];
    }
}

/* ---- reorder ---------------------------------------------------------------------------- */

/* A held item with its keys beside it: the heap compares without reaching back into the
 * columns (a cache miss per comparison once they are large). */
typedef struct {
    int64_t issue, arrival, index;
} held_t;

static inline int before(const held_t* a, const held_t* b) {
    return a->issue < b->issue || (a->issue == b->issue && a->arrival < b->arrival);
}

/* Items 0..n_held-1 are held already; items n_held..n-1 arrive in order. Each arrival past
 * `window` held items releases the smallest (issue, arrival). Writes the released items in
 * release order and the still-held ones (unordered); returns the number released. */
int64_t ci_reorder(const int64_t* issue, const int64_t* arrival, int64_t n_held, int64_t n,
                   int64_t window, int64_t* released, int64_t* held_out, int64_t* n_held_out) {
    held_t* heap = malloc((size_t)(window + 2) * sizeof *heap);
    if (!heap) return -1;
    int64_t size = 0, out = 0;
    for (int64_t i = 0; i < n; i++) {
        held_t item = {issue[i], arrival[i], i};
        int64_t k = size++; /* sift up */
        while (k > 0) {
            int64_t parent = (k - 1) / 2;
            if (!before(&item, &heap[parent])) break;
            heap[k] = heap[parent];
            k = parent;
        }
        heap[k] = item;
        if (i < n_held || size <= window) continue;
        released[out++] = heap[0].index;
        held_t last = heap[--size]; /* sift down */
        k = 0;
        for (;;) {
            int64_t child = 2 * k + 1;
            if (child >= size) break;
            if (child + 1 < size && before(&heap[child + 1], &heap[child])) child++;
            if (!before(&heap[child], &last)) break;
            heap[k] = heap[child];
            k = child;
        }
        heap[k] = last;
    }
    for (int64_t k = 0; k < size; k++) held_out[k] = heap[k].index;
    *n_held_out = size;
    free(heap);
    return out;
}

/* ---- decisions -------------------------------------------------------------------------- */

/* the engine-core protocol's codes, by shorter names */
enum {
    WHERE_NONE = CI_ENGINE_V1_WHERE_NONE,
    WHERE_START = CI_ENGINE_V1_WHERE_START,
    WHERE_IN = CI_ENGINE_V1_WHERE_IN,
    WHERE_OFF = CI_ENGINE_V1_WHERE_OFF,
};
enum {
    B_BEGIN = CI_ENGINE_V1_DECISION_BEGIN,
    B_END = CI_ENGINE_V1_DECISION_END,
    B_MASK = CI_ENGINE_V1_BOUNDARY_MASK,
    IN_STEP = CI_ENGINE_V1_DECISION_IN_STEP,
    UNEXPECTED = CI_ENGINE_V1_DECISION_UNEXPECTED,
    MICRO = CI_ENGINE_V1_DECISION_MICRO,
};

/* table[(state * nroles + role) * 4 + where] = next_state << 8 | decision bits (template
 * mode). ckey[i] < 0: the op's role is not in the cycle (where = none). In period mode
 * (`period` set) every op is on the cycle and the decision follows from `where` and whether a
 * repetition has started. state, cycle_pos and started are read and updated. */
void ci_decide(int64_t n, const int32_t* role, const int32_t* ckey, const int32_t* cycle,
               int32_t cycle_len, int32_t* cycle_pos, const int32_t* table, int32_t nroles,
               int32_t* state, int32_t period, int32_t* started, uint8_t* out) {
    int32_t s = *state, pos = *cycle_pos, st = *started;
    for (int64_t i = 0; i < n; i++) {
        int where = WHERE_NONE;
        int32_t k = ckey[i];
        if (k >= 0 && cycle_len > 0) {
            if (k == cycle[pos]) {
                where = pos == 0 ? WHERE_START : WHERE_IN;
                pos = (pos + 1) % cycle_len;
            } else if (k == cycle[0]) {
                where = WHERE_START;
                pos = 1 % cycle_len;
            } else {
                where = WHERE_OFF;
            }
        }
        if (period) {
            if (where == WHERE_START) {
                st = 1;
                out[i] = B_BEGIN | IN_STEP;
            } else if (!st) {
                out[i] = UNEXPECTED;
            } else {
                out[i] = IN_STEP | (where == WHERE_OFF ? UNEXPECTED : 0);
            }
            continue;
        }
        int32_t e = table[((int64_t)s * nroles + role[i]) * 4 + where];
        s = e >> 8;
        out[i] = (uint8_t)(e & 0xff);
    }
    *state = s;
    *cycle_pos = pos;
    *started = st;
}

/* ---- Steps ------------------------------------------------------------------------------ */

/* Places ops (with decisions `dec`) into Steps, as GpuEngine._place does one op at a time.
 * With open_in, steps[0] and its role row hold the Step left open by the previous batch and
 * are continued. Role rows are [step][role]. step_of[i] is the op's Step or -1. Returns the
 * number of Steps written; the last is still open when its `closed` is 0. */
int64_t ci_place(int64_t n, const uint8_t* dec, const int32_t* role, int32_t nroles,
                 const int64_t* duration, const int64_t* size, const double* busbw,
                 const int64_t* lost, const int64_t* end_real, const int64_t* end_mono, int32_t open_in,
                 ci_engine_step_v1_t* steps, int64_t* role_count, int64_t* role_time, int64_t* role_bytes,
                 int64_t* role_max, double* role_bw, int64_t* step_of) {
    int64_t s = 0;
    int open = open_in != 0;
    for (int64_t i = 0; i < n; i++) {
        uint8_t d = dec[i];
        if ((d & B_MASK) == B_BEGIN && open) {
            /* records lost just before a Step's first op: the hole cut the open Step short */
            steps[s].lost += lost[i];
            steps[s].closed = 1;
            steps[s].next_start = i;
            open = 0;
            s++;
        }
        if (!(d & IN_STEP)) {
            step_of[i] = -1;
            continue;
        }
        ci_engine_step_v1_t* st = &steps[s];
        int64_t row = s * nroles;
        if (!open) {
            memset(st, 0, sizeof *st);
            st->first = i;
            st->last = -1;
            st->next_start = -1;
            st->end_mono = NONE;
            st->slowest = -1;
            st->slowest_dur = -1;
            for (int32_t r = 0; r < nroles; r++) {
                role_count[row + r] = role_time[row + r] = role_bytes[row + r] = role_max[row + r] = 0;
                role_bw[row + r] = 0.0;
            }
            open = 1;
        }
        step_of[i] = s;
        int64_t dur = duration[i];
        st->op_count++;
        st->unexpected += (d & UNEXPECTED) != 0;
        if (st->op_count > 1) st->lost += lost[i];
        st->bytes += size[i];
        st->time_ns += dur;
        double weighted = busbw[i] * (double)dur;
        st->busbw_sum += weighted;
        int64_t r = row + role[i];
        role_count[r]++;
        role_time[r] += dur;
        role_bytes[r] += size[i];
        role_bw[r] += weighted;
        if (dur > role_max[r]) role_max[r] = dur;
        if (dur > st->slowest_dur) {
            st->slowest_dur = dur;
            st->slowest = i;
        }
        if (end_mono[i] != NONE) {
            int64_t m = st->end_mono == NONE ? 0 : st->end_mono;
            st->end_mono = end_mono[i] > m ? end_mono[i] : m;
        }
        if (end_real[i] > st->end_real) st->end_real = end_real[i];
        st->last = i;
        st->micro += (d & MICRO) != 0;
        if ((d & B_MASK) == B_END) {
            st->closed = 1;
            open = 0;
            s++;
        }
    }
    return s + (open ? 1 : 0);
}

/* ---- a job cut's decisions --------------------------------------------------------------- */

/* A job cut's Step per op (step[i]; < 0 or == tail: in no Step) as decision bits: an op in a
 * Step is IN_STEP, and begins its Step (B_BEGIN) when its Step is later than every Step seen
 * before it, from *last_step on (an op reordered back across a boundary stays in the Step
 * that is open). The indices of the Steps begun go to begun[] (their number is returned) and
 * *last_step becomes the latest Step seen. */
int64_t ci_cut_decide(int64_t n, const int64_t* step, int64_t tail, int64_t* last_step, uint8_t* out,
                      int64_t* begun) {
    int64_t latest = *last_step, count = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t s = step[i];
        if (s < 0 || s == tail) {
            out[i] = 0;
            continue;
        }
        if (s > latest) {
            out[i] = IN_STEP | B_BEGIN;
            begun[count++] = s;
            latest = s;
        } else {
            out[i] = IN_STEP;
        }
    }
    *last_step = latest;
    return count;
}

/* ---- each Step's seq spans per communicator ------------------------------------------------ */

/* For the ops in Steps (step_of[i] >= 0; a Step's ops are one stretch: step_of never goes
 * back) with a seq (seq[i] >= 0): per Step and cell (kind * ncomm + comm_code[comm[i]]), the
 * lowest and highest seq and the number of ops, written in (Step, cell) order. Returns the
 * number of spans written (at most n), -1 when out of memory, -2 when step_of goes back. */
int64_t ci_spans(int64_t n, const int64_t* step_of, const int64_t* kind, const int64_t* comm,
                 const int64_t* comm_code, int64_t ncomm, const int64_t* seq, int64_t* out_step,
                 int64_t* out_cell, int64_t* lo, int64_t* hi, int64_t* count) {
    int64_t width = 2 * ncomm;
    int64_t* slot = malloc((size_t)(width > 0 ? width : 1) * sizeof *slot); /* cell -> span */
    if (!slot) return -1;
    for (int64_t c = 0; c < width; c++) slot[c] = -1;
    int64_t m = 0, first = 0, cur = -1; /* spans [first, m) are the current Step's */
    for (int64_t i = 0; i <= n; i++) {
        int64_t s = i < n ? step_of[i] : -1;
        if (i < n && (s < 0 || seq[i] < 0)) continue;
        if (i == n || s != cur) { /* the current Step is complete: its spans in cell order, slots freed */
            if (i < n && s < cur) {
                free(slot);
                return -2;
            }
            for (int64_t a = first + 1; a < m; a++) { /* insertion sort: a Step has few cells */
                int64_t c = out_cell[a], l = lo[a], h = hi[a], k = count[a], b = a;
                for (; b > first && out_cell[b - 1] > c; b--) {
                    out_cell[b] = out_cell[b - 1];
                    lo[b] = lo[b - 1];
                    hi[b] = hi[b - 1];
                    count[b] = count[b - 1];
                }
                out_cell[b] = c;
                lo[b] = l;
                hi[b] = h;
                count[b] = k;
            }
            for (int64_t a = first; a < m; a++) slot[out_cell[a]] = -1;
            if (i == n) break;
            cur = s;
            first = m;
        }
        int64_t c = kind[i] * ncomm + comm_code[comm[i]];
        int64_t at = slot[c];
        if (at < 0) {
            at = slot[c] = m++;
            out_step[at] = s;
            out_cell[at] = c;
            lo[at] = hi[at] = seq[i];
            count[at] = 1;
        } else {
            if (seq[i] < lo[at]) lo[at] = seq[i];
            if (seq[i] > hi[at]) hi[at] = seq[i];
            count[at]++;
        }
    }
    free(slot);
    return m;
}

/* ---- op shapes ------------------------------------------------------------------------------ */

/* Numbers the distinct (comm, func, peer, size) of n ops in order of first appearance:
 * shape[i] is op i's number, first[k] the first op of shape k. Returns the number of shapes,
 * or -1 when out of memory. */
int64_t ci_shapes(int64_t n, const int64_t* comm, const int64_t* func, const int64_t* peer,
                  const int64_t* size, int64_t* shape, int64_t* first) {
    uint64_t slots = 16;
    while (slots < 2 * (uint64_t)n) slots <<= 1;
    int64_t* table = malloc(slots * sizeof *table); /* shape number + 1, 0 when free */
    if (!table) return -1;
    memset(table, 0, slots * sizeof *table);
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t h = (uint64_t)comm[i] * 0x9E3779B97F4A7C15ull;
        h = (h ^ (uint64_t)func[i]) * 0xC2B2AE3D27D4EB4Full;
        h = (h ^ (uint64_t)peer[i]) * 0x165667B19E3779F9ull;
        h = (h ^ (uint64_t)size[i]) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 31;
        for (uint64_t k = h & (slots - 1);; k = (k + 1) & (slots - 1)) {
            int64_t e = table[k];
            if (!e) {
                first[count] = i;
                shape[i] = count;
                table[k] = ++count;
                break;
            }
            int64_t f = first[e - 1];
            if (comm[f] == comm[i] && func[f] == func[i] && peer[f] == peer[i] && size[f] == size[i]) {
                shape[i] = e - 1;
                break;
            }
        }
    }
    free(table);
    return count;
}

/* ---- medians of history windows --------------------------------------------------------- */

/* First index in sorted w[0..n) whose value is >= x. */
static int64_t lower_bound(const double* w, int64_t n, double x) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (w[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* out[q] = the median of series[start[q] .. end[q]) (statistics.median: the middle value, or
 * the mean of the two middle ones), for windows of 1..4096 values. Queries come in Step
 * order, so the window slides: it is kept sorted and moved one value at a time (a binary
 * search and a memmove each), and rebuilt only when it jumps back. */
int32_t ci_window_medians(const double* series, int64_t n, const int64_t* start, const int64_t* end,
                          double* out) {
    double window[4096];
    int64_t lo = 0, hi = 0, size = 0; /* window holds series[lo .. hi), sorted */
    for (int64_t q = 0; q < n; q++) {
        int64_t s = start[q], e = end[q];
        if (e - s <= 0 || e - s > 4096) return -1;
        if (s < lo || e < hi || s >= hi) { /* not a slide forward: start again at s */
            lo = hi = s;
            size = 0;
        }
        for (; lo < s; lo++) { /* drop the values that left */
            int64_t i = lower_bound(window, size, series[lo]);
            memmove(&window[i], &window[i + 1], (size_t)(size - i - 1) * sizeof *window);
            size--;
        }
        for (; hi < e; hi++) { /* add the values that came */
            int64_t i = lower_bound(window, size, series[hi]);
            memmove(&window[i + 1], &window[i], (size_t)(size - i) * sizeof *window);
            window[i] = series[hi];
            size++;
        }
        out[q] = size % 2 ? window[size / 2] : (window[size / 2 - 1] + window[size / 2]) / 2;
    }
    return 0;
}

/* The medians of a bounded history (step_summary.medians), for Steps in order: the window
 * holds `prior` (n_prior <= width values) and learns values[j] at each Step j where learns[j],
 * keeping its latest `width` (1..4096). size[j] is how many values it holds just before Step
 * j; med[j] their median where asked[j] and size[j] >= min_history, else NaN. Returns 0, -1
 * when out of memory, -2 when width or n_prior is out of bounds. */
int32_t ci_history_medians(const double* prior, int64_t n_prior, int64_t width, int64_t k,
                           const uint8_t* asked, const uint8_t* learns, const double* values,
                           int64_t min_history, double* med, int64_t* size) {
    if (width < 1 || width > 4096 || n_prior < 0 || n_prior > width) return -2;
    double* series = malloc((size_t)(n_prior + k + 1) * sizeof *series);
    int64_t* bounds = calloc((size_t)(3 * k + 1), sizeof *bounds);
    double* out = malloc((size_t)(k + 1) * sizeof *out);
    if (!series || !bounds || !out) {
        free(series);
        free(bounds);
        free(out);
        return -1;
    }
    int64_t *start = bounds, *end = bounds + k, *step = bounds + 2 * k;
    memcpy(series, prior, (size_t)n_prior * sizeof *series);
    int64_t m = n_prior, q = 0;
    for (int64_t j = 0; j < k; j++) {
        int64_t s = m > width ? m - width : 0;
        size[j] = m - s;
        med[j] = NAN;
        if (asked[j] && m - s >= min_history && m > s) {
            start[q] = s;
            end[q] = m;
            step[q++] = j;
        }
        if (learns[j]) series[m++] = values[j];
    }
    int32_t rc = ci_window_medians(series, q, start, end, out);
    if (rc == 0)
        for (int64_t i = 0; i < q; i++) med[step[i]] = out[i];
    free(series);
    free(bounds);
    free(out);
    return rc;
}

/* ---- cycle learning --------------------------------------------------------------------- */

/* For each period p = periods[k]: the longest run of positions i with codes[i + p] ==
 * codes[i] (runs[k]) and the position it starts at (starts[k]), the first on a tie; a period
 * with no such position gets run 0, start 1. */
void ci_longest_runs(const int64_t* codes, int64_t n, const int64_t* periods, int64_t n_periods,
                     int64_t* runs, int64_t* starts) {
    for (int64_t k = 0; k < n_periods; k++) {
        int64_t p = periods[k], cur = 0, best = 0, best_end = 0;
        /* from n - p on there is nothing to compare with: every run there is 0 */
        for (int64_t i = 0; i < n - p; i++) {
            cur = (cur + 1) & -(int64_t)(codes[i + p] == codes[i]); /* branch-free: the run or 0 */
            if (cur > best) {
                best = cur;
                best_end = i;
            }
        }
        runs[k] = best;
        starts[k] = best_end - best + 1;
    }
}
