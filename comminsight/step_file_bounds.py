"""How big a step-summary file and one of its lines may be, for every reader of
`semantics/step/` (the Agent's API, slave and master, the engine reading its own output back).

A summary is a few KiB: a longer line is none, and is passed over rather than held. The files
grow for as long as training runs and are read a chunk at a time; their bound only refuses
what no engine writes (a sparse file planted to keep a reader busy for hours).
"""

STEP_LINE_BYTES_MAX = 16 << 20
STEP_FILE_BYTES_MAX = 1 << 40
