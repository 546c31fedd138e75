from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ProtocolVersion(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROTOCOL_VERSION_UNSPECIFIED: _ClassVar[ProtocolVersion]
    PROTOCOL_VERSION_1: _ClassVar[ProtocolVersion]

class IngestState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INGEST_STATE_UNSPECIFIED: _ClassVar[IngestState]
    INGEST_STATE_ACTIVE: _ClassVar[IngestState]
    INGEST_STATE_DRAINING: _ClassVar[IngestState]
    INGEST_STATE_RETIRED: _ClassVar[IngestState]
    INGEST_STATE_QUARANTINED: _ClassVar[IngestState]

class NameSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NAME_SOURCE_UNSPECIFIED: _ClassVar[NameSource]
    NAME_SOURCE_NONE: _ClassVar[NameSource]
    NAME_SOURCE_NCCL: _ClassVar[NameSource]
    NAME_SOURCE_INJECT: _ClassVar[NameSource]

class OpKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OP_KIND_UNSPECIFIED: _ClassVar[OpKind]
    OP_KIND_COLL: _ClassVar[OpKind]
    OP_KIND_P2P: _ClassVar[OpKind]

class RejectReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REJECT_REASON_UNSPECIFIED: _ClassVar[RejectReason]
    REJECT_REASON_WRONG_TOKEN: _ClassVar[RejectReason]
    REJECT_REASON_VERSION_MISMATCH: _ClassVar[RejectReason]
    REJECT_REASON_OVERSIZED: _ClassVar[RejectReason]
    REJECT_REASON_MALFORMED: _ClassVar[RejectReason]
    REJECT_REASON_UNKNOWN_SESSION: _ClassVar[RejectReason]
    REJECT_REASON_SEQUENCE_GAP: _ClassVar[RejectReason]
    REJECT_REASON_NODE_CONFLICT: _ClassVar[RejectReason]
    REJECT_REASON_NOT_A_MASTER: _ClassVar[RejectReason]
    REJECT_REASON_SHUTTING_DOWN: _ClassVar[RejectReason]
PROTOCOL_VERSION_UNSPECIFIED: ProtocolVersion
PROTOCOL_VERSION_1: ProtocolVersion
INGEST_STATE_UNSPECIFIED: IngestState
INGEST_STATE_ACTIVE: IngestState
INGEST_STATE_DRAINING: IngestState
INGEST_STATE_RETIRED: IngestState
INGEST_STATE_QUARANTINED: IngestState
NAME_SOURCE_UNSPECIFIED: NameSource
NAME_SOURCE_NONE: NameSource
NAME_SOURCE_NCCL: NameSource
NAME_SOURCE_INJECT: NameSource
OP_KIND_UNSPECIFIED: OpKind
OP_KIND_COLL: OpKind
OP_KIND_P2P: OpKind
REJECT_REASON_UNSPECIFIED: RejectReason
REJECT_REASON_WRONG_TOKEN: RejectReason
REJECT_REASON_VERSION_MISMATCH: RejectReason
REJECT_REASON_OVERSIZED: RejectReason
REJECT_REASON_MALFORMED: RejectReason
REJECT_REASON_UNKNOWN_SESSION: RejectReason
REJECT_REASON_SEQUENCE_GAP: RejectReason
REJECT_REASON_NODE_CONFLICT: RejectReason
REJECT_REASON_NOT_A_MASTER: RejectReason
REJECT_REASON_SHUTTING_DOWN: RejectReason

class RegisterRequest(_message.Message):
    __slots__ = ("protocol_version", "node", "stream_epoch", "last_built_batch_seq", "clock", "processes", "communicators")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    STREAM_EPOCH_FIELD_NUMBER: _ClassVar[int]
    LAST_BUILT_BATCH_SEQ_FIELD_NUMBER: _ClassVar[int]
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    COMMUNICATORS_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    node: NodeIdentity
    stream_epoch: int
    last_built_batch_seq: int
    clock: ClockSample
    processes: _containers.RepeatedCompositeFieldContainer[ProcessInfo]
    communicators: _containers.RepeatedCompositeFieldContainer[CommunicatorMember]
    def __init__(self, protocol_version: _Optional[int] = ..., node: _Optional[_Union[NodeIdentity, _Mapping]] = ..., stream_epoch: _Optional[int] = ..., last_built_batch_seq: _Optional[int] = ..., clock: _Optional[_Union[ClockSample, _Mapping]] = ..., processes: _Optional[_Iterable[_Union[ProcessInfo, _Mapping]]] = ..., communicators: _Optional[_Iterable[_Union[CommunicatorMember, _Mapping]]] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ("protocol_version", "session_id", "master_instance_id", "last_applied_batch_seq", "max_batch_bytes", "heartbeat_interval_ms", "stale_after_ms", "master_agent_version", "master_clock", "full_state_requested")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_APPLIED_BATCH_SEQ_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_BYTES_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    STALE_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    MASTER_AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    MASTER_CLOCK_FIELD_NUMBER: _ClassVar[int]
    FULL_STATE_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    session_id: int
    master_instance_id: int
    last_applied_batch_seq: int
    max_batch_bytes: int
    heartbeat_interval_ms: int
    stale_after_ms: int
    master_agent_version: str
    master_clock: ClockSample
    full_state_requested: bool
    def __init__(self, protocol_version: _Optional[int] = ..., session_id: _Optional[int] = ..., master_instance_id: _Optional[int] = ..., last_applied_batch_seq: _Optional[int] = ..., max_batch_bytes: _Optional[int] = ..., heartbeat_interval_ms: _Optional[int] = ..., stale_after_ms: _Optional[int] = ..., master_agent_version: _Optional[str] = ..., master_clock: _Optional[_Union[ClockSample, _Mapping]] = ..., full_state_requested: _Optional[bool] = ...) -> None: ...

class NodeIdentity(_message.Message):
    __slots__ = ("node_name", "host", "boot_id", "agent_version", "agent_pid", "comminsight_home", "api_url", "agent_started_real_ns", "relay")
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    BOOT_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    AGENT_PID_FIELD_NUMBER: _ClassVar[int]
    COMMINSIGHT_HOME_FIELD_NUMBER: _ClassVar[int]
    API_URL_FIELD_NUMBER: _ClassVar[int]
    AGENT_STARTED_REAL_NS_FIELD_NUMBER: _ClassVar[int]
    RELAY_FIELD_NUMBER: _ClassVar[int]
    node_name: str
    host: str
    boot_id: str
    agent_version: str
    agent_pid: int
    comminsight_home: str
    api_url: str
    agent_started_real_ns: int
    relay: bool
    def __init__(self, node_name: _Optional[str] = ..., host: _Optional[str] = ..., boot_id: _Optional[str] = ..., agent_version: _Optional[str] = ..., agent_pid: _Optional[int] = ..., comminsight_home: _Optional[str] = ..., api_url: _Optional[str] = ..., agent_started_real_ns: _Optional[int] = ..., relay: _Optional[bool] = ...) -> None: ...

class ClockSample(_message.Message):
    __slots__ = ("mono_ns", "real_ns")
    MONO_NS_FIELD_NUMBER: _ClassVar[int]
    REAL_NS_FIELD_NUMBER: _ClassVar[int]
    mono_ns: int
    real_ns: int
    def __init__(self, mono_ns: _Optional[int] = ..., real_ns: _Optional[int] = ...) -> None: ...

class NodeStateBatch(_message.Message):
    __slots__ = ("session_id", "batch_seq", "clock", "full_state", "full_state_last", "processes", "communicators", "progress", "agent_counters", "hang_events", "step_summaries", "metric_totals", "rank_classes", "subtree_nodes")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_SEQ_FIELD_NUMBER: _ClassVar[int]
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    FULL_STATE_FIELD_NUMBER: _ClassVar[int]
    FULL_STATE_LAST_FIELD_NUMBER: _ClassVar[int]
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    COMMUNICATORS_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    AGENT_COUNTERS_FIELD_NUMBER: _ClassVar[int]
    HANG_EVENTS_FIELD_NUMBER: _ClassVar[int]
    STEP_SUMMARIES_FIELD_NUMBER: _ClassVar[int]
    METRIC_TOTALS_FIELD_NUMBER: _ClassVar[int]
    RANK_CLASSES_FIELD_NUMBER: _ClassVar[int]
    SUBTREE_NODES_FIELD_NUMBER: _ClassVar[int]
    session_id: int
    batch_seq: int
    clock: ClockSample
    full_state: bool
    full_state_last: bool
    processes: _containers.RepeatedCompositeFieldContainer[ProcessInfo]
    communicators: _containers.RepeatedCompositeFieldContainer[CommunicatorMember]
    progress: _containers.RepeatedCompositeFieldContainer[CommProgress]
    agent_counters: AgentCounters
    hang_events: _containers.RepeatedCompositeFieldContainer[HangEvent]
    step_summaries: _containers.RepeatedCompositeFieldContainer[StepSummaryRecord]
    metric_totals: NodeMetricTotals
    rank_classes: _containers.RepeatedCompositeFieldContainer[RankClass]
    subtree_nodes: _containers.RepeatedCompositeFieldContainer[SubtreeNode]
    def __init__(self, session_id: _Optional[int] = ..., batch_seq: _Optional[int] = ..., clock: _Optional[_Union[ClockSample, _Mapping]] = ..., full_state: _Optional[bool] = ..., full_state_last: _Optional[bool] = ..., processes: _Optional[_Iterable[_Union[ProcessInfo, _Mapping]]] = ..., communicators: _Optional[_Iterable[_Union[CommunicatorMember, _Mapping]]] = ..., progress: _Optional[_Iterable[_Union[CommProgress, _Mapping]]] = ..., agent_counters: _Optional[_Union[AgentCounters, _Mapping]] = ..., hang_events: _Optional[_Iterable[_Union[HangEvent, _Mapping]]] = ..., step_summaries: _Optional[_Iterable[_Union[StepSummaryRecord, _Mapping]]] = ..., metric_totals: _Optional[_Union[NodeMetricTotals, _Mapping]] = ..., rank_classes: _Optional[_Iterable[_Union[RankClass, _Mapping]]] = ..., subtree_nodes: _Optional[_Iterable[_Union[SubtreeNode, _Mapping]]] = ...) -> None: ...

class RankClass(_message.Message):
    __slots__ = ("member", "progress", "process", "node_name", "rank_runs", "size", "nodes", "ops_completed_sum", "bytes_completed_sum")
    MEMBER_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    RANK_RUNS_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    OPS_COMPLETED_SUM_FIELD_NUMBER: _ClassVar[int]
    BYTES_COMPLETED_SUM_FIELD_NUMBER: _ClassVar[int]
    member: CommunicatorMember
    progress: CommProgress
    process: ProcessInfo
    node_name: str
    rank_runs: _containers.RepeatedScalarFieldContainer[int]
    size: int
    nodes: int
    ops_completed_sum: int
    bytes_completed_sum: int
    def __init__(self, member: _Optional[_Union[CommunicatorMember, _Mapping]] = ..., progress: _Optional[_Union[CommProgress, _Mapping]] = ..., process: _Optional[_Union[ProcessInfo, _Mapping]] = ..., node_name: _Optional[str] = ..., rank_runs: _Optional[_Iterable[int]] = ..., size: _Optional[int] = ..., nodes: _Optional[int] = ..., ops_completed_sum: _Optional[int] = ..., bytes_completed_sum: _Optional[int] = ...) -> None: ...

class SubtreeNode(_message.Message):
    __slots__ = ("node_name", "host", "state", "last_seen_age_ms", "processes", "mode", "via")
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    VIA_FIELD_NUMBER: _ClassVar[int]
    node_name: str
    host: str
    state: str
    last_seen_age_ms: int
    processes: int
    mode: str
    via: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, node_name: _Optional[str] = ..., host: _Optional[str] = ..., state: _Optional[str] = ..., last_seen_age_ms: _Optional[int] = ..., processes: _Optional[int] = ..., mode: _Optional[str] = ..., via: _Optional[_Iterable[str]] = ...) -> None: ...

class BatchAck(_message.Message):
    __slots__ = ("last_applied_batch_seq", "master_clock", "full_state_requested")
    LAST_APPLIED_BATCH_SEQ_FIELD_NUMBER: _ClassVar[int]
    MASTER_CLOCK_FIELD_NUMBER: _ClassVar[int]
    FULL_STATE_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    last_applied_batch_seq: int
    master_clock: ClockSample
    full_state_requested: bool
    def __init__(self, last_applied_batch_seq: _Optional[int] = ..., master_clock: _Optional[_Union[ClockSample, _Mapping]] = ..., full_state_requested: _Optional[bool] = ...) -> None: ...

class ProcessInfo(_message.Message):
    __slots__ = ("pid", "ingest_state", "ingest_state_reason", "alive", "heartbeat_mono_ns", "heartbeat_real_ns", "global_rank", "local_rank", "world_size", "local_world_size", "cuda_device", "device_uuid", "job_id", "process_name", "shm_file", "shm_abi_version", "nccl_profiler_abi_version", "profiler_version", "event_mask", "hang_threshold_ms", "started_real_ns", "started_mono_ns", "records_read_total", "records_overwritten_total", "fifo_events_dropped_total", "log_records_lost_total", "pid_namespace")
    PID_FIELD_NUMBER: _ClassVar[int]
    INGEST_STATE_FIELD_NUMBER: _ClassVar[int]
    INGEST_STATE_REASON_FIELD_NUMBER: _ClassVar[int]
    ALIVE_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_MONO_NS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_REAL_NS_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_RANK_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    LOCAL_WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    CUDA_DEVICE_FIELD_NUMBER: _ClassVar[int]
    DEVICE_UUID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PROCESS_NAME_FIELD_NUMBER: _ClassVar[int]
    SHM_FILE_FIELD_NUMBER: _ClassVar[int]
    SHM_ABI_VERSION_FIELD_NUMBER: _ClassVar[int]
    NCCL_PROFILER_ABI_VERSION_FIELD_NUMBER: _ClassVar[int]
    PROFILER_VERSION_FIELD_NUMBER: _ClassVar[int]
    EVENT_MASK_FIELD_NUMBER: _ClassVar[int]
    HANG_THRESHOLD_MS_FIELD_NUMBER: _ClassVar[int]
    STARTED_REAL_NS_FIELD_NUMBER: _ClassVar[int]
    STARTED_MONO_NS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_READ_TOTAL_FIELD_NUMBER: _ClassVar[int]
    RECORDS_OVERWRITTEN_TOTAL_FIELD_NUMBER: _ClassVar[int]
    FIFO_EVENTS_DROPPED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    LOG_RECORDS_LOST_TOTAL_FIELD_NUMBER: _ClassVar[int]
    PID_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    pid: int
    ingest_state: IngestState
    ingest_state_reason: str
    alive: bool
    heartbeat_mono_ns: int
    heartbeat_real_ns: int
    global_rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    cuda_device: int
    device_uuid: str
    job_id: str
    process_name: str
    shm_file: str
    shm_abi_version: int
    nccl_profiler_abi_version: int
    profiler_version: int
    event_mask: int
    hang_threshold_ms: int
    started_real_ns: int
    started_mono_ns: int
    records_read_total: int
    records_overwritten_total: int
    fifo_events_dropped_total: int
    log_records_lost_total: int
    pid_namespace: int
    def __init__(self, pid: _Optional[int] = ..., ingest_state: _Optional[_Union[IngestState, str]] = ..., ingest_state_reason: _Optional[str] = ..., alive: _Optional[bool] = ..., heartbeat_mono_ns: _Optional[int] = ..., heartbeat_real_ns: _Optional[int] = ..., global_rank: _Optional[int] = ..., local_rank: _Optional[int] = ..., world_size: _Optional[int] = ..., local_world_size: _Optional[int] = ..., cuda_device: _Optional[int] = ..., device_uuid: _Optional[str] = ..., job_id: _Optional[str] = ..., process_name: _Optional[str] = ..., shm_file: _Optional[str] = ..., shm_abi_version: _Optional[int] = ..., nccl_profiler_abi_version: _Optional[int] = ..., profiler_version: _Optional[int] = ..., event_mask: _Optional[int] = ..., hang_threshold_ms: _Optional[int] = ..., started_real_ns: _Optional[int] = ..., started_mono_ns: _Optional[int] = ..., records_read_total: _Optional[int] = ..., records_overwritten_total: _Optional[int] = ..., fifo_events_dropped_total: _Optional[int] = ..., log_records_lost_total: _Optional[int] = ..., pid_namespace: _Optional[int] = ...) -> None: ...

class CommunicatorMember(_message.Message):
    __slots__ = ("comm_id", "pid", "generation", "comm_rank", "nranks", "nnodes", "name", "name_source", "local_rank", "cuda_device", "nccl_profiler_abi_version", "init_real_ns", "init_mono_ns", "finalize_mono_ns", "device_uuid", "pid_namespace")
    COMM_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    COMM_RANK_FIELD_NUMBER: _ClassVar[int]
    NRANKS_FIELD_NUMBER: _ClassVar[int]
    NNODES_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NAME_SOURCE_FIELD_NUMBER: _ClassVar[int]
    LOCAL_RANK_FIELD_NUMBER: _ClassVar[int]
    CUDA_DEVICE_FIELD_NUMBER: _ClassVar[int]
    NCCL_PROFILER_ABI_VERSION_FIELD_NUMBER: _ClassVar[int]
    INIT_REAL_NS_FIELD_NUMBER: _ClassVar[int]
    INIT_MONO_NS_FIELD_NUMBER: _ClassVar[int]
    FINALIZE_MONO_NS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_UUID_FIELD_NUMBER: _ClassVar[int]
    PID_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    comm_id: int
    pid: int
    generation: int
    comm_rank: int
    nranks: int
    nnodes: int
    name: str
    name_source: NameSource
    local_rank: int
    cuda_device: int
    nccl_profiler_abi_version: int
    init_real_ns: int
    init_mono_ns: int
    finalize_mono_ns: int
    device_uuid: str
    pid_namespace: int
    def __init__(self, comm_id: _Optional[int] = ..., pid: _Optional[int] = ..., generation: _Optional[int] = ..., comm_rank: _Optional[int] = ..., nranks: _Optional[int] = ..., nnodes: _Optional[int] = ..., name: _Optional[str] = ..., name_source: _Optional[_Union[NameSource, str]] = ..., local_rank: _Optional[int] = ..., cuda_device: _Optional[int] = ..., nccl_profiler_abi_version: _Optional[int] = ..., init_real_ns: _Optional[int] = ..., init_mono_ns: _Optional[int] = ..., finalize_mono_ns: _Optional[int] = ..., device_uuid: _Optional[str] = ..., pid_namespace: _Optional[int] = ...) -> None: ...

class CommProgress(_message.Message):
    __slots__ = ("comm_id", "pid", "generation", "comm_rank", "collectives", "p2p", "inflight_count", "oldest_inflight", "hang_flagged_seq", "hang_flagged_mono_ns", "ops_completed_total", "bytes_completed_total", "sampled_mono_ns", "pid_namespace")
    COMM_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    COMM_RANK_FIELD_NUMBER: _ClassVar[int]
    COLLECTIVES_FIELD_NUMBER: _ClassVar[int]
    P2P_FIELD_NUMBER: _ClassVar[int]
    INFLIGHT_COUNT_FIELD_NUMBER: _ClassVar[int]
    OLDEST_INFLIGHT_FIELD_NUMBER: _ClassVar[int]
    HANG_FLAGGED_SEQ_FIELD_NUMBER: _ClassVar[int]
    HANG_FLAGGED_MONO_NS_FIELD_NUMBER: _ClassVar[int]
    OPS_COMPLETED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    BYTES_COMPLETED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SAMPLED_MONO_NS_FIELD_NUMBER: _ClassVar[int]
    PID_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    comm_id: int
    pid: int
    generation: int
    comm_rank: int
    collectives: StageCounters
    p2p: StageCounters
    inflight_count: int
    oldest_inflight: InflightOp
    hang_flagged_seq: int
    hang_flagged_mono_ns: int
    ops_completed_total: int
    bytes_completed_total: int
    sampled_mono_ns: int
    pid_namespace: int
    def __init__(self, comm_id: _Optional[int] = ..., pid: _Optional[int] = ..., generation: _Optional[int] = ..., comm_rank: _Optional[int] = ..., collectives: _Optional[_Union[StageCounters, _Mapping]] = ..., p2p: _Optional[_Union[StageCounters, _Mapping]] = ..., inflight_count: _Optional[int] = ..., oldest_inflight: _Optional[_Union[InflightOp, _Mapping]] = ..., hang_flagged_seq: _Optional[int] = ..., hang_flagged_mono_ns: _Optional[int] = ..., ops_completed_total: _Optional[int] = ..., bytes_completed_total: _Optional[int] = ..., sampled_mono_ns: _Optional[int] = ..., pid_namespace: _Optional[int] = ...) -> None: ...

class StageCounters(_message.Message):
    __slots__ = ("enqueued", "enqueued_mono_ns", "gpu_started", "gpu_started_mono_ns", "completed", "completed_mono_ns")
    ENQUEUED_FIELD_NUMBER: _ClassVar[int]
    ENQUEUED_MONO_NS_FIELD_NUMBER: _ClassVar[int]
    GPU_STARTED_FIELD_NUMBER: _ClassVar[int]
    GPU_STARTED_MONO_NS_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_MONO_NS_FIELD_NUMBER: _ClassVar[int]
    enqueued: int
    enqueued_mono_ns: int
    gpu_started: int
    gpu_started_mono_ns: int
    completed: int
    completed_mono_ns: int
    def __init__(self, enqueued: _Optional[int] = ..., enqueued_mono_ns: _Optional[int] = ..., gpu_started: _Optional[int] = ..., gpu_started_mono_ns: _Optional[int] = ..., completed: _Optional[int] = ..., completed_mono_ns: _Optional[int] = ...) -> None: ...

class InflightOp(_message.Message):
    __slots__ = ("seq", "kind", "func", "datatype", "algo", "proto", "peer_or_root", "count", "size_bytes", "channels_started", "channels_completed", "enqueued_mono_ns", "gpu_started_mono_ns", "n_channels", "op_index", "unproven")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    FUNC_FIELD_NUMBER: _ClassVar[int]
    DATATYPE_FIELD_NUMBER: _ClassVar[int]
    ALGO_FIELD_NUMBER: _ClassVar[int]
    PROTO_FIELD_NUMBER: _ClassVar[int]
    PEER_OR_ROOT_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_STARTED_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    ENQUEUED_MONO_NS_FIELD_NUMBER: _ClassVar[int]
    GPU_STARTED_MONO_NS_FIELD_NUMBER: _ClassVar[int]
    N_CHANNELS_FIELD_NUMBER: _ClassVar[int]
    OP_INDEX_FIELD_NUMBER: _ClassVar[int]
    UNPROVEN_FIELD_NUMBER: _ClassVar[int]
    seq: int
    kind: OpKind
    func: str
    datatype: str
    algo: str
    proto: str
    peer_or_root: int
    count: int
    size_bytes: int
    channels_started: int
    channels_completed: int
    enqueued_mono_ns: int
    gpu_started_mono_ns: int
    n_channels: int
    op_index: int
    unproven: bool
    def __init__(self, seq: _Optional[int] = ..., kind: _Optional[_Union[OpKind, str]] = ..., func: _Optional[str] = ..., datatype: _Optional[str] = ..., algo: _Optional[str] = ..., proto: _Optional[str] = ..., peer_or_root: _Optional[int] = ..., count: _Optional[int] = ..., size_bytes: _Optional[int] = ..., channels_started: _Optional[int] = ..., channels_completed: _Optional[int] = ..., enqueued_mono_ns: _Optional[int] = ..., gpu_started_mono_ns: _Optional[int] = ..., n_channels: _Optional[int] = ..., op_index: _Optional[int] = ..., unproven: _Optional[bool] = ...) -> None: ...

class HangEvent(_message.Message):
    __slots__ = ("fifo_event_abi_version", "record", "read_real_ns", "origin_node")
    FIFO_EVENT_ABI_VERSION_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    READ_REAL_NS_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_NODE_FIELD_NUMBER: _ClassVar[int]
    fifo_event_abi_version: int
    record: bytes
    read_real_ns: int
    origin_node: str
    def __init__(self, fifo_event_abi_version: _Optional[int] = ..., record: _Optional[bytes] = ..., read_real_ns: _Optional[int] = ..., origin_node: _Optional[str] = ...) -> None: ...

class StepSummaryRecord(_message.Message):
    __slots__ = ("step_summary_version", "json", "origin_node")
    STEP_SUMMARY_VERSION_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_NODE_FIELD_NUMBER: _ClassVar[int]
    step_summary_version: int
    json: bytes
    origin_node: str
    def __init__(self, step_summary_version: _Optional[int] = ..., json: _Optional[bytes] = ..., origin_node: _Optional[str] = ...) -> None: ...

class NodeMetricTotals(_message.Message):
    __slots__ = ("comm_ops", "profiler_drops", "records_lost_total", "hangs_open", "comms_folded")
    class ProfilerDropsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class HangsOpenEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    COMM_OPS_FIELD_NUMBER: _ClassVar[int]
    PROFILER_DROPS_FIELD_NUMBER: _ClassVar[int]
    RECORDS_LOST_TOTAL_FIELD_NUMBER: _ClassVar[int]
    HANGS_OPEN_FIELD_NUMBER: _ClassVar[int]
    COMMS_FOLDED_FIELD_NUMBER: _ClassVar[int]
    comm_ops: _containers.RepeatedCompositeFieldContainer[CommOpTotals]
    profiler_drops: _containers.ScalarMap[str, int]
    records_lost_total: int
    hangs_open: _containers.ScalarMap[str, int]
    comms_folded: int
    def __init__(self, comm_ops: _Optional[_Iterable[_Union[CommOpTotals, _Mapping]]] = ..., profiler_drops: _Optional[_Mapping[str, int]] = ..., records_lost_total: _Optional[int] = ..., hangs_open: _Optional[_Mapping[str, int]] = ..., comms_folded: _Optional[int] = ...) -> None: ...

class CommOpTotals(_message.Message):
    __slots__ = ("comm_id", "comm_name", "func", "ops_total", "bytes_total", "latency_seconds_sum", "job_id")
    COMM_ID_FIELD_NUMBER: _ClassVar[int]
    COMM_NAME_FIELD_NUMBER: _ClassVar[int]
    FUNC_FIELD_NUMBER: _ClassVar[int]
    OPS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    BYTES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    LATENCY_SECONDS_SUM_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    comm_id: int
    comm_name: str
    func: str
    ops_total: int
    bytes_total: int
    latency_seconds_sum: float
    job_id: str
    def __init__(self, comm_id: _Optional[int] = ..., comm_name: _Optional[str] = ..., func: _Optional[str] = ..., ops_total: _Optional[int] = ..., bytes_total: _Optional[int] = ..., latency_seconds_sum: _Optional[float] = ..., job_id: _Optional[str] = ...) -> None: ...

class AgentCounters(_message.Message):
    __slots__ = ("ingest_lag_ms", "shm_files_quarantined_total", "fifo_events_read_total", "outbox_batches", "outbox_bytes", "outbox_events_dropped_total")
    INGEST_LAG_MS_FIELD_NUMBER: _ClassVar[int]
    SHM_FILES_QUARANTINED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    FIFO_EVENTS_READ_TOTAL_FIELD_NUMBER: _ClassVar[int]
    OUTBOX_BATCHES_FIELD_NUMBER: _ClassVar[int]
    OUTBOX_BYTES_FIELD_NUMBER: _ClassVar[int]
    OUTBOX_EVENTS_DROPPED_TOTAL_FIELD_NUMBER: _ClassVar[int]
    ingest_lag_ms: float
    shm_files_quarantined_total: int
    fifo_events_read_total: int
    outbox_batches: int
    outbox_bytes: int
    outbox_events_dropped_total: int
    def __init__(self, ingest_lag_ms: _Optional[float] = ..., shm_files_quarantined_total: _Optional[int] = ..., fifo_events_read_total: _Optional[int] = ..., outbox_batches: _Optional[int] = ..., outbox_bytes: _Optional[int] = ..., outbox_events_dropped_total: _Optional[int] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("session_id", "clock", "last_built_batch_seq", "shutting_down")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    LAST_BUILT_BATCH_SEQ_FIELD_NUMBER: _ClassVar[int]
    SHUTTING_DOWN_FIELD_NUMBER: _ClassVar[int]
    session_id: int
    clock: ClockSample
    last_built_batch_seq: int
    shutting_down: bool
    def __init__(self, session_id: _Optional[int] = ..., clock: _Optional[_Union[ClockSample, _Mapping]] = ..., last_built_batch_seq: _Optional[int] = ..., shutting_down: _Optional[bool] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("last_applied_batch_seq", "master_clock")
    LAST_APPLIED_BATCH_SEQ_FIELD_NUMBER: _ClassVar[int]
    MASTER_CLOCK_FIELD_NUMBER: _ClassVar[int]
    last_applied_batch_seq: int
    master_clock: ClockSample
    def __init__(self, last_applied_batch_seq: _Optional[int] = ..., master_clock: _Optional[_Union[ClockSample, _Mapping]] = ...) -> None: ...

class WatchStackRequestsRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: int
    def __init__(self, session_id: _Optional[int] = ...) -> None: ...

class StackRequest(_message.Message):
    __slots__ = ("request_id", "pid", "global_rank", "node_name", "pid_namespace")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_RANK_FIELD_NUMBER: _ClassVar[int]
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    PID_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    pid: int
    global_rank: int
    node_name: str
    pid_namespace: int
    def __init__(self, request_id: _Optional[int] = ..., pid: _Optional[int] = ..., global_rank: _Optional[int] = ..., node_name: _Optional[str] = ..., pid_namespace: _Optional[int] = ...) -> None: ...

class StackReport(_message.Message):
    __slots__ = ("session_id", "request_id", "python_stack_version", "json")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PYTHON_STACK_VERSION_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    session_id: int
    request_id: int
    python_stack_version: int
    json: bytes
    def __init__(self, session_id: _Optional[int] = ..., request_id: _Optional[int] = ..., python_stack_version: _Optional[int] = ..., json: _Optional[bytes] = ...) -> None: ...

class StackReportAck(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Reject(_message.Message):
    __slots__ = ("reason", "message", "master_protocol_version", "max_batch_bytes", "last_applied_batch_seq")
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    MASTER_PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_BYTES_FIELD_NUMBER: _ClassVar[int]
    LAST_APPLIED_BATCH_SEQ_FIELD_NUMBER: _ClassVar[int]
    reason: RejectReason
    message: str
    master_protocol_version: int
    max_batch_bytes: int
    last_applied_batch_seq: int
    def __init__(self, reason: _Optional[_Union[RejectReason, str]] = ..., message: _Optional[str] = ..., master_protocol_version: _Optional[int] = ..., max_batch_bytes: _Optional[int] = ..., last_applied_batch_seq: _Optional[int] = ...) -> None: ...
