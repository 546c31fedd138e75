from enum import StrEnum

class JobStepNodeState(StrEnum):
    LINKED = "linked"
    REFERENCE = "reference"
    SILENT = "silent"
    UNLINKED = "unlinked"

    def __str__(self) -> str:
        return str(self.value)
