/* The simulated GPU's per-channel events, one C loop per kernel.
 *
 * NCCL's proxy thread starts a KernelCh event for every channel of a kernel as the kernel
 * reaches it, and records KernelChStop then stops each as it finishes: some 26 calls of each
 * kind per collective on a busy communicator. Made one at a time from Python, through cffi,
 * they cost a simulated rank more CPU than everything else it does for the op; here they are
 * the same calls, in the same order, with the same arguments (comminsight/sim/abi.py says
 * which), made from C. The plugin is reached through the function table it exports, as NCCL
 * reaches it.
 *
 * The descriptor and state arguments are variables of the loop, zeroed for every call, as
 * NCCL's are variables of the function that makes the call: a plugin may keep neither.
 *
 * Each function returns how many of the plugin's calls returned non-zero, which the caller
 * counts as it counts every other call's.
 */
#include <stdint.h>
#include <string.h>

#include "comminsight/nccl_profiler_v4.h"
#include "comminsight/nccl_profiler_v5.h"
#include "comminsight/nccl_profiler_v6.h"
#include "comminsight/nccl_profiler_v7.h"

#define CI_SIM_KERNEL_CHANNELS(V)                                                              \
    int ci_sim_start_kernel_channels_v##V(const ci_nccl_profiler_v##V##_t* plugin,            \
                                          void* context, void* parent, int n,                  \
                                          const uint64_t* ptimers, void** handles) {           \
        int nonzero = 0;                                                                       \
        for (int ch = 0; ch < n; ch++) {                                                       \
            ci_nccl_event_descr_v##V##_t descr;                                                \
            memset(&descr, 0, sizeof descr);                                                   \
            descr.type = CI_NCCL_V##V##_EVENT_TYPE_KERNEL_CH;                                  \
            descr.parentObj = parent;                                                          \
            descr.rank = 0; /* NCCL leaves it: the plugin takes the rank from the parent */    \
            descr.u.kernelCh.channelId = (uint8_t)ch;                                          \
            descr.u.kernelCh.pTimer = ptimers[ch];                                             \
            handles[ch] = NULL;                                                                \
            if (plugin->startEvent(context, &handles[ch], &descr) != 0) nonzero++;             \
        }                                                                                      \
        return nonzero;                                                                        \
    }                                                                                          \
                                                                                               \
    int ci_sim_stop_kernel_channels_v##V(const ci_nccl_profiler_v##V##_t* plugin, int n,       \
                                         void* const* handles, const uint64_t* ptimers) {      \
        int nonzero = 0;                                                                       \
        for (int ch = 0; ch < n; ch++) {                                                       \
            if (handles[ch] == NULL) continue; /* not delivered: NCCL calls nothing for it */  \
            ci_nccl_state_args_v##V##_t args;                                                  \
            memset(&args, 0, sizeof args);                                                     \
            args.kernelCh.pTimer = ptimers[ch];                                                \
            if (plugin->recordEventState(handles[ch], CI_NCCL_V##V##_EVENT_STATE_KERNEL_CH_STOP, \
                                         &args) != 0)                                          \
                nonzero++;                                                                     \
            if (plugin->stopEvent(handles[ch]) != 0) nonzero++;                                \
        }                                                                                      \
        return nonzero;                                                                        \
    }

CI_SIM_KERNEL_CHANNELS(4)
CI_SIM_KERNEL_CHANNELS(5)
CI_SIM_KERNEL_CHANNELS(6)
CI_SIM_KERNEL_CHANNELS(7)
