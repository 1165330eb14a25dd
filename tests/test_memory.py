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
