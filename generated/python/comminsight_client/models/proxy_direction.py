from enum import StrEnum

class ProxyDirection(StrEnum):
    RECV = "recv"
    SEND = "send"

    def __str__(self) -> str:
        return str(self.value)
