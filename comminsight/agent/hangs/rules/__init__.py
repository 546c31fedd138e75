"""The hang verdicts, one rule (or a family of them) per module; verdict_rules.py orders them."""
