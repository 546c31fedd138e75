"""CommInsight Inject: names every NCCL communicator PyTorch creates `<group_desc>:<group_name>`.

Installed as its own dependency-free wheel (`comminsight_inject`, `make build-inject`) whose
`.pth` file imports `startup` at interpreter start. `startup` only registers an import hook;
torch is never imported by Inject. When the program imports `torch.distributed`,
`torch_adapter` wraps process-group creation so that each group's NCCL options carry the name
(`nccl_config`), records the groups to `<home>/metadata/inject/` (`metadata`) and, opt-in,
optimizer-step markers (`step_markers`). When the process makes its first group it takes the
stack signal, unless something holds it (`stack_signal`), and answers it with its threads'
Python frames (`stack_dump`). Every failure leaves torch as it was (`state`).

Modules import each other relatively only: the same files are the package
`comminsight.inject` in this repository and `comminsight_inject` in the wheel.
"""

__version__ = "0.1.0"
