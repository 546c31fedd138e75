/* A profiler plugin for testing the simulated NCCL: it records every call it receives.
 *
 * Exports ncclProfiler_v5 and ncclProfiler_v4, built only from the generated headers. Each
 * call becomes one text line "<call> key=value ..." appended, with a single write(2), to
 * $RECORDING_PLUGIN_DIR/calls-<pid>.log. Handles and contexts are heap objects that are
 * never freed, so every address it hands out is unique for the life of the process.
 *
 * Environment:
 *   RECORDING_PLUGIN_DIR          where the call logs go (required)
 *   RECORDING_PLUGIN_MASK         activation mask written in init (default: every bit)
 *   RECORDING_PLUGIN_MASK_SWITCH  "N:M": after the N-th Coll/P2p start of the process, set
 *                                 the mask to M (a plugin changing it at run time)
 *   RECORDING_PLUGIN_FAIL_INIT    init fails for communicators whose name contains this
 *   RECORDING_PLUGIN_KEEP_STRINGS "1": keep the Coll's func pointer and read it again at stop
 *                                 (what a buggy plugin does; the sim must make it visible)
 */
#define _POSIX_C_SOURCE 200809L
#include "comminsight/nccl_profiler_v4.h"
#include "comminsight/nccl_profiler_v5.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  int abi;
  uint64_t type;
  const char* kept_func; /* RECORDING_PLUGIN_KEEP_STRINGS: NCCL's pointer, deliberately kept */
} handle_t;

static int log_fd = -1;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static atomic_long task_starts;
static int32_t* volatile saved_mask;

