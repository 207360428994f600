"""The performance database without a GPU: probes, the file format, prediction."""

from __future__ import annotations

import dataclasses
import json
import re
import warnings

import pytest

from fusec.cost import perfdb
from fusec.cost.analytic import DEFAULT
from fusec.cost.model import natural_blocks
from fusec.cost.perfdb import probes as P
from fusec.cost.perfdb import store
from fusec.cost.perfdb.build import limiting_shared, problem_sizes
from fusec.cost.perfdb.model import PerfdbPredictor
from fusec.emit.kernel import emit_kernel
from fusec.errors import FusecWarning
from fusec.families import build_kernel
from fusec.frontend import load_script
from fusec.space import unfused_plan
from fusec.space.combinations import build_space
from fusec.space.held import HELD_SHAPES
from fusec.space.implementations import TILE_SHAPES
from fusec.target import by_name
from tests.helpers import ROOT, library
from tests.library_scripts import TRIANGLE_FUNCTIONS

H100 = by_name("h100")


@pytest.fixture(scope="module")
def found():
    return P.probes(library())


def fake_database(found, *, load=1e-6, compute=2e-7, skip=lambda key: False) -> store.Database:
    """Every probe measured: transfers `load`, computes `compute` s per block-iteration."""
    timings = {}
    for probe in found:
        if skip(probe.key):
            continue
        base = compute if probe.kind == "compute" else load
        # more blocks per SM share the memory system: each block gets slower
        timings[probe.key] = store.Timing(probe.key, probe.kind, {1: base, 2: base * 1.6, 4: base * 3.0},
                                          40, 4)
    fake = dataclasses.asdict(dataclasses.replace(H100, name="NVIDIA Fake 1"))  # recorded as a build records it
    return store.Database({"name": "NVIDIA Fake 1", "slug": "fake-1", "sms": 132, "target": fake}, {
        "name": library().name, "hash": library().content_hash}, "0", "today", 3e-6,
        {"waves": 6}, timings, "fake.json")


# ------------------------------------------------------------------ probes

@pytest.mark.slow
def test_every_routine_of_every_function_is_probed(found):
    """Each routine a single-call kernel runs has a probe, in every searched shape."""
    keys = {p.key for p in found}
    lib = library()
    names = {r.name for f in lib.functions.values() for i in f.implementations
             for r in (*i.loads, i.compute, i.store) if i.geometry is None}  # band ones: predicted from bytes
    assert {k.routine for k in keys} == names
    for dtype in ("float32", "float64"):
        tile_load = {(k.block, k.iters, k.tile_rows, k.serial) for k in keys
                     if k.routine == "tile_load" and k.dtype == dtype}
        assert len(tile_load) == len(P.PROBED_TILE_SHAPES) * 2  # every tile shape, both serial axes
        held = {(s.block, s.iters, s.tile_rows) for s in HELD_SHAPES}
        assert held <= {(b, i, r) for b, i, r, _ in tile_load}  # held fusions' wide tiles too
    assert set(TILE_SHAPES) <= set(P.PROBED_TILE_SHAPES)
    assert len({p.kernel.name for p in found}) == len(found)


def test_probe_keeps_only_its_routine(found):
    probe = next(p for p in found if p.key.routine == "gemv_compute" and p.key.serial == "rows")
    body = emit_kernel(probe.kernel, probe.dag, library(), probe=True).split("extern \"C\"", 1)[1]
    assert "gemv_compute(" in body
    assert "tile_load(" not in body and "cols_load(" not in body and "rows_partial_store(" not in body
    assert "fusec_arrive" not in body  # no finish
    assert "+= fusec_sink" in body and "g_v2_y[0] = fusec_sink" in body


def test_single_call_dag_of_a_scalar_reduction():
    dag = P.single_call_dag(library(), library().functions["sdot"])
    assert [c.function for c in dag.calls] == ["sdot"]
    assert [dag.value(v).name for v in dag.outputs] == ["r"]


