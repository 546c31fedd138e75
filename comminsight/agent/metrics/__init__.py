"""The Agent's Prometheus exposition: op series under the labels a fleet joins on, Step
durations, drop totals, the inputs' and the engine's counters, the master's job-wide series."""
