from enum import StrEnum

class HangEvidenceState(StrEnum):
    LOWERED = "lowered"
    RAISED = "raised"

    def __str__(self) -> str:
        return str(self.value)
