"""The parameter tensors of the decoder the workloads pretend to train, one per nn.Parameter.

Frameworks that work per tensor need them: DeepSpeed broadcasts the model from rank 0 one
parameter at a time, ZeRO-3 gathers and reduces them per module and bucket, veRL pushes them
to the inference engine one at a time. The shape is a Llama decoder: a token embedding, per
layer an input RMSNorm, q/k/v/o projections, a post-attention RMSNorm and a gated MLP
(gate/up/down), then a final norm and an untied output head. Each layer's tensors add up to
`ModelShape.layer_params`; the embedding and the head come on top (32000 x hidden each).

The weight-decay flag follows the two optimizer groups Hugging Face's Trainer builds
(`get_decay_parameter_names`): norms (and biases, which Llama has none of) go without decay.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby

from comminsight.sim.workloads.model import ModelShape

VOCAB = 32000


@dataclass(frozen=True)
class ParamTensor:
    name: str
    module: str  # the nn.Module that owns it directly
    numel: int
    ndim: int
    decay: bool


@dataclass(frozen=True)
class OwningModule:
    """A module with parameters of its own: what ZeRO-3's hooks fetch and release."""

    name: str
    params: tuple[ParamTensor, ...]

    @property
    def numel(self) -> int:
        return sum(p.numel for p in self.params)


def _linear(module: str, numel: int) -> ParamTensor:
    return ParamTensor(f"{module}.weight", module, numel, 2, True)


def _norm(module: str, hidden: int) -> ParamTensor:
    return ParamTensor(f"{module}.weight", module, hidden, 1, False)


def layer_parameters(model: ModelShape, layer: int) -> list[ParamTensor]:
    h = model.hidden
    ffn_numel = max(h, (model.layer_params - 4 * h * h - 2 * h) // 3)
    prefix = f"model.layers.{layer}"
    return [
        _norm(f"{prefix}.input_layernorm", h),
        *(_linear(f"{prefix}.self_attn.{p}_proj", h * h) for p in "qkvo"),
        _norm(f"{prefix}.post_attention_layernorm", h),
        *(_linear(f"{prefix}.mlp.{p}_proj", ffn_numel) for p in ("gate", "up", "down")),
    ]


def decoder_parameters(model: ModelShape) -> list[ParamTensor]:
    """Every parameter in model.named_parameters() order (construction order)."""
    h = model.hidden
    params = [ParamTensor("model.embed_tokens.weight", "model.embed_tokens", VOCAB * h, 2, True)]
    for layer in range(model.layers):
        params += layer_parameters(model, layer)
    params.append(_norm("model.norm", h))
    params.append(_linear("lm_head", VOCAB * h))
    return params


def owning_modules(params: list[ParamTensor]) -> list[OwningModule]:
    """The modules in forward order, each with its own parameters."""
    return [OwningModule(name, tuple(group)) for name, group in groupby(params, lambda p: p.module)]


def root_numel(model: ModelShape) -> int:
    """What FSDP wraps at the root when each decoder layer is its own unit: the embedding,
    the final norm and the output head."""
    return 2 * VOCAB * model.hidden + model.hidden
