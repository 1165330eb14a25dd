"""The untrusted server, played for real: from everything it holds it must not recompute a client's randomness.

One real Flower simulation (Ray backend) in the DEFAULT mode (secret client randomness) serves: laplace-l1 with
label randomized response, gaussian, bitrr, and a point whose feature cache holds a corrupt (NaN) row on one client,
which must fail alone while the run completes. The reproducible-mode control (the same attack succeeds when the
server holds the client seed) is in test_simulation.py, which runs with ``run.client-seed``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from fl_privtext import pipeline, rng
from fl_privtext.client import data_digest, mechanism_for, point_key
from fl_privtext.config import ExperimentConfig
from fl_privtext.extract import EmbeddingCache
from fl_privtext.pipeline.runner import run_points
from fl_privtext.privacy import label_rr
from fl_privtext.public import PublicSpec
from fl_privtext.report.accounting import charge

FAST = {"server.epochs": 3, "attack.epochs": 3, "run.progress": False, "federation.num-clients": 4,
        "federation.rounds": 2, "run.baseline": False, "server.learner": "centroid"}


def _cfg(cache_dir, **sets) -> ExperimentConfig:
    return ExperimentConfig.from_flat({**FAST, "extractor.cache-dir": str(cache_dir), **sets})


def server_knowledge(point: dict, extra: frozenset[int] = frozenset()) -> set[int]:
    """Every integer the server holds for this point: its config, its queries, the replies' metadata; ``extra``
    adds what a server should NOT hold (the control: the client seed)."""
    ints: set[int] = set(range(8)) | set(extra)
    for obs in point["sent"]:
        for rec in obs.configs.values():
            ints.update(int(v) for v in rec.values() if isinstance(v, (int, float)) and float(v).is_integer())
    for obs in point["observations"]:
        ints.add(obs.src_node_id)
        for rec in obs.metrics.values():
            ints.update(int(v) for v in rec.values() if isinstance(v, (int, float)) and float(v).is_integer())
    return ints


def candidate_streams(point: dict, cfg: ExperimentConfig, seed: int, rnd: int, extra: frozenset[int],
                      digest: str = ""):
    """Every stream the server could derive: known roots x the key layouts the platform ever used (``digest``: the
    data digest of the batch, which a server that knows the clean data could compute)."""
    key = point_key(cfg)
    roots = sorted(server_knowledge(point, extra))
    for root, client in itertools.product(roots, range(cfg.federation.num_clients)):
        yield rng.generator(root, "privatize", rnd, client, 0)  # the old layout (seed, round, client, batch)
        yield rng.generator(root, "privatize", key, seed, rnd, client, 0)  # the reproducible layout until #22
        yield rng.generator(root, "privatize", key, seed, rnd, client, 0, digest)  # keyed by the data (#22)


def replay(cfg: ExperimentConfig, x: np.ndarray, y: np.ndarray, num_classes: int, g: np.random.Generator):
    """What a client with generator ``g`` would have uploaded for these records (the server's recomputation)."""
    feats = mechanism_for(PublicSpec.of(cfg), x.shape[1]).privatize(x, g)
    labels = label_rr(y, num_classes, cfg.privacy.label_epsilon, g) if cfg.privacy.label_epsilon > 0 else y
    return feats, labels


def best_recomputation(point: dict, cfg: ExperimentConfig, features: np.ndarray, labels: np.ndarray,
                       num_classes: int, extra: frozenset[int] = frozenset()) -> dict[str, float]:
    """The server's best attempt over all candidate streams, for the first upload of round 0: the smallest residual
    of the features in noise units, and the highest agreement of bits / labels."""
    obs = next(o for o in point["observations"] if "upload" in o.arrays)
    up = obs.arrays["upload"]
    rows, seen_x, seen_y = up["rows"], up["features"], up["labels"]
    mech = mechanism_for(PublicSpec.of(cfg), features.shape[1])
    scale = getattr(mech, "noise_scale", None) or getattr(mech, "noise_std", None) or 1.0
    best = {"residual": np.inf, "bit_agreement": 0.0, "label_agreement": 0.0}
    digest = data_digest(rows, np.asarray(features[rows], np.float32))
    for g in candidate_streams(point, cfg, point["per_seed"][0]["seed"], 0, extra, digest):
        fx, fy = replay(cfg, features[rows], labels[rows], num_classes, g)
        best["residual"] = min(best["residual"], float(np.median(np.abs(fx - seen_x))) / scale)
        best["bit_agreement"] = max(best["bit_agreement"], float(np.mean(fx == seen_x)))
        best["label_agreement"] = max(best["label_agreement"], float(np.mean(fy == seen_y)))
    return best


@pytest.fixture(scope="module")
def served(cache_dir, tmp_path_factory):
    corrupt_dir = tmp_path_factory.mktemp("corrupt_cache")
    cfgs = {
        "l1_labels": _cfg(cache_dir, **{"privacy.mechanism": "laplace-l1", "privacy.label-epsilon": 1.0}),
        "gaussian": _cfg(cache_dir, **{"privacy.mechanism": "gaussian"}),
        "bitrr": _cfg(cache_dir, **{"privacy.mechanism": "bitrr", "privacy.epsilon": 50.0}),
        "faulty": _cfg(corrupt_dir, **{"privacy.mechanism": "laplace-l1"}),
    }
    # a corrupt cached row on client 1 (a real fault: a bad feature file); the client must refuse, alone
    prep = pipeline.prepare(cfgs["faulty"], features="extract")
    cache = EmbeddingCache(corrupt_dir)
    path = cache.path(cache.key(prep.ds.fingerprint, prep.extractor.identity()))
    broken = np.load(path, mmap_mode="r+")
    bad_row = int(prep.shards[1][0])
    broken[bad_row, 0] = np.nan
    broken.flush()
    del broken
    # The cache's load-time check (tests/extract/test_cache.py) would repair this row before any client sees it;
    # here the damage stands for one that happens after that check (the entry counts as verified in this process),
    # so the client's own refusal is what is tested.
    from fl_privtext.extract import cache as cache_mod

    cache_mod._VERIFIED.add(cache_mod._stamp(path))
    state = tmp_path_factory.mktemp("clients")
    results = run_points(list(cfgs.values()), keep_observations=True, state_dir=state)
    return {name: (cfg, res) for (name, cfg), res in zip(cfgs.items(), results)}, bad_row, state


@pytest.mark.parametrize("name", ["l1_labels", "gaussian", "bitrr"])
def test_the_server_cannot_recompute_client_noise_in_the_default_mode(served, name):
    points, *_ = served
    cfg, point = points[name]
    assert point["privacy"]["randomness"] == "secret"
    prep = pipeline.prepare(cfg, features="extract")
    feats = np.asarray(prep.features, np.float32)
    best = best_recomputation(point, cfg, feats, prep.ds.labels, len(prep.ds.label_names))
    if name == "bitrr":
        # flip probability 1/(1+e^(50/500)) = 0.475: a known stream would agree on every bit
        assert best["bit_agreement"] < 0.56, best
    else:
        assert best["residual"] > 0.3, best  # noise-scale error (median |L1 - L2| of two draws), never ~1e-7
    if cfg.privacy.label_epsilon > 0:
        assert best["label_agreement"] < 0.9, best  # a known stream would reproduce every flip


def test_no_message_from_the_server_carries_a_client_seed_and_noise_never_repeats(served):
    points, *_ = served
    _, point = points["l1_labels"]
    for obs in point["sent"]:
        assert "run.client-seed" not in obs.configs.get("config", {})
    ups = [o.arrays["upload"] for o in point["observations"] if "upload" in o.arrays]
    by_round = {}
    for up in ups:
        for r, x in zip(up["rows"], up["features"]):
            by_round.setdefault(int(r), []).append(x)
    # each record was uploaded once per round: two independent draws, never the same noise (two independent
    # continuous draws coincide in a coordinate with probability ~0: allow float32 ties, not repeated vectors)
    assert all(len(v) == 2 for v in by_round.values())
    same = np.array([np.mean(v[0] == v[1]) for v in by_round.values()])
    assert same.max() < 0.1 and same.mean() < 1e-3, (same.max(), same.mean())


def test_a_failing_client_is_reported_and_the_run_completes(served):
    points, bad_row, state = served
    cfg, point = points["faulty"]
    faults = point["faults"]
    assert len(faults["failed_clients"]) == cfg.federation.rounds  # client 1 fails in every round, alone
    # the server learns one fixed line (issue #34: no ids, values or exception text in any reply) ...
    assert all(f["kind"] == "error" and f["reason"] == "refused: internal error"
               for f in faults["failed_clients"]), [f["reason"] for f in faults["failed_clients"]]
    # ... while the client's own log names the record and keeps the trace
    log = (state / "node-1" / "client.log").read_text()
    assert "non-finite" in log and str(bad_row) in log and "Traceback" in log
    prep = pipeline.prepare(cfg, features="none")
    silent = set(prep.ds.user_ids[prep.shards[1]].tolist())
    assert faults["num_users_not_heard_from"] == len(silent)
    assert set(faults["users_not_heard_from"]) <= silent
    seed = point["per_seed"][0]
    expected = (len(prep.ds) - len(prep.shards[1])) * cfg.federation.rounds
    assert seed["uploads_received"] == expected and seed["utility"]["available"]
    # only what was sent is charged: client 1's users spent nothing, the others one release per record and round
    sent = np.concatenate([o.arrays["upload"]["rows"] for o in point["observations"] if "upload" in o.arrays])
    reps, _ = charge(prep.ds.user_ids, sent, mechanism_for(PublicSpec.of(cfg), 50).report(), cfg.privacy,
                     len(prep.ds.label_names))
    charged = set(reps.epsilons()[0].tolist())
    assert charged.isdisjoint(silent) and len(charged) == len(np.unique(prep.ds.user_ids)) - len(silent)
    _, counts = np.unique(prep.ds.user_ids[sent], return_counts=True)
    per_user = point["privacy"]["composition"]["per_user"]
    # epsilon + the secure sampler's grid
    true_eps = float(mechanism_for(PublicSpec.of(cfg), 50).report().epsilon_worst_case)
    assert per_user["max_epsilon_worst_case"] == pytest.approx(counts.max() * true_eps)


def test_labels_in_the_clear_make_the_total_epsilon_infinite_and_rr_is_charged(served):
    points, *_ = served
    _, rr = points["l1_labels"]
    _, clear = points["gaussian"]
    rr_user, clear_user = rr["privacy"]["composition"]["per_user"], clear["privacy"]["composition"]["per_user"]
    assert clear_user["max_epsilon_total"] == "inf" and np.isfinite(clear_user["max_epsilon_worst_case"])
    assert "NOT protected" in clear["privacy"]["composition"]["labels"]["note"]
    # laplace-l1 eps 1 + label RR eps 1 per upload, plus the on-device answers (issue #22): at least twice the
    # representations', at most that plus the on-device part; and exactly what the clients' ledgers charged
    assert 2 * rr_user["max_epsilon_worst_case"] - 1e-9 <= rr_user["max_epsilon_total"] <= (
        2 * rr_user["max_epsilon_worst_case"] + rr_user["max_epsilon_on_device"] + 1e-9)
    assert rr["privacy"]["ledger"]["per_user"]["max_epsilon_charged"] == pytest.approx(rr_user["max_epsilon_total"])
