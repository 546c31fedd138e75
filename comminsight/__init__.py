"""CommInsight: observability and semantic analysis for NCCL collective communication."""


def __getattr__(name: str):
    # The version is looked up on first use only: importlib.metadata costs a tenth of a second,
    # paid otherwise by every simulated rank, CLI call and engine process that never asks.
    if name == "__version__":
        from importlib import metadata

        try:
            version = metadata.version("comminsight")
        except metadata.PackageNotFoundError:  # a source tree that was never installed
            version = "0+unknown"
        globals()["__version__"] = version
        return version
    raise AttributeError(f"module 'comminsight' has no attribute {name!r}")
