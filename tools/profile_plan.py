"""Run one fusion implementation of a script a few times, for a profiler.

    ncu --section SpeedOfLight ... python3 tools/profile_plan.py bicgk --dtype float32 --n 16384 \\
        --block 256 --iters 2 --tile-rows 64 --serial rows [--sass]

Builds the combination that fuses every call (or, with --tuned, the program
fusec.compile picks for the sizes: the tuned plan where the tuning cache has
one), runs it on random device inputs, and with --sass prints the kernel's
SASS via cuobjdump. The striped kernels' DRAM and L2 traffic, for instance:

    ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct \
        --kernel-name regex:_s_ --launch-skip 2 --launch-count 1 --cache-control all \
        python3 tools/profile_plan.py gemver --n 16384 --tuned --runs 4

and how busy L2 and DRAM are (docs/design/striped-fusion.md): add lts__t_bytes.sum,
lts__throughput.avg.pct_of_peak_sustained_elapsed and
dram__throughput.avg.pct_of_peak_sustained_elapsed to --metrics.
"""

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("script")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--n", type=int, default=16384)
    parser.add_argument("--block", type=int, default=256)
    parser.add_argument("--iters", type=int, default=2)
    parser.add_argument("--tile-rows", type=int, default=32)
    parser.add_argument("--serial", default="rows")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sass", action="store_true")
    parser.add_argument("--tuned", action="store_true", help="the program fusec.compile picks for the sizes")
    args = parser.parse_args()

    import cupy

    from bench.fusion import device_inputs
    from fusec import data, nvcc
    from fusec.emit.program import generate
    from fusec.frontend import load_script
    from fusec.ir.geometry import Shape
    from fusec.ir.plan import KernelPlan, ProgramPlan
    from fusec.library.loader import load_library
    from fusec.library.model import Geometry
    from fusec.runtime import cuda
    from fusec.runtime.program import Program
    from fusec.space.fusions import Fusion
    from fusec.space.implementations import steps_in_order
    library = load_library(data.LIBRARY)
    dag = load_script(ROOT / "scripts" / f"{args.script}.script", library)
    sizes = {s: args.n for s in dag.sizes}
    if args.tuned:
        from fusec.api import compile_dag
        program = compile_dag(dag, library, args.dtype, sizes=sizes)
        print(f"{args.script} {args.dtype}: {program.tuned or 'predicted'}: {program.generated.plan.summary(dag)}")
    else:
        calls = tuple(c.id for c in dag.calls)
        steps = steps_in_order(dag, library, Fusion(calls), calls, True)
        impls = tuple(library.functions[dag.call(c).function].implementations[0].name for c in calls)
        plan = KernelPlan(calls, impls, steps, Shape(Geometry.TILE, args.block, args.iters, args.tile_rows),
                          args.serial)
        program = Program(generate(dag, library, ProgramPlan((plan,)), args.dtype))
    inputs = device_inputs(cupy, dag, sizes, args.dtype, seed=1)
    for _ in range(args.runs):
        program(**inputs)
    cupy.cuda.runtime.deviceSynchronize()
    if args.sass:
        with cuda.context() as ctx:
            cubin = nvcc.compile_cubin(program.source, cuda.arch_of(ctx)).cubin
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(cubin)
            f.flush()
            print(subprocess.run(["cuobjdump", "-sass", f.name], capture_output=True, text=True).stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
