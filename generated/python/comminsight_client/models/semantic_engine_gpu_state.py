from enum import StrEnum

class SemanticEngineGpuState(StrEnum):
    BACKING_OFF = "backing_off"
    FINISHED = "finished"
    RUNNING = "running"

    def __str__(self) -> str:
        return str(self.value)
