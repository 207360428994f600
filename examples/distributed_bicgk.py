"""BiCGK (q = A p, s = A^T r) over every GPU of a node, one process each.

    mpirun -n 2 python -m mpi4py examples/distributed_bicgk.py [--n 16384] [--dtype float32]
    torchrun --nproc-per-node 2 examples/distributed_bicgk.py [--n 16384]

The communicator comes from the launcher's environment: NCCL through CuPy
under mpirun (CuPy arrays), torch.distributed under torchrun (PyTorch
tensors). Rank 0 makes the whole problem and scatters it, which suits an
example; a solver builds each rank's rows where they are (prog.rows("A")).
Each rank gets its rows of q and the whole of s; rank 0 checks them against
the float64 oracle and prints the plan.
"""

from __future__ import annotations

import argparse

import fusec.distributed as fd
from fusec import oracle

SCRIPT = "scripts/bicgk.script"


def device_arrays(comm):
    """(upload, download) in the communicator's framework."""
    if comm is not None and comm.arrays_family == "torch":
        import torch
        return (lambda a: torch.as_tensor(a, device=f"cuda:{comm.device}"),
                lambda t: t.detach().cpu().numpy())
    import cupy
    return cupy.asarray, cupy.asnumpy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=16384)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    args = parser.parse_args()
    if args.n < 1:
        parser.error(f"argument --n: must be a whole number >= 1, got {args.n}")

    prog = fd.compile(SCRIPT, dtype=args.dtype, sizes={"n": args.n})
    upload, download = device_arrays(prog.comm)
    root = prog.rank == 0
    inputs = oracle.random_inputs(prog.dag, {"m": args.n, "n": args.n}, args.dtype, 0) if root else None

    # every rank takes its rows of A and r, and the whole of p
    A = prog.scatter("A", upload(inputs["A"]) if root else None)
    p = prog.scatter("p", upload(inputs["p"]) if root else None)
    r = prog.scatter("r", upload(inputs["r"]) if root else None)
    q, s = prog(A=A, p=p, r=r)  # q: this rank's rows; s: whole, on every rank

    q_whole = prog.gather("q", q)  # rank 0 puts q together
    if root:
        from fusec.api import resolve_library
        results = {"q": download(q_whole), "s": download(s)}
        checks = oracle.check_outputs(prog.dag, resolve_library(None), inputs, results, args.dtype)
        print(prog.describe())
        print()
        for check in checks:
            print(check)
        lo, hi = prog.rows("A") or (0, args.n)  # one rank: A is whole
        print(f"{prog.plan.ranks} rank(s); rank 0 held rows {lo}..{hi - 1} of A")
        if not all(c.passed for c in checks):
            raise SystemExit(1)


if __name__ == "__main__":
    main()
