"""The node's Profiler drop counters (shm v1 header counters), exact while producers come and
go: the final counts of every producer that left are added to a running total, and the live
producers' current counts are added to that at each pass.

Taking the largest value ever seen instead would let one retired producer with many drops hide
every later producer's drops until they exceed it. A producer's final counts are read when
ProducerSet retires it (Producer.final_header, the header copied just before its region is
closed), so increments between the last pass and its retirement are counted too; a region
dropped unread (its file shrank under the mapping) leaves with the counts last seen.
"""

from __future__ import annotations

from collections.abc import Iterable

from comminsight.agent.receivers.producers import Producer


class ProfilerDropTotals:
    def __init__(self, names: Iterable[str]) -> None:
        self.names = tuple(names)
        self.retired = dict.fromkeys(self.names, 0)  # what producers that left counted
        self._live: dict[int, tuple[Producer, dict[str, int]]] = {}  # id -> (it, its counts)
        self._final: set[int] = set()  # ids of _live whose counts were read once released

    def _counts(self, header, before: dict[str, int] | None) -> dict[str, int]:
        counts = {name: int(header[name]) for name in self.names}
        if before is not None:  # a counter never goes back, whatever a region claims
            counts = {name: max(value, before[name]) for name, value in counts.items()}
        return counts

    def _retire(self, counts: dict[str, int]) -> None:
        for name, value in counts.items():
            self.retired[name] += value

    def update(self, live: Iterable[Producer], retired: Iterable[Producer]) -> dict[str, int]:
        """The node's totals after one pass: `live` are the producers mapped now, `retired`
        the ones this pass retired."""
        for producer in retired:
            seen = self._live.pop(id(producer), None)
            before = seen[1] if seen else None
            if producer.final_header is not None:
                self._retire(self._counts(producer.final_header, before))
            elif before is not None:
                self._retire(before)
        current: dict[int, tuple[Producer, dict[str, int]]] = {}
        for producer in live:
            seen = self._live.pop(id(producer), None)
            if seen is not None and id(producer) in self._final:
                current[id(producer)] = seen  # a released region's header changes no more
                continue
            current[id(producer)] = (
                producer,
                self._counts(producer.region.header, seen[1] if seen else None),
            )
            if producer.released:
                self._final.add(id(producer))
        self._final &= current.keys()
        for _, counts in self._live.values():  # left without a final read (dropped unread)
            self._retire(counts)
        self._live = current
        totals = dict(self.retired)
        for _, counts in current.values():
            for name, value in counts.items():
                totals[name] += value
        return totals
