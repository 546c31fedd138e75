from enum import StrEnum

class OpClass(StrEnum):
    COLL = "coll"
    P2P = "p2p"

    def __str__(self) -> str:
        return str(self.value)
