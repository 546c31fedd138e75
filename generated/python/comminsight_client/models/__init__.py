""" Contains all the data models used in inputs/outputs """

from .agent_mode import AgentMode
from .anomaly import Anomaly
from .anomaly_kind import AnomalyKind
from .anomaly_unit import AnomalyUnit
from .archive_error import ArchiveError
from .archive_flush import ArchiveFlush
from .archive_provider import ArchiveProvider
from .archive_status import ArchiveStatus
from .cause_link import CauseLink
from .comm_progress import CommProgress
from .comm_rank import CommRank
from .comm_ref import CommRef
from .comm_seq_span import CommSeqSpan
from .communicator import Communicator
from .communicator_page import CommunicatorPage
from .communicator_state import CommunicatorState
from .communicator_state_filter import CommunicatorStateFilter
from .communicator_view import CommunicatorView
from .culprit import Culprit
from .culprit_basis import CulpritBasis
from .disagreement_kind import DisagreementKind
from .error import Error
from .error_code import ErrorCode
from .error_detail import ErrorDetail
from .error_location import ErrorLocation
from .gpu_ref import GpuRef
from .hang_evidence import HangEvidence
from .hang_evidence_end import HangEvidenceEnd
from .hang_evidence_state import HangEvidenceState
from .hang_report import HangReport
from .hang_report_list import HangReportList
from .hang_status_filter import HangStatusFilter
from .hang_threshold import HangThreshold
from .health import Health
from .health_status import HealthStatus
from .incident import Incident
from .incident_consequence import IncidentConsequence
from .incident_detail import IncidentDetail
from .incident_list import IncidentList
from .incident_root import IncidentRoot
from .incident_stack import IncidentStack
from .incident_stack_frame import IncidentStackFrame
from .incident_stack_status import IncidentStackStatus
from .incident_status import IncidentStatus
from .incident_status_filter import IncidentStatusFilter
from .inflight_evidence import InflightEvidence
from .inflight_op import InflightOp
from .inflight_op_list import InflightOpList
from .inflight_state import InflightState
from .ingest_state import IngestState
from .job_ref import JobRef
from .job_step import JobStep
from .job_step_gpu import JobStepGpu
from .job_step_node import JobStepNode
from .job_step_node_state import JobStepNodeState
from .job_step_page import JobStepPage
from .name_source import NameSource
from .node import Node
from .node_list import NodeList
from .node_reject import NodeReject
from .node_state import NodeState
from .node_state_filter import NodeStateFilter
from .node_summary import NodeSummary
from .op_class import OpClass
from .op_info import OpInfo
from .op_kind import OpKind
from .op_record import OpRecord
from .op_record_list import OpRecordList
from .op_ref import OpRef
from .open_api_document import OpenApiDocument
from .open_api_document_info import OpenApiDocumentInfo
from .open_api_document_paths import OpenApiDocumentPaths
from .process import Process
from .process_state import ProcessState
from .producer import Producer
from .producer_mode import ProducerMode
from .progress_mark import ProgressMark
from .proxy_direction import ProxyDirection
from .proxy_progress import ProxyProgress
from .rank_evidence import RankEvidence
from .recovery import Recovery
from .recovery_method import RecoveryMethod
from .report_status import ReportStatus
from .resolution import Resolution
from .resolve_hang_request import ResolveHangRequest
from .resolve_incident_request import ResolveIncidentRequest
from .role_stats import RoleStats
from .root_change import RootChange
from .semantic_engine_failure import SemanticEngineFailure
from .semantic_engine_gpu import SemanticEngineGpu
from .semantic_engine_gpu_state import SemanticEngineGpuState
from .semantic_engine_health import SemanticEngineHealth
from .seq_progress import SeqProgress
from .seq_span_claim import SeqSpanClaim
from .severity import Severity
from .slowest_op import SlowestOp
from .step_disagreement import StepDisagreement
from .step_page import StepPage
from .step_summary import StepSummary
from .threshold_difference import ThresholdDifference
from .threshold_source import ThresholdSource
from .timing_source import TimingSource
from .verdict import Verdict

__all__ = (
    "AgentMode",
    "Anomaly",
    "AnomalyKind",
    "AnomalyUnit",
    "ArchiveError",
    "ArchiveFlush",
    "ArchiveProvider",
    "ArchiveStatus",
    "CauseLink",
    "CommProgress",
    "CommRank",
    "CommRef",
    "CommSeqSpan",
    "Communicator",
    "CommunicatorPage",
    "CommunicatorState",
    "CommunicatorStateFilter",
    "CommunicatorView",
    "Culprit",
    "CulpritBasis",
    "DisagreementKind",
    "Error",
    "ErrorCode",
    "ErrorDetail",
    "ErrorLocation",
    "GpuRef",
    "HangEvidence",
    "HangEvidenceEnd",
    "HangEvidenceState",
    "HangReport",
    "HangReportList",
    "HangStatusFilter",
    "HangThreshold",
    "Health",
    "HealthStatus",
    "Incident",
    "IncidentConsequence",
    "IncidentDetail",
    "IncidentList",
    "IncidentRoot",
    "IncidentStack",
    "IncidentStackFrame",
    "IncidentStackStatus",
    "IncidentStatus",
    "IncidentStatusFilter",
    "InflightEvidence",
    "InflightOp",
    "InflightOpList",
    "InflightState",
    "IngestState",
    "JobRef",
    "JobStep",
    "JobStepGpu",
    "JobStepNode",
    "JobStepNodeState",
    "JobStepPage",
    "NameSource",
    "Node",
    "NodeList",
    "NodeReject",
    "NodeState",
    "NodeStateFilter",
    "NodeSummary",
    "OpClass",
    "OpenApiDocument",
    "OpenApiDocumentInfo",
    "OpenApiDocumentPaths",
    "OpInfo",
    "OpKind",
    "OpRecord",
    "OpRecordList",
    "OpRef",
    "Process",
    "ProcessState",
    "Producer",
    "ProducerMode",
    "ProgressMark",
    "ProxyDirection",
    "ProxyProgress",
    "RankEvidence",
    "Recovery",
    "RecoveryMethod",
    "ReportStatus",
    "Resolution",
    "ResolveHangRequest",
    "ResolveIncidentRequest",
    "RoleStats",
    "RootChange",
    "SemanticEngineFailure",
    "SemanticEngineGpu",
    "SemanticEngineGpuState",
    "SemanticEngineHealth",
    "SeqProgress",
    "SeqSpanClaim",
    "Severity",
    "SlowestOp",
    "StepDisagreement",
    "StepPage",
    "StepSummary",
    "ThresholdDifference",
    "ThresholdSource",
    "TimingSource",
    "Verdict",
)
