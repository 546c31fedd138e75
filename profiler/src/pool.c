/* Preallocated pool of in-flight ops: a lock-free stack of free entries, fronted by a small
 * per-thread cache.
 *
 * The shared stack's head packs (ABA tag << 32 | index + 1) into one 64-bit word, so a pop
 * that raced with a pop+push of the same entry fails its compare-and-swap instead of
 * corrupting the list. Every compare-and-swap on that one word moves its cache line between
 * cores, which with NCCL's enqueuing thread allocating and its proxy thread freeing cost
 * hundreds of ns per op; so each thread keeps up to CACHE_MAX free entries of its own and
 * trades with the shared stack in batches. The pool is allocated once (at the first init) and
 * never grows: exhaustion drops the event and is counted, memory stays bounded. A thread that
 * exits gives its cached entries back.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ci_internal.h"

#define BATCH 32

ci_op_t* ci_pool_ops; /* read inline by ci_op_from_handle (hot path) */
uint32_t ci_pool_n;
static uint64_t head; /* tag << 32 | (index + 1); 0 index part = empty */
static uint64_t epoch; /* bumped when the pool is (re)made: thread caches of an old pool are void */
/* Thread caches may hold at most half the pool between them: each caching thread reserves a
 * full cache's worth once; threads beyond that work straight on the shared stack, so many
 * threads cannot hoard the pool empty. */
static uint64_t reserved;

static ci_op_t* shared_pop(void) {
    uint64_t old = __atomic_load_n(&head, __ATOMIC_ACQUIRE);
    for (;;) {
        uint32_t idx1 = (uint32_t)old;
        if (CI_UNLIKELY(idx1 == 0)) return NULL;
        ci_op_t* op = &ci_pool_ops[idx1 - 1];
        uint32_t next = __atomic_load_n(&op->next_free, __ATOMIC_RELAXED);
        uint64_t desired = ((old >> 32) + 1) << 32 | next;
        if (__atomic_compare_exchange_n(&head, &old, desired, true, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return op;
    }
}

static void shared_push(ci_op_t* op) {
    uint64_t old = __atomic_load_n(&head, __ATOMIC_ACQUIRE);
    for (;;) {
        __atomic_store_n(&op->next_free, (uint32_t)old, __ATOMIC_RELAXED);
        uint64_t desired = ((old >> 32) + 1) << 32 | (uint64_t)(op->index + 1);
        if (__atomic_compare_exchange_n(&head, &old, desired, true, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return;
    }
}

void ci_pool_flush_thread(ci_thread_t* t) {
    if (t->pool_epoch == __atomic_load_n(&epoch, __ATOMIC_ACQUIRE)) {
        while (t->pool_n) shared_push(&ci_pool_ops[t->pool_items[--t->pool_n]]);
        if (t->pool_cached) __atomic_sub_fetch(&reserved, CI_POOL_CACHE, __ATOMIC_RELAXED);
    }
    t->pool_n = 0;
    t->pool_cached = false;
}

/* This thread's cache, emptied if it belongs to an earlier pool (after fork, or re-init). */
static ci_thread_t* my_cache(void) {
    ci_thread_t* t = ci_thread();
    uint64_t current = __atomic_load_n(&epoch, __ATOMIC_ACQUIRE);
    if (CI_UNLIKELY(t->pool_epoch != current)) {
        t->pool_epoch = current;
        t->pool_n = 0;
        t->pool_cached = false;
        if (!t->shared) {
            uint64_t now = __atomic_add_fetch(&reserved, CI_POOL_CACHE, __ATOMIC_RELAXED);
            if (now <= ci_pool_n / 2) t->pool_cached = true;
            else __atomic_sub_fetch(&reserved, CI_POOL_CACHE, __ATOMIC_RELAXED);
        }
    }
    return t;
}

int ci_pool_init(uint32_t n) {
    if (ci_pool_ops) return 0;
    ci_op_t* ops = aligned_alloc(64, (size_t)n * sizeof(*ops)); /* each op's lines its own */
    if (!ops) return -1;
    memset(ops, 0, (size_t)n * sizeof(*ops));
    for (uint32_t i = 0; i < n; i++) {
        ops[i].index = i;
        ops[i].next_free = (i + 1 < n) ? i + 2 : 0; /* stored as index + 1 */
    }
    head = n ? 1 : 0;
    reserved = 0;
    ci_pool_n = n;
    ci_pool_ops = ops;
    __atomic_add_fetch(&epoch, 1, __ATOMIC_RELEASE);
    return 0;
}

void ci_pool_destroy(void) {
    free(ci_pool_ops);
    ci_pool_ops = NULL;
    ci_pool_n = 0;
    head = 0;
    __atomic_add_fetch(&epoch, 1, __ATOMIC_RELEASE);
}

ci_op_t* ci_pool_get(void) {
    ci_thread_t* c = my_cache();
    ci_op_t* op;
    if (CI_UNLIKELY(!c->pool_cached)) {
        op = shared_pop();
        if (!op) return NULL;
    } else {
        if (CI_UNLIKELY(c->pool_n == 0)) {
            while (c->pool_n < BATCH) {
                ci_op_t* got = shared_pop();
                if (!got) break;
                c->pool_items[c->pool_n++] = got->index;
            }
            if (c->pool_n == 0) return NULL;
        }
        op = &ci_pool_ops[c->pool_items[--c->pool_n]];
    }
    __atomic_store_n(&op->state, CI_OP_LIVE, __ATOMIC_RELAXED);
    return op;
}

void ci_pool_put(ci_op_t* op) {
    /* A new generation first: handles of the previous life stop resolving to this entry. */
    __atomic_store_n(&op->generation, __atomic_load_n(&op->generation, __ATOMIC_RELAXED) + 1, __ATOMIC_RELEASE);
    __atomic_store_n(&op->state, CI_OP_FREE, __ATOMIC_RELEASE);
    ci_thread_t* c = my_cache();
    if (CI_UNLIKELY(!c->pool_cached)) {
        shared_push(op);
        return;
    }
    if (CI_UNLIKELY(c->pool_n == CI_POOL_CACHE))
        while (c->pool_n > CI_POOL_CACHE - BATCH) shared_push(&ci_pool_ops[c->pool_items[--c->pool_n]]);
    c->pool_items[c->pool_n++] = op->index;
}

ci_op_t* ci_pool_at(uint32_t index) { return index < ci_pool_n ? &ci_pool_ops[index] : NULL; }
uint32_t ci_pool_size(void) { return ci_pool_n; }
