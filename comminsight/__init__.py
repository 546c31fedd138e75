"""CommInsight: observability and semantic analysis for NCCL collective communication."""
