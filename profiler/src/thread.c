/* Per-thread state of the hot path, reached through one initial-exec TLS pointer.
 *
 * A shared library's ordinary thread-locals go through __tls_get_addr (a call per access, which
 * measured ~15 ns per op); one pointer in static TLS is a single load. Each NCCL thread that
 * calls in gets a block from a preallocated array (no allocation on the hot path) and gives it
 * back when it exits. If all blocks are taken, the thread shares a fallback block that turns
 * the per-thread caches off (correct, just slower).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "ci_internal.h"

#define BLOCKS 1024

__thread ci_thread_t* ci_tls __attribute__((tls_model("initial-exec")));

static ci_thread_t blocks[BLOCKS];
static ci_thread_t fallback = {.shared = true};
static ci_thread_t* free_list;
static uint32_t next_unused;
static pthread_mutex_t blocks_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_key_t exit_key;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;
static bool unloading; /* under blocks_lock: the pool is about to be freed */

/* A thread's exit gives its cached pool entries back, under blocks_lock: an unload frees the
 * pool only after taking that lock, so an exit that began earlier has finished with the pool
 * by then and a later one leaves it alone. A thread that called in may exit while the main
 * thread unloads the plugin: the interpreter's join returns before the thread's own exit
 * handlers have run. */
static void detach(void* block) {
    ci_thread_t* t = block;
    pthread_mutex_lock(&blocks_lock);
    if (!unloading) {
        ci_pool_flush_thread(t);
        t->next = free_list;
        free_list = t;
    }
    pthread_mutex_unlock(&blocks_lock);
}

static bool exit_key_made;

static void make_exit_key(void) { exit_key_made = pthread_key_create(&exit_key, detach) == 0; }

/* The library is being unloaded (NCCL dlcloses the plugin once its last communicator is
 * gone) while threads that called in live on: their exit must not run `detach`, which goes
 * with the library. Found on real GPUs, where every PyTorch job then died of SIGSEGV at exit.
 * Called before the pool is freed. */
void ci_thread_unload(void) {
    pthread_mutex_lock(&blocks_lock);
    unloading = true;
    pthread_mutex_unlock(&blocks_lock);
    if (exit_key_made) {
        pthread_key_delete(exit_key);
        exit_key_made = false;
    }
}

ci_thread_t* ci_thread_attach(void) {
    pthread_once(&exit_key_once, make_exit_key);
    pthread_mutex_lock(&blocks_lock); /* once per thread, never on the hot path */
    ci_thread_t* t = free_list;
    if (t) free_list = t->next;
    else if (next_unused < BLOCKS) t = &blocks[next_unused++];
    pthread_mutex_unlock(&blocks_lock);
    if (!t) {
        ci_tls = &fallback;
        return ci_tls;
    }
    memset(t, 0, sizeof(*t));
    t->tid = (uint32_t)syscall(SYS_gettid);
    pthread_setspecific(exit_key, t);
    ci_tls = t;
    return t;
}

/* In a forked child the forking thread keeps its block; its tid is the child's own now. Only
 * it survives: a parent thread that was attaching or exiting at the fork held blocks_lock, and
 * the child's own threads would wait for it forever (and a child that joins its writer at
 * finalize with them). The blocks the parent's other threads held stay taken: nobody gives
 * them back, and the fallback block covers the rest. */
void ci_thread_after_fork(void) {
    pthread_mutex_init(&blocks_lock, NULL);
    if (ci_tls && !ci_tls->shared) ci_tls->tid = (uint32_t)syscall(SYS_gettid);
}
