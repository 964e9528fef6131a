"""Values computed once per key per process, safe for concurrent first calls.

Dispatch's per-device state (device facts, loaded libraries) is filled by the first call that needs an entry;
many threads may make that call at once. `OnceMap` runs the computation of one key in one thread while the
others wait for its result (a failure is raised in each waiting thread and not remembered: the next call tries
again), and different keys proceed in parallel. A look-up of a known key takes no lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable


class OnceMap:
    def __init__(self):
        self._values: dict = {}
        self._locks: dict = {}
        self._guard = threading.Lock()

    def get(self, key: Hashable, compute: Callable[[], object]):
        """The value of `key`, computed by `compute()` the first time (once, whatever the threads)."""
        try:
            return self._values[key]
        except KeyError:
            pass
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            if key not in self._values:
                self._values[key] = compute()
            return self._values[key]

    def __contains__(self, key: Hashable) -> bool:
        return key in self._values

    def keys(self) -> list:
        return list(self._values)

    def clear(self) -> None:
        with self._guard:
            self._values.clear()
