from enum import StrEnum

class ArchiveProvider(StrEnum):
    FSSPEC = "fsspec"
    LOCAL = "local"

    def __str__(self) -> str:
        return str(self.value)
