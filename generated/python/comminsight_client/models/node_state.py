from enum import StrEnum

class NodeState(StrEnum):
    CONNECTED = "connected"
    DISCONNECTED = "disconnected"
    LOCAL = "local"
    REJECTED = "rejected"
    STALE = "stale"

    def __str__(self) -> str:
        return str(self.value)
