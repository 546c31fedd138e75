/* Diagnostics of the plugin itself: through NCCL's logger when NCCL gave one (so they land in
 * NCCL_DEBUG output), else on stderr. Warnings always; debug lines only with
 * COMMINSIGHT_PROFILER_DEBUG=1. Never on the hot path.
 */
#include <stdarg.h>
#include <stdio.h>

#include "ci_internal.h"
#include "comminsight/nccl_profiler_v5.h"

static ci_nccl_debug_logger_v5_fn nccl_logger; /* the same signature in v4 and v5 */

void ci_log_set_nccl_logger(void* logfn) {
    if (logfn && !nccl_logger) nccl_logger = (ci_nccl_debug_logger_v5_fn)logfn;
}

static void emit(uint32_t level, const char* fmt, va_list ap) {
    char msg[1024];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    if (nccl_logger) {
        /* flags 0x4000 is NCCL_PROFILE: NCCL_DEBUG_SUBSYS=PROFILE selects these lines */
        nccl_logger(level, 0x4000, __FILE__, __LINE__, "CommInsight: %s", msg);
        return;
    }
    fprintf(stderr, "comminsight-profiler[%d]: %s\n", (int)ci_g.pid, msg);
}

void ci_warn(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    emit(CI_NCCL_V5_LOG_LEVEL_WARN, fmt, ap);
    va_end(ap);
}

void ci_debug(const char* fmt, ...) {
    if (!ci_g.cfg.debug) return;
    va_list ap;
    va_start(ap, fmt);
    emit(CI_NCCL_V5_LOG_LEVEL_INFO, fmt, ap);
    va_end(ap);
}
