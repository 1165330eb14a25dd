"""End to end through a real Flower simulation (Ray backend): uploads, traffic inspection, attacks at both ends.

One simulation serves several experiment points (as sweeps do; two of them differ only in the attacker and share
one collection): Ray starts twice for this module, once for the
no-privacy points and once for the private ones (never in one federation, issue #34). It runs the
REPRODUCIBLE mode (``run.client-seed``): the Flower path must equal the plain loop bit for bit, and a server that held
the client seed could recompute the noise (the control of tests/federation/test_threat_model.py).
"""

from __future__ import annotations

import contextlib
import os

import numpy as np
import pytest

from fl_privtext import pipeline
from fl_privtext.client import CLIENT_SEED_ENV, client_upload, merge_uploads
from fl_privtext.config import ExperimentConfig
from fl_privtext.federation.simulation import ray_processes, wait_exited
from fl_privtext.metrics import binomial_interval
from fl_privtext.pipeline import federated
from fl_privtext.pipeline.runner import run_points
from fl_privtext.report import aggregate

CLIENT_SEED = 918_273_645  # not a small integer: those are within a brute-forcing server's reach
FAST = {"server.epochs": 10, "attack.epochs": 15, "run.progress": False, "federation.num-clients": 4,
        "run.client-seed": CLIENT_SEED, "federation.client-threads": 2,
        "privacy.sampler": "float", "server.learner": "centroid", "run.baseline": False}  # reproducible mode is about the seeded stream; secure noise comes from the OS


def _cfg(cache_dir, **sets) -> ExperimentConfig:
    flat = {**FAST, "extractor.cache-dir": str(cache_dir), **sets}
    return ExperimentConfig.from_flat(flat)


@pytest.fixture(scope="module")
def points(cache_dir, request):
    from tests.conftest import staged_data_root

    cfgs = {
        # one query in flight at a time (federation.max-in-flight): the uploads must still equal the plain clients'
        "l1_two_rounds": _cfg(cache_dir, **{"privacy.mechanism": "laplace-l1", "privacy.epsilon": 1.0,
                                            "federation.rounds": 2, "federation.max-in-flight": 1}),
        # count-epsilon 40: the on-device answers' randomized response flips a bit with probability e^-40
        # test-frac 0.5 as none_select: the same shard, so both no-privacy points share one federation (suite time)
        "none": _cfg(cache_dir, **{"privacy.mechanism": "none", "client.count-epsilon": 40.0,
                                   "data.test-frac": 0.5}),
        "l1_tiny_eps": _cfg(cache_dir, **{"privacy.mechanism": "laplace-l1", "privacy.epsilon": 0.1}),
        # the same point under another attacker: served on l1_tiny_eps's collection (issue #38)
        "l1_tiny_eps_attacker": _cfg(cache_dir, **{"privacy.mechanism": "laplace-l1", "privacy.epsilon": 0.1,
                                                   "attack.families": "logistic", "attack.extra": False}),
        # the clients choose the on-device model (two stages of the on-device round); half the users are test users
        # (~160 select records per candidate, se ~0.035) so the clean heads' lead over the constant (~0.2 at
        # test-frac 0.2 on 60 records each, i.e. ~2.3 se: one CI machine kept the constant there) is decisive
        "none_select": _cfg(cache_dir, **{"privacy.mechanism": "none", "client.count-epsilon": 40.0,
                                          "data.test-frac": 0.5,
                                          "server.learner": "auto", "server.select-on": "clients",
                                          "attack.enabled": False}),
    }
    root = staged_data_root()
    if root is not None:
        blog = {"data.name": "blog", "data.root": str(root), "data.options.max_rows": 6000}
        cfgs["blog_none"] = _cfg(cache_dir, **blog, **{"privacy.mechanism": "none"})
        cfgs["blog_tiny_eps"] = _cfg(cache_dir, **blog, **{"privacy.mechanism": "laplace-l1",
                                                           "privacy.epsilon": 0.1})
    server_env: list[str | None] = []  # the driver's environment as the ServerApp's rounds saw it
    # the no-privacy points in a federation of their own: clients that serve a private point never hold a
    # no-privacy entry (the runner refuses such a policy, issue #34)
    # and one shard per federation: a client holds one set of users (points over other data or roles run apart)
    from fl_privtext.client.policy import user_keys

    groups: dict[str, dict[str, ExperimentConfig]] = {}
    for n, c in cfgs.items():
        key = repr((c.privacy.mechanism == "none", sorted(user_keys(c.to_flat()).items())))
        groups.setdefault(key, {})[n] = c
    served: dict[str, tuple[ExperimentConfig, dict]] = {}
    collected: list[str] = []  # the point of every round the server collected
    ray_procs: dict[int, int] = {}  # Ray's processes (node and actors) while the rounds ran
    ray_cmds: set[str] = set()  # their command lines
    ray_down: list[bool] = []  # at the start of each computation (in order): whether all of them had exited
    evaluate = federated.Traffic.evaluate

    def watched(self, cfg):  # type: ignore[no-untyped-def]
        ray_down.append(wait_exited(ray_procs, timeout=0))
        return evaluate(self, cfg)

    federated.Traffic.evaluate = watched  # type: ignore[method-assign]
    last_down = []  # per federation: its last point's computation started with Ray down
    try:
        for group in groups.values():
            def on_round(i: int, *_: object, names: tuple[str, ...] = tuple(group)) -> None:
                server_env.append(os.environ.get(CLIENT_SEED_ENV))
                collected.append(names[i])
                ray_procs.update(ray_processes())
                for pid in ray_procs:
                    with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
                        ray_cmds.add(f.read().replace(b"\0", b" ").decode(errors="replace"))

            ray_procs.clear()
            results = run_points(list(group.values()), keep_observations=True, on_round=on_round)
            last_down.append((len(ray_procs), ray_down[-1]))
            served |= {name: (cfg, res) for (name, cfg), res in zip(group.items(), results, strict=True)}
    finally:
        federated.Traffic.evaluate = evaluate  # type: ignore[method-assign]
    return served | {"server_env": server_env, "collected": collected, "last_down": last_down, "ray_cmds": ray_cmds}


