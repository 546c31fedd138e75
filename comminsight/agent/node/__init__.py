"""The node Agent's pipeline put together: each pass reads the Profilers' SHM regions and the
hang-event FIFO (core), hands the ops to the live Semantic Engine (steps), diagnoses hangs
(hangs), and updates what the API, the metrics and the archive export."""
