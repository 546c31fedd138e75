/* A stand-in for NCCL whose process sees the wall clock an hour ahead of the kernel's, the
 * state a node is in just after NTP steps CLOCK_REALTIME back: any deadline computed from a
 * reading taken before the step lies an hour in the kernel's future.
 *
 * The executable defines clock_gettime and is linked with --export-dynamic, so the plugin it
 * dlopens binds to this definition (the executable comes first in the lookup scope): no
 * LD_PRELOAD, no privilege, and the machine's clock is left alone. Only CLOCK_REALTIME moves;
 * every other clock is the kernel's.
 *
 * Commands on stdin, one per line, each answered "ok" on stdout once done:
 *   ops N    N AllReduce collectives on one communicator (Coll, and one KernelCh when the
 *            plugin asks for channel events), completed at once
 *   stuck    one more AllReduce that starts and never finishes (a hang)
 *   quit     finalize the communicator and exit
 *
 * usage: wall_clock_ahead PLUGIN.so
 */
#define _GNU_SOURCE

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "comminsight/nccl_profiler_v5.h"

#define AHEAD_S 3600

int clock_gettime(clockid_t clock, struct timespec* ts) {
    /* the raw system call: libc's own clock_gettime would be this function again */
    int rc = (int)syscall(SYS_clock_gettime, clock, ts);
    if (rc == 0 && clock == CLOCK_REALTIME) ts->tv_sec += AHEAD_S;
    return rc;
}

static int32_t mask;
static char send_buf, recv_buf;

static void collective(const ci_nccl_profiler_v5_t* prof, void* ctx, uint64_t seq, int finish) {
    int32_t m = __atomic_load_n(&mask, __ATOMIC_RELAXED);
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
    if (!finish) return;
    if (coll && (m & CI_NCCL_V5_EVENT_TYPE_KERNEL_CH)) {
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
    if (argc != 2) {
        fprintf(stderr, "usage: %s PLUGIN.so\n", argv[0]);
        return 2;
    }
    void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    const ci_nccl_profiler_v5_t* prof = lib ? dlsym(lib, "ncclProfiler_v5") : NULL;
    if (!prof) {
        fprintf(stderr, "cannot load ncclProfiler_v5 from %s: %s\n", argv[1], dlerror());
        return 1;
    }
    void* ctx = NULL;
    if (prof->init(&ctx, 0x5eed0001ull, &mask, "wall-clock-ahead", 1, 1, 0, NULL) != CI_NCCL_V5_RESULT_SUCCESS) {
        fprintf(stderr, "init failed\n");
        return 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    uint64_t seq = 0;
    char line[64];
    while (fgets(line, sizeof(line), stdin)) {
        long n;
        if (sscanf(line, "ops %ld", &n) == 1) {
            for (long i = 0; i < n; i++) collective(prof, ctx, seq++, 1);
        } else if (strncmp(line, "stuck", 5) == 0) {
            collective(prof, ctx, seq++, 0);
        } else if (strncmp(line, "quit", 4) == 0) {
            break;
        }
        printf("ok\n");
    }
    prof->finalize(ctx);
    printf("ok\n");
    return 0;
}
