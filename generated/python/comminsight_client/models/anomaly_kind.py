from enum import StrEnum

class AnomalyKind(StrEnum):
    BANDWIDTH_LOW = "bandwidth_low"
    MISSING_OPS = "missing_ops"
    OP_SLOW = "op_slow"
    RECORDS_LOST = "records_lost"
    STEP_SLOW = "step_slow"
    UNEXPECTED_OPS = "unexpected_ops"

    def __str__(self) -> str:
        return str(self.value)
