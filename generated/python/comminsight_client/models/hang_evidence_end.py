from enum import StrEnum

class HangEvidenceEnd(StrEnum):
    BOUND_REACHED = "bound_reached"
    COMM_FINALIZED = "comm_finalized"
    OP_COMPLETED = "op_completed"

    def __str__(self) -> str:
        return str(self.value)
