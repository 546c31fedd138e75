"""A slave Agent: its node's state streamed to the master from an on-disk outbox, with TLS and
backoff."""
