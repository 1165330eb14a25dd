"""Sampler goodness of fit at alpha = 1e-6 with fixed seeds: flip rates, Laplace/Gaussian scales, dropout, labels."""

import numpy as np
import pytest
from scipy import stats

from fl_privtext.privacy import label_rr, make_mechanism, word_dropout
from fl_privtext.privacy.dropout import masked_count
from fl_privtext.privacy.randomisers import flip_bits, laplace_noise
from tests.samplers import float_mechanism

ALPHA = 1e-6


def assert_rate(ones: int, n: int, p: float) -> None:
    """Exact binomial test and Wilson interval at level ALPHA."""
    assert stats.binomtest(int(ones), int(n), p).pvalue > ALPHA, (ones, n, p)
    ci = stats.binomtest(int(ones), int(n)).proportion_ci(confidence_level=1 - ALPHA, method="wilson")
    assert ci.low <= p <= ci.high


@pytest.mark.parametrize(("name", "params"), [
    ("ome", {"epsilon": 1.0, "lam": 2.0}), ("ome", {"epsilon": 1.0, "lam": 100.0}),
    ("sue", {"epsilon": 2.0}), ("oue", {"epsilon": 2.0}), ("bitrr", {"epsilon": 50.0}),
])
def test_flip_rates_match_bit_probabilities(name, params):
    mech = float_mechanism(name, dim=5, **params)
    p, q = mech.bit_probabilities()
    rng = np.random.default_rng(11)
    n = 40_000
    d = mech.code_bits
    ones_in = mech.randomise(np.ones((n, d), np.uint8), rng).values
    zeros_in = mech.randomise(np.zeros((n, d), np.uint8), rng).values
    assert ones_in.dtype == np.float32 and set(np.unique(ones_in)) <= {0.0, 1.0}
    for parity in (0, 1):  # each class of bits (OME: p differs by parity)
        cols = np.arange(parity, d, 2)
        assert_rate(ones_in[:, cols].sum(), n * cols.size, float(p[parity]))
        assert_rate(zeros_in[:, cols].sum(), n * cols.size, float(q[parity]))


def test_flip_bits_mixed_input_uses_the_right_probability():
    rng = np.random.default_rng(3)
    bits = (rng.random((50_000, 6)) < 0.5).astype(np.uint8)
    p = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4])
    q = np.array([0.01, 0.1, 0.2, 0.3, 0.45, 0.05])
    y = flip_bits(bits, p, q, rng)
    for j in range(6):
        one = bits[:, j] == 1
        assert_rate(y[one, j].sum(), one.sum(), p[j])
        assert_rate(y[~one, j].sum(), (~one).sum(), q[j])


@pytest.mark.parametrize(("name", "params", "scale_key"), [
    ("laplace-l1", {"epsilon": 0.7, "clip_norm": 2.0}, "noise_scale"),
    ("laplace-box", {"epsilon": 3.0, "dim": 6, "low": -1.0, "high": 1.0}, "noise_scale"),
    ("gaussian", {"epsilon": 0.8, "delta": 1e-6, "clip_norm": 1.5}, "noise_std"),
])
def test_noise_scale_ks(name, params, scale_key):
    mech = float_mechanism(name, **params)
    scale = mech.report().calibration[scale_key]
    x = np.zeros((40_000, 6), dtype=np.float32)  # normalises to itself, so the output is the noise
    y = mech.privatize(x, np.random.default_rng(5)).astype(np.float64).ravel()
    dist = "laplace" if "laplace" in name else "norm"
    assert stats.kstest(y, dist, args=(0.0, scale)).pvalue > ALPHA
    # and the test has power: a 5% wrong scale is rejected
    assert stats.kstest(y, dist, args=(0.0, scale * 1.05)).pvalue < ALPHA


