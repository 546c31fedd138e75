from enum import StrEnum

class DisagreementKind(StrEnum):
    BOUNDARY_MISMATCH = "boundary_mismatch"
    NODE_NUMBERING = "node_numbering"
    NO_COMM_SEQS = "no_comm_seqs"
    OFFSET_CONFLICT = "offset_conflict"
    SILENT_NODE = "silent_node"
    UNLINKED = "unlinked"

    def __str__(self) -> str:
        return str(self.value)
