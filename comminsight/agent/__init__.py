"""The CommInsight Agent (SHM/FIFO consumer, metrics, API, hang diagnosis, archive)."""