def test_laplace_dpnr_noise_is_independent_per_coordinate():
    mech = make_mechanism("laplace-dpnr", epsilon=2.0, dim=8, sampler="float")
    x = np.tile(np.arange(8, dtype=np.float32), (30_000, 1))  # min-max -> (0, 1/7, ..., 1)
    noise = mech.privatize(x, np.random.default_rng(6)) - np.arange(8, dtype=np.float32) / 7
    assert stats.kstest(noise.ravel().astype(np.float64), "laplace", args=(0.0, 0.5)).pvalue > ALPHA
    assert abs(np.corrcoef(noise[:, 0], noise[:, 1])[0, 1]) < 0.03


def test_laplace_dpnr_code_adds_one_scalar_per_example():
    mech = make_mechanism("laplace-dpnr-code", epsilon=1.0)
    rng = np.random.default_rng(7)
    x = rng.normal(size=(1000, 12)).astype(np.float32)
    y = mech.privatize(x, rng)
    recovered = y - y.min(axis=1, keepdims=True)
    lo = x.min(axis=1, keepdims=True)
    assert np.allclose(recovered, (x - lo) / (x.max(axis=1, keepdims=True) - lo), atol=1e-5)
    shared = y[:, 0] - (x[:, 0] - lo[:, 0]) / (x.max(axis=1) - lo[:, 0])
    assert stats.kstest(shared.astype(np.float64), "laplace", args=(0.0, 1.0)).pvalue > ALPHA


def test_laplace_noise_helper_shapes_and_chunks():
    y = laplace_noise((3000, 1000), 2.0, np.random.default_rng(8))  # several chunks
    assert y.dtype == np.float32 and y.shape == (3000, 1000)
    assert stats.kstest(y[:, ::50].ravel().astype(np.float64), "laplace", args=(0.0, 2.0)).pvalue > ALPHA


def test_word_dropout_count_and_uniform_positions():
    rng = np.random.default_rng(9)
    text = " ".join(f"w{i}" for i in range(10))
    out = word_dropout([text] * 20_000, 0.3, rng)
    masked = np.array([[w == "[MASK]" for w in t.split()] for t in out])
    assert np.all(masked.sum(axis=1) == 3)
    counts = masked.sum(axis=0)
    assert stats.chisquare(counts).pvalue > ALPHA  # every position equally likely
    kept = [t.split() for t in out[:100]]
    assert all(w == "[MASK]" or w == f"w{i}" for ws in kept for i, w in enumerate(ws))


def test_word_dropout_rounding_up_and_edge_cases():
    assert masked_count(3, 0.5) == 2 and masked_count(10, 0.3) == 3 and masked_count(0, 0.5) == 0
    assert masked_count(7, 1.0) == 7 and masked_count(7, 0.0) == 0
    rng = np.random.default_rng(0)
    assert word_dropout(["a  b", ""], 0.0, rng) == ["a  b", ""]
    assert word_dropout(["a b c d"], 1.0, rng, mask_token="<m>") == ["<m> <m> <m> <m>"]
    assert word_dropout([""], 0.5, rng) == [""]
    with pytest.raises(ValueError, match=r"mu .* \[0, 1\]"):
        word_dropout(["a"], 1.5, rng)
    with pytest.raises(ValueError, match="sequence of texts"):
        word_dropout("a b c", 0.5, rng)
    same = [word_dropout(["a b c d e f"] * 5, 0.5, np.random.default_rng(s)) for s in (1, 1, 2)]
    assert same[0] == same[1] and same[0] != same[2]


def test_label_rr_rates():
    rng = np.random.default_rng(10)
    k, eps, n = 5, 1.2, 200_000
    labels = rng.integers(0, k, size=n)
    out = label_rr(labels, k, eps, rng)
    assert out.dtype == np.int64 and out.min() >= 0 and out.max() < k
    p = np.exp(eps) / (np.exp(eps) + k - 1)
    assert_rate((out == labels).sum(), n, p)
    changed = out[labels == 0][out[labels == 0] != 0]
    assert stats.chisquare(np.bincount(changed, minlength=k)[1:]).pvalue > ALPHA  # uniform over other classes
    with pytest.raises(ValueError, match=r"\[0, 5\)"):
        label_rr(np.array([5]), 5, 1.0, rng)
    with pytest.raises(ValueError, match="num_classes must be an integer >= 2"):
        label_rr(np.array([0]), 1, 1.0, rng)