def test_results_follow_the_public_contract(points):
    _, point = points["l1_two_rounds"]
    res = aggregate(point, total_s=1.0)
    assert 0 <= res["utility"]["accuracy"] <= 1 and 0 <= res["utility"]["macro_f1"] <= 1
    assert res["privacy"]["mechanism"] == "laplace-l1"
    assert res["privacy"]["epsilon_nominal"] == pytest.approx(1.0)
    assert res["privacy"]["epsilon_worst_case"] == pytest.approx(1.0)
    for name, a in res["attacks"].items():
        assert {"accuracy", "majority_baseline"} <= set(a)
        assert res["empirical_privacy"][name] == pytest.approx(1 - a["accuracy"])
    fed = res["federation"]
    assert fed["num_clients"] == 4 and fed["num_users"] > 4
    assert res["timing"]["total_s"] == 1.0 and res["timing"]["federation_s"] > 0


def test_eavesdropper_saw_exactly_what_the_server_received(points):
    cfg, point = points["l1_two_rounds"]
    seed = point["per_seed"][0]
    n_records = point["num_records"]
    assert seed["uploads_received"] == seed["uploads_observed"] == n_records * cfg.federation.rounds
    assert seed["messages_observed"] == cfg.federation.num_clients * cfg.federation.rounds
    # every user is charged for each release: records per user x rounds
    per_user = point["privacy"]["composition"]["per_user"]
    _, counts = np.unique(pipeline.prepare(cfg, features="none").ds.user_ids, return_counts=True)
    assert per_user["max_epsilon"] == pytest.approx(counts.max() * cfg.federation.rounds * cfg.privacy.epsilon)


def test_no_raw_text_or_raw_representation_leaves_a_client(points):
    cfg, point = points["l1_two_rounds"]
    prep = pipeline.prepare(cfg, features="extract")
    raw = np.asarray(prep.features, np.float32)
    observations = point["observations"]
    assert len(observations) == cfg.federation.num_clients * cfg.federation.rounds
    for obs in observations:
        assert obs.message_type == "query.upload"
        assert set(obs.arrays) == {"upload"}
        # the only config record: where the reply was computed (public metadata, like the sender's node id)
        assert set(obs.configs) == {"placement", "ledger"} and set(obs.configs["placement"]) == {"host", "ray-node"}
        # what the client charged in its own ledger (issue #22): public accounting, no data
        assert set(obs.configs["ledger"]) == {"charged", "ledger-max", "replayed", "scope", "withheld"}
        assert all(isinstance(v, str) for v in obs.configs["placement"].values())
        assert set(obs.arrays["upload"]) == set(pipeline.UPLOAD_KEYS)
        assert set(obs.metrics) == {"stats"}
        up = obs.arrays["upload"]
        for arr in up.values():
            assert arr.dtype.kind in "fiu"  # numbers only: no strings, no objects
        feats, rows = up["features"], up["rows"]
        assert feats.shape == (len(rows), raw.shape[1])
        # the uploaded vectors are not the raw representations (nor their L1-normalised form)
        x = raw[rows]
        x1 = x / np.abs(x).sum(axis=1, keepdims=True)
        assert not np.isclose(feats, x, atol=1e-4).all(axis=1).any()
        assert not np.isclose(feats, x1, atol=1e-4).all(axis=1).any()


