"""Distributed discrete Gaussian (Kairouz, Liu & Steinke, ICML 2021): each client clips, rounds to the secure
aggregation's integer grid and adds its SHARE of discrete Gaussian noise before masking; the server only ever holds
the noisy sum.

Mechanism (one round). A client's update u (a float vector of dimension d) is clipped in L2 to
``clip - step * sqrt(d) / 2`` and rounded to the grid of spacing ``step`` (``z = rint(u / step)``): by the triangle
inequality ||z||_2 <= clip / step, so every client's integer vector lies in the L2 ball of radius clip / step,
exactly, after rounding. It then adds ``N_Z(0, sigma^2)`` noise to every coordinate, i.i.d., with
``sigma = noise_multiplier * clip / (sqrt(min_clients) * step)`` (integer units; exact sampler
`fl_privtext.privacy.exact.discrete_gaussian`, CKS 2020, from the client's secret stream). ``noise_multiplier`` and
``min_clients`` are the CLIENT's policy: when at least ``min_clients`` clients contribute, the sum carries at least
the noise of DP-FedAvg's ``noise_multiplier * clip`` (in variance).

Neighbouring relation: one USER's data replaced (replace-one, user level, as `dp_fedavg_guarantee`). The user lives
on one client; the other clients' vectors do not change, that client's vector moves within its ball, so the sum of
the integer vectors moves by Delta_2 <= 2 clip / step in L2.

Guarantee: KLS 2021, Proposition 14 (sum of n independent N_Z(0, sigma^2) vectors, sigma >= 1/2): for every Renyi
order alpha, D_alpha <= alpha * eps^2 / 2 with ``eps = Delta_2 / (sqrt(n) sigma) + tau sqrt(d)`` and
``tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 sigma^2 k / (k + 1))`` (the sum's distance from a discrete Gaussian of
variance n sigma^2); i.e. rho-zCDP with rho = eps^2 / 2. (Their other two bounds need Delta_1, which we bound only
by sqrt(d) Delta_2; with that bound the second equals this one.) rho-zCDP is RDP(alpha) = alpha * rho, the RDP curve
of a Gaussian mechanism of noise multiplier 1 / sqrt(2 rho), so rounds enter Google's dp-accounting RDP accountant as
that Gaussian event and compose there (conversion to (epsilon, delta): Canonne, Kamath & Steinke 2020, as
dp-accounting does). No amplification by sampling: the server chooses the clients, it knows who was selected.
Dropouts: n is the number of clients whose vectors are in the sum (fewer contributors = less noise); a client charges
its ledger for n = ``min_clients`` (the fewest its policy accepts; it refuses a round with fewer selected, and the
unmasking when fewer are still active). The modular sum the server decodes is a post-processing of the integer sum
(`fl_privtext.federation.secagg`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from fl_privtext.privacy.exact import SecureBits, discrete_gaussian


def round_to_grid(update: np.ndarray, clip: float, step: float) -> np.ndarray:
    """``update`` clipped in L2 to ``clip - step * sqrt(d) / 2`` and rounded to the grid: integers (int64) whose L2
    norm is at most ``clip / step``."""
    u = np.asarray(update, np.float64).ravel()
    if not (clip > 0 and step > 0 and math.isfinite(clip) and math.isfinite(step)):
        raise ValueError(f"clip and step must be finite and > 0; got clip={clip}, step={step}.")
    inner = clip - step * math.sqrt(max(u.size, 1)) / 2
    if inner <= 0:
        raise ValueError(f"The secure-aggregation grid step {step:g} is too coarse for clip {clip:g} at dimension "
                         f"{u.size}: need step * sqrt(d) / 2 < clip.")
    norm = float(np.linalg.norm(u))
    if norm > inner:
        u = u * (inner / norm)
    return np.rint(u / step).astype(np.int64)


def share_sigma(*, noise_multiplier: float, clip: float, min_clients: int, step: float) -> float:
    """Each client's discrete Gaussian parameter in grid units."""
    return noise_multiplier * clip / (math.sqrt(min_clients) * step)


def noisy_share(update: np.ndarray, *, clip: float, noise_multiplier: float, min_clients: int, step: float,
                bits: SecureBits) -> np.ndarray:
    """A client's contribution: its clipped, grid-rounded update plus its discrete Gaussian share, as floats on the
    grid (``(z + noise) * step``, exact: the secure sum's encoding maps it back to the integers)."""
    z = round_to_grid(update, clip, step).astype(np.float64)
    sigma = share_sigma(noise_multiplier=noise_multiplier, clip=clip, min_clients=min_clients, step=step)
    if sigma > 0:
        z += discrete_gaussian(z.size, sigma, bits)
    return z * step


