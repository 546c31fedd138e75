from enum import StrEnum

class CommunicatorView(StrEnum):
    FULL = "full"
    SUMMARY = "summary"

    def __str__(self) -> str:
        return str(self.value)