def test_flower_path_reproduces_the_plain_loop_exactly(points):
    cfg, point = points["none"]
    plain = pipeline.run_plain(cfg)
    fl_seed, pl_seed = point["per_seed"][0], plain["per_seed"][0]
    assert fl_seed["utility"]["accuracy"] == pl_seed["utility"]["accuracy"]
    assert fl_seed["attacks"] == pl_seed["attacks"]
    # on-device inference through Flower (model sent to the test clients, counts back) = the in-process clients
    assert fl_seed["utility"]["on_device"] == pl_seed["utility"]["on_device"]
    assert fl_seed["utility"]["on_device"]["available"] is True
    # without privacy E[upload | x] = x: the clients' verdicts are the server's per-upload ones, up to what still
    # separates the two heads without noise (the per-upload head's James-Stein shrinkage of the class means by
    # tr S_w / n_k, the float32 export): near-ties only, one test record of 603 on this point (centroid chosen)
    gap = abs(fl_seed["utility"]["on_device"]["accuracy"] - fl_seed["utility"]["accuracy"])
    assert gap <= 0.01, gap


def test_the_clients_choice_through_flower_equals_the_plain_loop(points):
    cfg, point = points["none_select"]
    fl = point["per_seed"][0]["utility"]["on_device"]
    assert fl == pipeline.run_plain(cfg)["per_seed"][0]["utility"]["on_device"]
    cands = fl["selection"]["candidates"]
    assert set(cands) == {"constant", "centroid", "lda", "linear"}  # server.auto-candidates' default: no MLP
    assert fl["learner"] != "constant", cands
    # every test client answered both stages (select: every candidate as model.i; report: the chosen one)
    assert fl["selection"]["clients"] == fl["clients"] == 4 and not fl["selection"]["refusals"]


def test_private_uploads_through_flower_equal_the_plain_clients(points):
    # The actors read the driver's client-data snapshot; every privatized value must match the in-process client.
    cfg, point = points["l1_two_rounds"]
    prep = pipeline.prepare(cfg, features="cached")
    plain = merge_uploads([client_upload(prep.client, c, rnd, cfg.run.seed, cfg, client_seed=CLIENT_SEED).arrays()
                           for rnd in range(cfg.federation.rounds) for c in range(cfg.federation.num_clients)])
    seen = merge_uploads([o.arrays["upload"] for o in point["observations"] if "upload" in o.arrays])
    assert len(plain["rows"]) == 2 * len(prep.ds)
    for k in plain:
        np.testing.assert_array_equal(seen[k], plain[k])


def test_the_last_points_attacks_start_once_rays_processes_have_exited(points):
    # the last point's computation overlapped Flower's shutdown: its attacks allocated ~0.5 GB while Ray's actors
    # and own processes (~1 GB at 10M users) were still exiting, the run's peak (issue #38); it now waits for them
    assert [n > 2 for n, _ in points["last_down"]] == [True] * len(points["last_down"])  # GCS, raylet, actors...
    assert [down for _, down in points["last_down"]] == [True] * len(points["last_down"])


def test_the_local_ray_head_runs_without_its_monitors(points):
    # a one-machine simulation neither autoscales nor sends its workers' logs to the driver: Ray's autoscaler monitor
    # and log monitor were two Python processes (163 MB) beside the run (issue #38; simulation._lean_head)
    cmds = points["ray_cmds"]
    assert any("raylet" in c for c in cmds) and any("gcs_server" in c for c in cmds)
    assert not [c for c in cmds if "autoscaler/_private/monitor.py" in c or "log_monitor.py" in c]


