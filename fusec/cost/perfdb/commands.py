"""``fusec perfdb build`` and ``fusec perfdb show`` (wired in :mod:`fusec.cli`)."""

from __future__ import annotations

import collections
from pathlib import Path

from ...errors import FusecError
from . import store


def build_command(args) -> int:
    from ...api import resolve_library
    from .build import build
    library = resolve_library(args.library)
    dtypes = ("float32", "float64") if args.dtype == "both" else (args.dtype,)
    missing = args.missing
    database, path = build(library, dtypes, Path(args.output) if args.output else None,
                           progress=not args.quiet, missing=missing)
    what = "holds" if missing else "timed"
    print(f"{what} {len(database.timings)} routine keys of library {library.name!r} on"
          f" {database.device['name']} ({', '.join(dtypes)}); launch {database.launch * 1e6:.1f} us")
    print(f"wrote {path}")
    return 0


def show_command(args) -> int:
    from ...target import chosen_slug
    folder = Path(args.dir) if args.dir else None
    wanted = chosen_slug(args.gpu)
    if wanted is None:
        raise FusecError("no GPU here: name one with --gpu (e.g. --gpu h100)")
    path = store.find(wanted, folder)
    if path is None:
        raise FusecError(f"no performance database for {wanted!r} in {folder or store.directory()}")
    database = store.load(path)
    if database is None:
        return 1
    device = database.device
    print(f"{path}")
    print(f"device   {device['name']}, {device['sms']} SMs, compute capability"
          f" {device.get('compute_capability', '?')}, driver {device.get('cuda_driver', '?')},"
          f" {device.get('nvcc', '?')}")
    print(f"library  {database.library.get('name')} (hash {database.library.get('hash')})")
    print(f"built    {database.built} by fusec {database.fusec}; launch {database.launch * 1e6:.2f} us")
    counts = collections.Counter((t.key.dtype, t.key.geometry) for t in database.timings.values())
    print("routine keys  " + ", ".join(f"{d} {g}: {n}" for (d, g), n in sorted(counts.items())))
    if args.routine:
        names = sorted({t.key.routine for t in database.timings.values()})
        if args.routine not in names:
            raise FusecError(f"--routine {args.routine!r}: {path.name} timed no such routine"
                             f" (it has: {', '.join(names)})")
        print()
        print(f"{'routine':<20} {'section':<5} {'dtype':<8} {'shape':<22} {'blocks/SM: us per block-iteration'}")
        for timing in sorted(database.timings.values(), key=lambda t: t.key):
            key = timing.key
            if key.routine != args.routine:
                continue
            shape = f"{key.block}t,{key.iters}it" + (f",{key.tile_rows}r,{key.serial}" if key.serial else "")
            levels = "  ".join(f"{b}:{s * 1e6:.3f}" for b, s in sorted(timing.seconds.items()))
            print(f"{key.routine:<20} {key.section:<5} {key.dtype:<8} {shape:<22} {levels}")
    return 0
