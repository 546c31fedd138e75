"""The live Semantic Engine inside the Agent (one engine per GPU, checkpoints, restarts, lag)
and the Step summaries it writes, read back and reconciled job-wide."""
