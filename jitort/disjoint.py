"""Disjoint sets (union-find) over the indices 0..n-1, with path halving: the connected
components that the kernel library's compile groups and the layout pass's NHWC regions are
made of."""
from __future__ import annotations


class DisjointSets:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        """The representative of ``i``'s set."""
        parent = self.parent
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(self, i: int, j: int) -> None:
        """Merge ``i``'s set into ``j``'s."""
        self.parent[self.find(i)] = self.find(j)
