from enum import StrEnum

class AgentMode(StrEnum):
    MASTER = "master"
    RELAY = "relay"
    SLAVE = "slave"
    STANDALONE = "standalone"

    def __str__(self) -> str:
        return str(self.value)
