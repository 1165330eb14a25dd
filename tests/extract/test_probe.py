"""Linear probes: GloVe and MiniLM features carry the task label and every private attribute (held-out users).

On the embedded ``default`` dataset and on a 2,000-post blog subset (skipped without the staged data), an
L2-regularised logistic regression trained on train users must beat the best constant predictor on test users
by a one-sided binomial z >= 3 (p < 0.0014) and by >= 3 accuracy points. MiniLM runs with max_length=64 and,
on ``default``, on 25% of the users, to keep the CPU cost to tens of seconds.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fl_privtext.extract import GloveExtractor, HFExtractor, extract_cached

data = pytest.importorskip("fl_privtext.data")

pytestmark = pytest.mark.slow
MIN_Z = 3.0
MIN_MARGIN = 0.03
MINILM_MAX_LENGTH = 64


def shared_data_root() -> Path | None:
    root = os.environ.get("FL_PRIVTEXT_DATA") or str(
        Path(__file__).resolve().parents[2].parent / "shared" / "data"
    )
    return Path(root) if Path(root, "blog_authorship").is_dir() else None


def logistic_probe(
    x_tr: np.ndarray, y_tr: np.ndarray, x_te: np.ndarray, k: int, l2: float = 0.1
) -> np.ndarray:
    """Predicted classes of a full-batch (L-BFGS) multinomial logistic regression on standardised features."""
    mu, sd = x_tr.mean(0), x_tr.std(0) + 1e-6
    a = torch.from_numpy(((x_tr - mu) / sd).astype(np.float32))
    b = torch.from_numpy(y_tr.astype(np.int64))
    w = torch.zeros(a.shape[1], k, requires_grad=True)
    c = torch.zeros(k, requires_grad=True)
    opt = torch.optim.LBFGS([w, c], max_iter=150, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(a @ w + c, b) + l2 * (w**2).sum()
        loss.backward()
        return loss

    opt.step(closure)  # type: ignore[no-untyped-call]
    with torch.no_grad():
        return (torch.from_numpy(((x_te - mu) / sd).astype(np.float32)) @ w + c).argmax(1).numpy()


def check_probes(
    ds: Any, feats: np.ndarray, rows: np.ndarray, what: str
) -> dict[str, tuple[float, float, float]]:
    """Probe the label and each categorical attribute on ``rows`` of ``ds`` (split by user)."""
    roles = data.assign_roles(np.asarray(ds.user_ids)[rows], test_frac=0.4, aux_frac=0.05, seed=0)
    tr, te = roles != "test", roles == "test"
    targets = [("label", ds.labels, len(ds.label_names))]
    targets += [
        (a.name, ds.attribute(a.name), a.num_classes) for a in ds.attributes if a.kind == "categorical"
    ]
    assert len(targets) >= 3, f"{what}: expected a label and >= 2 attributes, got {[t[0] for t in targets]}"
    results: dict[str, tuple[float, float, float]] = {}
    failures = []
    for name, y_all, k in targets:
        y = np.asarray(y_all)[rows]
        n = int(te.sum())
        baseline = np.bincount(y[te], minlength=k).max() / n  # best constant predictor, chosen in hindsight
        acc = float((logistic_probe(feats[tr], y[tr], feats[te], k) == y[te]).mean())
        z = (acc - baseline) / np.sqrt(baseline * (1 - baseline) / n)
        results[name] = (acc, baseline, z)
        if z < MIN_Z or acc - baseline < MIN_MARGIN:
            failures.append(f"{name}: accuracy {acc:.3f} vs majority {baseline:.3f} (z={z:.1f}, n={n})")
    assert not failures, (
        f"{what}: probe does not beat the majority baseline clearly: {failures}; all: {results}"
    )
    return results


@pytest.fixture(scope="module")
def default_ds() -> Any:
    return data.load_dataset("default")


@pytest.fixture(scope="module")
def blog_ds() -> Any:
    root = shared_data_root()
    if root is None:
        pytest.skip("the staged blog corpus (../shared/data or FL_PRIVTEXT_DATA) is not available")
    return data.load_dataset("blog", data_root=root, max_rows=2000, seed=0)


@pytest.fixture(scope="module")
def probe_minilm() -> HFExtractor:
    return HFExtractor(max_length=MINILM_MAX_LENGTH, batch_size=32)


def user_subset(ds: Any, frac: float, seed: int = 0) -> np.ndarray:
    users = np.asarray(ds.user_ids)
    uniq = np.unique(users)
    chosen = np.random.default_rng(seed).choice(uniq, size=round(frac * len(uniq)), replace=False)
    return np.flatnonzero(np.isin(users, chosen))


def test_glove_probe_default(default_ds: Any, glove: GloveExtractor, tmp_path: Path) -> None:
    feats = np.asarray(extract_cached(default_ds, glove, tmp_path, progress=False))
    check_probes(default_ds, feats, np.arange(len(default_ds)), "glove/default")


def test_minilm_probe_default(default_ds: Any, probe_minilm: HFExtractor) -> None:
    rows = user_subset(default_ds, 0.25)
    texts = default_ds.texts
    feats = probe_minilm.extract([texts[i] for i in rows], progress=False)
    check_probes(default_ds, feats, rows, "minilm/default")


@pytest.mark.parametrize("which", ["glove", "minilm"])
def test_probe_blog(
    which: str, blog_ds: Any, glove: GloveExtractor, probe_minilm: HFExtractor, tmp_path: Path
) -> None:
    ext: Callable[..., np.ndarray] = (glove if which == "glove" else probe_minilm).extract
    feats = ext(blog_ds.texts, progress=False)
    assert feats.shape == (2000, 50 if which == "glove" else 384)
    check_probes(blog_ds, feats, np.arange(len(blog_ds)), f"{which}/blog")