def kls_tau(sigma: float, n: int) -> float:
    """KLS 2021's tau for the sum of n discrete Gaussians of parameter sigma."""
    return 10.0 * sum(math.exp(-2.0 * math.pi**2 * sigma**2 * k / (k + 1)) for k in range(1, n))


def sum_rho(*, sigma: float, n: int, l2_sensitivity: float, dim: int) -> float:
    """zCDP rho of the sum of n clients' N_Z(0, sigma^2) shares for an integer L2 sensitivity (grid units)."""
    if n < 1:
        raise ValueError(f"The number of contributors must be >= 1; got {n}.")
    if sigma < 0.5:
        return math.inf  # KLS Proposition 14 needs sigma >= 1/2
    eps = l2_sensitivity / (math.sqrt(n) * sigma) + kls_tau(sigma, n) * math.sqrt(dim)
    return 0.5 * eps * eps


def epsilon_of(rhos: Sequence[float], delta: float) -> float:
    """(epsilon at delta) of the composition of rho-zCDP rounds, through dp-accounting's RDP accountant (each round
    entered as the Gaussian event with the same RDP curve)."""
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant

    if any(math.isinf(r) for r in rhos):
        return math.inf
    acct = RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    for r in rhos:
        if r > 0:
            acct.compose(dp_accounting.GaussianDpEvent(1.0 / math.sqrt(2.0 * r)))
    return float(acct.get_epsilon(delta)) if any(r > 0 for r in rhos) else 0.0


def round_rho(*, noise_multiplier: float, clip: float, min_clients: int, contributors: int, step: float,
              dim: int) -> float:
    """rho of one round: ``contributors`` shares of sigma = `share_sigma`, sensitivity 2 clip / step (replace-one)."""
    if noise_multiplier <= 0:
        return math.inf
    sigma = share_sigma(noise_multiplier=noise_multiplier, clip=clip, min_clients=min_clients, step=step)
    return sum_rho(sigma=sigma, n=contributors, l2_sensitivity=2.0 * clip / step, dim=dim)


def declared_rho(shares: Sequence[tuple[float, float, int]], *, step: float, dim: int) -> float:
    """rho of one round's sum from each contributor's declared (noise multiplier, clip, min clients). Shares of
    equal sigma form a group; any one group's shares are a KLS sum, and every other share is independent noise
    added to it (post-processing), so the smallest group rho bounds the round; the sensitivity is the largest clip's.
    Equal declarations give `round_rho` with all contributors."""
    if not shares:
        return math.inf
    cmax = max(c for _, c, _ in shares)
    groups: dict[float, int] = {}
    for z, c, m in shares:
        sigma = share_sigma(noise_multiplier=z, clip=c, min_clients=int(m), step=step)
        groups[sigma] = groups.get(sigma, 0) + 1
    return min((sum_rho(sigma=sg, n=n, l2_sensitivity=2.0 * cmax / step, dim=dim) for sg, n in groups.items()
                if sg > 0), default=math.inf)


def distributed_guarantee(*, noise_multiplier: float, clip: float, min_clients: int, contributors: Sequence[int],
                          step: float, dim: int, delta: float) -> dict[str, Any]:
    """Central (epsilon, delta) against the server of the noisy sums of a run, with the number of contributors of
    each round (dropouts accounted), per round and composed; ``client_charge_per_round``: the epsilon a client
    charges per round (n = min_clients, delta each round)."""
    rhos = [round_rho(noise_multiplier=noise_multiplier, clip=clip, min_clients=min_clients, contributors=int(k),
                      step=step, dim=dim) for k in contributors]
    worst = round_rho(noise_multiplier=noise_multiplier, clip=clip, min_clients=min_clients,
                      contributors=min_clients, step=step, dim=dim)
    return {"epsilon": epsilon_of(rhos, delta), "delta": float(delta),
            "per_round_epsilon": [epsilon_of([r], delta) for r in rhos],
            "contributors": [int(k) for k in contributors], "min_clients": int(min_clients),
            "noise_multiplier": float(noise_multiplier), "clip": float(clip), "grid_step": float(step),
            "dim": int(dim), "client_charge_per_round": epsilon_of([worst], delta),
            "mechanism": "distributed discrete Gaussian (Kairouz, Liu & Steinke ICML 2021, Prop. 14)",
            "relation": "user-level, replace-one (sensitivity 2 clip of the sum)",
            "accountant": "zCDP rounds composed in dp-accounting's RDP accountant; no sampling amplification "
                          "(the server selects the clients)"}
