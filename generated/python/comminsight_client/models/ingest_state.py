from enum import StrEnum

class IngestState(StrEnum):
    ACTIVE = "active"
    DRAINING = "draining"
    QUARANTINED = "quarantined"
    RETIRED = "retired"

    def __str__(self) -> str:
        return str(self.value)
