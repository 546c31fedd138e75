from enum import StrEnum

class CauseLink(StrEnum):
    CULPRIT_WAITS = "culprit_waits"
    MISSING_MEMBER = "missing_member"
    P2P_PEER = "p2p_peer"
    SAME_CULPRIT = "same_culprit"
    WAITED_THERE_FIRST = "waited_there_first"

    def __str__(self) -> str:
        return str(self.value)
