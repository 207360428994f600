"""Size sweeps: GB/s on minimum bytes against n, fusec beside cuBLAS and the best other peer
(the analog of the paper's Figs. 5 and 6).

    python -m bench.sweeps [--scripts bicgk,gemver] [--dtype float32|float64|both]
                           [--n 512,1024,2048,4096,8192,16384] [--repeat 20] [--tune TOP]
                           [--peers cublas,torch,torch.compile,jax] [--out bench/results] [--name h100-sweep]
    python -m bench.sweeps --plot-only bench/results/h100-sweep.json [MORE.json ...] [--out DIR] [--name NAME]

Every point is one row of bench.peers (same inputs, checks and timing; see
its doc): matrices n x n, fusec, the cuBLAS call sequence and every other peer
(PyTorch, torch.compile, JAX), of which the fastest at that point is "the best
other peer". Writes <out>/<name>.json (after every point, so an interrupted
sweep keeps what it measured), <name>.md, and with matplotlib one PNG per
sequence, <name>-<sequence>.png: the GPU's time above, the time with the
host's launching below, a column per dtype, the copy bandwidth measured in the
run (every precision's first, before any point) as a dotted line. Without matplotlib the JSON is written and
the PNGs can
be made later, wherever matplotlib is, with --plot-only (several JSONs, say a
float32 and a float64 run, are merged).

fusec runs the plan its tuning cache holds for each point, else the
predictor's first choice (the table says which). --tune TOP first tunes every
point as ``fusec tune SCRIPT --size n=N --dtype D --top TOP`` does, the winner
stored in the tuning cache, so that every point is tuned (at the small sizes
the predictor's first choice was up to 1.39x slower: GEMVER fp32 n = 512).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import sys
from pathlib import Path

from bench import peers as P

SIZES = (512, 1024, 2048, 4096, 8192, 16384)
OTHERS = ("torch", "torch.compile", "jax")  # the best of these is "the best other peer"
MARKERS = {"torch": "o", "torch.compile": "s", "jax": "^"}
COLORS = {"fusec": "tab:red", "cublas": "tab:blue", "best": "tab:green"}


# ---------------------------------------------------------------------------
# The series
# ---------------------------------------------------------------------------

def _gbs(row: dict, result: dict, field: str) -> float:
    return row["minimum_bytes"] / (result[field] * 1e-6) / 1e9


def series(rows: list[dict], script: str, dtype: str, field: str = "gpu_us") -> dict:
    """n, and GB/s of fusec, cuBLAS (None where it did not run) and the best
    other peer with its name, at every n of one sequence and dtype."""
    rows = sorted((r for r in rows if r["script"] == script and r["dtype"] == dtype), key=lambda r: r["n"])
    out = {"n": [], "fusec": [], "plan": [], "cublas": [], "best": [], "best_name": []}
    for r in rows:
        out["n"].append(r["n"])
        out["plan"].append("tuned" if r["fusec"].get("tuned") else "predicted")
        out["fusec"].append(_gbs(r, r["fusec"], field))
        cublas = r["peers"].get("cublas", {})
        out["cublas"].append(_gbs(r, cublas, field) if cublas.get("status") == "ok" else None)
        others = {p: r["peers"][p] for p in OTHERS if r["peers"].get(p, {}).get("status") == "ok"}
        best = min(others, key=lambda p: others[p][field]) if others else None
        out["best"].append(_gbs(r, others[best], field) if best else None)
        out["best_name"].append(best)
    return out


def markdown(report: dict) -> str:
    lines = [f"# Size sweeps on {report['device']}", "",
             f"{report['when']}; `{report['command']}`; median of {report['repeat']} runs after 3 warm-ups;"
             " GB/s on minimum bytes, the GPU's time (JAX's pipelined: see bench/peers.py). Best other peer:"
             " the fastest of PyTorch, torch.compile and JAX at that n.", ""]
    for script in dict.fromkeys(r["script"] for r in report["rows"]):
        for dtype in report["dtypes"]:
            s = series(report["rows"], script, dtype)
            if not s["n"]:
                continue
            bw = report["copy_bandwidth"][dtype] / 1e9
            lines += [f"## {script}, {dtype} (copy bandwidth {bw:.0f} GB/s)", "",
                      "| n | fusec GB/s | fusec's plan | cuBLAS GB/s | best other peer | its GB/s | fusec / cuBLAS"
                      " | fusec / best other |",
                      "|---:|---:|---|---:|---|---:|---:|---:|"]
            for i, n in enumerate(s["n"]):
                f, c, b = s["fusec"][i], s["cublas"][i], s["best"][i]
                best_name = P.LABELS.get(s['best_name'][i], '—')
                lines.append(f"| {n} | {f:.0f} | {s['plan'][i]} | {_num(c)} | {best_name} | {_num(b)} |"
                             f" {_ratio(f, c)} | {_ratio(f, b)} |")
            lines.append("")
    return "\n".join(lines)


def _num(value) -> str:
    return "—" if value is None else f"{value:.0f}"


def _ratio(ours, theirs) -> str:
    return "—" if theirs is None else f"{ours / theirs:.2f}×"


# ---------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------

def plot(report: dict, out: Path, name: str) -> list[Path]:
    """One PNG per sequence; raises ImportError without matplotlib."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    written = []
    dtypes = [d for d in ("float32", "float64") if d in report["dtypes"]]
    for script in dict.fromkeys(r["script"] for r in report["rows"]):
        fig, axes = plt.subplots(2, len(dtypes), figsize=(6 * len(dtypes), 8), squeeze=False, sharex=True)
        for col, dtype in enumerate(dtypes):
            for row, (field, what) in enumerate((("gpu_us", "the GPU's time"),
                                                 ("host_us", "with the host's launching"))):
                _panel(axes[row][col], report, script, dtype, field, f"{script.upper()}, {dtype}: {what}")
        fig.suptitle(f"{script.upper()} on {report['device']}: GB/s on minimum bytes"
                     " (JAX's GPU time is its pipelined time: see bench/peers.py)")
        legend = {}  # one legend for the figure, below the panels, every label once
        for ax in axes.flat:
            for handle, label in zip(*ax.get_legend_handles_labels()):
                legend.setdefault(label, handle)
        fig.legend(legend.values(), legend.keys(), loc="lower center", ncol=4, fontsize=9, frameon=False)
        fig.tight_layout(rect=(0, 0.07, 1, 1))
        path = out / f"{name}-{script}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def _panel(ax, report: dict, script: str, dtype: str, field: str, title: str) -> None:
    s = series(report["rows"], script, dtype, field)
    if not s["n"]:
        ax.set_visible(False)
        return
    ax.plot(s["n"], s["fusec"], "-o", color=COLORS["fusec"], label="fusec", linewidth=2)
    ax.plot(s["n"], [float("nan") if v is None else v for v in s["cublas"]], "-D", color=COLORS["cublas"],
            label="cuBLAS call sequence")
    ax.plot(s["n"], [float("nan") if v is None else v for v in s["best"]], "-", color=COLORS["best"],
            label="best of PyTorch / torch.compile / JAX")
    for peer, marker in MARKERS.items():
        points = [(n, v) for n, v, who in zip(s["n"], s["best"], s["best_name"]) if who == peer]
        if points:
            ax.plot(*zip(*points), marker, color=COLORS["best"], label=f"  best: {P.LABELS[peer]}")
    bw = report["copy_bandwidth"].get(dtype)
    top = max(v for v in s["fusec"] + s["cublas"] + s["best"] + [bw / 1e9 if bw else 0] if v is not None)
    if bw:
        ax.axhline(bw / 1e9, linestyle=":", color="gray", label="copy bandwidth (measured in the run)")
        ax.annotate(f"copy {bw / 1e9:.0f} GB/s", (s["n"][0], bw / 1e9), textcoords="offset points",
                    xytext=(0, 3), fontsize=8, color="gray")
    ax.set_xscale("log", base=2)
    ax.set_xticks(s["n"])
    ax.set_xticklabels([str(n) for n in s["n"]])
    ax.set_xlabel("n (matrix n x n)")
    ax.set_ylabel("GB/s")
    ax.set_ylim(0, top * 1.1)
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)


