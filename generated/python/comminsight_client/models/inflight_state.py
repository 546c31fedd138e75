from enum import StrEnum

class InflightState(StrEnum):
    ENQUEUED = "enqueued"
    GPU_STARTED = "gpu_started"

    def __str__(self) -> str:
        return str(self.value)
