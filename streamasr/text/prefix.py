"""Snapshots of a list that only grows: a greedy hypothesis' tokens and times, step by step.

Why: greedy search only appends to a hypothesis, so each step's tokens are the previous
step's plus a few. Copying them into a new tuple at every step costs the whole utterance (a
reference count touched per token, in memory long gone cold), so a 30-minute utterance made
every step cost more than the last. A Prefix is the first `n` items of a shared list that is
only ever appended to: taking one costs O(1), and every earlier Prefix keeps seeing exactly
the items it saw (nothing is ever changed or removed where a Prefix can look).

A Prefix behaves as the tuple of its items: it is equal to (and hashes like) that tuple,
slices into tuples, and pickles as a tuple, so a process on the other side of a queue gets a
plain tuple.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import islice
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")


class Prefix(Sequence[T], Generic[T]):
    """The first `length` items of `items`, a list its owner only ever appends to."""

    __slots__ = ("_items", "_length")

    def __init__(self, items: list[T], length: int | None = None) -> None:
        size = len(items) if length is None else length
        if not 0 <= size <= len(items):
            raise ValueError(f"a prefix of {size} items of a list of {len(items)}")
        self._items = items
        self._length = size

    def shares_storage(self, other: object) -> bool:
        """Both are prefixes of the same list, so the shorter is a prefix of the longer."""
        return isinstance(other, Prefix) and other._items is self._items

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[T, ...]: ...

    def __getitem__(self, index: int | slice) -> T | tuple[T, ...]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._length)
            if step == 1:  # the usual case, a tail: one C-level copy of just those items
                return tuple(self._items[start:stop])
            return tuple(self._items[i] for i in range(start, stop, step))
        position = index + self._length if index < 0 else index
        if not 0 <= position < self._length:
            raise IndexError("Prefix index out of range")
        return self._items[position]

    def __iter__(self) -> Iterator[T]:
        return islice(self._items, self._length)

    def __eq__(self, other: object) -> bool:
        if self.shares_storage(other):
            return len(self) == len(other)  # type: ignore[arg-type]
        if isinstance(other, (Prefix, tuple, list)):
            return len(self) == len(other) and tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return repr(tuple(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, (tuple(self),))


class Growing(Generic[T]):
    """An append-only list handing out Prefix snapshots; `replace` starts a new list when
    the items change anywhere but at the end (a beam that switched paths, a new segment), so
    snapshots taken before never change."""

    def __init__(self) -> None:
        self._items: list[T] = []

    def snapshot(self) -> Prefix[T]:
        return Prefix(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def extend(self, new: Sequence[T]) -> Prefix[T]:
        """Append `new` and return the snapshot of everything: O(len(new))."""
        self._items.extend(new)
        return Prefix(self._items)

    def replace(self, keep: int, new: Sequence[T]) -> Prefix[T]:
        """The first `keep` items followed by `new`, in a fresh list (O(keep + len(new)))
        unless nothing is dropped, when it is `extend`."""
        if keep >= len(self._items):
            return self.extend(new)
        items = self._items[:keep]
        items.extend(new)
        self._items = items
        return Prefix(items)
