from enum import StrEnum

class CommunicatorStateFilter(StrEnum):
    ACTIVE = "active"
    ALL = "all"
    FINALIZED = "finalized"

    def __str__(self) -> str:
        return str(self.value)