@pytest.mark.nvcc
def test_probe_modules_compile(found):
    """Every probe module compiles for sm_90 without spills."""
    from fusec import nvcc
    sources = [s for s, _ in P.modules(library(), found)]
    for compiled in nvcc.compile_many(sources, "sm_90"):
        assert compiled.resources
        assert all(r.spill_stores == 0 for r in compiled.resources.values())


def test_occupancy_arithmetic():
    assert natural_blocks(32, 0, 256, H100) == 8
    assert natural_blocks(64, 0, 256, H100) == 4
    assert natural_blocks(80, 0, 256, H100) == 3  # 80 regs x 32 = 2560 per warp; 65536 / (2560 x 8)
    assert natural_blocks(32, 100_000, 128, H100) == 2  # shared memory limits
    for blocks in (1, 2, 3, 4, 6, 8):
        extra = limiting_shared(blocks, 4096, H100)
        per_block = extra + 4096 + 1024
        assert 233472 // per_block == blocks


def test_problem_sizes_give_several_waves(found):
    for probe in found:
        if probe.key.dtype != "float32":
            continue
        sizes = problem_sizes(probe, 8, 132)
        assert probe.kernel.grid(sizes) >= 6 * 132 * 8


def test_every_probe_fits_the_smallest_gpu_it_is_built_on(found):
    """A probe's arrays at the most blocks per SM its threads allow stay within 20 GiB (the H100
    has 80 GB): a square matrix's one size grows both axes, so it is stretched by the square
    root of what the grid lacks. Stretched as the others, the triangle's probes asked for 2.4 TB
    and 'fusec perfdb build --missing' died of cuMemAlloc on an H200."""
    import math
    for probe in found:
        if probe.key.dtype != "float64":
            continue
        kernel = probe.kernel
        most = H100.threads_per_sm // kernel.plan.shape.block
        sizes = problem_sizes(probe, most, H100.sms)
        arrays = {arg.value for arg in kernel.args if arg.role in ("in", "out")}
        nbytes = sum(math.prod(sizes[d] for d in probe.dag.value(v).dims) * 8 for v in arrays
                     if probe.dag.value(v).dims)
        assert nbytes <= 20 * 2**30, (probe.key, sizes, nbytes)
        assert kernel.grid(sizes) >= 6 * H100.sms * most or sizes == dict(probe.sizes), probe.key


# ------------------------------------------------------------------ the file

def test_round_trip(tmp_path, found):
    db = fake_database(found)
    path = tmp_path / "fake-1.json"
    store.save(db, path)
    again = store.load(path, library())
    assert again.timings == db.timings and again.launch == db.launch and again.sms == 132
    assert json.loads(path.read_text())["library"]["hash"] == library().content_hash


