"""Library code draws randomness only from explicit generators (style.md #13), in every package, not just privacy."""

import re
from pathlib import Path

import fl_privtext

PACKAGE = Path(fl_privtext.__file__).resolve().parent
FORBIDDEN = [
    re.compile(r"np\.random\.(?!Generator\b|PCG64\b|SeedSequence\b)\w+"),
    re.compile(r"^\s*(import random|from random import)", re.MULTILINE),
    re.compile(r"torch\.(manual_seed|seed|rand|randn|randint|randperm|normal|bernoulli)\((?!.*generator=)"),
    re.compile(r"\bdefault_rng\("),
    re.compile(r"nn\.Dropout\("),  # draws its masks from the global RNG
]


def test_no_global_rng_anywhere_in_the_package():
    files = [p for p in PACKAGE.rglob("*.py") if "default" not in p.parts]  # the data generator script is not library code
    assert len(files) > 30
    offenders = [
        f"{p.relative_to(PACKAGE)}: {m.group(0)!r}"
        for p in files
        for pat in FORBIDDEN
        for m in pat.finditer(p.read_text())
    ]
    assert not offenders, offenders
