"""The one bounded cache of srift: a memo that starts over when it holds ``CACHE_ENTRIES`` entries.

The recommender scores thousands of clusters with one predictor, and the communication model and
the simulator memoize per (GPU, batch), per topology and per communication model; a search touches
a few dozen of each, so the bound is never reached by one prediction and only keeps a long-running
process (a notebook, a benchmark) from growing without limit.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

CACHE_ENTRIES = 8192  # entries a cache keeps before it starts over

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """A memo of at most ``size`` entries, emptied when full.

    Args:
        size: Entries kept before the cache starts over.

    Raises:
        ValueError: for a size below 1.
    """

    __slots__ = ("_entries", "size")

    def __init__(self, size: int = CACHE_ENTRIES) -> None:
        if size < 1:
            raise ValueError(f"cache size must be at least 1, got {size}")
        self._entries: dict[K, V] = {}
        self.size = size

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The value of ``key``, made by ``make()`` on a miss."""
        try:
            return self._entries[key]
        except KeyError:
            return self.put(key, make())

    def put(self, key: K, value: V) -> V:
        """Keep ``value`` for ``key`` (starting over first when full) and return it."""
        if key not in self._entries and len(self._entries) >= self.size:
            self._entries.clear()
        self._entries[key] = value
        return value

    def clear(self) -> None:
        """Forget every entry (a test or a refit that changes what the entries were made from)."""
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


class ObjectMemo(Generic[V]):
    """A memo of values derived from an object that is not hashable (a Profile) and is never changed
    once made: keyed by the object's identity and a hashable ``key``. Each entry holds a weak
    reference that must still point at the same object (an id can come back for another object
    once the first is freed). At most ``size`` entries, emptied when full.

    Args:
        size: Entries kept before the memo starts over.

    Raises:
        ValueError: for a size below 1.
    """

    __slots__ = ("_cache",)

    def __init__(self, size: int = CACHE_ENTRIES) -> None:
        self._cache: BoundedCache[tuple[int, Hashable], tuple[weakref.ref, V]] = BoundedCache(size)

    @property
    def size(self) -> int:
        return self._cache.size

    def get(self, obj: object, key: Hashable, make: Callable[[], V]) -> V:
        """The value for ``(obj, key)``, made by ``make()`` on a miss."""
        k = (id(obj), key)
        ref, value = self._cache.get(k, lambda: (weakref.ref(obj), make()))
        if ref() is obj:
            return value
        return self._cache.put(k, (weakref.ref(obj), make()))[1]  # the id came back for another object

    def clear(self) -> None:
        """Forget every entry."""
        self._cache.clear()

    def __len__(self) -> int:
        return len(self._cache)
