from enum import StrEnum

class CommunicatorState(StrEnum):
    ACTIVE = "active"
    FINALIZED = "finalized"

    def __str__(self) -> str:
        return str(self.value)