def test_actors_run_with_their_thread_share(points):
    # federation.client-threads = 2 (not Ray's default of floor(client-cpus) = 1): each actor's OpenMP/MKL/OpenBLAS
    # pools were sized by the environment fl_privtext.threads gave it
    _, point = points["l1_two_rounds"]
    threads = {o.metrics["stats"]["threads"] for o in point["observations"] if "stats" in o.metrics}
    assert threads == {2}


def test_the_client_seed_reaches_the_actors_but_not_the_servers_environment(points):
    # run_points hands the seed to the Ray workers through the environment Ray's processes inherit at ray.init and
    # restores the driver's right after: the ServerApp's rounds ran without it, the clients ran seeded
    assert points["server_env"] and all(v in (None, "") for v in points["server_env"])
    _, point = points["l1_two_rounds"]
    assert point["privacy"]["randomness"] == "reproducible"


def _attack_both_ends(points, clear: str, private: str):
    _, p_clear = points[clear]
    _, p_priv = points[private]
    for name, a in p_clear["per_seed"][0]["attacks"].items():
        _, hi = binomial_interval(a["majority_baseline"], a["num_targets"])
        assert a["accuracy"] > hi and a["accuracy"] > a["majority_baseline"] + 0.03, (name, a)
    for name, a in p_priv["per_seed"][0]["attacks"].items():
        # labels travel in the clear: the null is the majority, or the majority given the label when the label
        # itself leaks the attribute (blog topics do); the attack must sit at one of them and under its ceiling
        bases = [a["majority_baseline"], a.get("majority_given_label_baseline", a["majority_baseline"])]
        cis = [binomial_interval(b, a["num_targets"]) for b in bases]
        assert any(lo <= a["accuracy"] <= hi for lo, hi in cis), (name, a)
        assert a["accuracy_ci95"][0] <= a["ceiling"] and not a["violation"], (name, a)


def test_attack_at_both_ends_on_the_default_data(points):
    _attack_both_ends(points, "none", "l1_tiny_eps")


def test_attack_at_both_ends_on_the_blog_data(points):
    if "blog_none" not in points:
        pytest.skip("staged blog data not available")
    _attack_both_ends(points, "blog_none", "blog_tiny_eps")


def test_reproducible_mode_is_labelled_and_a_server_holding_the_client_seed_removes_the_noise(points):
    from tests.federation.test_threat_model import best_recomputation

    cfg, point = points["l1_two_rounds"]
    assert point["privacy"]["randomness"] == "reproducible"
    assert all("run.client-seed" not in o.configs.get("config", {}) for o in point["sent"])  # not via the server
    prep = pipeline.prepare(cfg, features="cached")
    feats = np.asarray(prep.features, np.float32)
    k = len(prep.ds.label_names)
    assert best_recomputation(point, cfg, feats, prep.ds.labels, k)["residual"] > 0.3  # seed unknown: no
    # the known-bad variant: given the client seed, the server's recomputation is exact (the attack has power)
    assert best_recomputation(point, cfg, feats, prep.ds.labels, k, frozenset({CLIENT_SEED}))["residual"] == 0.0


def test_points_that_differ_only_in_the_attacker_share_one_collection(points):
    # issue #38: the eavesdropper is passive, so a point that differs only in attack.* is served on the traffic
    # already collected (no round asked of the clients again, nothing new released or charged) and equals the
    # same point run alone (the plain loop: the Flower path's reference, test_flower_path_reproduces_the_plain_loop)
    cfg, first = points["l1_tiny_eps"]
    other_cfg, shared = points["l1_tiny_eps_attacker"]
    assert points["collected"].count("l1_tiny_eps") == cfg.federation.rounds * cfg.run.seeds
    assert "l1_tiny_eps_attacker" not in points["collected"]  # a second collection would be listed here
    a, b = first["per_seed"][0], shared["per_seed"][0]
    assert b["utility"] == a["utility"] and b["utility"]["on_device"]["available"] is True
    assert b["messages_observed"] == a["messages_observed"] and first["privacy"] == shared["privacy"]
    alone = pipeline.run_plain(other_cfg)["per_seed"][0]
    assert b["utility"] == alone["utility"] and b["attacks"] == alone["attacks"]
    assert b["attacks"] != a["attacks"]  # each point ran its own attacker on the shared traffic


def test_reproducible_mode_gives_identical_numbers_run_to_run(points):
    cfg, point = points["l1_tiny_eps"]
    again = pipeline.run_plain(cfg)
    a, b = point["per_seed"][0], again["per_seed"][0]
    assert a["utility"] == b["utility"] and a["attacks"] == b["attacks"]
