from enum import StrEnum

class ThresholdSource(StrEnum):
    AGENT = "agent"
    DEFAULT = "default"
    ENVIRONMENT = "environment"
    FILE = "file"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return str(self.value)
