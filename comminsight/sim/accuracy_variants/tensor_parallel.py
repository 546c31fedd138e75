"""Variants of this family, as the frameworks issue them."""

from __future__ import annotations

from comminsight.sim.accuracy_case import Case

CASES: list[Case] = []
