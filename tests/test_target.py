"""GpuTarget: the GPU as a value, and what its figures change (no GPU needed)."""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from fusec.cost.analytic import AnalyticPredictor
from fusec.cost.model import natural_blocks
from fusec.errors import ArgumentError
from fusec.families import build_kernel
from fusec.families.held import registers_allowed, shared_allowed
from fusec.families.horizontal import register_bound
from fusec.lower.kernel import keep_l2_bytes
from fusec.space.combinations import build_space
from fusec.space.implementations import band_shapes
from fusec.target import GpuTarget, UnknownGpuWarning, by_name, from_record, known, reference, resolve
from tests.helpers import ROOT, library, tile_program

H100, A100, L40S, H200 = (by_name(n) for n in ("h100", "a100", "l40s", "h200"))


def dag_of(script: str):
    from fusec.frontend import load_script
    return load_script(ROOT / "scripts" / f"{script}.script", library())


def test_the_reference_gpu_is_the_h100_with_the_figures_fusec_was_built_around():
    """The H100's entry holds what the modules used to hard-code (sm_90, 228 KB of
    shared memory per SM, 227 KB per block, 50 MB of L2, 132 SMs)."""
    assert reference() == H100 and H100.slug == "h100-80gb-hbm3"
    assert (H100.sms, H100.threads_per_sm, H100.registers_per_sm) == (132, 2048, 65536)
    assert (H100.shared_per_sm, H100.shared_per_block, H100.l2_bytes) == (228 * 1024, 227 * 1024, 50 * 2 ** 20)
    assert H100.compute_capability == "9.0" and H100.threads_per_block == 1024


def test_every_known_gpu_has_sane_figures():
    for slug, gpu in known().items():
        assert gpu.slug.startswith(slug) or slug.startswith(gpu.slug.split("-")[0]), slug
        assert gpu.shared_per_block <= gpu.shared_per_sm and gpu.threads_per_block <= gpu.threads_per_sm
        assert 1e11 < gpu.copy_bandwidth < 1e14 and gpu.bandwidth_source in ("measured", "fitted", "estimated")


def test_a_name_finds_its_gpu_by_prefix_and_an_unknown_name_is_an_argument_error(monkeypatch):
    monkeypatch.delenv("FUSEC_GPU", raising=False)
    assert resolve("h100") == H100 and resolve("NVIDIA H200") == H200 and resolve("a100") == A100
    with pytest.raises(ArgumentError) as error:
        resolve("nosuchgpu")
    assert error.value.argument == "gpu" and "h100-80gb-hbm3" in str(error.value)
    monkeypatch.setenv("FUSEC_GPU", "l40s")
    assert resolve() == L40S


def test_a_database_record_gives_its_target():
    """A record with the figures fusec measured gives them; an older one (name and SMs
    only) gives the known model's with its SM count; a model fusec does not know gets
    its own SM count on the reference's figures, with one warning."""
    recorded = dataclasses.replace(H100, sms=114, name="NVIDIA H100 PCIe")
    assert from_record({"name": "NVIDIA H100 PCIe", "sms": 114, "target": dataclasses.asdict(recorded)}) == recorded
    assert from_record({"name": "NVIDIA H100 80GB HBM3", "sms": 130}) == H100.with_sms(130)
    broken = dict(dataclasses.asdict(H100), l2_bytes="fifty")
    assert from_record({"name": "NVIDIA H100 80GB HBM3", "sms": 132, "target": broken}) == H100
    with pytest.warns(UnknownGpuWarning, match="Quadro Z"):
        other = from_record({"name": "NVIDIA Quadro Z", "sms": 40})
    assert other.sms == 40 and other.name == "NVIDIA Quadro Z"


