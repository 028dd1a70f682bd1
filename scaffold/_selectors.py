"""How an aggregation picks the sets it reads.

A selector turns a set size and a seeded random generator into groups of
member indices; each group becomes one aggregation call (times ``samples``).
Selectors are index-based, so they are drawn when a run starts, from the run's
recorded seed: the same seed gives the same subsets whatever order calls finish in.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from scaffold._errors import GraphDefinitionError, SubsetSizeError

Groups = list[tuple[int, ...]]


@runtime_checkable
class Selector(Protocol):
    """Picks groups of member indices from a set of ``size`` members."""

    def groups(self, size: int, rng: random.Random) -> Groups:
        """Return the groups; each is a tuple of distinct indices in ``range(size)``."""
        ...

    def check(self, size: int) -> None:
        """Raise :class:`SubsetSizeError` if this selector cannot work on ``size`` members."""
        ...

    def count(self, size: int) -> int:
        """How many groups :meth:`groups` returns for ``size`` members."""
        ...


@dataclass(frozen=True)
class AllMembers:
    """One group holding every member (``n`` copies of it when ``n > 1``).

    Examples:
        >>> AllMembers().groups(3, random.Random(0))
        [(0, 1, 2)]
    """

    n: int = 1

    def __post_init__(self) -> None:
        if self.n < 1:
            raise SubsetSizeError(f"n must be at least 1, got {self.n}")

    def groups(self, size: int, rng: random.Random) -> Groups:
        return [tuple(range(size))] * self.n

    def check(self, size: int) -> None:
        return None

    def count(self, size: int) -> int:
        return self.n

    def describe(self) -> str:
        return "all members" + (f" ×{self.n}" if self.n > 1 else "")


@dataclass(frozen=True)
class RandomSubsets:
    """``n`` subsets of ``k`` distinct members, each drawn uniformly without replacement (RSA).

    Examples:
        >>> [len(g) for g in RandomSubsets(k=2, n=3).groups(5, random.Random(0))]
        [2, 2, 2]
    """

    k: int
    n: int = 1
    distinct: bool = False
    """Draw ``n`` *different* subsets (SPIRAL's sets; needs ``n`` ≤ C(size, k)); else each is drawn independently."""

    def __post_init__(self) -> None:
        if self.k < 1:
            raise SubsetSizeError(f"subset size k must be at least 1, got {self.k}")
        if self.n < 1:
            raise SubsetSizeError(f"number of subsets n must be at least 1, got {self.n}")

    def groups(self, size: int, rng: random.Random) -> Groups:
        # Partial Fisher-Yates: uniform k-subsets, ~3x faster than rng.sample for small k.
        k, rand = self.k, rng.random
        out: Groups = []
        seen: set[frozenset[int]] = set()
        members = list(range(size))
        while len(out) < self.n:
            pool = members.copy()
            for i in range(k):
                j = i + int(rand() * (size - i))
                pool[i], pool[j] = pool[j], pool[i]
            group = tuple(pool[:k])
            if self.distinct:  # rejection keeps every set of distinct subsets equally likely
                key = frozenset(group)
                if key in seen:
                    continue
                seen.add(key)
            out.append(group)
        return out

    def check(self, size: int) -> None:
        if self.k > size:
            raise SubsetSizeError(f"subset size k={self.k} is larger than the set it draws from (n={size})")
        if self.distinct and self.n > math.comb(size, self.k):
            raise SubsetSizeError(f"{self.n} distinct subsets of {self.k} cannot be drawn from {size} members "
                                  f"(there are {math.comb(size, self.k)})")

    def count(self, size: int) -> int:
        return self.n

    def describe(self) -> str:
        return f"{self.n} {'distinct ' if self.distinct else ''}random {self.k}-subsets"


@dataclass(frozen=True)
class Partition:
    """Consecutive groups of ``k`` (the last one smaller unless ``drop_remainder``), optionally shuffled first.

    Examples:
        >>> Partition(k=2).groups(5, random.Random(0))
        [(0, 1), (2, 3), (4,)]
    """

    k: int
    shuffle: bool = False
    drop_remainder: bool = False

    def __post_init__(self) -> None:
        if self.k < 1:
            raise SubsetSizeError(f"group size k must be at least 1, got {self.k}")

    def groups(self, size: int, rng: random.Random) -> Groups:
        order = list(range(size))
        if self.shuffle:
            rng.shuffle(order)
        out = [tuple(order[i : i + self.k]) for i in range(0, size, self.k)]
        if self.drop_remainder and out and len(out[-1]) < self.k:
            out.pop()
        return out

    def check(self, size: int) -> None:
        if self.k > size:
            raise SubsetSizeError(f"group size k={self.k} is larger than the set it partitions (n={size})")

    def count(self, size: int) -> int:
        return size // self.k if self.drop_remainder else -(-size // self.k)

    def describe(self) -> str:
        return f"groups of {self.k}" + (" (shuffled)" if self.shuffle else "")


@dataclass(frozen=True)
class Each:
    """One group per member: every member is read on its own (self-refinement, critique).

    Examples:
        >>> Each().groups(3, random.Random(0))
        [(0,), (1,), (2,)]
    """

    def groups(self, size: int, rng: random.Random) -> Groups:
        return [(i,) for i in range(size)]

    def check(self, size: int) -> None:
        return None

    def count(self, size: int) -> int:
        return size

    def describe(self) -> str:
        return "each member"


@dataclass(frozen=True)
class Pairs:
    """Pairs of distinct members, for pairwise comparison: every pair, or ``per_member`` random opponents each.

    With ``per_member=None`` every unordered pair is read once (n(n-1)/2 groups). With
    ``per_member=m`` there are ``n * m / 2`` pairs (rounded up), drawn from the run's seed as a
    round-robin over a shuffled order, so every member is compared about ``m`` times and no pair
    repeats while unused pairs remain. The order inside a
    pair is shuffled too, so a judge's position bias does not favour any member.

    Examples:
        >>> Pairs().groups(3, random.Random(0))
        [(0, 1), (0, 2), (1, 2)]
        >>> len(Pairs(per_member=2).groups(6, random.Random(0)))
        6
    """

    per_member: int | None = None

    def __post_init__(self) -> None:
        if self.per_member is not None and self.per_member < 1:
            raise SubsetSizeError(f"per_member must be at least 1, got {self.per_member}")

    def groups(self, size: int, rng: random.Random) -> Groups:
        if self.per_member is None:
            return [(i, j) for i in range(size) for j in range(i + 1, size)]
        want = self.count(size)
        appearances = [0] * size
        used: set[tuple[int, int]] = set()
        chosen: Groups = []
        while len(chosen) < want:
            # the least-compared member meets the least-compared one it has not met yet
            order = sorted(range(size), key=lambda i: (appearances[i], rng.random()))
            first = order[0]
            fresh = [j for j in order[1:] if (min(first, j), max(first, j)) not in used]
            second = (fresh or order[1:])[0]
            used.add((min(first, second), max(first, second)))
            appearances[first] += 1
            appearances[second] += 1
            chosen.append((first, second) if rng.random() < 0.5 else (second, first))
        return chosen

    def check(self, size: int) -> None:
        if size < 2:
            raise SubsetSizeError(f"pairwise comparison needs at least 2 members, got {size}")

    def count(self, size: int) -> int:
        if self.per_member is None:
            return size * (size - 1) // 2
        return -(-size * self.per_member // 2) if size >= 2 else 0

    def describe(self) -> str:
        return "every pair" if self.per_member is None else f"pairs, {self.per_member} per member"


@dataclass(frozen=True)
class CustomSelector:
    """Wraps a function ``(size, rng) -> groups of indices``; the group count must not depend on the rng.

    Examples:
        >>> pairs = CustomSelector(lambda size, rng: [(i, (i + 1) % size) for i in range(size)])
        >>> pairs.groups(3, random.Random(0))
        [(0, 1), (1, 2), (2, 0)]
    """

    fn: Callable[[int, random.Random], Sequence[Sequence[int]]]

    def groups(self, size: int, rng: random.Random) -> Groups:
        raw = self.fn(size, rng)
        out: Groups = []
        for group in raw:
            g = tuple(int(i) for i in group)
            if not g:
                raise GraphDefinitionError("a custom selector returned an empty group")
            if any(i < 0 or i >= size for i in g):
                raise GraphDefinitionError(f"a custom selector returned index out of range(0, {size}): {g}")
            if len(set(g)) != len(g):
                raise GraphDefinitionError(f"a custom selector returned a group with repeated members: {g}")
            out.append(g)
        return out

    def check(self, size: int) -> None:
        self.groups(size, random.Random(0))

    def count(self, size: int) -> int:
        return len(self.groups(size, random.Random(0)))

    def describe(self) -> str:
        return f"custom ({getattr(self.fn, '__name__', 'selector')})"


def make_selector(
    select: Selector | str | Callable[[int, random.Random], Sequence[Sequence[int]]] | None,
    k: int | None,
    n: int,
) -> Selector:
    """Build the selector that ``aggregate(select=..., k=..., n=...)`` asks for."""
    if n < 1:
        raise SubsetSizeError(f"n must be at least 1, got {n}")
    if isinstance(select, Selector):
        return select
    if callable(select):
        return CustomSelector(select)
    if select is None:
        return AllMembers(n) if k is None else RandomSubsets(k, n)
    if select == "all":
        return AllMembers(n)
    if select == "random":
        if k is None:
            raise GraphDefinitionError("select='random' needs k, the subset size")
        return RandomSubsets(k, n)
    if select == "partition":
        if k is None:
            raise GraphDefinitionError("select='partition' needs k, the group size")
        return Partition(k)
    if select == "each":
        return Each()
    raise GraphDefinitionError(
        f"unknown select={select!r}; use 'all', 'random', 'partition', 'each', a Selector or a function"
    )