@pytest.mark.parametrize("damage", [
    lambda t: t[: len(t) // 2],  # truncated
    lambda t: "",
    lambda t: t.replace('"format": 1', '"format": 99'),
    lambda t: re.sub(r'("seconds": \{\s*"1": )[0-9.e-]+', r'\1-1', t, count=1),  # a negative time
    lambda t: json.dumps([1, 2]),
])
def test_damaged_file_is_reported_and_not_used(tmp_path, found, damage):
    path = tmp_path / "fake-1.json"
    store.save(fake_database(found), path)
    path.write_text(damage(path.read_text()))
    with pytest.warns(store.PerfdbWarning, match="damaged"):
        assert store.load(path, library()) is None


def test_stale_library_hash_is_reported_and_not_used(tmp_path, found):
    path = tmp_path / "fake-1.json"
    db = fake_database(found)
    store.save(store.Database(db.device, {"name": "blas", "hash": "0123"}, db.fusec, db.built, db.launch,
                              db.bench_sizes, db.timings), path)
    with pytest.warns(store.PerfdbWarning, match="not used"):
        assert store.load(path, library()) is None


def _recording(db, files):
    return store.Database(db.device, {"name": "blas", "hash": "0123", "files": files}, db.fusec, db.built,
                          db.launch, db.bench_sizes, db.timings)


def test_a_library_that_only_gained_files_keeps_its_database(tmp_path, found):
    """A database records the hash of each file it timed: a library that has every one of
    them unchanged (and a new function besides) is the version timed; one changed file,
    or one the library no longer has, and the database is not used."""
    path = tmp_path / "fake-1.json"
    files = dict(library().files)
    new = next(name for name in sorted(files) if name.endswith(".cu"))  # a function the database did not time
    gained = {k: v for k, v in files.items() if k != new}
    store.save(_recording(fake_database(found), gained), path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kept = store.load(path, library())
    assert kept is not None and kept.library["files"] == gained
    for changed in ({**gained, "vector.cuh": "0" * 16}, {**gained, "gone.cu": "0" * 16}, {}):
        store.save(_recording(fake_database(found), changed), path)
        with pytest.warns(store.PerfdbWarning, match="not used"):
            assert store.load(path, library()) is None


def test_library_files_must_be_text(tmp_path, found):
    path = tmp_path / "fake-1.json"
    store.save(_recording(fake_database(found), {"vector.cuh": 7}), path)
    with pytest.warns(store.PerfdbWarning, match="damaged.*library file vector.cuh"):
        assert store.load(path, library()) is None


@pytest.mark.parametrize("value", ["h100-80gb-hbm3/../../../victim", "../victim", "H100 80GB", ""])
def test_a_device_slug_that_is_no_slug_is_damaged_and_nothing_is_written_by_it(tmp_path, monkeypatch, capsys,
                                                                               value):
    """A database's slug names the files beside it (corrections/<slug>.json, the training file):
    "h100-80gb-hbm3/../../../victim" made `fusec perfdb fit` replace a file outside the folder."""
    from fusec import data
    from fusec.cli import main
    folder = tmp_path / "perfdb"
    folder.mkdir()
    path = folder / "h100-80gb-hbm3.json"
    raw = json.loads((data.PERFDB / "h100-80gb-hbm3.json").read_text())
    raw["device"]["slug"] = value
    path.write_text(json.dumps(raw))
    with pytest.warns(store.PerfdbWarning, match=rf"performance database {re.escape(str(path))} is damaged"
                                                 r" \(device slug"):
        assert store.load(path, library()) is None
    victim = tmp_path / "victim.json"
    victim.write_text("a file of the user's")
    monkeypatch.setenv("FUSEC_PERFDB", str(folder))
    training = data.TRAINING / "h100-80gb-hbm3.json"
    assert main(["perfdb", "fit", "--gpu", "h100", "--training", str(training)]) == 1
    assert "is damaged (device slug" in capsys.readouterr().err
    assert victim.read_text() == "a file of the user's" and not (folder / "corrections").exists()


def test_find_by_prefix(tmp_path, found):
    store.save(fake_database(found), tmp_path / "h100-80gb-hbm3.json")
    assert store.find("h100", tmp_path).name == "h100-80gb-hbm3.json"
    assert store.find("NVIDIA H100 80GB HBM3", tmp_path).name == "h100-80gb-hbm3.json"
    assert store.find("a100", tmp_path) is None


def test_predictor_for_falls_back_with_a_warning(tmp_path, monkeypatch, found):
    monkeypatch.setenv("FUSEC_PERFDB", str(tmp_path))
    monkeypatch.delenv("FUSEC_GPU", raising=False)
    with pytest.warns(store.PerfdbWarning, match="no performance database"):
        assert perfdb.predictor_for(library(), "h100") == DEFAULT  # the analytic model of the H100
    store.save(fake_database(found), tmp_path / "h100-80gb-hbm3.json")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        predictor = perfdb.predictor_for(library(), "h100")
    assert isinstance(predictor, PerfdbPredictor)
    monkeypatch.setenv("FUSEC_GPU", "h100")
    assert isinstance(perfdb.predictor_for(library()), PerfdbPredictor)


# ------------------------------------------------------------------ prediction

def kernel_of(script, plan_index=0, dtype="float32"):
    dag = load_script(ROOT / "scripts" / f"{script}.script", library())
    plan = unfused_plan(dag, library())
    return dag, build_kernel(dag, library(), plan.kernels[plan_index], dtype, 0)


def test_prediction_is_max_of_transfers_and_compute(found):
    dag, kernel = kernel_of("sgemv")
    sizes = {s: 16384 for s in dag.sizes}
    slow_compute = PerfdbPredictor(fake_database(found, load=1e-6, compute=5e-6), library())
    fast_compute = PerfdbPredictor(fake_database(found, load=1e-6, compute=1e-9), library())
    blocks = min(DEFAULT.blocks_per_sm(kernel), 4)
    transfer, compute, _ = slow_compute.routine_seconds(kernel, dag, blocks)
    assert compute > transfer
    assert slow_compute.kernel_seconds(kernel, dag, sizes) > fast_compute.kernel_seconds(kernel, dag, sizes)
    t, c, _ = fast_compute.routine_seconds(kernel, dag, blocks)
    assert t > c


def test_prediction_scales_with_the_problem(found):
    dag, kernel = kernel_of("sgemv")
    predictor = PerfdbPredictor(fake_database(found), library())
    small = predictor.kernel_seconds(kernel, dag, {s: 8192 for s in dag.sizes})
    big = predictor.kernel_seconds(kernel, dag, {s: 16384 for s in dag.sizes})
    assert 3.2 < (big - 3e-6) / (small - 3e-6) < 4.5  # four times the work, less the ragged end


def test_fused_bicgk_predicted_first(found):
    """A loaded once beats A loaded twice."""
    dag = load_script(ROOT / "scripts" / "bicgk.script", library())
    space = build_space(dag, library(), "float32", {s: 8192 for s in dag.sizes},
                        PerfdbPredictor(fake_database(found), library()))
    assert len(space.best().plan.kernels) == 1


def test_unmeasured_shape_falls_back_to_the_analytic_model(found):
    dag, kernel = kernel_of("sgemv")
    predictor = PerfdbPredictor(fake_database(found, skip=lambda k: k.routine == "tile_load"), library())
    with pytest.warns(FusecWarning, match="no timings"):
        seconds = predictor.kernel_seconds(kernel, dag, {s: 8192 for s in dag.sizes})
    assert seconds == DEFAULT.kernel_seconds(kernel, dag, {s: 8192 for s in dag.sizes})


# ------------------------------------------------------------------ the command line

def test_cli_show(tmp_path, found, capsys):
    from fusec.cli import main
    store.save(fake_database(found), tmp_path / "h100-80gb-hbm3.json")
    assert main(["perfdb", "show", "--gpu", "h100", "--dir", str(tmp_path), "--routine", "tile_load"]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA Fake 1, 132 SMs" in out and library().content_hash in out
    assert out.count("tile_load ") == len(P.PROBED_TILE_SHAPES) * 2 * 2  # every shape, both axes and precisions
    assert main(["perfdb", "show", "--gpu", "a100", "--dir", str(tmp_path)]) == 1
    assert "no performance database for 'a100'" in capsys.readouterr().err
    assert main(["perfdb", "show", "--gpu", "h100", "--dir", str(tmp_path), "--routine", "tile_lod"]) == 1
    err = capsys.readouterr().err
    assert "--routine 'tile_lod'" in err and "tile_load" in err


def test_cli_build_needs_a_gpu(capsys):
    from fusec.cli import main
    from fusec.target import present
    if present() is not None:
        pytest.skip("a GPU is present")
    assert main(["perfdb", "build", "-q"]) == 1
    assert "needs PyCUDA and an NVIDIA GPU" in capsys.readouterr().err


@pytest.mark.parametrize("stale", [False, True])
@pytest.mark.slow
def test_build_missing_refuses_without_a_usable_database(tmp_path, monkeypatch, found, stale):
    """--missing keeps a database's timings: there must be one, of this library."""
    from fusec.cost.perfdb import build as B
    from fusec.errors import FusecError
    from fusec.target import GpuInfo
    monkeypatch.setattr(B, "present", lambda: GpuInfo("NVIDIA Fake 1", 132, "9.0", "13.0"))
    monkeypatch.setattr(B, "from_device", lambda: dataclasses.replace(H100, name="NVIDIA Fake 1"))
    if stale:
        db = fake_database(found)
        store.save(store.Database(db.device, {"name": "blas", "hash": "0123"}, db.fusec, db.built,
                                  db.launch, db.bench_sizes, db.timings), tmp_path / "fake-1.json")
    with pytest.raises(FusecError, match=r"--missing: .*fake-1\.json is not a usable database"):
        B.build(library(), ("float32",), tmp_path, progress=False, missing=True)


def test_cli_build_help_names_missing(capsys):
    from fusec.cli import main
    with pytest.raises(SystemExit):
        main(["perfdb", "build", "--help"])
    assert "--missing" in capsys.readouterr().out


def test_saved_database_is_readable_by_others(tmp_path, found):
    """Atomic writes go through mkstemp (0600); the result gets the usual umask bits."""
    import os
    store.save(fake_database(found), tmp_path / "x.json")
    mode = (tmp_path / "x.json").stat().st_mode & 0o777
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask


@pytest.mark.slow
def test_routine_orders_the_model_cannot_tell_apart_tie_and_fewest_load_phases_go_first(found):
    """GEMVER's fused first kernel, with its loads in one phase or three: the same routines,
    so the same prediction to the last bit (sums in another order used to differ in it, and
    the three-phase order, 1-5 % slower on the H100, came first)."""
    import dataclasses
    import random

    from fusec.ir.plan import KernelPlan
    from fusec.space.implementations import load_phases
    draw = random.Random(5)
    base = fake_database(found)
    timings = {key: dataclasses.replace(t, seconds={b: s * draw.uniform(0.5, 2.0) for b, s in t.seconds.items()})
               for key, t in base.timings.items()}
    predictor = PerfdbPredictor(dataclasses.replace(base, timings=timings), library())
    dag = load_script(ROOT / "scripts" / "gemver.script", library())
    space = build_space(dag, library(), "float32", {s: 16384 for s in dag.sizes}, predictor, held=False)
    tied = 0
    for options in space.options.values():
        plans = [o for o in options if isinstance(o[0], KernelPlan)]
        by_rest = {}
        for plan, _, seconds in plans:
            by_rest.setdefault(dataclasses.replace(plan, steps=()), []).append((seconds, load_phases(plan)))
        for group in by_rest.values():
            times = sorted({s for s, _ in group})
            assert all(b - a > 1e-9 * b for a, b in zip(times, times[1:]))  # a tie is exact or none
            if len({p for _, p in group}) > 1 and len(times) == 1:
                tied += 1
        for (_, _, s1), (p2, _, s2), (p1, _, _) in zip(options, options[1:], options):
            if s1 == s2:
                assert sum(load_phases(p) for p in getattr(p1, "parts", (p1,))) <= \
                    sum(load_phases(p) for p in getattr(p2, "parts", (p2,)))
    assert tied > 0


@pytest.mark.parametrize("path", sorted(store.BUNDLED.glob("*.json")), ids=lambda p: p.stem)
def test_every_bundled_database_is_whole_for_the_bundled_library(path, found):
    """Each GPU's database (the H100's, the H200's) loads for the library as it is with no
    warning, times every routine key the space can ask for in both precisions, and keeps
    the GPU's figures it was built on (the H200's with the copy bandwidth it measured).
    The triangle part's functions (TRIANGLE_FUNCTIONS) came after both were built: their
    probes, and only those, a database may lack until `fusec perfdb build --missing` runs on
    its GPU."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        database = store.load(path, library())
    assert database is not None and database.slug == path.stem
    lacking = [p for p in found if p.key not in database.timings]
    assert {p.function for p in lacking} <= set(TRIANGLE_FUNCTIONS)
    target = database.device["target"]
    known = by_name(database.device["name"])
    assert known is not None and target["sms"] == known.sms and target["l2_bytes"] == known.l2_bytes
    assert target["bandwidth_source"] in ("measured", "fitted")
