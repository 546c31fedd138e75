/* NCCL's operation, datatype, algorithm and protocol strings -> shm v1 enum values.
 *
 * The spellings are the generated enum labels (protocols/shm/v1). NCCL passes pointers to
 * static strings, so a small direct-mapped cache keyed by the pointer answers almost every
 * lookup; a hit is confirmed by comparing the string with the cached value's label, so a
 * caller that reuses a buffer for another name (the simulator does) still gets the right
 * value. Cache entries are single 64-bit words (pointer << 8 | value): no torn reads between
 * threads. NULL or unknown strings map to UNKNOWN (0).
 */
#include <string.h>
#include <strings.h>

#include "ci_internal.h"

typedef const char* (*label_fn)(uint8_t);

#define CACHE_SLOTS 64 /* per enum; NCCL uses a handful of distinct strings */

typedef struct name_table {
    label_fn label;
    uint8_t max_value;
    bool ignore_case;
    uint64_t cache[CACHE_SLOTS];
    const char* labels[256]; /* label of each value, filled on first use */
    /* a label of under 16 bytes with its NUL, as two words, and which of their bytes it fills:
     * a cache hit is confirmed with two loads instead of a loop over the characters */
    uint64_t words[256][2], masks[256][2];
    uint32_t ready;
} name_table_t;

static bool same(const name_table_t* t, const char* a, const char* b) {
    return t->ignore_case ? strcasecmp(a, b) == 0 : strcmp(a, b) == 0;
}

static void fill_words(name_table_t* t, uint8_t v, const char* label) {
    size_t n = label ? strlen(label) + 1 : 0; /* with the NUL */
    unsigned char bytes[16] = {0}, mask[16] = {0};
    if (n == 0 || n > sizeof(bytes)) return; /* mask stays 0: confirmed by the loop */
    memcpy(bytes, label, n);
    memset(mask, 0xFF, n);
    memcpy(t->words[v], bytes, sizeof(bytes));
    memcpy(t->masks[v], mask, sizeof(mask));
}

static uint8_t slow_lookup(name_table_t* t, const char* name) {
    if (!__atomic_load_n(&t->ready, __ATOMIC_ACQUIRE)) {
        for (unsigned v = 0; v <= t->max_value; v++) {
            const char* l = t->label((uint8_t)v);
            fill_words(t, (uint8_t)v, l);
            __atomic_store_n(&t->labels[v], l, __ATOMIC_RELAXED);
        }
        __atomic_store_n(&t->ready, 1, __ATOMIC_RELEASE);
    }
    for (uint8_t v = 1; v <= t->max_value; v++) {
        const char* l = t->label(v);
        if (l && same(t, l, name)) return v;
    }
    return 0;
}

/* Exact comparison, inlined: labels are short, and this runs on every op. */
static inline bool equal(const char* a, const char* b) {
    while (*a && *a == *b) {
        a++;
        b++;
    }
    return *a == *b;
}

/* Whether the text at `name` is value v's label, by its first 16 bytes. Those may run past the
 * string's NUL, but never off its page (the caller checks), so the load cannot fault; the mask
 * keeps only the label's own bytes. Sanitizers would report the bytes past the NUL. */
__attribute__((no_sanitize_address, no_sanitize_thread, no_sanitize_undefined)) static inline bool same_words(const name_table_t* t, uint8_t v,
                                                                    const char* name) {
    uint64_t a, b;
    __builtin_memcpy(&a, name, 8);
    __builtin_memcpy(&b, name + 8, 8);
    return (((a ^ t->words[v][0]) & t->masks[v][0]) | ((b ^ t->words[v][1]) & t->masks[v][1])) == 0;
}

#define PAGE_SAFE(p) (((p) & 4095u) <= 4096u - 16u) /* 16 bytes from p stay on p's 4 KiB page */

/* Everything but a cache hit that two words confirm: kept out of line, so that the hit needs
 * no stack frame. */
static __attribute__((noinline)) uint8_t lookup_slow(name_table_t* t, const char* name, uint64_t* slot,
                                                     uint64_t entry) {
    uintptr_t p = (uintptr_t)name;
    if (entry >> 8 == (uint64_t)p) { /* a cached pointer whose label the words cannot confirm */
        uint8_t v = (uint8_t)entry;
        const char* l = __atomic_load_n(&t->labels[v], __ATOMIC_RELAXED);
        if (l && equal(l, name)) return v;
    }
    if (!*name) return 0;
    uint8_t v = slow_lookup(t, name);
    /* cache only exact spellings, so that a hit can be confirmed with an exact compare */
    if (v && (uint64_t)p < (1ull << 56) && equal(t->label(v), name))
        __atomic_store_n(slot, (uint64_t)p << 8 | v, __ATOMIC_RELEASE);
    return v;
}

