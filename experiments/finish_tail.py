"""Where BiCGK's finish costs its time: every block's start, end of work and end, read from
the GPU's global timer (one launch, instrumented).

experiments/finish_cost.py found BiCGK's tile kernels 13-23 % faster with the last blocks'
sums taken out, on the H200 at n = 2048-8192, while none of the rewrites that make the sums
cheaper (more loads in flight, one accumulator, columns first) gained. Two readings fit: the
sums are a tail (the grid's last blocks finish every column of tiles, and all of their sums
wait for the end), or they slow the kernel throughout. This instruments the generated kernel:
thread 0 of every block notes ``%globaltimer`` when the block starts, when it has stored its
partials (before the finish's barrier, fence and tickets) and when it ends (after its sums,
behind a barrier), into a ``__device__`` array read back through the driver. Reported per
variant (fusec, and 'no sums', '8 loads in flight' and '32 loads in flight' of
experiments.finish_cost):

- span: first start to last end;
- work done: first start to the last block's end of work (its partials stored);
- tail: from then to the last end, the time no block streams the matrix;
- blocks over 1 µs: how many blocks spent over 1 µs from their end of work to their end
  (fence, tickets, and the sums of the last to arrive), and the median of that time among them.

    python -m experiments.finish_tail [--case float32:4096 ...] [--runs 5] [--out DIR] [--name NAME]

Instrumented kernels run a little slower than fusec's (one more barrier a block); the
times are those of the median run of ``--runs`` by span, each after a warm-up run.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import statistics
from pathlib import Path

from experiments.finish_cost import FINISH, variant
from experiments.source_runs import case, last_block

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = ("fusec", "no sums", "8 loads in flight", "32 loads in flight")
CASES = (("float32", 4096), ("float64", 4096), ("float64", 8192))
MAX_BLOCKS = 1 << 16
START = "  fusec_follow_previous();\n"
END = "}\n#undef ITERS"
TIMER = f"""__device__ unsigned long long fusec_times[3 * {MAX_BLOCKS}];  // start, work done, end, a block
__device__ __forceinline__ unsigned long long fusec_now() {{
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}}
"""


def instrumented(source: str) -> str:
    """``source`` (one kernel) with thread 0 of each block noting its three times."""
    assert source.count(START) == 1 and source.count(FINISH) == 1 and source.count(END) == 1, \
        "the tile family's kernel changed: update experiments.finish_tail"
    source = source.replace(START, START + "  const unsigned long long fusec_t0 = fusec_now();\n")
    source = source.replace(FINISH, "  if (threadIdx.x == 0) {\n    fusec_times[3 * blockIdx.x] = fusec_t0;\n"
                            "    fusec_times[3 * blockIdx.x + 1] = fusec_now();\n  }\n" + FINISH)
    source = source.replace(END, "  BARRIER();\n"
                            "  if (threadIdx.x == 0) fusec_times[3 * blockIdx.x + 2] = fusec_now();\n" + END)
    return TIMER + source


def read_times(program, blocks: int) -> list[tuple[int, int, int]]:
    """The blocks' (start, work done, end) in ns, from the program's loaded module."""
    from fusec.runtime import cuda
    driver = ctypes.CDLL("libcuda.so.1")
    with cuda.context() as ctx:
        module = program._load(ctx).module
        pointer, size = ctypes.c_uint64(), ctypes.c_size_t()
        assert driver.cuModuleGetGlobal_v2(ctypes.byref(pointer), ctypes.byref(size), ctypes.c_void_p(module),
                                           b"fusec_times") == 0
        host = (ctypes.c_uint64 * (3 * blocks))()
        assert driver.cuMemcpyDtoH_v2(host, pointer, ctypes.c_size_t(24 * blocks)) == 0
    return [tuple(host[3 * b:3 * b + 3]) for b in range(blocks)]


def summary(times: list[tuple[int, int, int]]) -> dict:
    first = min(t[0] for t in times)
    done, end = max(t[1] for t in times), max(t[2] for t in times)
    finishing = sorted(t[2] - t[1] for t in times if t[2] - t[1] > 1000)
    return {"span us": (end - first) / 1e3, "work done us": (done - first) / 1e3, "tail us": (end - done) / 1e3,
            "finishing blocks": len(finishing),
            "finishing median us": statistics.median(finishing) / 1e3 if finishing else 0.0,
            "blocks": len(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--case", type=case, action="append",
                        help="DTYPE:N (repeatable; default float32:4096, float64:4096, float64:8192)")
    parser.add_argument("--runs", type=int, default=5, help="instrumented runs of each variant (1 or more)")
    parser.add_argument("--out", type=Path, default=ROOT / "experiments" / "results")
    parser.add_argument("--name", default="h200-finish-tail")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs {args.runs}: 1 or more")
    import cupy

    import fusec
    from bench.fusion import device_inputs
    from fusec.runtime.program import Program
    rows = []
    for dtype, n in args.case or CASES:
        path = ROOT / "scripts" / "bicgk.script"
        sizes = {"m": n, "n": n}
        base = last_block(fusec.compile(path, dtype=dtype, sizes=sizes))
        plan = base.generated.plan.summary(base.dag)
        inputs = device_inputs(cupy, base.dag, sizes, dtype, seed=5)
        row = {"dtype": dtype, "n": n, "plan": plan, "tuned": bool(base.tuned), "variants": {}}
        for name in VARIANTS:
            program = Program(dataclasses.replace(base.generated, source=instrumented(variant(base.source, name))))
            runs = []
            for _ in range(args.runs):
                program(**inputs)
                cupy.cuda.Device().synchronize()
                program(**inputs)
                cupy.cuda.Device().synchronize()
                times = [t for t in read_times(program, MAX_BLOCKS) if t[2]]  # the grid's blocks
                runs.append(summary(times))
            program.release()
            row["variants"][name] = sorted(runs, key=lambda r: r["span us"])[len(runs) // 2]
            s = row["variants"][name]
            print(f"{dtype} {n} {name:20s} span {s['span us']:7.1f} us  work done {s['work done us']:7.1f}"
                  f"  tail {s['tail us']:5.1f}  finishing blocks {s['finishing blocks']:4d}"
                  f" (median {s['finishing median us']:.1f} us) of {s['blocks']}", flush=True)
        rows.append(row)
        del inputs
        cupy.get_default_memory_pool().free_all_blocks()
    device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    args.out.mkdir(parents=True, exist_ok=True)
    command = (f"python -m experiments.finish_tail --runs {args.runs}"
               + "".join(f" --case {d}:{n}" for d, n in args.case or ()) + f" --name {args.name}")
    (args.out / f"{args.name}.json").write_text(json.dumps({"device": device, "command": command, "rows": rows},
                                                           indent=1))
    (args.out / f"{args.name}.md").write_text(table(device, command, rows))


def table(device: str, command: str, rows: list[dict]) -> str:
    """The markdown table of a run's json."""
    lines = [f"# Where BiCGK's finish costs its time, on {device} (`{command}`)", "",
             "One instrumented launch, the median of the runs by span; µs from the first block's start.", "",
             "| precision | n | plan | variant | span | work done | tail | blocks over 1 µs (median µs) |",
             "|---|---:|---|---|---:|---:|---:|---:|"]
    for row in rows:
        plan = ("tuned: " if row["tuned"] else "predicted: ") + row["plan"]
        for name, s in row["variants"].items():
            over = f"{s['finishing blocks']} of {s['blocks']} ({s['finishing median us']:.1f})"
            lines.append(f"| {row['dtype']} | {row['n']} | {plan} | {name} | {s['span us']:.1f}"
                         f" | {s['work done us']:.1f} | {s['tail us']:.1f} | {over} |")
            plan = ""
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