def test_occupancy_follows_the_target():
    """1024-thread blocks: two per H100 SM, one per L40S SM (1536 threads)."""
    assert natural_blocks(32, 0, 1024, H100) == 2 and natural_blocks(32, 0, 1024, L40S) == 1
    assert natural_blocks(32, 100_000, 128, H100) == 2 and natural_blocks(32, 100_000, 128, A100) == 1
    assert shared_allowed(1, A100) < shared_allowed(1, H100) == 227 * 1024
    assert registers_allowed(512, 2, H100) == registers_allowed(512, 2, A100) == 64


def test_a_turning_kernel_leaves_l2_its_share_of_the_targets_l2():
    """keep_blocks: 0.4 of L2, so the H200's 60 MB keep more blocks than the H100's 50
    and the A100's 40 fewer."""
    kernels = {gpu.slug: tile_program("bicgk", "float32").kernels[0] for gpu in (H100,)}
    plan = kernels[H100.slug].plan
    dag = dag_of("bicgk")
    keep = {gpu.slug: build_kernel(dag, library(), plan, "float32", 0, alone=True, target=gpu).keep_blocks
            for gpu in (A100, H100, H200)}
    assert keep[A100.slug] < keep[H100.slug] < keep[H200.slug]
    assert keep[H100.slug] == kernels[H100.slug].keep_blocks  # the reference is the default
    assert keep_l2_bytes(H200) == int(0.4 * 60 * 2 ** 20)


def test_the_space_takes_its_sms_and_limits_from_the_predictors_target():
    """Band shapes are sized to fill the SMs in waves; a held fusion's blocks must all be
    resident. On a GPU of 108 SMs and 40 MB of L2 the space differs where it should."""
    assert band_shapes(16384, 16384, "float32", H100.sms) != band_shapes(16384, 16384, "float32", A100.sms)
    dag = dag_of("gemver")
    sizes = {s: 4096 for s in dag.sizes}
    spaces = {gpu.slug: build_space(dag, library(), "float32", sizes, AnalyticPredictor(target=gpu))
              for gpu in (H100, A100)}
    held = {slug: {plan for options in space.options.values() for plan, _, _ in options if plan.family == "held"}
            for slug, space in spaces.items()}
    # an A100 SM gives its blocks 164 KB of shared memory, an H100's 228: fewer tiles held there
    assert max(p.shared for p in held[A100.slug]) < max(p.shared for p in held[H100.slug])
    assert len(held[A100.slug]) < len(held[H100.slug])
    best = {slug: space.best() for slug, space in spaces.items()}
    assert best[A100.slug].predicted > best[H100.slug].predicted  # 1.8 TB/s against 2.9


def test_hfuse_register_bound_follows_the_targets_threads():
    """Two parts of 256 threads at 64 registers: 4 blocks per H100 SM (2048 threads),
    so 65536 / (4 x 512) = 32 registers; 3 per L40S SM (1536 threads), so 40."""
    kernel = tile_program("bicgk", "float32").kernels[0]
    assert kernel.block == 256
    assert register_bound((kernel, kernel), (64, 64), H100) == 32
    assert register_bound((kernel, kernel), (64, 64), L40S) == 40


def test_an_unknown_gpu_named_is_refused_by_compile(monkeypatch):
    import fusec
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ArgumentError) as error:
            fusec.compile(ROOT / "scripts" / "bicgk.script", library(), "float32", gpu="nosuchgpu")
    assert error.value.argument == "gpu"



@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_gpu_name_is_refused_by_compile(empty, monkeypatch):
    """gpu="" is a mistake, not "the GPU present" (None says that), as --gpu "" is at the
    command line; it was taken for None."""
    import fusec
    monkeypatch.delenv("FUSEC_GPU", raising=False)
    with pytest.raises(ArgumentError) as error:
        fusec.compile(ROOT / "scripts" / "bicgk.script", library(), "float32", gpu=empty)
    assert error.value.argument == "gpu" and "is empty" in str(error.value)

def test_gpu_target_is_frozen_and_hashable():
    assert {H100: 1}[by_name("h100-80gb-hbm3")] == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        H100.sms = 1  # type: ignore[misc]
    assert isinstance(H100, GpuTarget)
