/* Host timestamps for the hot path: CLOCK_MONOTONIC, read through the TSC where that is safe.
 *
 * clock_gettime costs ~21 ns on the VMs measured here and the hot path reads it twice per op;
 * a TSC read costs ~9 ns. Where the kernel itself keeps time with the TSC (clocksource "tsc",
 * invariant TSC), the plugin converts TSC ticks to CLOCK_MONOTONIC nanoseconds along a line
 *     ns = base_ns + ((tsc - base_tsc) * mult) >> 32
 * that the background thread re-anchors every heartbeat. Re-anchoring never jumps: the new line
 * starts where the old one is now and is steered to meet the kernel's clock one period later,
 * so time read this way is continuous and increasing, within a few microseconds of
 * CLOCK_MONOTONIC. Everywhere else (other clocksources, other CPUs) it is clock_gettime.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "ci_internal.h"

#if defined(__x86_64__)
#include <x86intrin.h>

typedef struct clock_line {
    uint32_t seq; /* odd while the line is being replaced */
    uint64_t base_tsc, base_ns, mult;
} clock_line_t;

static clock_line_t line;
static bool tsc_enabled;

static uint64_t kernel_ns(void) { return ci_clock_ns(CLOCK_MONOTONIC); }

/* A (tsc, ns) pair read as close together as the machine allows: the tightest of a few tries. */
static void paired_sample(uint64_t* tsc, uint64_t* ns) {
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 5; i++) {
        uint64_t before = __rdtsc();
        uint64_t k = kernel_ns();
        uint64_t after = __rdtsc();
        if (after - before < best) {
            best = after - before;
            *tsc = before + (after - before) / 2;
            *ns = k;
        }
    }
}

static bool file_has(const char* path, const char* word) {
    FILE* f = fopen(path, "r");
    if (!f) return false;
    char buf[4096];
    bool found = false;
    while (!found && fgets(buf, sizeof(buf), f)) {
        for (char* p = strstr(buf, word); p && !found; p = strstr(p + 1, word)) {
            size_t n = strlen(word);
            found = (p == buf || p[-1] == ' ' || p[-1] == '\t') && (p[n] == ' ' || p[n] == '\n' || p[n] == '\0');
        }
    }
    fclose(f);
    return found;
}

static void publish_line(uint64_t base_tsc, uint64_t base_ns, uint64_t mult) {
    __atomic_add_fetch(&line.seq, 1, __ATOMIC_ACQ_REL);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&line.base_tsc, base_tsc, __ATOMIC_RELAXED);
    __atomic_store_n(&line.base_ns, base_ns, __ATOMIC_RELAXED);
    __atomic_store_n(&line.mult, mult, __ATOMIC_RELAXED);
    __atomic_add_fetch(&line.seq, 1, __ATOMIC_RELEASE);
}

void ci_clock_init(void) {
    tsc_enabled = false;
    if (!file_has("/sys/devices/system/clocksource/clocksource0/current_clocksource", "tsc") ||
        !file_has("/proc/cpuinfo", "constant_tsc") || !file_has("/proc/cpuinfo", "nonstop_tsc"))
        return;
    uint64_t t0, n0, t1, n1;
    paired_sample(&t0, &n0);
    struct timespec pause = {0, 20 * 1000 * 1000}; /* 20 ms: ~1e-5 slope error, steered out later */
    nanosleep(&pause, NULL);
    paired_sample(&t1, &n1);
    if (t1 <= t0 || n1 <= n0) return;
    uint64_t mult = (uint64_t)(((unsigned __int128)(n1 - n0) << 32) / (t1 - t0));
    publish_line(t1, n1, mult);
    tsc_enabled = true;
}

static inline uint64_t line_at(uint64_t tsc, uint64_t base_tsc, uint64_t base_ns, uint64_t mult) {
    if (CI_UNLIKELY(tsc < base_tsc)) return base_ns; /* a core read just before the anchor */
    return base_ns + (uint64_t)(((unsigned __int128)(tsc - base_tsc) * mult) >> 32);
}

uint64_t ci_now_mono(void) {
    if (CI_UNLIKELY(!tsc_enabled)) return kernel_ns();
    for (int tries = 0; tries < 4; tries++) {
        uint32_t seq = __atomic_load_n(&line.seq, __ATOMIC_ACQUIRE);
        uint64_t base_tsc = __atomic_load_n(&line.base_tsc, __ATOMIC_RELAXED);
        uint64_t base_ns = __atomic_load_n(&line.base_ns, __ATOMIC_RELAXED);
        uint64_t mult = __atomic_load_n(&line.mult, __ATOMIC_RELAXED);
        uint64_t tsc = __rdtsc();
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if ((seq & 1) || seq != __atomic_load_n(&line.seq, __ATOMIC_RELAXED)) continue;
        return line_at(tsc, base_tsc, base_ns, mult);
    }
    return kernel_ns();
}

/* Background thread, once per heartbeat (`period_ns`): start a new line where the current one
 * is now, aimed to meet the kernel's clock one period ahead. */
void ci_clock_steer(uint64_t period_ns) {
    if (!tsc_enabled || period_ns == 0) return;
    uint64_t tsc, truth;
    paired_sample(&tsc, &truth);
    /* Our time at the sample's own TSC, not a fresh read: a thread preempted between the two
     * would see itself ahead by the preemption and slow the line by as much, running behind
     * the kernel's clock for the next period. Only this thread replaces the line. */
    uint64_t base_tsc = __atomic_load_n(&line.base_tsc, __ATOMIC_RELAXED);
    uint64_t base_ns = __atomic_load_n(&line.base_ns, __ATOMIC_RELAXED);
    uint64_t mult = __atomic_load_n(&line.mult, __ATOMIC_RELAXED);
    uint64_t ours = line_at(tsc, base_tsc, base_ns, mult);
    /* ticks per period at the current rate, and the ns the new line must cover in them */
    uint64_t ticks = (uint64_t)(((unsigned __int128)period_ns << 32) / (mult ? mult : 1));
    int64_t error = (int64_t)(truth - ours); /* > 0: we are behind */
    int64_t cover = (int64_t)period_ns + error;
    if (ticks == 0 || cover <= (int64_t)period_ns / 2 || cover >= (int64_t)period_ns * 2) {
        /* far off (suspend, migration): re-anchor on the kernel, but never backwards */
        publish_line(tsc, truth > ours ? truth : ours, mult);
        return;
    }
    uint64_t new_mult = (uint64_t)(((unsigned __int128)(uint64_t)cover << 32) / ticks);
    publish_line(tsc, ours, new_mult);
}

#else /* not x86-64: the kernel's clock, always */

void ci_clock_init(void) {}
void ci_clock_steer(uint64_t period_ns) { (void)period_ns; }
static inline uint64_t line_at(uint64_t tsc, uint64_t base_tsc, uint64_t base_ns, uint64_t mult) {
    if (CI_UNLIKELY(tsc < base_tsc)) return base_ns; /* a core read just before the anchor */
    return base_ns + (uint64_t)(((unsigned __int128)(tsc - base_tsc) * mult) >> 32);
}

uint64_t ci_now_mono(void) { return ci_clock_ns(CLOCK_MONOTONIC); }

#endif
