from enum import StrEnum

class TimingSource(StrEnum):
    HOST = "host"
    KERNEL_GPU = "kernel_gpu"
    NONE = "none"

    def __str__(self) -> str:
        return str(self.value)
