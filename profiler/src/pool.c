/* Preallocated pool of in-flight ops: a lock-free stack of free entries.
 *
 * The head packs (ABA tag << 32 | index + 1) into one 64-bit word, so a pop that raced with a
 * pop+push of the same entry fails its compare-and-swap instead of corrupting the list. The
 * pool is allocated once (at the first init) and never grows: exhaustion drops the event and
 * is counted, memory stays bounded.
 */
#include <stdlib.h>
#include <string.h>

#include "ci_internal.h"

ci_op_t* ci_pool_ops; /* read inline by ci_op_from_handle (hot path) */
uint32_t ci_pool_n;
#define ops ci_pool_ops
#define size ci_pool_n
static uint64_t head; /* tag << 32 | (index + 1); 0 index part = empty */

int ci_pool_init(uint32_t n) {
    if (ops) return 0;
    ops = calloc(n, sizeof(*ops));
    if (!ops) return -1;
    size = n;
    for (uint32_t i = 0; i < n; i++) {
        ops[i].index = i;
        ops[i].next_free = (i + 1 < n) ? i + 2 : 0; /* stored as index + 1 */
    }
    head = n ? 1 : 0;
    return 0;
}

void ci_pool_destroy(void) {
    free(ops);
    ops = NULL;
    size = 0;
    head = 0;
}

ci_op_t* ci_pool_get(void) {
    uint64_t old = __atomic_load_n(&head, __ATOMIC_ACQUIRE);
    for (;;) {
        uint32_t idx1 = (uint32_t)old;
        if (CI_UNLIKELY(idx1 == 0)) return NULL;
        ci_op_t* op = &ops[idx1 - 1];
        uint32_t next = __atomic_load_n(&op->next_free, __ATOMIC_RELAXED);
        uint64_t desired = ((old >> 32) + 1) << 32 | next;
        if (__atomic_compare_exchange_n(&head, &old, desired, true, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            __atomic_store_n(&op->state, CI_OP_LIVE, __ATOMIC_RELAXED);
            return op;
        }
    }
}

void ci_pool_put(ci_op_t* op) {
    /* A new generation first: handles of the previous life stop resolving to this entry. */
    __atomic_store_n(&op->generation, __atomic_load_n(&op->generation, __ATOMIC_RELAXED) + 1,
                     __ATOMIC_RELAXED); /* the owner is alone here; the CAS below publishes it */
    __atomic_store_n(&op->state, CI_OP_FREE, __ATOMIC_RELEASE);
    uint64_t old = __atomic_load_n(&head, __ATOMIC_ACQUIRE);
    for (;;) {
        __atomic_store_n(&op->next_free, (uint32_t)old, __ATOMIC_RELAXED);
        uint64_t desired = ((old >> 32) + 1) << 32 | (uint64_t)(op->index + 1);
        if (__atomic_compare_exchange_n(&head, &old, desired, true, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return;
    }
}

ci_op_t* ci_pool_at(uint32_t index) { return index < size ? &ops[index] : NULL; }
uint32_t ci_pool_size(void) { return size; }
