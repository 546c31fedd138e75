from enum import StrEnum

class NodeStateFilter(StrEnum):
    ALL = "all"
    CONNECTED = "connected"
    DISCONNECTED = "disconnected"
    LOCAL = "local"
    REJECTED = "rejected"
    STALE = "stale"

    def __str__(self) -> str:
        return str(self.value)
