"""Sizes of a script's or a composite's arrays while they are checked: a union-find over
dimensions, each class named after its declared symbol, and how a size reads in a message
(:mod:`fusec.frontend.check`, :mod:`fusec.library.composite`)."""

from __future__ import annotations

from ..library.model import Kind


class Sizes:
    """Union-find over dimensions, each node with a name it may give its class.

    A class is named after its declared symbol if it has one, otherwise after
    its best label: labels of declarations (``A.rows``) beat labels of call
    variables (``sgemv.m``, never seen in practice: every call dimension is
    unified with a declared array's), and earlier nodes beat later ones.
    """

    DECLARED, CALL = 0, 1

    def __init__(self) -> None:
        self._parent: list[int] = []
        self._symbol: list[str | None] = []  # meaningful at roots
        self._best: list[tuple[int, int, str]] = []  # (rank, node, label), at roots
        self._symbols: dict[str, int] = {}
        self._declared: list[int] = []  # nodes made by declarations, in order

    def _new(self, symbol: str | None, rank: int, label: str) -> int:
        node = len(self._parent)
        self._parent.append(node)
        self._symbol.append(symbol)
        self._best.append((rank, node, label))
        return node

    def symbol(self, name: str) -> int:
        """The node of declared size symbol ``name`` (one per name)."""
        if name not in self._symbols:
            self._symbols[name] = self._new(name, self.DECLARED, name)
            self._declared.append(self._symbols[name])
        return self._symbols[name]

    def anonymous(self, label: str) -> int:
        """A size a declaration leaves out, named ``label`` unless unified."""
        node = self._new(None, self.DECLARED, label)
        self._declared.append(node)
        return node

    def variable(self, label: str) -> int:
        """A function's dimension variable, fresh for one call."""
        return self._new(None, self.CALL, label)

    def find(self, node: int) -> int:
        root = node
        while self._parent[root] != root:
            root = self._parent[root]
        while self._parent[node] != root:
            self._parent[node], node = root, self._parent[node]
        return root

    def unify(self, a: int, b: int) -> tuple[str, str] | None:
        """Merge the classes of ``a`` and ``b``; their names if both are declared and differ."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return None
        sa, sb = self._symbol[ra], self._symbol[rb]
        if sa is not None and sb is not None:
            return sa, sb
        self._parent[rb] = ra
        self._symbol[ra] = sa if sa is not None else sb
        self._best[ra] = min(self._best[ra], self._best[rb])
        return None

    def name(self, node: int) -> str:
        root = self.find(node)
        symbol = self._symbol[root]
        return symbol if symbol is not None else self._best[root][2]

    def declared_order(self) -> list[str]:
        """Class names in order of their first appearance in a declaration."""
        return list(dict.fromkeys(self.name(node) for node in self._declared))


AXES = {Kind.VECTOR: ("length",), Kind.MATRIX: ("rows", "columns")}


def size_phrase(kind: Kind, axis: int, size: str) -> str:
    """``length n`` of a vector, ``n rows`` / ``n columns`` of a matrix."""
    word = AXES[kind][axis]
    return f"length {size}" if word == "length" else f"{size} {word}"
