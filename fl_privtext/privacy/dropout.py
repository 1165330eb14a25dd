"""Word dropout before extraction and its claimed amplification (DPNR, Theorem 2).

DPNR Theorem 2: if A(x) = f(x) + r is epsilon-DP, then A applied to x with a dropout mask of rate mu is
epsilon' = ln((1 - mu) e^epsilon + mu)-DP. This is amplification by subsampling and holds ONLY when
(1) adjacency is word substitution (two texts differ in one word), (2) the mask is random, secret and independent
of the data, and (3) the base mechanism is epsilon-DP for word substitutions including the mask token. A
user-chosen mask gives no amplification; under replacement adjacency (the whole text may change) there is none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

DEFAULT_MASK_TOKEN = "[MASK]"

PRECONDITIONS: tuple[str, ...] = (
    "Amplification (DPNR Theorem 2) holds only under word-substitution adjacency: two texts differ in one word.",
    ("The dropout mask must be random, secret and independent of the data; a user-chosen mask gives no "
     "amplification."),
    "The base mechanism must be epsilon-DP for word substitutions that include the mask token.",
    "Under replacement adjacency (any two texts) there is no amplification: use epsilon_worst_case.",
)


def _check_mu(mu: float) -> float:
    if isinstance(mu, bool) or not isinstance(mu, (int, float, np.floating)) or not 0.0 <= float(mu) <= 1.0:
        raise ValueError(f"mu (word dropout rate) must be a number in [0, 1], got {mu!r}.")
    return float(mu)


def amplified_epsilon(epsilon: float, mu: float) -> float:
    """epsilon' = ln((1 - mu) e^epsilon + mu) (DPNR Theorem 2); inf stays inf for mu < 1, mu = 1 gives 0."""
    mu = _check_mu(mu)
    if not epsilon >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon}.")
    if mu == 0.0:
        return float(epsilon)
    if mu == 1.0:
        return 0.0
    if math.isinf(epsilon):
        return math.inf
    return float(np.logaddexp(math.log1p(-mu) + epsilon, math.log(mu)))


def masked_count(num_words: int, mu: float) -> int:
    """Words masked in a text of ``num_words`` words: ceil(d * mu).

    Rounding up makes each word's masking probability ceil(d*mu)/d >= mu, so the amplified epsilon of Theorem 2
    (decreasing in the masking probability) is a valid bound for every text length; floor or round would not be
    (e.g. d=3, mu=0.5: floor masks 1/3 < 0.5 of the words).
    """
    mu = _check_mu(mu)
    return min(num_words, math.ceil(num_words * mu - 1e-9))


def word_dropout(
    texts: Sequence[str], mu: float, rng: np.random.Generator, *, mask_token: str = DEFAULT_MASK_TOKEN
) -> list[str]:
    """Replace ceil(d*mu) uniformly placed words of every text by ``mask_token`` (a fresh secret mask per text).

    Words are whitespace tokens; the result is re-joined with single spaces. mu = 0 returns the texts unchanged
    (whitespace included). See the module docstring for when the amplified epsilon applies.
    """
    mu = _check_mu(mu)
    if isinstance(texts, str):
        raise ValueError("word_dropout expects a sequence of texts, got a single string.")  # noqa: TRY004
    if mu == 0.0:
        return list(texts)
    out: list[str] = []
    for text in texts:
        words = text.split()
        k = masked_count(len(words), mu)
        if k:
            for i in rng.choice(len(words), size=k, replace=False):
                words[int(i)] = mask_token
        out.append(" ".join(words))
    return out
