"""CommInsight: observability and semantic analysis for NCCL collective communication."""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("comminsight")
except _metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
