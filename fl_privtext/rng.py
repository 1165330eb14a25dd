"""Seed derivation: one logged root seed, one independent stream per (stage, ...) key.

No library code uses a global RNG; every random function takes a ``numpy.random.Generator``
(or ``torch.Generator``) built here from the root seed and a key naming its purpose.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # torch is imported where a torch Generator is built: clients never need it
    import torch


def _key_words(keys: tuple[object, ...]) -> list[int]:
    # Stable across processes and Python versions (unlike hash()): sha256 of the repr of each key.
    words: list[int] = []
    for k in keys:
        digest = hashlib.sha256(repr(k).encode()).digest()
        words.append(int.from_bytes(digest[:4], "little"))
    return words


def derive_seed(root: int, *keys: object) -> int:
    """A 63-bit seed for the stream named by ``keys`` under ``root`` (e.g. ``("privatize", round, user)``)."""
    ss = np.random.SeedSequence(entropy=int(root), spawn_key=_key_words(keys))
    return int(ss.generate_state(2, dtype=np.uint32).astype(np.uint64) @ np.array([1, 2**32], dtype=np.uint64)) >> 1


def generator(root: int, *keys: object) -> np.random.Generator:
    """numpy Generator (PCG64) for the stream named by ``keys``."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy=int(root), spawn_key=_key_words(keys))))


def torch_generator(root: int, *keys: object, device: str | torch.device = "cpu") -> torch.Generator:
    """torch Generator for the stream named by ``keys``."""
    import torch

    g = torch.Generator(device=device)
    g.manual_seed(derive_seed(root, *keys))
    return g