def write_plots(report: dict, out: Path, name: str) -> bool:
    try:
        paths = plot(report, out, name)
    except ImportError:
        print(f"matplotlib is not installed here: wrote the JSON only; make the PNGs where it is with\n"
              f"    python -m bench.sweeps --plot-only {out / name}.json --out {out}", file=sys.stderr)
        return False
    for path in paths:
        print(f"wrote {path}", file=sys.stderr)
    return True


def merge(paths: list[str]) -> dict:
    """One report of several JSON files (their rows, dtypes and copy bandwidths)."""
    reports = [json.loads(Path(p).read_text(encoding="utf-8")) for p in paths]
    merged = dict(reports[0])
    merged["rows"] = [r for rep in reports for r in rep["rows"]]
    merged["dtypes"] = list(dict.fromkeys(d for rep in reports for d in rep["dtypes"]))
    merged["copy_bandwidth"] = {k: v for rep in reports for k, v in rep["copy_bandwidth"].items()}
    return merged


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------

def tune_point(script: str, dtype: str, n: int, top: int, log=print) -> None:
    """Tune one point as ``fusec tune`` does (n x n matrices), the winner stored in the tuning cache."""
    from fusec.frontend import load_script
    from fusec.tune.search import tune
    library = P._library()
    dag = load_script(P.ROOT / "scripts" / f"{script}.script", library)
    result = tune(dag, library, dtype, P.script_sizes(dag, n, n), top=top, progress=False)
    winner = result.winner
    log(f"{script:8s} {dtype}  n = {n}: tuned, " + (f"{winner.measurement.seconds * 1e6:.1f} us" if winner else
                                                     "no candidate passed (the predictor's plan runs)"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    P.add_common(parser, "bicgk,gemver", "sweep")
    parser.add_argument("--n", default=",".join(map(str, SIZES)), help="matrix sizes (default: %(default)s)")
    parser.add_argument("--plot-only", nargs="+", metavar="JSON", help="make the PNGs (and .md) from JSON files")
    parser.add_argument("--tune", type=int, default=0, metavar="TOP",
                        help="tune every point first, measuring the TOP best-predicted plans (as 'fusec tune"
                             " --top TOP'); the winners go into the tuning cache (default 0: use the cache)")
    args = parser.parse_args(argv)
    if args.tune < 0:
        parser.error(f"--tune {args.tune}: the number of plans to measure, 0 (off) or more")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.plot_only:
        report = merge(args.plot_only)
        name = args.name or Path(args.plot_only[0]).stem
        (out / f"{name}.md").write_text(markdown(report), encoding="utf-8")
        return 0 if write_plots(report, out, name) else 1
    scripts, peer_names = P.check_args(parser, args)
    try:
        ns = [int(x) for x in args.n.split(",") if x]
    except ValueError:
        parser.error(f"--n {args.n!r}: expected whole numbers separated by commas")
    if not ns or min(ns) < 1:
        parser.error("--n: sizes must be at least 1")

    import cupy

    from bench.fusion import copy_bandwidth
    peers = P.start(cupy, peer_names)
    device = P.device_name(cupy)
    name = args.name or P.default_name(device, "sweep")
    report = {"device": device, "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "command": P.command_line("bench.sweeps", argv), "repeat": args.repeat,
              "dtypes": P.dtypes_of(args.dtype), "copy_bandwidth": {}, "peers": P.peer_info(peers), "rows": []}
    log = functools.partial(print, file=sys.stderr, flush=True)
    # Every precision's copy bandwidth first, before the sweep's arrays and the peers' caches fill
    # the GPU's memory: measured after the float32 sweep it came out 12-14 % lower in two runs
    # (2585 and 2626 GB/s against 3011), while cuBLAS's times did not move.
    for dtype in report["dtypes"]:
        report["copy_bandwidth"][dtype] = copy_bandwidth(cupy)
    for dtype in report["dtypes"]:
        bandwidth = report["copy_bandwidth"][dtype]
        for script in scripts:
            for n in ns:
                if args.tune:
                    tune_point(script, dtype, n, args.tune, log)
                report["rows"].append(P.measure(script, dtype, n, n, peers, args.repeat, cupy, bandwidth, log=log))
                (out / f"{name}.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    (out / f"{name}.md").write_text(markdown(report), encoding="utf-8")
    print(markdown(report))
    write_plots(report, out, name)
    wrong = [r for r in report["rows"] for p in r["peers"].values() if p["status"] == "wrong"]
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
