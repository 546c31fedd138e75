"""What every part of the Agent shares and none of them owns: its settings and command line,
liveness of a pid, rate-limited logging, how a metric family is built from its schema, the
hang threshold's health, giving memory back."""
