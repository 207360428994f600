"""What fusec ships besides its code: the BLAS library with its tuned plans, the performance
databases (with their fitted corrections and the plan timings those were fitted to), the
solvers' iteration scripts, and the figures of the GPUs it knows by name. Read through
importlib.resources, so an installed wheel finds them as a source checkout does."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

ROOT = Path(str(resources.files(__name__)))
LIBRARY = ROOT / "blas"  # the bundled library (its shipped plans in tunings/)
PERFDB = ROOT / "perfdb"  # the performance databases, one per GPU; their fitted corrections in corrections/
TRAINING = ROOT / "training"  # measured plan times per GPU, what the corrections are fitted to
SOLVERS = ROOT / "solvers"  # one iteration of each solver of fusec.solvers, a script each
