from enum import StrEnum

class HangStatusFilter(StrEnum):
    ALL = "all"
    OPEN = "open"
    RESOLVED = "resolved"

    def __str__(self) -> str:
        return str(self.value)
