"""The held-out clean-accuracy estimate with the clean spread taken from PUBLIC rows (issue #37 item 3, a lead).

    PYTHONPATH=. HF_HUB_OFFLINE=1 nice -n 5 python simulations/select_by_public_spread.py

`fl_privtext.server.selection.clean_accuracy` fails because the clean within-class spread W Sigma W^T is not
resolved by the uploads (its docstring). Here Sigma is replaced by the TOTAL covariance of public rows through the
mechanism's public map (E[upload | x] of ``privacy.public-data``; blog: its in-domain rows ``blog:other-users``): an
over-estimate (between-class spread included), but one the noise does not touch. Per candidate (3 folds by user,
Linear at C = 1e-4 fixed): the exact on-device accuracy of the head fitted on every upload beside the estimate and
its unresolved share. A simulation (the exact column reads clean features); not wired into the server.
"""

from __future__ import annotations

import sys

import numpy as np

sys.path.insert(0, __import__("os").path.dirname(__file__))
from sklearn.model_selection import GroupKFold
from sweep import default_data_root

from fl_privtext import rng
from fl_privtext.client.ondevice import expected_input
from fl_privtext.client.upload import mechanism_for
from fl_privtext.config import ExperimentConfig
from fl_privtext.ondevice import mlp_logits
from fl_privtext.pipeline.preparation import prepare
from fl_privtext.public import PublicSpec, public_features
from fl_privtext.rng import generator
from fl_privtext.server.learners import ClassStats, make_learner
from fl_privtext.server.noise import noise_law


def est(export, x, y, k, law, sigma, draws=3000):
    """`clean_accuracy`'s linear branch with ``sigma`` given (here: the public rows' total covariance)."""
    st = ClassStats.of(np.asarray(x, np.float64), y, k, law.variance)
    s_up = st.within()
    counts = np.maximum(st.counts, 1.0)
    pi = counts / counts.sum()
    m = st.means
    std = np.asarray(export["std"], np.float64)
    w = np.asarray(export["weight_0"], np.float64) / std
    b = np.asarray(export["bias_0"], np.float64) - w @ np.asarray(export["mean"], np.float64)
    z = generator(0, "pub", k).standard_normal((draws, k))
    a = w @ sigma @ w.T
    acc = 0
    unres = 0
    spread = float(np.clip(np.linalg.eigvalsh((a + a.T) / 2), 0, None).sum())
    for c in range(k):
        cov = a - w @ s_up @ w.T / counts[c]
        lam, vec = np.linalg.eigh((cov + cov.T) / 2)
        unres = max(unres, float(-np.clip(lam, None, 0).sum()) / max(spread, 1e-300))
        acc += pi[c] * float(
            np.mean((w @ m[c] + b + z @ (vec * np.sqrt(np.clip(lam, 0, None))).T).argmax(1) == c)
        )
    return acc, unres


def main() -> None:
    for eps in (1.0, 4.0, 16.0):
        for seed in (0, 1):
            cfg = ExperimentConfig.from_flat(
                {
                    "data.name": "blog",
                    "data.options.max_rows": 10000,
                    "data.root": default_data_root(),
                    "privacy.mechanism": "privunitg",
                    "privacy.epsilon": eps,
                    "privacy.sampler": "float",
                    "privacy.public-data": "blog:other-users",
                },
                ExperimentConfig(),
            )
            prep = prepare(cfg)
            x = np.asarray(prep.features, np.float32)
            y = np.asarray(prep.ds.labels)
            k = len(prep.ds.label_names)
            users = prep.ds.user_index.reshape(-1)
            tr = prep.roles != "test"
            te = ~tr
            mech = mechanism_for(PublicSpec.of(cfg), x.shape[1])
            up = np.asarray(mech.privatize(x[tr], rng.generator(seed, "sim-upload")), np.float64)
            law = noise_law(mech, x.shape[1], up.mean(0), rng.generator(seed, "server", "noise"))
            public_x = np.asarray(public_features(PublicSpec.of(cfg)), np.float32)
            pub = np.asarray(mech.expected(public_x), np.float64)
            sig_pub = np.cov(pub.T)
            clean_te = expected_input(x[te], PublicSpec.of(cfg), cfg.server.aggregate)
            out = []
            for name in ("constant", "centroid", "lda", "linear"):
                def mk(name: str = name, k: int = k, law=law, seed: int = seed):
                    return make_learner(name, num_classes=k, noise=law, seed=seed, linear_c=1e-4)

                ex = float(np.mean(mlp_logits(mk().fit(up, y[tr]).export(), clean_te).argmax(1) == y[te]))
                ests = []
                for a, b in GroupKFold(3).split(up, y[tr], users[tr]):
                    ests.append(est(mk().fit(up[a], y[tr][a]).export(), up[b], y[tr][b], k, law, sig_pub))
                out.append(
                    f"{name} exact {ex:.3f} pubest {np.mean([e for e, _ in ests]):.3f} unres {max(u for _, u in ests):.2f}"
                )
            print(f"blog eps {eps:g} seed {seed} public rows {len(pub)}:", "; ".join(out), flush=True)


if __name__ == "__main__":
    main()
