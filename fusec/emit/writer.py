"""The CUDA writer every family prints with: indented lines, and the text that
names a script call in comments."""

from __future__ import annotations

from pathlib import Path

from ..ir.dag import Constant, Dag


class CudaWriter:
    def __init__(self):
        self.lines: list[str] = []
        self.depth = 0

    def __call__(self, text: str = "") -> None:
        self.lines.append(("  " * self.depth + text) if text else "")

    def open(self, text: str) -> None:
        self(text + " {")
        self.depth += 1

    def close(self, text: str = "}") -> None:
        self.depth -= 1
        self(text)


def call_text(dag: Dag, call: int) -> str:
    record = dag.call(call)
    args = ", ".join(a.text if isinstance(a, Constant) else dag.value(a).label for a in record.args)
    return (f"{Path(dag.file).name}:{record.coord.line}  "
            f"{dag.value(record.result).label} = {record.function}({args}){record.origin}")


