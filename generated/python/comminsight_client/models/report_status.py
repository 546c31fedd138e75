from enum import StrEnum

class ReportStatus(StrEnum):
    OPEN = "open"
    RESOLVED = "resolved"

    def __str__(self) -> str:
        return str(self.value)
