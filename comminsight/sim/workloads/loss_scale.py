"""Which optimizer steps find inf/NaN gradients under fp16 dynamic loss scaling.

Both scalers start high (2^16) so that small gradients survive fp16; the first steps overflow
until the scale has come down to what the gradients tolerate, and later the scale is raised
again after a window of clean steps, which overflows once more if the gradients have not
shrunk, plus the occasional gradient spike. The rules are the frameworks' own:

- DeepSpeed `DynamicLossScaler.update_scale` (deepspeed/runtime/fp16/loss_scaler.py):
  hysteresis 2 (the first overflow only spends the hysteresis, the next halves the scale),
  doubling after `loss_scale_window` clean steps since the last overflow.
- torch `GradScaler.update` (torch/amp/grad_scaler.py): halve on every overflow, double after
  `growth_interval` clean steps in a row.
- Megatron-LM `DynamicGradScaler.update` (megatron/core/optimizer/grad_scaler.py): every
  overflow resets the growth tracker and spends one unit of hysteresis (default 2), halving once
  it is spent; after `loss_scale_window` clean steps in a row the hysteresis is restored and the
  scale doubles. The initial scale is `--initial-loss-scale` (default 2^32: dozens of skipped
  iterations; training scripts commonly pass 65536, which this models).

What the gradients tolerate is drawn from a generator seeded by the run's seed and the step,
never by the rank: every rank takes the same decision, as the frameworks make sure by reducing
the overflow flag (DeepSpeed) or by checking gradients that are already all-reduced (DDP).
"""

from __future__ import annotations

import random

INITIAL_SCALE_LOG2 = 16


SPIKE_RATE = 0.03  # gradient spikes per step of a run that trains smoothly


def tolerated_scale_log2(seed: int, step: int, spike_rate: float = SPIKE_RATE) -> float:
    """log2 of the largest loss scale this step's gradients survive in fp16."""
    settle = random.Random(f"{seed}/loss-scale/settle").uniform(12.0, 14.5)
    rng = random.Random(f"{seed}/loss-scale/{step}")
    tolerated = settle + rng.gauss(0.0, 0.3)
    if rng.random() < spike_rate:  # a gradient spike
        tolerated -= rng.uniform(2.0, 4.0)
    return tolerated


def deepspeed_overflows(
    seed: int, steps: int, window: int, hysteresis: int = 2, spike_rate: float = SPIKE_RATE
) -> list[bool]:
    scale, current_hysteresis, last_overflow = INITIAL_SCALE_LOG2, hysteresis, -1
    overflows = []
    for step in range(steps):
        overflow = scale > tolerated_scale_log2(seed, step, spike_rate)
        overflows.append(overflow)
        if overflow:
            if hysteresis == 1 or current_hysteresis == 1:
                scale = max(scale - 1, 0)
            else:
                current_hysteresis -= 1
            last_overflow = step
        else:
            stable = step - last_overflow - 1
            if stable > 0 and stable % window == 0:
                current_hysteresis = hysteresis
                scale += 1
    return overflows


def grad_scaler_overflows(seed: int, steps: int, growth_interval: int) -> list[bool]:
    scale, clean = INITIAL_SCALE_LOG2, 0
    overflows = []
    for step in range(steps):
        overflow = scale > tolerated_scale_log2(seed, step)
        overflows.append(overflow)
        if overflow:
            scale, clean = scale - 1, 0
        else:
            clean += 1
            if clean == growth_interval:
                scale, clean = scale + 1, 0
    return overflows


def megatron_overflows(
    seed: int,
    steps: int,
    window: int,
    hysteresis: int = 2,
    initial_log2: float = INITIAL_SCALE_LOG2,
    spike_rate: float = SPIKE_RATE,
) -> list[bool]:
    scale, growth, current_hysteresis = initial_log2, 0, hysteresis
    overflows = []
    for step in range(steps):
        overflow = scale > tolerated_scale_log2(seed, step, spike_rate)
        overflows.append(overflow)
        if overflow:
            growth = 0
            current_hysteresis -= 1
            if current_hysteresis <= 0:
                scale = max(scale - 1, 0)
        else:
            growth += 1
            if growth == window:
                growth, current_hysteresis = 0, hysteresis
                scale += 1
    return overflows
