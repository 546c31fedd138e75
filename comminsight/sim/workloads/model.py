"""The transformer the workloads pretend to train: sizes and compute times.

A decoder of `layers` layers with about 12*hidden^2 parameters each, sequence 2048 and micro-
batch 1, on a GPU that sustains 400 TFLOP/s. Forward costs 2 FLOPs per parameter and token,
backward twice that; the optimizer streams 16 bytes per parameter at 2 TB/s. Warm-up steps are
three times slower (allocator growth, autotuning, first-use connections).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SEQ_LEN = 2048
MICRO_BATCH = 1
GPU_FLOPS = 400e12
HBM_BYTES_PER_S = 2e12
WARMUP_SLOWDOWN = 3.0
OPTIMIZER_BYTES_PER_PARAM = 16


@dataclass(frozen=True)
class ModelShape:
    params: int
    layers: int

    @property
    def layer_params(self) -> int:
        return self.params // self.layers

    @property
    def hidden(self) -> int:
        return max(64, int(math.sqrt(self.layer_params / 12)) // 64 * 64)

    @property
    def activation_elements(self) -> int:
        """One layer's output for one micro-batch: what TP all-reduces and PP sends."""
        return SEQ_LEN * MICRO_BATCH * self.hidden

    def forward_ns(self, params: int, warmup: bool = False) -> float:
        ns = 2 * params * SEQ_LEN * MICRO_BATCH / GPU_FLOPS * 1e9
        return ns * (WARMUP_SLOWDOWN if warmup else 1.0)

    def backward_ns(self, params: int, warmup: bool = False) -> float:
        return 2 * self.forward_ns(params, warmup)

    def optimizer_ns(self, params: int) -> float:
        return params * OPTIMIZER_BYTES_PER_PARAM / HBM_BYTES_PER_S * 1e9


def parse_param_count(text: str) -> int:
    """'125M', '1.3B', '350000000' -> a parameter count."""
    text = text.strip().upper()
    scale = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9}.get(text[-1:], 1)
    number = text[:-1] if scale != 1 else text
    try:
        return int(float(number) * scale)
    except ValueError:
        raise ValueError(f"not a parameter count: {text!r} (try 125M or 1.3B)") from None
