"""Exact log-likelihoods log P[upload | encoded clean input] of each mechanism: the mechanism-aware attacks' core.

``log_likelihood(mech, uploads, codes)`` returns the (N, M) matrix of log densities (up to a constant per upload)
of every upload under every candidate code, where a code is the candidate's clean representation after the
mechanism's own deterministic stages (``encode_candidates``: normalise -> encode, public and noise-free).

Each mechanism declares its likelihood beside its class (``Mechanism.log_likelihood``, with
``Mechanism.likelihood_note`` naming what it computes where it is not exact; subclasses inherit): Laplace family
(sum |y - c| / b), Gaussian (||y - c||^2 / 2 sigma^2), every per-bit randomiser (OME, SUE, OUE, BitRR: sum of log
Bernoulli(p_j or q_j); a fractional code c in [0, 1] - e.g. a class mean - gives the exact likelihood of
independent bits with Pr[1] = c p + (1 - c) q); the cap family (PrivUnit, PrivUnitG, Duchi), mvlaplace and
purkayastha, each with its density. A mechanism that declares none (the base class) gets the nearest-neighbour
score -||y - c||^2, reported as not exact; so does an object that is not a `Mechanism`.

The secure cap samplers (``sampler = "secure"``: PrivUnitG and Duchi, `fl_privtext.privacy.mechanisms.privunitg`
and `fl_privtext.privacy.mechanisms.privunit`, ``CapMechanism.secure_sign_vertex``) are other constructions than the
float cap law: the input is rounded to a sign vertex s (independent coordinates, Pr[s_i = +1] = (1 + r_i) / 2, r the
clipped input over C) and the integer draw X is conditioned on {sum X >= g}; the upload is C / m diag(s) X. Secure Duchi declares its law exactly, secure
PrivUnitG by a stated normal approximation (``likelihood_exact: false``; `note` names it).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fl_privtext.privacy.mechanisms.likelihood import NEAREST_NOTE, nearest
from fl_privtext.privacy.normalise import as_batch

LogLikelihood = Callable[[object, np.ndarray, np.ndarray], np.ndarray]


def _nearest(mech: object, y: np.ndarray, c: np.ndarray) -> np.ndarray:
    return nearest(y, c)


def _find(mech: object) -> tuple[LogLikelihood, bool, str]:
    declared = getattr(type(mech), "log_likelihood", None)
    if declared is None:
        return _nearest, False, NEAREST_NOTE
    explain = getattr(mech, "likelihood_note", None)
    note_ = "" if explain is None else str(explain())
    return declared, note_ == "", note_


def lookup(mech: object) -> tuple[LogLikelihood, bool]:
    """The log-likelihood ``mech`` declares, as ``fn(mech, uploads, codes)``, and whether it is exact (False: an
    approximation, `note` names it)."""
    fn, exact, _ = _find(mech)
    return fn, exact


def note(mech: object) -> str:
    """What ``lookup(mech)`` computes when it is not exact ("" when exact)."""
    return _find(mech)[2]


def encode_candidates(mech: object, x: np.ndarray) -> np.ndarray:
    """The noise-free part of the mechanism applied to clean representations: (M, k) -> (M, D) float64."""
    batch = as_batch(x, getattr(mech, "dim", None))
    norm = mech.normalise(batch)  # type: ignore[attr-defined]
    enc = mech.encode(norm.values)  # type: ignore[attr-defined]
    return np.asarray(enc.values, np.float64)


def log_likelihood(mech: object, uploads: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """(N, D) uploads x (M, D) codes -> (N, M) log-likelihoods (exact where declared, see ``lookup``)."""
    fn, _ = lookup(mech)
    return fn(mech, np.asarray(uploads, np.float64), np.asarray(codes, np.float64))
