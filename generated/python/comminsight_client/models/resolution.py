from enum import StrEnum

class Resolution(StrEnum):
    COMM_FINALIZED = "comm_finalized"
    EXPIRED = "expired"
    OPERATOR = "operator"
    OP_COMPLETED = "op_completed"
    PROCESS_EXITED = "process_exited"
    SUPERSEDED = "superseded"

    def __str__(self) -> str:
        return str(self.value)
