/* The log writer: reads the SHM ring with its own cursor and appends inspector-log v1 lines
 * (protocols/inspector-log/v1) to segmented files under <home>/inspector_logs/.
 *
 * A segment is written as <name>.jsonl.partial, starts with a segment_start line and ends with
 * a seal line (line count, byte count and CRC-32 of everything before it); it is fsync'ed and
 * renamed to <name>.jsonl, so a sealed file is complete by construction. Records the ring
 * overwrote before the writer read them become one gap line with the lost range. A failed
 * write (disk full) truncates the segment back to its last good byte, drops and counts what it
 * could not write, and resumes with a gap line when space returns. Only this thread (or the
 * finalizing thread after joining it) touches the writer state.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ci_internal.h"
#include "op_timing.h"
#include "comminsight/inspector_log_v1.h"

#define BUF_SIZE (1u << 20)
#define FLUSH_AT (BUF_SIZE - 16384) /* a line is < 4 KiB; keep headroom */
#define RETRY_NS 1000000000ull      /* disk-full retry period */
#define STUCK_NS 1000000000ull      /* a ticket never completed after this is lost */

/* Every line is written by the encoders generated from the schema (inspector_log_v1_codec.h,
 * included below with what they append through); the string constants the writer chooses
 * among (kinds, name sources) are the schema's spelling too. */
#define V(name) CI_INSPECTOR_LOG_V1_V_##name

typedef struct segment {
    int fd;
    uint64_t index;
    char name[256];            /* of the .partial file, in the writer's directory */
    char partial[CI_PATH_MAX]; /* its full path, for messages */
    uint64_t bytes, records, ring_records, ops, lost;
    uint64_t first_ring_seq, last_ring_seq;
    uint32_t crc;
    uint64_t opened_mono;
} segment_t;

/* Lines in the buffer, not yet on disk: they count for the segment only once written. */
typedef struct tally {
    uint64_t records, ring_records, ops, lost;
    uint64_t first_ring_seq, last_ring_seq; /* of the ring records */
    uint64_t span_first, span_last;         /* every ring seq the lines account for, gaps too */
} tally_t;

typedef struct writer {
    bool disabled;
    uint64_t cursor; /* next ring ticket to read */
    segment_t seg;
    uint64_t next_index;
    int dir_fd; /* inspector_logs/, checked once; every segment is opened relative to it */
    char dir[CI_DIR_MAX];
    bool segment_made; /* a segment was created in dir: from then on a failure is a gap */
    char* buf;
    size_t len;
    tally_t pending; /* what the buffer holds, added to the segment once it is on disk */
    bool disk_full;
    uint64_t retry_at;
    uint64_t gap_first, gap_count; /* pending lost range (ring seqs) */
    const char* gap_reason;
    const char* seal_due; /* why the open segment is to be sealed once the disk takes it */
    uint64_t stuck_ticket, stuck_since;
} writer_t;

static writer_t w = {.seg = {.fd = -1}, .dir_fd = -1, .stuck_ticket = UINT64_MAX};

uint64_t ci_logwriter_cursor(void) {
    if (w.disabled || !ci_g.cfg.log_enable) return UINT64_MAX;
    return __atomic_load_n(&w.cursor, __ATOMIC_ACQUIRE);
}

/* In a forked child: forget the parent's segment without touching it. */
void ci_logwriter_reset(void) {
    ci_zstd_reset();
    if (w.seg.fd >= 0) close(w.seg.fd);
    if (w.dir_fd >= 0) close(w.dir_fd);
    free(w.buf);
    memset(&w, 0, sizeof(w));
    w.seg.fd = -1;
    w.dir_fd = -1;
    w.stuck_ticket = UINT64_MAX;
}

/* ---- CRC-32 (zlib polynomial, as the seal line promises) ---- */
static uint32_t crc_table[256];
static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
}
static uint32_t crc_update(uint32_t crc, const char* p, size_t n) {
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ (uint8_t)p[i]) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

/* ---- JSON building into the buffer ---- */
static void put(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void put(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(w.buf + w.len, BUF_SIZE - w.len, fmt, ap);
    va_end(ap);
    if (n > 0) w.len += ((size_t)n < BUF_SIZE - w.len) ? (size_t)n : BUF_SIZE - w.len - 1;
}

/* How many bytes at s form one well-formed UTF-8 character (Unicode table 3-7: no overlong
 * forms, surrogates or code points past U+10FFFF); 0 if none does, with *bad set to the bytes
 * one U+FFFD stands for (the maximal subpart, as Python's decode(errors="replace") counts them,
 * so a name reads the same from a log line as from the SHM table). s is NUL-terminated. */
static size_t utf8_char(const unsigned char* s, size_t* bad) {
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) need = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) need = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return *bad = 1, 0;
    for (size_t i = 1; i < need; i++) {
        unsigned char b = s[i];
        if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF)) return *bad = i, 0;
    }
    return need;
}

/* A JSON string of whatever bytes s holds: names come from NCCL, the application and the
 * environment, and one byte that is not UTF-8 makes the whole line unreadable to a strict
 * reader, so such bytes are written as U+FFFD. Whole characters only: the buffer's end never
 * cuts one. */
static void put_json_string(const char* s) {
    put("\"");
    const unsigned char* p = (const unsigned char*)s;
    while (*p && w.len < BUF_SIZE - 8) {
        unsigned char c = *p;
        if (c < 0x80) {
            if (c == '"' || c == '\\') put("\\%c", c);
            else if (c < 0x20) put("\\u%04x", c);
            else w.buf[w.len++] = (char)c;
            p++;
            continue;
        }
        size_t bad = 0, n = utf8_char(p, &bad);
        if (n == 0) {
            put("\\ufffd");
            p += bad;
            continue;
        }
        memcpy(w.buf + w.len, p, n);
        w.len += n;
        p += n;
    }
    put("\"");
}

