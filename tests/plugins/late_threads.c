/* A stand-in for NCCL in a process whose plugin threads are slow to be scheduled (a loaded
 * node): every thread the plugin starts waits, before its first instruction, until the
 * stand-in lets it go. Whatever the process does meanwhile happens before the log writer's
 * first pass, for certain, with no timing involved.
 *
 * The executable defines pthread_create and is linked with --export-dynamic, so the plugin
 * it dlopens binds to this definition (the executable comes first in the lookup scope); it
 * starts the thread through libc's own, on a trampoline that waits at the gate.
 *
 * What it does: init two communicators, BURST completed AllReduces on the first, open the
 * gate, finalize both, exit. With the default activation mask each AllReduce is one ring
 * record, so the ring receives BURST + 4 records (two communicator inits, two finalizes).
 *
 * usage: late_threads PLUGIN.so BURST
 */
#define _GNU_SOURCE

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "comminsight/nccl_profiler_v5.h"

typedef int (*create_fn)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);

typedef struct held {
    void* (*fn)(void*);
    void* arg;
} held_t;

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static int gate_open;

static void* at_the_gate(void* p) {
    held_t h = *(held_t*)p;
    free(p);
    pthread_mutex_lock(&gate_lock);
    while (!gate_open) pthread_cond_wait(&gate_cond, &gate_lock);
    pthread_mutex_unlock(&gate_lock);
    return h.fn(h.arg);
}

int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*fn)(void*), void* arg) {
    create_fn real = (create_fn)dlsym(RTLD_NEXT, "pthread_create");
    held_t* h = malloc(sizeof(*h));
    if (!real || !h) {
        free(h);
        return 11; /* EAGAIN */
    }
    h->fn = fn;
    h->arg = arg;
    int rc = real(thread, attr, at_the_gate, h);
    if (rc != 0) free(h);
    return rc;
}

static void open_gate(void) {
    pthread_mutex_lock(&gate_lock);
    gate_open = 1;
    pthread_cond_broadcast(&gate_cond);
    pthread_mutex_unlock(&gate_lock);
}

static int32_t mask;
static char send_buf, recv_buf;

static void collective(const ci_nccl_profiler_v5_t* prof, void* ctx, uint64_t seq) {
    ci_nccl_event_descr_v5_t d = {0};
    d.type = CI_NCCL_V5_EVENT_TYPE_COLL;
    d.u.coll.seqNumber = seq;
    d.u.coll.func = "AllReduce";
    d.u.coll.sendBuff = &send_buf;
    d.u.coll.recvBuff = &recv_buf;
    d.u.coll.count = 1024;
    d.u.coll.datatype = "ncclFloat32";
    d.u.coll.nChannels = 1;
    d.u.coll.nWarps = 8;
    d.u.coll.algo = "RING";
    d.u.coll.proto = "SIMPLE";
    void* coll = NULL;
    prof->startEvent(ctx, &coll, &d);
    if (coll && (__atomic_load_n(&mask, __ATOMIC_RELAXED) & CI_NCCL_V5_EVENT_TYPE_KERNEL_CH)) {
        ci_nccl_event_descr_v5_t k = {0};
        k.type = CI_NCCL_V5_EVENT_TYPE_KERNEL_CH;
        k.parentObj = coll;
        k.u.kernelCh.pTimer = 1000000 + seq * 20000;
        void* ch = NULL;
        prof->startEvent(ctx, &ch, &k);
        if (ch) {
            ci_nccl_state_args_v5_t a = {0};
            a.kernelCh.pTimer = k.u.kernelCh.pTimer + 15000;
            prof->recordEventState(ch, CI_NCCL_V5_EVENT_STATE_KERNEL_CH_STOP, &a);
            prof->stopEvent(ch);
        }
    }
    if (coll) prof->stopEvent(coll);
}

int main(int argc, char** argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s PLUGIN.so BURST\n", argv[0]);
        return 2;
    }
    long burst = strtol(argv[2], NULL, 10);
    void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    const ci_nccl_profiler_v5_t* prof = lib ? dlsym(lib, "ncclProfiler_v5") : NULL;
    if (!prof) {
        fprintf(stderr, "cannot load ncclProfiler_v5 from %s: %s\n", argv[1], dlerror());
        return 1;
    }
    void* first = NULL;
    void* second = NULL;
    if (prof->init(&first, 0x1a7e0001ull, &mask, "late-first", 1, 1, 0, NULL) != CI_NCCL_V5_RESULT_SUCCESS ||
        prof->init(&second, 0x1a7e0002ull, &mask, "late-second", 1, 1, 0, NULL) != CI_NCCL_V5_RESULT_SUCCESS) {
        fprintf(stderr, "init failed\n");
        return 1;
    }
    for (long i = 0; i < burst; i++) collective(prof, first, (uint64_t)i);
    open_gate();
    prof->finalize(second);
    prof->finalize(first);
    return 0;
}
