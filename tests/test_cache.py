"""The per-object memo built on srift's one bounded cache (BoundedCache itself: tests/test_plans.py)."""

from __future__ import annotations

import pytest

from srift.cache import ObjectMemo


class _Thing:  # not hashable by value, like a Profile
    pass


def test_the_object_memo_keys_on_the_object_and_holds_no_strong_reference():
    memo: ObjectMemo[int] = ObjectMemo(size=8)
    a, b = _Thing(), _Thing()
    calls: list[object] = []
    assert memo.get(a, "k", lambda: calls.append(a) or 1) == 1
    assert memo.get(a, "k", lambda: calls.append(a) or 2) == 1  # a hit
    assert memo.get(b, "k", lambda: calls.append(b) or 3) == 3  # another object, its own entry
    assert calls == [a, b] and len(memo) == 2
    # the memo keeps only weak references: a freed object's entry can never answer for a new one
    entry = memo._cache.get((id(a), "k"), lambda: pytest.fail("entry missing"))
    del a, calls
    assert entry[0]() is None
    assert memo.size == 8
