/* Golden binary fixtures of the shm v1 and fifo-event v1 layouts, from the C side.
 *
 *   binary_fixtures write DIR        write shm_header.bin, shm_comm_entry.bin, shm_op_slot.bin,
 *                                    fifo_event.bin with the values of fixtures/binary/NAME.json
 *   binary_fixtures read KIND FILE   decode FILE (written by anyone) and print its fields as JSON
 *
 * Python does the same with the generated numpy dtypes (test_binary_fixtures.py); both sides
 * must produce identical bytes and read each other's. The values are set field by field here,
 * independently of the JSON, so a disagreement in layout or encoding shows up as a diff.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comminsight/fifo_event_v1.h"
#include "comminsight/shm_v1.h"

static int write_file(const char* dir, const char* name, const void* data, size_t size) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE* f = fopen(path, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) {
        perror(path);
        return 1;
    }
    return 0;
}

static int read_file(const char* path, void* data, size_t size) {
    FILE* f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    size_t n = fread(data, 1, size, f);
    fclose(f);
    if (n != size) {
        fprintf(stderr, "%s: expected %zu bytes, got %zu\n", path, size, n);
        return 1;
    }
    return 0;
}

static void fill_header(ci_shm_header_v1_t* h) {
    memset(h, 0, sizeof(*h));
    h->magic = CI_SHM_V1_MAGIC;
    h->abi_version = CI_SHM_V1_PROTOCOL_VERSION;
    h->header_size = sizeof(ci_shm_header_v1_t);
    h->file_size = 4096 + 4 * 512 + 64 * 256;
    h->state = CI_SHM_V1_FILE_STATE_LIVE;
    h->flags = CI_SHM_V1_HEADER_FLAGS_GPU_TIMING | CI_SHM_V1_HEADER_FLAGS_LOGS_ENABLED;
    h->comm_table_offset = 4096;
    h->comm_capacity = 4;
    h->comm_entry_size = sizeof(ci_shm_comm_entry_v1_t);
    h->ring_offset = 4096 + 4 * 512;
    h->ring_capacity = 64;
    h->slot_size = sizeof(ci_shm_op_slot_v1_t);
    h->pid = 4242;
    h->uid = 1000;
    h->rank = 3;
    h->local_rank = 1;
    h->world_size = 16;
    h->local_world_size = 8;
    h->cuda_device = 1;
    h->nccl_abi_version = 5;
    h->start_real_ns = 1764400000123456789ULL;
    h->start_mono_ns = 987654321012ULL;
    h->plugin_version = (0u << 16) | (1u << 8) | 0u;
    h->event_mask = 70;
    h->hang_threshold_ms = 300000;
    strcpy(h->hostname, "node-a");
    strcpy(h->job_id, "job-17");
    strcpy(h->process_name, "python train.py --steps 100");
    h->heartbeat_mono_ns = 987654999000ULL;
    h->heartbeat_real_ns = 1764400000801456789ULL;
    h->heartbeat_count = 678;
    h->heartbeat_interval_ms = 1000;
    h->comms_active = 2;
    h->ring_head = 130;
    h->records_published = 129;
    h->records_dropped_busy = 1;
    h->events_dropped_pool = 2;
    h->comms_dropped = 3;
    h->fifo_events_dropped = 4;
    h->log_records_written = 120;
    h->log_records_lost = 9;
}

static void fill_comm(ci_shm_comm_entry_v1_t* c) {
    memset(c, 0, sizeof(*c));
    c->state = CI_SHM_V1_COMM_STATE_ACTIVE;
    c->generation = 2;
    c->comm_id = 0x9f3c2a1b00d4e5f6ULL;
    c->rank = 3;
    c->nranks = 16;
    c->nnodes = 2;
    c->local_rank = 1;
    c->cuda_device = 1;
    c->nccl_abi_version = 5;
    c->init_real_ns = 1764400000200000000ULL;
    c->init_mono_ns = 987654400000ULL;
    strcpy(c->name, "dp_group:3");
    c->name_source = CI_SHM_V1_NAME_SOURCE_INJECT;
    c->progress_seqlock = 10;
    c->inflight_count = 1;
    c->coll_enqueued = 57;
    c->coll_enqueued_mono_ns = 987654900000ULL;
    c->coll_started = 57;
    c->coll_completed = 56;
    c->p2p_enqueued = 4;
    c->p2p_completed = 4;
    c->inflight_seq = 56;
    c->inflight_kind = CI_SHM_V1_RECORD_KIND_COLL;
    c->inflight_func = CI_SHM_V1_FUNC_ALL_REDUCE;
    c->inflight_datatype = CI_SHM_V1_DATATYPE_BFLOAT16;
    c->inflight_algo = CI_SHM_V1_ALGO_RING;
    c->inflight_proto = CI_SHM_V1_PROTO_SIMPLE;
    c->inflight_peer = CI_SHM_V1_NO_RANK;
    c->inflight_channels_started = 24;
    c->inflight_channels_stopped = 23;
    c->inflight_count_elems = 1048576;
    c->inflight_bytes = 2097152;
    c->inflight_enqueue_mono_ns = 987654900000ULL;
    c->hang_flagged_seq = UINT64_MAX;
    c->inflight_n_channels = 24;
    c->inflight_op_index = 112;
    c->gpu_clock_offset_ns = -1764399012345678901LL;
    c->ops_total = 60;
    c->bytes_total = 125829120;
}

static void fill_slot(ci_shm_op_slot_v1_t* s) {
    memset(s, 0, sizeof(*s));
    s->seq = 130;
    s->kind = CI_SHM_V1_RECORD_KIND_COLL;
    s->func = CI_SHM_V1_FUNC_ALL_REDUCE;
    s->datatype = CI_SHM_V1_DATATYPE_FLOAT32;
    s->algo = CI_SHM_V1_ALGO_RING;
    s->proto = CI_SHM_V1_PROTO_SIMPLE;
    s->timing_source = CI_SHM_V1_TIMING_SOURCE_KERNEL_GPU;
    s->n_channels = 24;
    s->n_warps = 17;
    s->flags = CI_SHM_V1_SLOT_FLAGS_GRAPH_CAPTURED;
    s->kernel_ch_count = 24;
    s->comm_index = 1;
    s->comm_id = 0x9f3c2a1b00d4e5f6ULL;
    s->rank = 3;
    s->peer = CI_SHM_V1_NO_RANK;
    s->op_seq = 55;
    s->count = 262144;
    s->bytes = 1048576;
    s->stream = 0x7f00deadbeefULL;
    s->tid = 4243;
    s->nranks = 16;
    s->host_start_mono_ns = 987654800000ULL;
    s->host_stop_mono_ns = 987654803000ULL;
    s->complete_mono_ns = 987654861000ULL;
    s->gpu_start_ticks = 1764400000700000000ULL;
    s->gpu_end_ticks = 1764400000700051200ULL;
    s->api_start_mono_ns = 987654799000ULL;
    s->group_id = 77;
    s->channels_started = 24;
    s->comm_op_index = 110;
}

static void fill_fifo(ci_fifo_event_v1_t* e) {
    memset(e, 0, sizeof(*e));
    e->magic = CI_FIFO_V1_MAGIC;
    e->abi_version = CI_FIFO_V1_PROTOCOL_VERSION;
    e->event_size = CI_FIFO_V1_EVENT_SIZE;
    e->event_type = CI_FIFO_V1_EVENT_TYPE_HANG_SUSPECTED;
    e->op_kind = CI_SHM_V1_RECORD_KIND_COLL;
    e->func = CI_SHM_V1_FUNC_ALL_REDUCE;
    e->pid = 4242;
    e->event_seq = 1;
    e->detect_mono_ns = 988000000000ULL;
    e->detect_real_ns = 1764400345123456789ULL;
    e->comm_id = 0x9f3c2a1b00d4e5f6ULL;
    e->rank = 3;
    e->nranks = 16;
    e->datatype = CI_SHM_V1_DATATYPE_BFLOAT16;
    e->n_channels = 24;
    e->channels_started = 24;
    e->channels_stopped = 23;
    e->peer = -1;
    e->op_seq = 56;
    e->count = 1048576;
    e->bytes = 2097152;
    e->enqueue_mono_ns = 987654900000ULL;
    e->age_ns = 345100000ULL;
    e->threshold_ns = 300000000ULL;
    e->coll_enqueued = 57;
    e->coll_completed = 56;
    e->p2p_enqueued = 4;
    e->p2p_completed = 4;
    e->inflight_count = 1;
    e->local_rank = 1;
    e->cuda_device = 1;
    strcpy(e->hostname, "node-a");
    strcpy(e->comm_name, "dp_group:3");
    e->op_index = 112;
}

#define U(name, v) printf("%s\"%s\":%" PRIu64, first ? "" : ",", name, (uint64_t)(v)), first = 0
#define I(name, v) printf("%s\"%s\":%" PRId64, first ? "" : ",", name, (int64_t)(v)), first = 0
#define S(name, v) printf("%s\"%s\":\"%s\"", first ? "" : ",", name, v), first = 0

static int read_kind(const char* kind, const char* path) {
    int first = 1;
    printf("{");
    if (strcmp(kind, "shm_header") == 0) {
        static ci_shm_header_v1_t h;
        if (read_file(path, &h, sizeof(h))) return 1;
        U("magic", h.magic); U("abi_version", h.abi_version); U("header_size", h.header_size);
        U("file_size", h.file_size); U("state", h.state); U("flags", h.flags);
        U("comm_table_offset", h.comm_table_offset); U("comm_capacity", h.comm_capacity);
        U("comm_entry_size", h.comm_entry_size); U("ring_offset", h.ring_offset);
        U("ring_capacity", h.ring_capacity); U("slot_size", h.slot_size); I("pid", h.pid);
        U("uid", h.uid); I("rank", h.rank); I("local_rank", h.local_rank);
        I("world_size", h.world_size); I("local_world_size", h.local_world_size);
        I("cuda_device", h.cuda_device); U("nccl_abi_version", h.nccl_abi_version);
        U("start_real_ns", h.start_real_ns); U("start_mono_ns", h.start_mono_ns);
        U("plugin_version", h.plugin_version); I("event_mask", h.event_mask);
        U("hang_threshold_ms", h.hang_threshold_ms); S("hostname", h.hostname);
        S("job_id", h.job_id); S("process_name", h.process_name);
        U("heartbeat_mono_ns", h.heartbeat_mono_ns); U("heartbeat_real_ns", h.heartbeat_real_ns);
        U("heartbeat_count", h.heartbeat_count); U("heartbeat_interval_ms", h.heartbeat_interval_ms);
        U("comms_active", h.comms_active); U("ring_head", h.ring_head);
        U("records_published", h.records_published); U("records_dropped_busy", h.records_dropped_busy);
        U("events_dropped_pool", h.events_dropped_pool); U("comms_dropped", h.comms_dropped);
        U("fifo_events_dropped", h.fifo_events_dropped);
        U("log_records_written", h.log_records_written); U("log_records_lost", h.log_records_lost);
    } else if (strcmp(kind, "shm_comm_entry") == 0) {
        ci_shm_comm_entry_v1_t c;
        if (read_file(path, &c, sizeof(c))) return 1;
        U("state", c.state); U("generation", c.generation); U("comm_id", c.comm_id);
        I("rank", c.rank); I("nranks", c.nranks); I("nnodes", c.nnodes);
        I("local_rank", c.local_rank); I("cuda_device", c.cuda_device);
        U("nccl_abi_version", c.nccl_abi_version); U("init_real_ns", c.init_real_ns);
        U("init_mono_ns", c.init_mono_ns); S("name", c.name); U("name_source", c.name_source);
        U("progress_seqlock", c.progress_seqlock); U("inflight_count", c.inflight_count);
        U("coll_enqueued", c.coll_enqueued); U("coll_enqueued_mono_ns", c.coll_enqueued_mono_ns);
        U("coll_started", c.coll_started); U("coll_completed", c.coll_completed);
        U("p2p_enqueued", c.p2p_enqueued); U("p2p_completed", c.p2p_completed);
        U("inflight_seq", c.inflight_seq); U("inflight_kind", c.inflight_kind);
        U("inflight_func", c.inflight_func); U("inflight_datatype", c.inflight_datatype);
        U("inflight_algo", c.inflight_algo); U("inflight_proto", c.inflight_proto);
        I("inflight_peer", c.inflight_peer);
        U("inflight_channels_started", c.inflight_channels_started);
        U("inflight_channels_stopped", c.inflight_channels_stopped);
        U("inflight_count_elems", c.inflight_count_elems); U("inflight_bytes", c.inflight_bytes);
        U("inflight_enqueue_mono_ns", c.inflight_enqueue_mono_ns);
        U("hang_flagged_seq", c.hang_flagged_seq); U("ops_total", c.ops_total);
        U("bytes_total", c.bytes_total); U("inflight_n_channels", c.inflight_n_channels);
        U("inflight_op_index", c.inflight_op_index); I("gpu_clock_offset_ns", c.gpu_clock_offset_ns);
    } else if (strcmp(kind, "shm_op_slot") == 0) {
        ci_shm_op_slot_v1_t s;
        if (read_file(path, &s, sizeof(s))) return 1;
        U("seq", s.seq); U("kind", s.kind); U("func", s.func); U("datatype", s.datatype);
        U("algo", s.algo); U("proto", s.proto); U("timing_source", s.timing_source);
        U("n_channels", s.n_channels); U("n_warps", s.n_warps); U("flags", s.flags);
        U("kernel_ch_count", s.kernel_ch_count); U("comm_index", s.comm_index);
        U("comm_id", s.comm_id); I("rank", s.rank); I("peer", s.peer); U("op_seq", s.op_seq);
        U("count", s.count); U("bytes", s.bytes); U("stream", s.stream); U("tid", s.tid);
        I("nranks", s.nranks); U("host_start_mono_ns", s.host_start_mono_ns);
        U("host_stop_mono_ns", s.host_stop_mono_ns); U("complete_mono_ns", s.complete_mono_ns);
        U("gpu_start_ticks", s.gpu_start_ticks); U("gpu_end_ticks", s.gpu_end_ticks);
        U("api_start_mono_ns", s.api_start_mono_ns); U("group_id", s.group_id);
        S("raw_name", s.raw_name); U("channels_started", s.channels_started);
        U("hang_threshold_ms", s.hang_threshold_ms); U("comm_op_index", s.comm_op_index);
    } else if (strcmp(kind, "fifo_event") == 0) {
        ci_fifo_event_v1_t e;
        if (read_file(path, &e, sizeof(e))) return 1;
        U("magic", e.magic); U("abi_version", e.abi_version); U("event_size", e.event_size);
        U("event_type", e.event_type); U("op_kind", e.op_kind); U("func", e.func);
        I("pid", e.pid); U("event_seq", e.event_seq); U("detect_mono_ns", e.detect_mono_ns);
        U("detect_real_ns", e.detect_real_ns); U("comm_id", e.comm_id); I("rank", e.rank);
        I("nranks", e.nranks); U("datatype", e.datatype); U("n_channels", e.n_channels);
        U("channels_started", e.channels_started); U("channels_stopped", e.channels_stopped);
        I("peer", e.peer); U("op_seq", e.op_seq); U("count", e.count); U("bytes", e.bytes);
        U("enqueue_mono_ns", e.enqueue_mono_ns); U("age_ns", e.age_ns);
        U("threshold_ns", e.threshold_ns); U("coll_enqueued", e.coll_enqueued);
        U("coll_completed", e.coll_completed); U("p2p_enqueued", e.p2p_enqueued);
        U("p2p_completed", e.p2p_completed); U("inflight_count", e.inflight_count);
        I("local_rank", e.local_rank); I("cuda_device", e.cuda_device);
        S("hostname", e.hostname); S("comm_name", e.comm_name); U("op_index", e.op_index);
    } else {
        fprintf(stderr, "unknown kind %s\n", kind);
        return 2;
    }
    printf("}\n");
    return 0;
}

int main(int argc, char** argv) {
    if (argc == 3 && strcmp(argv[1], "write") == 0) {
        static ci_shm_header_v1_t h;
        ci_shm_comm_entry_v1_t c;
        ci_shm_op_slot_v1_t s;
        ci_fifo_event_v1_t e;
        fill_header(&h);
        fill_comm(&c);
        fill_slot(&s);
        fill_fifo(&e);
        return write_file(argv[2], "shm_header.bin", &h, sizeof(h)) |
               write_file(argv[2], "shm_comm_entry.bin", &c, sizeof(c)) |
               write_file(argv[2], "shm_op_slot.bin", &s, sizeof(s)) |
               write_file(argv[2], "fifo_event.bin", &e, sizeof(e));
    }
    if (argc == 4 && strcmp(argv[1], "read") == 0) return read_kind(argv[2], argv[3]);
    fprintf(stderr, "usage: %s write DIR | read KIND FILE\n", argv[0]);
    return 2;
}
