from enum import StrEnum

class IncidentStackStatus(StrEnum):
    CAPTURED = "captured"
    UNAVAILABLE = "unavailable"

    def __str__(self) -> str:
        return str(self.value)
