from enum import StrEnum

class Verdict(StrEnum):
    ALL_JOINED_NONE_COMPLETE = "all_joined_none_complete"
    COMM_INIT_STUCK = "comm_init_stuck"
    INCONCLUSIVE = "inconclusive"
    OP_MISMATCH = "op_mismatch"
    PROCESS_DIED = "process_died"
    RANK_LEFT = "rank_left"
    RANK_NOT_JOINED = "rank_not_joined"
    STRAGGLER = "straggler"
    STUCK_OUTSIDE_NCCL = "stuck_outside_nccl"

    def __str__(self) -> str:
        return str(self.value)
