/* An NCCL profiler plugin that does nothing: the baseline of the hot-path benchmark.
 *
 * Whatever NCCL (or bench/hot_path.c) pays to call a plugin at all is paid here too, so the
 * difference "plugin under test minus this one" is the plugin's own cost. To keep that
 * comparison fair it must make NCCL issue the same events as the plugin under test:
 *   - it asks for the same activation mask (COMMINSIGHT_PROFILER_EVENT_MASK, else the
 *     Profiler's default Coll|P2p|KernelCh), and
 *   - startEvent hands back a non-NULL handle, because NCCL only issues stop, recordEventState
 *     and child events for handles that are not NULL.
 *
 * Built with only the generated ABI headers, like the Profiler itself.
 */
#include <stdint.h>
#include <stdlib.h>

#include "comminsight/nccl_profiler_v4.h"
#include "comminsight/nccl_profiler_v5.h"

/* The Profiler's default mask (config key COMMINSIGHT_PROFILER_EVENT_MASK). */
#define EMPTY_DEFAULT_MASK \
    (CI_NCCL_V5_EVENT_TYPE_COLL | CI_NCCL_V5_EVENT_TYPE_P2P | CI_NCCL_V5_EVENT_TYPE_KERNEL_CH)

/* One byte whose address serves as every event handle: never dereferenced, only non-NULL. */
static char empty_handle;
/* Likewise the per-communicator context, so NCCL calls finalize. */
static char empty_context;

static int32_t empty_mask_from_env(void) {
    const char* text = getenv("COMMINSIGHT_PROFILER_EVENT_MASK");
    if (text == NULL || *text == '\0') return EMPTY_DEFAULT_MASK;
    char* end = NULL;
    /* base 0: the same mask may be written 70 or 0x46 */
    long value = strtol(text, &end, 0);
    if (*end != '\0' || value < 0 || value > INT32_MAX) return EMPTY_DEFAULT_MASK;
    return (int32_t)value;
}

static uint32_t empty_init_common(void** context, int32_t* eActivationMask) {
    *context = &empty_context;
    *eActivationMask = empty_mask_from_env();
    return CI_NCCL_V5_RESULT_SUCCESS;
}

static uint32_t empty_init_v5(void** context, uint64_t commId, int32_t* eActivationMask,
                              const char* commName, int32_t nNodes, int32_t nranks, int32_t rank,
                              ci_nccl_debug_logger_v5_fn logfn) {
    (void)commId, (void)commName, (void)nNodes, (void)nranks, (void)rank, (void)logfn;
    return empty_init_common(context, eActivationMask);
}

static uint32_t empty_init_v4(void** context, int32_t* eActivationMask, const char* commName,
                              uint64_t commHash, int32_t nNodes, int32_t nranks, int32_t rank,
                              ci_nccl_debug_logger_v4_fn logfn) {
    (void)commName, (void)commHash, (void)nNodes, (void)nranks, (void)rank, (void)logfn;
    return empty_init_common(context, eActivationMask);
}

static uint32_t empty_start_v5(void* context, void** eHandle, ci_nccl_event_descr_v5_t* eDescr) {
    (void)context, (void)eDescr;
    *eHandle = &empty_handle;
    return CI_NCCL_V5_RESULT_SUCCESS;
}

static uint32_t empty_start_v4(void* context, void** eHandle, ci_nccl_event_descr_v4_t* eDescr) {
    (void)context, (void)eDescr;
    *eHandle = &empty_handle;
    return CI_NCCL_V4_RESULT_SUCCESS;
}

static uint32_t empty_stop(void* eHandle) {
    (void)eHandle;
    return CI_NCCL_V5_RESULT_SUCCESS;
}

static uint32_t empty_record_v5(void* eHandle, uint32_t eState, ci_nccl_state_args_v5_t* args) {
    (void)eHandle, (void)eState, (void)args;
    return CI_NCCL_V5_RESULT_SUCCESS;
}

static uint32_t empty_record_v4(void* eHandle, uint32_t eState, ci_nccl_state_args_v4_t* args) {
    (void)eHandle, (void)eState, (void)args;
    return CI_NCCL_V4_RESULT_SUCCESS;
}

static uint32_t empty_finalize(void* context) {
    (void)context;
    return CI_NCCL_V5_RESULT_SUCCESS;
}

/* Default visibility is enough: the bench builds without -fvisibility=hidden. stop and
 * finalize have the same signature in v4 and v5, so both structs share them. */
const ci_nccl_profiler_v5_t ncclProfiler_v5 = {
    .name = "comminsight-bench-empty",
    .init = empty_init_v5,
    .startEvent = empty_start_v5,
    .stopEvent = empty_stop,
    .recordEventState = empty_record_v5,
    .finalize = empty_finalize,
};

const ci_nccl_profiler_v4_t ncclProfiler_v4 = {
    .name = "comminsight-bench-empty",
    .init = empty_init_v4,
    .startEvent = empty_start_v4,
    .stopEvent = empty_stop,
    .recordEventState = empty_record_v4,
    .finalize = empty_finalize,
};