/* Appenders of the generated encoders (inspector_log_v1_codec.h): text and numbers copied in
 * without a format string to interpret, what most of a compact line is made of. Like put(),
 * they stop at the buffer's end rather than overrun it. */
static void put_lit(const char* s, size_t n) {
    if (n >= BUF_SIZE - w.len) return;
    memcpy(w.buf + w.len, s, n);
    w.len += n;
}

static void put_u64(uint64_t v) {
    char text[20];
    size_t n = 0;
    do {
        text[sizeof(text) - ++n] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    put_lit(text + sizeof(text) - n, n);
}

static void put_i64(int64_t v) {
    if (v < 0) put_lit("-", 1);
    put_u64(v < 0 ? 0 - (uint64_t)v : (uint64_t)v);
}

static void put_hex(uint64_t v, const char* prefix, size_t prefix_len, size_t digits) {
    char text[20];
    size_t n = 0;
    text[sizeof(text) - ++n] = '"';
    do {
        text[sizeof(text) - ++n] = "0123456789abcdef"[v & 0xF];
        v >>= 4;
    } while (v || n <= digits);
    n += prefix_len;
    memcpy(text + sizeof(text) - n, prefix, prefix_len);
    text[sizeof(text) - ++n] = '"';
    put_lit(text + sizeof(text) - n, n);
}

static uint64_t mono_to_real(uint64_t mono) {
    const ci_shm_header_v1_t* h = ci_g.hdr;
    return h->start_real_ns + (mono - h->start_mono_ns);
}

static const char* label_or(const char* label, const char* fallback) { return label ? label : fallback; }

/* Execution time (Inspector's whole microseconds) and bandwidth, by the one definition the
 * Agent shares (op_timing.h): the bandwidths from the span in nanoseconds. */
static void op_timing(const ci_shm_op_slot_v1_t* r, uint64_t* exec_us, double* algbw, double* busbw) {
    uint64_t ns = ci_op_duration_ns(r);
    *exec_us = ns / 1000;
    ci_op_bandwidths_gbs(r, ns, algbw, busbw);
}

/* A fixed-size text field of a record as a C string, even where no NUL ends it. */
static const char* fixed_text(const char* field, size_t size) {
    static char text[64]; /* the log writer's thread only */
    size_t n = strnlen(field, size < sizeof(text) ? size : sizeof(text) - 1);
    memcpy(text, field, n);
    text[n] = '\0';
    return text;
}

static const char* func_name(const ci_shm_op_slot_v1_t* r) {
    if (r->func == CI_SHM_V1_FUNC_UNKNOWN && r->raw_name[0]) return r->raw_name;
    return label_or(ci_shm_v1_func_label(r->func), "Unknown");
}

static bool rooted(uint8_t func) {
    return func == CI_SHM_V1_FUNC_BROADCAST || func == CI_SHM_V1_FUNC_REDUCE ||
           func == CI_SHM_V1_FUNC_GATHER || func == CI_SHM_V1_FUNC_SCATTER;
}

/* What the generated encoders of a line's objects append through. */
#define CI_JSON_LIT(s) put_lit((s), sizeof(s) - 1)
#define CI_JSON_U64(v) put_u64(v)
#define CI_JSON_I64(v) put_i64(v)
#define CI_JSON_HEX(v, prefix, digits) put_hex((v), (prefix), sizeof(prefix) - 1, (digits))
#define CI_JSON_F6(v) put("%.6f", (v))
#define CI_JSON_STR(s) put_json_string(s)
#include "comminsight/inspector_log_v1_codec.h"

/* One line: the line object (its ci the record's kind), then the newline. */
static void put_line(const ci_inspector_log_v1_inspector_log_record_t* line) {
    ci_inspector_log_v1_put_inspector_log_record(line);
    put_lit("\n", 1);
}

static const char* name_source(uint8_t source) {
    return source == CI_SHM_V1_NAME_SOURCE_INJECT ? V(INJECT)
           : source == CI_SHM_V1_NAME_SOURCE_NCCL ? V(NCCL)
                                                  : V(NONE);
}

/* A communicator member as comm_init and segment_start lines name it. */
static ci_inspector_log_v1_comm_identity_t comm_identity(const ci_shm_comm_entry_v1_t* e) {
    ci_inspector_log_v1_comm_identity_t v = {
        .comm_id = e->comm_id,
        .comm_name = e->name[0] ? e->name : NULL,
        .name_source = name_source(e->name_source),
        .comm_rank = e->rank,
        .nranks = e->nranks,
        .nnodes = e->nnodes,
        .has_local_rank = e->local_rank >= 0,
        .local_rank = e->local_rank,
        .has_cuda_device = e->cuda_device >= 0,
        .cuda_device = e->cuda_device,
        .pid = ci_g.pid,
        .host = ci_g.hostname,
    };
    return v;
}

/* The compact form (kinds c and p): the same facts as the Inspector form in one object with
 * short keys, host times relative to the enqueue and the GPU span as a length (about a third
 * of the bytes). Optional keys are left out where the Inspector form leaves out or defaults
 * theirs. The keys, their order and their spelling are the schema's encoder's
 * (inspector_log_v1_codec.h); what goes into each is decided here. */
#define COMPACT_COMMON(v, r, e, ring_seq)                                                        \
    do {                                                                                         \
        (v).q = (ring_seq);                                                                      \
        (v).c = (r)->comm_id;                                                                    \
        (v).cn = (e) && (e)->name[0] ? (e)->name : NULL;                                         \
        (v).r = (r)->rank;                                                                       \
        (v).n = (r)->nranks;                                                                     \
        (v).nn = (e) ? (e)->nnodes : 1;                                                          \
        (v).f = func_name(r);                                                                    \
        (v).s = (r)->op_seq;                                                                     \
        (v).i = (r)->comm_op_index;                                                              \
        (v).e = (r)->count;                                                                      \
        (v).b = (r)->bytes;                                                                      \
        (v).d = label_or(ci_shm_v1_datatype_label((r)->datatype), "Unknown");                    \
        (v).ch = (r)->n_channels;                                                                \
        (v).has_st = (r)->stream != 0;                                                           \
        (v).st = (r)->stream;                                                                    \
        (v).gc = ((r)->flags & CI_SHM_V1_SLOT_FLAGS_GRAPH_CAPTURED) != 0;                        \
        (v).has_gr = (r)->group_id != 0;                                                         \
        (v).gr = (r)->group_id;                                                                  \
        (v).has_ut = (r)->user_tag != 0;                                                         \
        (v).ut = (r)->user_tag;                                                                  \
        (v).has_t = (r)->tid != 0;                                                               \
        (v).t = (r)->tid;                                                                        \
        (v).ts = label_or(ci_shm_v1_timing_source_label((r)->timing_source), "none");            \
        /* differences as signed 64-bit numbers: a clock read out of order stays a number */     \
        (v).h = (r)->host_start_mono_ns;                                                         \
        (v).hs = (int64_t)((r)->host_stop_mono_ns - (r)->host_start_mono_ns);                    \
        (v).has_hc = (r)->complete_mono_ns != 0;                                                 \
        (v).hc = (int64_t)((r)->complete_mono_ns - (r)->host_start_mono_ns);                     \
        /* as the Inspector form: ticks as read, present for a GPU-timed op only */             \
        (v).has_g0 = (v).has_gd = (r)->timing_source == CI_SHM_V1_TIMING_SOURCE_KERNEL_GPU;      \
        (v).g0 = (r)->gpu_start_ticks;                                                           \
        (v).gd = (int64_t)((r)->gpu_end_ticks - (r)->gpu_start_ticks);                           \
        (v).cc = (r)->kernel_ch_count;                                                           \
        (v).fc = ((r)->flags & CI_SHM_V1_SLOT_FLAGS_FORCED_COMPLETE) != 0;                       \
    } while (0)

static void put_compact_op_line(const ci_shm_op_slot_v1_t* r, const ci_shm_comm_entry_v1_t* e,
                                uint64_t ring_seq) {
    uint64_t exec_us;
    double algbw, busbw;
    op_timing(r, &exec_us, &algbw, &busbw);
    ci_inspector_log_v1_inspector_log_record_t line = {0};
    ci_inspector_log_v1_ci_coll_compact_t coll = {0};
    ci_inspector_log_v1_ci_p2p_compact_t p2p = {0};
    if (r->kind == CI_SHM_V1_RECORD_KIND_COLL) {
        COMPACT_COMMON(coll, r, e, ring_seq);
        coll.has_rt = rooted(r->func) && r->peer >= 0;
        coll.rt = r->peer;
        coll.a = label_or(ci_shm_v1_algo_label(r->algo), "UNKNOWN");
        coll.pt = label_or(ci_shm_v1_proto_label(r->proto), "UNKNOWN");
        coll.w = r->n_warps;
        coll.kv = r->kernel_variant[0] ? fixed_text(r->kernel_variant, sizeof(r->kernel_variant)) : NULL;
        coll.sy = (r->flags & CI_SHM_V1_SLOT_FLAGS_SYM_COLL) != 0;
        coll.has_bw = isfinite(busbw);
        coll.bw = busbw;
        line.ci_coll_compact = &coll;
    } else {
        COMPACT_COMMON(p2p, r, e, ring_seq);
        p2p.has_pe = r->peer >= 0;
        p2p.pe = r->peer;
        p2p.has_bw = isfinite(busbw);
        p2p.bw = busbw;
        line.ci_p2p_compact = &p2p;
    }
    ci_inspector_log_v1_put_inspector_log_record(&line);
    put_lit("\n", 1);
}

/* The Inspector form: NVIDIA Inspector's header, metadata and perf objects, and CommInsight's
 * ci object with every fact of the record (its keys, order and spelling the schema's encoders';
 * graph_captured and forced_complete always written, as NVIDIA's readers expect fields). */
static void put_inspector_op_line(const ci_shm_op_slot_v1_t* r, const ci_shm_comm_entry_v1_t* e,
                                  uint64_t ring_seq) {
    uint64_t exec_us;
    double algbw, busbw;
    op_timing(r, &exec_us, &algbw, &busbw);
    const char* timing = label_or(ci_shm_v1_timing_source_label(r->timing_source), "none");
    const char* datatype = label_or(ci_shm_v1_datatype_label(r->datatype), "Unknown");
    bool coll = r->kind == CI_SHM_V1_RECORD_KIND_COLL;
    bool gpu_timed = r->timing_source == CI_SHM_V1_TIMING_SOURCE_KERNEL_GPU; /* else no valid span */
    ci_inspector_log_v1_header_t header = {
        .id = r->comm_id,
        .comm_name = e && e->name[0] ? e->name : NULL,
        .rank = r->rank,
        .n_ranks = r->nranks,
        .nnodes = e ? e->nnodes : 1,
    };
    ci_inspector_log_v1_metadata_t metadata = {
        .inspector_output_format_version = "v4.0",
        .git_rev = "comminsight-" CI_VERSION_STRING,
        .rec_mechanism = "nccl_profiler_interface",
        .dump_timestamp_us = ci_now_real() / 1000,
        .hostname = ci_g.hostname,
        .pid = ci_g.pid,
    };
    ci_inspector_log_v1_inspector_log_record_t line = {.header = &header, .metadata = &metadata};
    ci_inspector_log_v1_coll_perf_t coll_perf = {
        .coll = func_name(r),
        .coll_sn = r->op_seq,
        .coll_msg_size_bytes = r->bytes,
        .coll_exec_time_us = exec_us,
        .coll_timing_source = timing,
        .coll_algobw_gbs = algbw,
        .coll_busbw_gbs = busbw,
    };
    ci_inspector_log_v1_p2p_perf_t p2p_perf = {
        .p2p = func_name(r),
        .p2p_sn = r->op_seq,
        .p2p_peer = r->peer,
        .p2p_msg_size_bytes = r->bytes,
        .p2p_exec_time_us = exec_us,
        .p2p_timing_source = timing,
        .p2p_algobw_gbs = algbw,
        .p2p_busbw_gbs = busbw,
    };
    ci_inspector_log_v1_ci_coll_t ci_coll = {0};
    ci_inspector_log_v1_ci_p2p_t ci_p2p = {0};
#define CI_COMMON(v)                                                                          \
    do {                                                                                      \
        (v).ring_seq = ring_seq;                                                              \
        (v).has_op_index = true;                                                              \
        (v).op_index = r->comm_op_index;                                                      \
        (v).count = r->count;                                                                 \
        (v).datatype = datatype;                                                              \
        (v).n_channels = r->n_channels;                                                       \
        (v).has_stream = r->stream != 0;                                                      \
        (v).stream = r->stream;                                                               \
        (v).has_graph_captured = true;                                                        \
        (v).graph_captured = (r->flags & CI_SHM_V1_SLOT_FLAGS_GRAPH_CAPTURED) != 0;          \
        (v).has_group_id = r->group_id != 0;                                                  \
        (v).group_id = r->group_id;                                                           \
        (v).has_user_tag = r->user_tag != 0;                                                  \
        (v).user_tag = r->user_tag;                                                           \
        (v).has_tid = true;                                                                   \
        (v).tid = r->tid;                                                                     \
        (v).host_start_mono_ns = r->host_start_mono_ns;                                       \
        (v).host_stop_mono_ns = r->host_stop_mono_ns;                                         \
        (v).has_host_complete_mono_ns = r->complete_mono_ns != 0;                             \
        (v).host_complete_mono_ns = r->complete_mono_ns;                                      \
        (v).has_gpu_start_globaltimer_ns = (v).has_gpu_stop_globaltimer_ns = gpu_timed;       \
        (v).gpu_start_globaltimer_ns = r->gpu_start_ticks;                                    \
        (v).gpu_stop_globaltimer_ns = r->gpu_end_ticks;                                       \
        (v).has_channels_completed = true;                                                    \
        (v).channels_completed = r->kernel_ch_count;                                          \
        (v).has_forced_complete = true;                                                       \
        (v).forced_complete = (r->flags & CI_SHM_V1_SLOT_FLAGS_FORCED_COMPLETE) != 0;        \
    } while (0)
    if (coll) {
        CI_COMMON(ci_coll);
        ci_coll.has_root = rooted(r->func) && r->peer >= 0;
        ci_coll.root = r->peer;
        ci_coll.algo = label_or(ci_shm_v1_algo_label(r->algo), "UNKNOWN");
        ci_coll.proto = label_or(ci_shm_v1_proto_label(r->proto), "UNKNOWN");
        ci_coll.n_warps = r->n_warps;
        ci_coll.kernel_variant =
            r->kernel_variant[0] ? fixed_text(r->kernel_variant, sizeof(r->kernel_variant)) : NULL;
        ci_coll.sym_coll = (r->flags & CI_SHM_V1_SLOT_FLAGS_SYM_COLL) != 0;
        line.coll_perf = &coll_perf;
        line.ci_coll = &ci_coll;
    } else {
        CI_COMMON(ci_p2p);
        line.p2p_perf = &p2p_perf;
        line.ci_p2p = &ci_p2p;
    }
#undef CI_COMMON
    ci_inspector_log_v1_put_inspector_log_record(&line);
    put_lit("\n", 1);
}

static void put_op_line(const ci_shm_op_slot_v1_t* r, uint64_t ring_seq) {
    ci_shm_comm_entry_v1_t snapshot, *e = NULL;
    if (r->comm_index < ci_g.comm_capacity) {
        ci_seqlock_read_comm(&snapshot, &ci_g.comm_table[r->comm_index]);
        e = &snapshot;
    }
    if (ci_g.cfg.log_compact) {
        put_compact_op_line(r, e, ring_seq);
        return;
    }
    put_inspector_op_line(r, e, ring_seq);
}

/* A seq counter of the comm table as its progress object says it: the last op (0-based) and
 * when, each left out until its first op. */
static ci_inspector_log_v1_seq_progress_t seq_progress(uint64_t enqueued, uint64_t enqueued_ns, uint64_t started,
                                                       uint64_t started_ns, uint64_t completed, uint64_t completed_ns) {
    ci_inspector_log_v1_seq_progress_t v = {
        .has_last_enqueued_seq = enqueued != 0,
        .last_enqueued_seq = enqueued - 1,
        .has_last_enqueued_mono_ns = enqueued != 0,
        .last_enqueued_mono_ns = enqueued_ns,
        .has_last_gpu_started_seq = started != 0,
        .last_gpu_started_seq = started - 1,
        .has_last_gpu_started_mono_ns = started != 0,
        .last_gpu_started_mono_ns = started_ns,
        .has_last_completed_seq = completed != 0,
        .last_completed_seq = completed - 1,
        .has_last_completed_mono_ns = completed != 0,
        .last_completed_mono_ns = completed_ns,
    };
    return v;
}

static void put_hang_line(const ci_shm_op_slot_v1_t* r, uint64_t ring_seq) {
    ci_shm_comm_entry_v1_t snapshot, *e = &snapshot;
    ci_seqlock_read_comm(&snapshot, &ci_g.comm_table[r->comm_index]);
    uint64_t detected = r->complete_mono_ns;
    /* p2p progress has no GPU start: NCCL's p2p events give none */
    ci_inspector_log_v1_seq_progress_t coll =
        seq_progress(e->coll_enqueued, e->coll_enqueued_mono_ns, e->coll_started, e->coll_started_mono_ns,
                     e->coll_completed, e->coll_completed_mono_ns);
    ci_inspector_log_v1_seq_progress_t p2p =
        seq_progress(e->p2p_enqueued, e->p2p_enqueued_mono_ns, 0, 0, e->p2p_completed, e->p2p_completed_mono_ns);
    ci_inspector_log_v1_comm_progress_t progress = {
        .collectives = &coll,
        .p2p = &p2p,
        .inflight_count = e->inflight_count,
    };
    ci_inspector_log_v1_ci_hang_evidence_t v = {
        .ring_seq = ring_seq,
        .comm_id = r->comm_id,
        .comm_rank = r->rank,
        .comm_name = e->name[0] ? e->name : NULL,
        .op_kind = r->hang_op_kind == CI_SHM_V1_RECORD_KIND_P2P ? V(P2P) : V(COLL),
        .func = func_name(r),
        .seq = r->op_seq,
        .has_op_index = true,
        .op_index = r->comm_op_index,
        .count = r->count,
        .datatype = label_or(ci_shm_v1_datatype_label(r->datatype), "Unknown"),
        .size_bytes = r->bytes,
        .has_root = r->peer >= 0 && rooted(r->func),
        .root = r->peer,
        .has_peer = r->peer >= 0 && !rooted(r->func),
        .peer = r->peer,
        .n_channels = r->n_channels,
        .channels_started = r->channels_started,
        .channels_completed = r->kernel_ch_count,
        .enqueued_mono_ns = r->host_start_mono_ns,
        .has_gpu_started_mono_ns = r->host_stop_mono_ns != 0,
        .gpu_started_mono_ns = r->host_stop_mono_ns,
        .age_ns = detected - r->host_start_mono_ns,
        .threshold_ns = (uint64_t)r->hang_threshold_ms * 1000000ull,
        .detected_mono_ns = detected,
        .detected_real_ns = mono_to_real(detected),
        .progress = &progress,
        .fifo_event_written = (r->flags & CI_SHM_V1_SLOT_FLAGS_FIFO_WRITTEN) != 0,
    };
    ci_inspector_log_v1_inspector_log_record_t line = {.ci_hang_evidence = &v};
    put_line(&line);
}

static void put_comm_line(const ci_shm_op_slot_v1_t* r, uint64_t ring_seq) {
    ci_shm_comm_entry_v1_t snapshot, *e = &snapshot;
    ci_seqlock_read_comm(&snapshot, &ci_g.comm_table[r->comm_index]);
    ci_inspector_log_v1_inspector_log_record_t line = {0};
    if (r->kind == CI_SHM_V1_RECORD_KIND_COMM_INIT) {
        char abi[16];
        snprintf(abi, sizeof(abi), "v%u", e->nccl_abi_version);
        ci_inspector_log_v1_comm_identity_t comm = comm_identity(e);
        ci_inspector_log_v1_ci_comm_init_t v = {
            .ring_seq = ring_seq,
            .comm = &comm,
            .profiler_abi = abi,
            .init_mono_ns = e->init_mono_ns,
            .init_real_ns = e->init_real_ns,
        };
        line.ci_comm_init = &v;
        put_line(&line);
        return;
    }
    uint64_t at = r->host_start_mono_ns;
    ci_inspector_log_v1_ci_comm_finalize_t v = {
        .ring_seq = ring_seq,
        .comm_id = r->comm_id,
        .comm_rank = r->rank,
        .finalize_mono_ns = at,
        .finalize_real_ns = mono_to_real(at),
        .coll_count = e->coll_completed,
        .p2p_count = e->p2p_completed,
        .has_last_coll_seq = e->coll_completed != 0,
        .last_coll_seq = e->coll_completed - 1,
        .inflight_count = e->inflight_count,
    };
    line.ci_comm_finalize = &v;
    put_line(&line);
}

/* ---- segments ---- */
static void write_out(void);

static void span(uint64_t first, uint64_t last) {
    tally_t* t = &w.pending;
    if (!t->span_first || first < t->span_first) t->span_first = first;
    if (last > t->span_last) t->span_last = last;
}

static void account_line(uint64_t ring_seq, bool op) {
    tally_t* t = &w.pending;
    t->records++;
    if (ring_seq) {
        t->ring_records++;
        if (!t->first_ring_seq) t->first_ring_seq = ring_seq;
        t->last_ring_seq = ring_seq;
        span(ring_seq, ring_seq);
    }
    if (op) t->ops++;
}

static void commit_pending(void) {
    segment_t* s = &w.seg;
    tally_t* t = &w.pending;
    s->records += t->records;
    s->ring_records += t->ring_records;
    s->ops += t->ops;
    s->lost += t->lost;
    if (!s->first_ring_seq) s->first_ring_seq = t->first_ring_seq;
    if (t->last_ring_seq) s->last_ring_seq = t->last_ring_seq;
    ci_counter_add(&ci_g.hdr->log_records_written, t->ring_records);
    memset(t, 0, sizeof(*t));
}

/* The home's inspector_logs takes no file at all (a read-only mount, a directory this user may
 * not write): every gap line would fail there too and the whole run would be lost. Before the
 * first segment that is a home we cannot use, so the logs move to the private directory; once
 * a segment exists there, a failure is a disk that filled or broke mid-run: gap lines. */
static bool move_to_private_dir(int err) {
    if (w.segment_made || !ci_unwritable_errno(err)) return false;
    char dir[CI_DIR_MAX];
    int fd = ci_home_dir_unwritable(CI_HOME_V1_INSPECTOR_LOGS, err, dir, sizeof(dir));
    if (fd < 0) return false;
    close(w.dir_fd);
    w.dir_fd = fd;
    snprintf(w.dir, sizeof(w.dir), "%s", dir);
    snprintf(w.seg.partial, sizeof(w.seg.partial), "%s/%s", w.dir, w.seg.name);
    return true;
}

static int segment_create(const char* name) {
    /* Exclusive and link-free: a name planted in the directory is never written through. */
    return openat(w.dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
}

/* The communicators live in the process, for a segment_start line: each as comm_init names it.
 * The line is built whole in the buffer, so the list ends where the next member would pass
 * LIST_END (a process with thousands of communicators, a comm table of up to 65536): the
 * members left out are counted in the line (ctx: its segment_start), and their comm_init lines
 * name them. Past LIST_END there is room for the rest of the line and the next line before the
 * buffer is written out. */
#define LIST_END (FLUSH_AT - 8192)
static void put_live_communicators(const void* ctx) {
    ci_inspector_log_v1_ci_segment_start_t* start = (ci_inspector_log_v1_ci_segment_start_t*)ctx;
    bool first = true;
    for (uint32_t i = 0; i < ci_g.comm_capacity; i++) {
        if (__atomic_load_n(&ci_g.comm_table[i].state, __ATOMIC_ACQUIRE) != CI_SHM_V1_COMM_STATE_ACTIVE) continue;
        size_t before = w.len;
        if (before < LIST_END) {
            ci_shm_comm_entry_v1_t e;
            ci_seqlock_read_comm(&e, &ci_g.comm_table[i]);
            if (!first) put_lit(",", 1);
            ci_inspector_log_v1_comm_identity_t v = comm_identity(&e);
            ci_inspector_log_v1_put_comm_identity(&v);
            if (w.len <= LIST_END) {
                first = false;
                continue;
            }
            w.len = before; /* it passed the bound: taken back whole */
        }
        start->has_communicators_omitted = true;
        start->communicators_omitted++;
    }
}

static void segment_open(void) {
    segment_t* s = &w.seg;
    memset(s, 0, sizeof(*s));
    s->fd = -1;
    s->index = w.next_index++;
    snprintf(s->name, sizeof(s->name), "ci-%s-%d-%llu-%06llu.jsonl.partial", ci_g.hostname, (int)ci_g.pid,
             (unsigned long long)ci_g.hdr->start_mono_ns, (unsigned long long)s->index);
    snprintf(s->partial, sizeof(s->partial), "%s/%s", w.dir, s->name);
    s->fd = segment_create(s->name);
    if (s->fd < 0 && move_to_private_dir(errno)) s->fd = segment_create(s->name);
    if (s->fd >= 0) w.segment_made = true;
    if (s->fd < 0) {
        ci_counter_add(&ci_g.hdr->log_write_errors, 1);
        ci_warn("cannot create %s: %s; log writing paused", s->partial, strerror(errno));
        w.disk_full = true;
        w.retry_at = ci_now_mono() + RETRY_NS;
        return;
    }
    s->opened_mono = ci_now_mono();
    /* segment_start: who wrote it, the clock pair, the live communicators */
    const ci_shm_header_v1_t* h = ci_g.hdr;
    ci_inspector_log_v1_process_identity_t process = {
        .host = ci_g.hostname,
        .pid = ci_g.pid,
        .start_real_ns = h->start_real_ns,
        .job_id = h->job_id[0] ? h->job_id : NULL,
        .has_global_rank = h->rank >= 0,
        .global_rank = h->rank,
        .has_local_rank = h->local_rank >= 0,
        .local_rank = h->local_rank,
        .has_world_size = h->world_size >= 1, /* WORLD_SIZE=0 is no world: left out */
        .world_size = h->world_size,
        .profiler_version = CI_VERSION_STRING,
    };
    ci_inspector_log_v1_clock_anchor_t clock = {.mono_ns = ci_now_mono(), .real_ns = ci_now_real()};
    ci_inspector_log_v1_ci_segment_start_t start = {
        .segment_index = s->index,
        .process = &process,
        .clock = &clock,
        .communicators = put_live_communicators,
        .communicators_ctx = &start,
        /* the first ring seq this segment's lines account for: a gap still to be written
         * comes before the next record read */
        .next_ring_seq = w.gap_count ? w.gap_first : w.cursor + 1,
    };
    ci_inspector_log_v1_inspector_log_record_t line = {.ci_segment_start = &start};
    put_line(&line);
    account_line(0, false);
}

static void segment_seal(const char* reason) {
    segment_t* s = &w.seg;
    if (s->fd < 0) return;
    w.seal_due = reason;
    write_out();
    if (w.disk_full || s->fd < 0) return; /* sealed later, when the disk takes it */
    uint64_t good_bytes = s->bytes;
    uint32_t good_crc = s->crc;
    uint64_t mono = ci_now_mono();
    ci_inspector_log_v1_ci_seal_t seal = {
        .segment_index = s->index,
        .record_count = s->records,
        .byte_count = s->bytes,
        .crc32 = s->crc,
        .op_count = s->ops,
        .ring_record_count = s->ring_records,
        .lost_count = s->lost,
        .has_first_ring_seq = s->first_ring_seq != 0,
        .first_ring_seq = s->first_ring_seq,
        .has_last_ring_seq = s->first_ring_seq != 0,
        .last_ring_seq = s->last_ring_seq,
        .reason = reason,
        .sealed_mono_ns = mono,
        .sealed_real_ns = mono_to_real(mono),
    };
    ci_inspector_log_v1_inspector_log_record_t line = {.ci_seal = &seal};
    put_line(&line);
    write_out(); /* the seal line adds nothing to the tally */
    if (w.disk_full) return;
    char final_name[sizeof(s->name)];
    size_t n = strlen(s->name) - strlen(".partial");
    memcpy(final_name, s->name, n);
    final_name[n] = '\0';
    if (fsync(s->fd) != 0 || renameat(w.dir_fd, s->name, w.dir_fd, final_name) != 0) {
        /* Not durable (ENOSPC or EIO from fsync) or not renamed: take the seal line back and
         * seal again on the next retry, so the file on disk always matches what is counted. */
        int err = errno;
        ci_counter_add(&ci_g.hdr->log_write_errors, 1);
        ci_warn("cannot seal %s (%s); retrying", s->partial, strerror(err));
        if (ftruncate(s->fd, (off_t)good_bytes) == 0) {
            s->bytes = good_bytes;
            s->crc = good_crc;
        } else {
            close(s->fd); /* its tail is unknown: leave it, the next segment takes over */
            s->fd = -1;
            w.seal_due = NULL;
        }
        w.disk_full = true;
        w.retry_at = ci_now_mono() + RETRY_NS;
        return;
    }
    ci_counter_add(&ci_g.hdr->log_segments_sealed, 1);
    fsync(w.dir_fd); /* the rename itself must survive a crash */
    close(s->fd);
    s->fd = -1;
    w.seal_due = NULL;
    ci_zstd_enqueue(final_name);
}

static void flush_gap(void);

/* The buffer could not be written: everything it accounted for is now missing from the file.
 * Record that as a disk_full gap placed before any gap still pending (which comes later in
 * ring order), so the log still accounts for every ticket once. */
static void requeue_as_lost(void) {
    tally_t* t = &w.pending;
    ci_counter_add(&ci_g.hdr->log_records_dropped, t->ring_records);
    uint64_t first = t->span_first, last = t->span_last;
    memset(t, 0, sizeof(*t));
    if (!first) return;
    uint64_t later_first = w.gap_first, later_count = w.gap_count;
    const char* later_reason = w.gap_reason;
    w.gap_first = first;
    w.gap_count = last - first + 1;
    w.gap_reason = V(DISK_FULL);
    if (!later_count) return;
    if (later_first == last + 1 && strcmp(later_reason, V(DISK_FULL)) == 0) {
        w.gap_count += later_count;
        return;
    }
    flush_gap(); /* into the (now empty) buffer; written when the disk takes it */
    w.gap_first = later_first;
    w.gap_count = later_count;
    w.gap_reason = later_reason;
}

/* Write the buffer; on failure truncate to the last good byte and account for what was lost. */
static void write_out(void) {
    segment_t* s = &w.seg;
    if (!w.len) return;
    size_t done = 0;
    while (s->fd >= 0 && done < w.len) {
        ssize_t n = write(s->fd, w.buf + done, w.len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        done += (size_t)n;
    }
    if (s->fd >= 0 && done == w.len) {
        s->crc = crc_update(s->crc, w.buf, w.len);
        s->bytes += w.len;
        w.len = 0;
        commit_pending();
        return;
    }
    int err = errno;
    if (s->fd >= 0 && ftruncate(s->fd, (off_t)s->bytes) != 0) { /* keep the file = its CRC */
        close(s->fd);
        s->fd = -1;
        w.seal_due = NULL;
    }
    if (s->fd >= 0 && s->bytes == 0) { /* not even segment_start made it: start over later */
        close(s->fd);
        unlinkat(w.dir_fd, s->name, 0);
        s->fd = -1;
        w.seal_due = NULL;
        w.next_index = s->index; /* keep segment indices gap-free */
    }
    ci_counter_add(&ci_g.hdr->log_write_errors, 1);
    if (!w.disk_full)
        ci_warn("writing %s failed (%s): records are dropped and counted until it succeeds", s->partial,
                strerror(err));
    w.disk_full = true;
    w.retry_at = ci_now_mono() + RETRY_NS;
    w.len = 0;
    requeue_as_lost();
}

static void flush_gap(void) {
    if (!w.gap_count) return;
    if (w.seg.fd < 0) segment_open();
    ci_inspector_log_v1_ci_gap_t gap = {
        .reason = w.gap_reason,
        .lost_count = w.gap_count,
        .first_lost_ring_seq = w.gap_first,
        .last_lost_ring_seq = w.gap_first + w.gap_count - 1,
        .detected_mono_ns = ci_now_mono(),
    };
    ci_inspector_log_v1_inspector_log_record_t line = {.ci_gap = &gap};
    put_line(&line);
    w.pending.lost += w.gap_count;
    span(w.gap_first, w.gap_first + w.gap_count - 1);
    account_line(0, false);
    w.gap_count = 0;
}

/* `count` ring records from `ring_seq` on that no line will hold: one gap line per run of them. */
static void note_lost_range(uint64_t ring_seq, uint64_t count, const char* reason) {
    if (w.gap_count && (w.gap_first + w.gap_count != ring_seq || strcmp(w.gap_reason, reason) != 0)) flush_gap();
    if (!w.gap_count) {
        w.gap_first = ring_seq;
        w.gap_reason = reason;
    }
    w.gap_count += count;
    if (strcmp(reason, V(RING_OVERWRITE)) == 0) ci_counter_add(&ci_g.hdr->log_records_lost, count);
}

static void note_lost(uint64_t ring_seq, const char* reason) { note_lost_range(ring_seq, 1, reason); }

static void emit(const ci_shm_op_slot_v1_t* r, uint64_t ring_seq) {
    if (w.disk_full) { /* nothing reaches the disk now: count it, remember the range */
        ci_counter_add(&ci_g.hdr->log_records_dropped, 1);
        note_lost(ring_seq, V(DISK_FULL));
        return;
    }
    flush_gap();
    if (w.seg.fd < 0) segment_open();
    if (w.seg.fd < 0) {
        ci_counter_add(&ci_g.hdr->log_records_dropped, 1);
        note_lost(ring_seq, V(WRITE_ERROR));
        return;
    }
    bool op = false;
    switch (r->kind) {
    case CI_SHM_V1_RECORD_KIND_COLL:
    case CI_SHM_V1_RECORD_KIND_P2P:
        put_op_line(r, ring_seq);
        op = true;
        break;
    case CI_SHM_V1_RECORD_KIND_COMM_INIT:
    case CI_SHM_V1_RECORD_KIND_COMM_FINALIZE:
        if (r->comm_index >= ci_g.comm_capacity) return;
        put_comm_line(r, ring_seq);
        break;
    case CI_SHM_V1_RECORD_KIND_HANG:
        if (r->comm_index >= ci_g.comm_capacity) return;
        put_hang_line(r, ring_seq);
        break;
    default: return;
    }
    account_line(ring_seq, op);
    if (w.len >= FLUSH_AT) write_out();
    if (w.seg.bytes + w.len >= ci_g.cfg.log_segment_bytes) segment_seal(V(SIZE));
}

/* Tickets the ring has lapped since the cursor: their slots hold later records now. They are
 * lost, as one range, without visiting each (a writer held up for long may face millions). */
static void skip_lapped(uint64_t head, uint64_t cap) {
    if (head - w.cursor <= cap) return;
    note_lost_range(w.cursor + 1, head - cap - w.cursor, V(RING_OVERWRITE));
    __atomic_store_n(&w.cursor, head - cap, __ATOMIC_RELEASE);
}

/* Read ring tickets [cursor, head). */
static void drain(bool final) {
    const ci_shm_header_v1_t* h = ci_g.hdr;
    uint64_t cap = ci_g.ring_mask + 1;
    uint64_t head = __atomic_load_n(&h->ring_head, __ATOMIC_ACQUIRE);
    ci_shm_op_slot_v1_t copy;
    skip_lapped(head, cap);
    while (w.cursor < head) {
        uint64_t t = w.cursor;
        const ci_shm_op_slot_v1_t* slot = &ci_g.ring[t & ci_g.ring_mask];
        uint64_t s1 = __atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE);
        if (s1 == t + 1) {
            ci_seqlock_read_slot(&copy, slot);
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            uint64_t s2 = __atomic_load_n(&slot->seq, __ATOMIC_RELAXED);
            if (s2 == t + 1) emit(&copy, t + 1);
            else note_lost(t + 1, V(RING_OVERWRITE));
        } else if ((s1 & ~CI_SHM_V1_SLOT_BUSY_BIT) > t + 1 || head - t > cap) {
            note_lost(t + 1, V(RING_OVERWRITE));
        } else {
            /* Not written yet: wait, unless it has been pending too long (its producer dropped it)
             * or this is the final drain. */
            uint64_t now = ci_now_mono();
            if (w.stuck_ticket != t) {
                w.stuck_ticket = t;
                w.stuck_since = now;
            }
            if (!final && now - w.stuck_since < STUCK_NS) break;
            note_lost(t + 1, V(RING_OVERWRITE));
        }
        __atomic_store_n(&w.cursor, t + 1, __ATOMIC_RELEASE);
    }
}

void ci_logwriter_run_once(bool final, const char* seal_reason) {
    if (w.disabled || !ci_g.hdr) return;
    if (!w.buf) {
        crc_init();
        w.buf = malloc(BUF_SIZE);
        snprintf(w.dir, sizeof(w.dir), "%s/" CI_HOME_V1_INSPECTOR_LOGS, ci_g.cfg.home);
        if (w.buf) w.dir_fd = ci_home_dir(CI_HOME_V1_INSPECTOR_LOGS, true, true, w.dir, sizeof(w.dir));
        if (!w.buf || w.dir_fd < 0) {
            ci_warn("cannot use %s (%s): inspector_logs disabled", w.dir, strerror(errno));
            w.disabled = true;
            return;
        }
        /* From the first ticket, not from what the ring still holds: records published
         * before this first pass and overwritten since (a burst at start-up, a writer thread
         * slow to be scheduled) are lost and must be said to be, in a gap line. */
        w.cursor = 0;
    }
    uint64_t now = ci_now_mono();
    /* The last pass retries at once: there is no later one to write the gap and the seal. */
    if (w.disk_full && (final || now >= w.retry_at)) {
        w.disk_full = false; /* try again; a failure sets it back */
        if (w.seg.fd < 0) segment_open();
        if (!w.disk_full) flush_gap();
        write_out();
        if (!w.disk_full && w.seal_due && w.seg.fd >= 0) segment_seal(w.seal_due);
    }
    drain(final);
    if (!w.disk_full) flush_gap();
    write_out();
    now = ci_now_mono(); /* the segment may have been opened during this pass */
    if (w.seg.fd >= 0 && w.seg.records > 1 && now > w.seg.opened_mono &&
        (double)(now - w.seg.opened_mono) >= ci_g.cfg.log_segment_s * 1e9)
        segment_seal(V(AGE));
    if (final) segment_seal(seal_reason);
    /* compressing sealed segments takes at most a quarter of the period: draining comes first */
    uint64_t slice_ns = (uint64_t)ci_g.cfg.log_flush_ms * 1000000ull / 4;
    ci_zstd_work(w.dir_fd, slice_ns > 2000000ull ? slice_ns : 2000000ull, final);
}
