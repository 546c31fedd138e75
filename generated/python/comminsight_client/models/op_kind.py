from enum import StrEnum

class OpKind(StrEnum):
    COLL = "coll"
    P2P = "p2p"

    def __str__(self) -> str:
        return str(self.value)
