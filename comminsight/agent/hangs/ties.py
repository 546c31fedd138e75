"""Things tied together, and what each is tied to in turn (a union-find): the processes of one
job, where nothing names the job."""

from __future__ import annotations

from collections.abc import Hashable


class Ties:
    def __init__(self) -> None:
        self._parent: dict[Hashable, Hashable] = {}

    def root(self, x: Hashable) -> Hashable:
        """What names x's group: the same for every member, the least of them (as sorted)."""
        parent = self._parent
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def tie(self, a: Hashable, b: Hashable) -> None:
        ra, rb = self.root(a), self.root(b)
        if ra != rb:
            self._parent[max(ra, rb)] = min(ra, rb)

    def groups(self) -> dict[Hashable, set]:
        """Each member and its whole group (one set, shared by the group's members)."""
        sets: dict[Hashable, set] = {}
        for x in list(self._parent):
            sets.setdefault(self.root(x), set()).add(x)
        return {x: sets[self.root(x)] for x in self._parent}

    def roots(self) -> dict[Hashable, Hashable]:
        return {x: self.root(x) for x in list(self._parent)}
