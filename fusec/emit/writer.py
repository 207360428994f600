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

    def otherwise(self) -> None:
        """Close the open ``if`` block and open its ``else``."""
        self.close("} else {")
        self.depth += 1

    def open_kernel(self, bounds: str, name: str, params: str, release: bool = True) -> None:
        """A generated kernel's signature and first statement. Every fusec kernel may be
        launched while the kernel before it in the stream still runs (a programmatic
        dependent launch: fusec/runtime/fastcall.c), so before anything else it waits for
        that one to end (support.cuh). Without ``release`` it lets the next be launched
        later itself (``fusec_release_next``), not at once."""
        self(f'extern "C" __global__ void {bounds} {name}(\n    {params})')
        self("{")
        self.depth += 1
        self("fusec_follow_previous();" if release else "fusec_wait_previous();")


def call_text(dag: Dag, call: int) -> str:
    record = dag.call(call)
    args = ", ".join(a.text if isinstance(a, Constant) else dag.value(a).label for a in record.args)
    return (f"{Path(dag.file).name}:{record.coord.line}  "
            f"{dag.value(record.result).label} = {record.function}({args}){record.origin}")


