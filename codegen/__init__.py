"""CommInsight protocol code generator: protocols/ -> generated/ (run as `python -m codegen`)."""