static void open_log(void) {
  const char* dir = getenv("RECORDING_PLUGIN_DIR");
  if (!dir) return;
  char path[4096];
  snprintf(path, sizeof path, "%s/calls-%ld.log", dir, (long)getpid());
  log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
  char line[256];
  const char* rank = getenv("RANK");
  int n = snprintf(line, sizeof line, "load pid=%ld rank=%s\n", (long)getpid(), rank ? rank : "-");
  if (log_fd >= 0 && write(log_fd, line, (size_t)n) < 0) log_fd = -1;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One line per call: "<call> t=<ns> tid=<thread> " then the caller's fields. */
static void record(const char* call, const char* fmt, ...) {
  pthread_once(&log_once, open_log);
  if (log_fd < 0) return;
  char line[2048];
  int n = snprintf(line, sizeof line, "%s t=%llu tid=%lu ", call, (unsigned long long)now_ns(),
                   (unsigned long)pthread_self());
  va_list ap;
  va_start(ap, fmt);
  n += vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
  va_end(ap);
  if (n > (int)sizeof line - 2) n = (int)sizeof line - 2;
  line[n++] = '\n';
  if (write(log_fd, line, (size_t)n) < 0) log_fd = -1;
}

static const char* str(const char* s) { return s ? s : "(null)"; }

static int32_t initial_mask(int abi) {
  const char* v = getenv("RECORDING_PLUGIN_MASK");
  if (v) return (int32_t)strtol(v, NULL, 0);
  return abi == 5 ? 0xFFF : 0xFF;
}

static void maybe_switch_mask(void) {
  const char* v = getenv("RECORDING_PLUGIN_MASK_SWITCH");
  long after, mask;
  if (!v || sscanf(v, "%ld:%li", &after, &mask) != 2) return;
  long n = atomic_fetch_add(&task_starts, 1) + 1;
  if (n == after && saved_mask) {
    *saved_mask = (int32_t)mask;
    record("mask_switch", "mask=%ld", mask);
  }
}

static uint32_t do_init(int abi, void** context, uint64_t comm_id, int32_t* mask, const char* name,
                        int32_t nnodes, int32_t nranks, int32_t rank, const void* logfn) {
  const char* fail = getenv("RECORDING_PLUGIN_FAIL_INIT");
  *mask = initial_mask(abi);
  saved_mask = mask;
  record("init", "abi=%d comm=%016llx name=%s nnodes=%d nranks=%d rank=%d mask_ptr=%p mask=%d logfn=%p",
         abi, (unsigned long long)comm_id, str(name), nnodes, nranks, rank, (void*)mask, *mask, logfn);
  if (fail && *fail && name && strstr(name, fail)) {
    record("init_failed", "comm=%016llx", (unsigned long long)comm_id);
    return 5;
  }
  *context = malloc(16);
  record("context", "comm=%016llx ctx=%p", (unsigned long long)comm_id, *context);
  return 0;
}

static handle_t* new_handle(int abi, uint64_t type) {
  handle_t* h = calloc(1, sizeof *h);
  h->abi = abi;
  h->type = type;
  return h;
}

/* ---- v5 ---- */

static uint32_t init_v5(void** context, uint64_t comm_id, int32_t* mask, const char* name, int32_t nnodes,
                        int32_t nranks, int32_t rank, ci_nccl_debug_logger_v5_fn logfn) {
  return do_init(5, context, comm_id, mask, name, nnodes, nranks, rank, (const void*)(uintptr_t)logfn);
}

static uint32_t start_v5(void* context, void** handle, ci_nccl_event_descr_v5_t* d) {
  handle_t* h = new_handle(5, d->type);
  const char* label = ci_nccl_v5_event_type_label(d->type);
  char fields[1024] = "";
  switch (d->type) {
  case CI_NCCL_V5_EVENT_TYPE_GROUP_API:
    snprintf(fields, sizeof fields, "depth=%d captured=%d", d->u.groupApi.groupDepth,
             (int)d->u.groupApi.graphCaptured);
    break;
  case CI_NCCL_V5_EVENT_TYPE_COLL_API:
    snprintf(fields, sizeof fields, "func=%s count=%zu dtype=%s root=%d stream=%p", str(d->u.collApi.func),
             d->u.collApi.count, str(d->u.collApi.datatype), d->u.collApi.root, d->u.collApi.stream);
    break;
  case CI_NCCL_V5_EVENT_TYPE_P2P_API:
    snprintf(fields, sizeof fields, "func=%s count=%zu dtype=%s stream=%p", str(d->u.p2pApi.func),
             d->u.p2pApi.count, str(d->u.p2pApi.datatype), d->u.p2pApi.stream);
    break;
  case CI_NCCL_V5_EVENT_TYPE_KERNEL_LAUNCH:
    snprintf(fields, sizeof fields, "stream=%p", d->u.kernelLaunch.stream);
    break;
  case CI_NCCL_V5_EVENT_TYPE_COLL:
    maybe_switch_mask();
    if (getenv("RECORDING_PLUGIN_KEEP_STRINGS")) h->kept_func = d->u.coll.func;
    snprintf(fields, sizeof fields,
             "seq=%llu func=%s count=%zu dtype=%s root=%d nch=%u nwarps=%u algo=%s proto=%s pgroup=%p send=%p recv=%p",
             (unsigned long long)d->u.coll.seqNumber, str(d->u.coll.func), d->u.coll.count,
             str(d->u.coll.datatype), d->u.coll.root, d->u.coll.nChannels, d->u.coll.nWarps,
             str(d->u.coll.algo), str(d->u.coll.proto), d->u.coll.parentGroup, d->u.coll.sendBuff,
             d->u.coll.recvBuff);
    break;
  case CI_NCCL_V5_EVENT_TYPE_P2P:
    maybe_switch_mask();
    snprintf(fields, sizeof fields, "func=%s count=%zu dtype=%s peer=%d nch=%u pgroup=%p buff=%p",
             str(d->u.p2p.func), d->u.p2p.count, str(d->u.p2p.datatype), d->u.p2p.peer, d->u.p2p.nChannels,
             d->u.p2p.parentGroup, d->u.p2p.buff);
    break;
  case CI_NCCL_V5_EVENT_TYPE_PROXY_OP:
    snprintf(fields, sizeof fields, "pid=%d ch=%u peer=%d nsteps=%d chunk=%d send=%d", d->u.proxyOp.pid,
             d->u.proxyOp.channelId, d->u.proxyOp.peer, d->u.proxyOp.nSteps, d->u.proxyOp.chunkSize,
             d->u.proxyOp.isSend);
    break;
  case CI_NCCL_V5_EVENT_TYPE_PROXY_STEP:
    snprintf(fields, sizeof fields, "step=%d", d->u.proxyStep.step);
    break;
  case CI_NCCL_V5_EVENT_TYPE_KERNEL_CH:
    snprintf(fields, sizeof fields, "ch=%u ptimer=%llu", d->u.kernelCh.channelId,
             (unsigned long long)d->u.kernelCh.pTimer);
    break;
  default:
    break;
  }
  record("start", "abi=5 ctx=%p h=%p type=%s parent=%p rank=%d %s", context, (void*)h, label ? label : "unknown",
         d->parentObj, d->rank, fields);
  *handle = h;
  return 0;
}

static uint32_t stop_any(void* handle) {
  handle_t* h = handle;
  if (h && h->kept_func) {
    char late[32] = "";
    strncpy(late, h->kept_func, sizeof late - 1);
    record("stop", "h=%p late_func=%s", handle, late);
  } else {
    record("stop", "h=%p", handle);
  }
  return 0;
}

static uint32_t state_v5(void* handle, uint32_t state, ci_nccl_state_args_v5_t* args) {
  if (!args) {
    record("state", "h=%p state=%u args=null", handle, state);
  } else if (state == CI_NCCL_V5_EVENT_STATE_KERNEL_CH_STOP) {
    record("state", "h=%p state=%u ptimer=%llu", handle, state, (unsigned long long)args->kernelCh.pTimer);
  } else {
    record("state", "h=%p state=%u trans=%zu", handle, state, args->proxyStep.transSize);
  }
  return 0;
}

static uint32_t finalize_any(void* context) {
  record("finalize", "ctx=%p", context);
  return 0;
}

ci_nccl_profiler_v5_t ncclProfiler_v5 = {"recording", init_v5, start_v5, stop_any, state_v5, finalize_any};

/* ---- v4 ---- */

static uint32_t init_v4(void** context, int32_t* mask, const char* name, uint64_t comm_hash, int32_t nnodes,
                        int32_t nranks, int32_t rank, ci_nccl_debug_logger_v4_fn logfn) {
  return do_init(4, context, comm_hash, mask, name, nnodes, nranks, rank, (const void*)(uintptr_t)logfn);
}

static uint32_t start_v4(void* context, void** handle, ci_nccl_event_descr_v4_t* d) {
  handle_t* h = new_handle(4, d->type);
  const char* label = ci_nccl_v4_event_type_label(d->type);
  char fields[1024] = "";
  switch (d->type) {
  case CI_NCCL_V4_EVENT_TYPE_COLL:
    maybe_switch_mask();
    snprintf(fields, sizeof fields, "seq=%llu func=%s count=%zu dtype=%s root=%d nch=%u nwarps=%u algo=%s proto=%s",
             (unsigned long long)d->u.coll.seqNumber, str(d->u.coll.func), d->u.coll.count,
             str(d->u.coll.datatype), d->u.coll.root, d->u.coll.nChannels, d->u.coll.nWarps,
             str(d->u.coll.algo), str(d->u.coll.proto));
    break;
  case CI_NCCL_V4_EVENT_TYPE_P2P:
    maybe_switch_mask();
    snprintf(fields, sizeof fields, "func=%s count=%zu dtype=%s peer=%d nch=%u", str(d->u.p2p.func),
             d->u.p2p.count, str(d->u.p2p.datatype), d->u.p2p.peer, d->u.p2p.nChannels);
    break;
  case CI_NCCL_V4_EVENT_TYPE_PROXY_OP:
    snprintf(fields, sizeof fields, "pid=%d ch=%u peer=%d nsteps=%d chunk=%d send=%d", d->u.proxyOp.pid,
             d->u.proxyOp.channelId, d->u.proxyOp.peer, d->u.proxyOp.nSteps, d->u.proxyOp.chunkSize,
             d->u.proxyOp.isSend);
    break;
  case CI_NCCL_V4_EVENT_TYPE_PROXY_STEP:
    snprintf(fields, sizeof fields, "step=%d", d->u.proxyStep.step);
    break;
  case CI_NCCL_V4_EVENT_TYPE_KERNEL_CH:
    snprintf(fields, sizeof fields, "ch=%u ptimer=%llu", d->u.kernelCh.channelId,
             (unsigned long long)d->u.kernelCh.pTimer);
    break;
  default:
    break;
  }
  record("start", "abi=4 ctx=%p h=%p type=%s parent=%p rank=%d %s", context, (void*)h, label ? label : "unknown",
         d->parentObj, d->rank, fields);
  *handle = h;
  return 0;
}

static uint32_t state_v4(void* handle, uint32_t state, ci_nccl_state_args_v4_t* args) {
  if (!args) {
    record("state", "h=%p state=%u args=null", handle, state);
  } else if (state == CI_NCCL_V4_EVENT_STATE_KERNEL_CH_STOP) {
    record("state", "h=%p state=%u ptimer=%llu", handle, state, (unsigned long long)args->kernelCh.pTimer);
  } else {
    record("state", "h=%p state=%u trans=%zu", handle, state, args->proxyStep.transSize);
  }
  return 0;
}

ci_nccl_profiler_v4_t ncclProfiler_v4 = {"recording", init_v4, start_v4, stop_any, state_v4, finalize_any};
