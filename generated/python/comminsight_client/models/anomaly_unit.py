from enum import StrEnum

class AnomalyUnit(StrEnum):
    COUNT = "count"
    GBS = "gbs"
    NS = "ns"
    RATIO = "ratio"

    def __str__(self) -> str:
        return str(self.value)
