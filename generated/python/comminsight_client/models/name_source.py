from enum import StrEnum

class NameSource(StrEnum):
    INJECT = "inject"
    NCCL = "nccl"
    NONE = "none"

    def __str__(self) -> str:
        return str(self.value)
