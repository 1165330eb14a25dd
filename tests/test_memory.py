"""fl_privtext.memory: with the threshold pinned, freed arrays of a few MiB go back to the OS; without, they stay."""

import subprocess
import sys

import pytest

SCRIPT = """
import sys
import numpy as np
from fl_privtext.memory import return_freed_arrays
if sys.argv[1] == "pin":
    assert return_freed_arrays()
def rss_kib():
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS")).split()[1])
big = np.ones(8 << 20, np.uint8)
del big  # a freed 8 MiB mapping: glibc (unpinned) raises its threshold above the arrays below
arrays, small = [], []
for _ in range(32):
    arrays.append(np.ones(4 << 20, np.uint8))
    small.append(np.ones(4096, np.uint8))  # small blocks between them keep the heap from shrinking at its top
before = rss_kib()
del arrays
print(before - rss_kib())
"""


def _returned_mib(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True)
    return int(out.stdout.strip()) / 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator (Linux)")
def test_pinned_threshold_returns_freed_arrays() -> None:
    pinned, default = _returned_mib("pin"), _returned_mib("default")
    if default > 100:  # not glibc (or a glibc that returns them anyway): nothing to show
        pytest.skip(f"this C library returned {default:.0f} MiB without the setting")
    assert pinned > 100  # of the 128 MiB freed


def test_memory_budget_refuses_a_run_its_estimate_exceeds_in_one_line() -> None:
    """run.memory-gb (issue #38): the calibrated estimate grows with records and width; a budget below it is refused
    with one line naming the estimate and the fix, a budget above it passes and is returned, 0 reads the machine."""
    from fl_privtext.memory import check_memory_budget, estimate_peak_gb, machine_memory_gb

    small, big = estimate_peak_gb(10_000, 50, 2), estimate_peak_gb(10_000_000, 50, 2)
    assert small < 2.5 and big > 8  # the base alone, vs ten million records of GloVe's width
    assert estimate_peak_gb(10_000, 384, 2) > small  # wider representations cost more
    assert check_memory_budget(4.0, 10_000, 50, 2) == 4.0
    with pytest.raises(ValueError) as exc:
        check_memory_budget(4.0, 10_000_000, 50, 2)
    msg = str(exc.value)
    assert "\n" not in msg and f"{big:.1f} GB" in msg and "run.memory-gb = 4" in msg
    assert check_memory_budget(0, 1_000, 50, 1) == pytest.approx(machine_memory_gb(), rel=0.5)


def test_memory_budget_is_a_config_key_checked_at_parse() -> None:
    from fl_privtext.config import ExperimentConfig

    assert ExperimentConfig.from_flat({"run.memory-gb": 3}).run.memory_gb == 3
    for bad in (-1, float("inf")):
        with pytest.raises(ValueError, match="run.memory-gb must be a finite number >= 0"):
            ExperimentConfig.from_flat({"run.memory-gb": bad})


def test_a_run_over_its_budget_stops_before_ray_starts(tmp_path) -> None:
    """The runner's validation (before extraction and Ray) applies the budget to the real data's record count."""
    import ray

    from fl_privtext.config import ExperimentConfig
    from fl_privtext.pipeline.runner import run_experiment

    cfg = ExperimentConfig.from_flat({"run.memory-gb": 0.1, "run.progress": False, "run.output": str(tmp_path / "r"),
                                      "extractor.cache-dir": str(tmp_path / "cache")})
    with pytest.raises(ValueError, match=r"needs about \d+\.\d GB at its peak \([\d,]+ records of 50 dimensions"):
        run_experiment(cfg, echo=False)
    assert not ray.is_initialized() and not (tmp_path / "cache").exists()
