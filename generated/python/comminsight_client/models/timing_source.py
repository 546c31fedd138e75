from enum import StrEnum

class TimingSource(StrEnum):
    COLLECTIVE_CPU = "collective_cpu"
    KERNEL_CPU = "kernel_cpu"
    KERNEL_GPU = "kernel_gpu"
    NONE = "none"

    def __str__(self) -> str:
        return str(self.value)
