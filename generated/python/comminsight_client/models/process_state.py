from enum import StrEnum

class ProcessState(StrEnum):
    ALIVE = "alive"
    EXITED = "exited"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return str(self.value)