static inline uint8_t lookup(name_table_t* t, const char* name) {
    if (CI_UNLIKELY(!name)) return 0;
    uintptr_t p = (uintptr_t)name;
    uint64_t* slot = &t->cache[(p >> 3) % CACHE_SLOTS];
    uint64_t entry = __atomic_load_n(slot, __ATOMIC_ACQUIRE); /* with the words it was cached after */
    /* same pointer: still the same text? (a caller may reuse a buffer for another name) */
    uint8_t v = (uint8_t)entry;
    if (CI_LIKELY(entry >> 8 == (uint64_t)p && t->masks[v][0] && PAGE_SAFE(p) && same_words(t, v, name))) return v;
    return lookup_slow(t, name, slot, entry);
}

static const char* func_label(uint8_t v) { return ci_shm_v1_func_label(v); }
static const char* datatype_label(uint8_t v) { return ci_shm_v1_datatype_label(v); }
static const char* algo_label(uint8_t v) { return ci_shm_v1_algo_label(v); }
static const char* proto_label(uint8_t v) { return ci_shm_v1_proto_label(v); }

static name_table_t funcs = {.label = func_label, .max_value = CI_SHM_V1_FUNC_WAIT_SIGNAL};
static name_table_t datatypes = {.label = datatype_label, .max_value = CI_SHM_V1_DATATYPE_FLOAT8_E5M2};
/* NCCL spells algorithms/protocols in capitals ("RING", "SIMPLE") in profiler events but in
 * mixed case elsewhere ("Ring", "Simple"); accept both. */
static name_table_t algos = {.label = algo_label, .max_value = CI_SHM_V1_ALGO_PAT, .ignore_case = true};
static name_table_t protos = {.label = proto_label, .max_value = CI_SHM_V1_PROTO_SIMPLE, .ignore_case = true};

uint8_t ci_func_of(const char* name) { return lookup(&funcs, name); }
uint8_t ci_datatype_of(const char* name) { return lookup(&datatypes, name); }

uint8_t ci_algo_of(const char* name) {
    uint8_t v = lookup(&algos, name);
    if (v || !name) return v;
    if (strcasecmp(name, "CollNetDirect") == 0) return CI_SHM_V1_ALGO_COLLNET_DIRECT;
    if (strcasecmp(name, "CollNetChain") == 0) return CI_SHM_V1_ALGO_COLLNET_CHAIN;
    if (strcasecmp(name, "NVLSTree") == 0) return CI_SHM_V1_ALGO_NVLS_TREE;
    return 0;
}

uint8_t ci_proto_of(const char* name) { return lookup(&protos, name); }

uint32_t ci_datatype_size(uint8_t datatype) {
    switch (datatype) {
    case CI_SHM_V1_DATATYPE_INT8:
    case CI_SHM_V1_DATATYPE_UINT8:
    case CI_SHM_V1_DATATYPE_FLOAT8_E4M3:
    case CI_SHM_V1_DATATYPE_FLOAT8_E5M2: return 1;
    case CI_SHM_V1_DATATYPE_FLOAT16:
    case CI_SHM_V1_DATATYPE_BFLOAT16: return 2;
    case CI_SHM_V1_DATATYPE_INT32:
    case CI_SHM_V1_DATATYPE_UINT32:
    case CI_SHM_V1_DATATYPE_FLOAT32: return 4;
    case CI_SHM_V1_DATATYPE_INT64:
    case CI_SHM_V1_DATATYPE_UINT64:
    case CI_SHM_V1_DATATYPE_FLOAT64: return 8;
    default: return 0;
    }
}

/* The length of s[0..n) less a character its end cuts: the lead byte of the last character
 * and its continuation bytes go when fewer than its length fit. Names in fixed fields are cut
 * on character boundaries, or every line that carries them is not UTF-8; bytes that were never
 * UTF-8 are left as they are (whoever writes them out as text escapes them). */
size_t ci_utf8_trim_tail(const char* s, size_t n) {
    size_t k = n;
    while (k > 0 && n - k < 4 && ((unsigned char)s[k - 1] & 0xC0) == 0x80) k--;
    if (k == 0) return n;
    unsigned char lead = (unsigned char)s[k - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (lead >= 0xF8 || need == 1) return n; /* not a lead byte: nothing of ours was cut */
    return need > n - (k - 1) ? k - 1 : n;
}

/* Copy a NUL-terminated string NCCL owns into a fixed field; never reads past `size - 1`. */
void ci_copy_name(char* dst, size_t size, const char* src, bool* truncated) {
    if (truncated) *truncated = false;
    if (!src) {
        dst[0] = '\0';
        return;
    }
    size_t n = strnlen(src, size);
    if (n >= size) {
        n = ci_utf8_trim_tail(src, size - 1);
        if (truncated) *truncated = true;
    }
    memcpy(dst, src, n);
    dst[n] = '\0';
}
