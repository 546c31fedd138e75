/* How long an op record took and its bus bandwidth, by the shm protocol's definitions of
 * timing_source (protocols/shm/v1): the GPU span of its kernel; else, where only the host saw
 * the kernel channels stop, enqueue to that stop; else, with no kernel events (KernelCh off),
 * the host's start to stop of the call; never a span whose clocks run backwards (0 then).
 * Bus bandwidth is NCCL Inspector's: traffic / time x the collective's factor, from the span in
 * nanoseconds.
 *
 * The log writer includes this header; the Agent and the live Semantic Engine compute the same
 * in numpy (comminsight/slot_timing.py), and contract-tests/test_op_timing.py holds the two
 * together on the same records, bit for bit. Header-only and free of the Profiler's state, so
 * that test compiles it alone. */
#ifndef CI_OP_TIMING_H
#define CI_OP_TIMING_H

#include <stdint.h>

#include "comminsight/shm_v1.h"

static inline uint64_t ci_span_ns(uint64_t from, uint64_t to) { return to >= from ? to - from : 0; }

/* The op's duration in nanoseconds. */
static inline uint64_t ci_op_duration_ns(const ci_shm_op_slot_v1_t* r) {
    switch (r->timing_source) {
    case CI_SHM_V1_TIMING_SOURCE_KERNEL_GPU: return ci_span_ns(r->gpu_start_ticks, r->gpu_end_ticks);
    case CI_SHM_V1_TIMING_SOURCE_KERNEL_CPU: return ci_span_ns(r->host_start_mono_ns, r->complete_mono_ns);
    case CI_SHM_V1_TIMING_SOURCE_COLLECTIVE_CPU:
        /* a call the host never saw stop (swept at finalize, say) has no span */
        return r->host_stop_mono_ns ? ci_span_ns(r->host_start_mono_ns, r->host_stop_mono_ns) : 0;
    default: return 0;
    }
}

/* NCCL Inspector's bandwidths in GB/s of an op that took `ns` (0 where ns is 0): the
 * algorithm bandwidth (its traffic, n x the bytes for a gathered op, over the time) and the
 * bus bandwidth (that x the collective's factor), in this order of float operations. */
static inline void ci_op_bandwidths_gbs(const ci_shm_op_slot_v1_t* r, uint64_t ns, double* algbw,
                                        double* busbw) {
    double n = r->nranks > 0 ? (double)r->nranks : 1.0;
    double traffic = (double)r->bytes, factor = 1.0;
    switch (r->func) {
    case CI_SHM_V1_FUNC_ALL_REDUCE: factor = 2.0 * (n - 1.0) / n; break;
    case CI_SHM_V1_FUNC_REDUCE_SCATTER:
    case CI_SHM_V1_FUNC_ALL_GATHER:
    case CI_SHM_V1_FUNC_ALL_TO_ALL:
        traffic *= n;
        factor = (n - 1.0) / n;
        break;
    default: break;
    }
    double seconds = (double)ns / 1e9;
    *algbw = ns ? traffic / 1e9 / seconds : 0.0;
    *busbw = *algbw * factor;
}

#endif
