from enum import StrEnum

class CulpritBasis(StrEnum):
    MAJORITY = "majority"
    RHYTHM = "rhythm"
    UNDECIDED = "undecided"

    def __str__(self) -> str:
        return str(self.value)
