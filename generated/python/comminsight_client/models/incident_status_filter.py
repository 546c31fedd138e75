from enum import StrEnum

class IncidentStatusFilter(StrEnum):
    ALL = "all"
    OPEN = "open"
    RESOLVED = "resolved"

    def __str__(self) -> str:
        return str(self.value)
