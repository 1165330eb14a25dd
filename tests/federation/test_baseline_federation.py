"""The no-privacy reference point lies outside the threat model (issue #34 item 3).

Before, `fl-privtext run` served the reference (mechanism none, uncapped) in the SAME `run_points` call as the
private point: the private point's clients held a policy entry that released their clean features and labels to
any server asking for it (measured: max difference 0.0, 701/701 labels), while results.json claimed the private
point's finite epsilon. Now the clients of a private point never hold such an entry: the reference is the referee's
plain loop (no client at all) or a federation of its own, and the runner refuses a mixed policy.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from fl_privtext import pipeline
from fl_privtext.client import POLICY_ENV, ClientPolicy, Refused
from fl_privtext.client.policy import policy_from
from fl_privtext.config import ExperimentConfig
from fl_privtext.federation import simulation
from fl_privtext.pipeline import runner
from fl_privtext.report.results import _json_safe, baseline_summary

CLIENT_SEED = 918_273_645
SMALL = {"run.progress": False, "federation.num-clients": 2, "federation.rounds": 2, "server.learner": "centroid",
         "attack.learner": "centroid", "attack.extra": False, "server.epochs": 3, "attack.epochs": 3,
         "run.client-seed": CLIENT_SEED, "privacy.mechanism": "laplace-l1", "privacy.epsilon": 1.0}


def _cfg(cache_dir, **sets) -> ExperimentConfig:
    return ExperimentConfig.from_flat({**SMALL, "extractor.cache-dir": str(cache_dir), **sets})


def _none_request(cfg: ExperimentConfig) -> ExperimentConfig:
    """What a malicious server of the private federation asks for: the point without privacy (its server's view)."""
    view = runner._server_view(cfg)
    return dataclasses.replace(view, privacy=dataclasses.replace(view.privacy, mechanism="none", mu=0.0,
                                                                 label_epsilon=0.0, projection="none", proj_dim=0))


def test_the_runner_refuses_a_policy_mixing_no_privacy_and_private_points():
    private = ExperimentConfig.from_flat({"privacy.mechanism": "laplace-l1"})
    clear = runner.baseline_point(private)
    assert clear is not None and runner.releases_in_clear(clear) and not runner.releases_in_clear(private)
    with pytest.raises(ValueError, match="no-privacy point.*beside 1 private one") as exc:
        runner._client_policy([private, clear])
    assert "\n" not in str(exc.value)
    with pytest.raises(ValueError, match="separate run_points call"):
        runner.run_points([clear, private])  # before anything starts (no Ray here)
    # each alone is a valid policy; a secure-sum point without a per-upload mechanism is a private one
    assert runner._client_policy([private]) and runner._client_policy([clear])
    secagg = ExperimentConfig.from_flat({"server.aggregate": "secagg", "privacy.mechanism": "none"})
    assert not runner.releases_in_clear(secagg) and runner._client_policy([secagg, private])
    with pytest.raises(ValueError, match="no-privacy point"):
        runner._client_policy([secagg, clear])


def test_the_old_mixed_policy_released_clean_data_the_new_one_refuses(monkeypatch):
    # the client's own decision on a malicious request for the no-privacy point, with the policy read from the
    # workers' environment as a simulated client reads it (fl_privtext.client.policy.policy_from)
    cfg = ExperimentConfig.from_flat({"privacy.mechanism": "laplace-l1", "client.max-epsilon": 40.0})
    reference = runner.baseline_point(cfg)
    assert reference is not None
    old = ClientPolicy.from_points([cfg, reference]).to_json()  # what run_experiment's clients held before
    monkeypatch.setenv(POLICY_ENV, old)
    entry = policy_from().entry_for(_none_request(cfg))  # answered: clean features and labels, uncapped
    assert entry.pinned["privacy.mechanism"] == "none" and entry.client.max_epsilon == float("inf")
    monkeypatch.setenv(POLICY_ENV, runner._client_policy([cfg]))  # what they hold now
    with pytest.raises(Refused, match="^refused: policy mismatch$"):
        policy_from().entry_for(_none_request(cfg))


@pytest.mark.slow
def test_a_run_computes_its_reference_without_the_private_points_clients(tmp_path, cache_dir, monkeypatch):
    policies: list[list[dict]] = []  # the policy of every federation the run started (what its clients held)
    init_ray = simulation.init_ray

    def recording(*args, **kwargs):
        policies.append(json.loads(kwargs["policy"])["entries"])  # {"shard-digest", "entries"}
        return init_ray(*args, **kwargs)

    monkeypatch.setattr(simulation, "init_ray", recording)
    cfg = _cfg(cache_dir)
    results = runner.run_experiment(cfg, output=tmp_path / "run", echo=False)
    # one federation, the private point's: no entry of it releases clean data
    assert len(policies) == 1 and [e["privacy.mechanism"] for e in policies[0]] == ["laplace-l1"]
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["baseline"]["federation"] == "separate"  # public contract
    assert saved["baseline"]["computed_by"] == runner.REFEREE_SOURCE
    assert saved["baseline"]["server_received"].startswith("clean features and labels of ")
    assert saved["federation"]["server_received"].startswith("privatized uploads of ")
    assert "laplace-l1, epsilon 1 per upload" in saved["federation"]["server_received"]
    # the reference's figures are the plain loop's, which the Flower path equals (test_simulation.py)
    reference = runner.baseline_point(cfg)
    assert reference is not None
    assert saved["baseline_no_privacy"] == _json_safe(baseline_summary(pipeline.run_plain(reference)))
    assert saved["baseline_no_privacy"] == results["baseline_no_privacy"]
    # metrics.jsonl still has the reference's rounds
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["round"] for m in lines if m["event"] == "round" and m["point"] == "baseline"] == [0, 1]


@pytest.mark.slow
def test_where_the_plain_loop_cannot_stand_in_the_reference_has_a_federation_of_its_own(tmp_path, cache_dir,
                                                                                        monkeypatch):
    policies: list[list[dict]] = []
    init_ray = simulation.init_ray

    def recording(*args, **kwargs):
        policies.append(json.loads(kwargs["policy"])["entries"])  # {"shard-digest", "entries"}
        return init_ray(*args, **kwargs)

    monkeypatch.setattr(simulation, "init_ray", recording)
    cfg = _cfg(cache_dir, **{"federation.shuffle": True, "federation.rounds": 1, "attack.enabled": False,
                             "server.on-device": False})
    assert runner.plain_blocker(cfg) == "federation.shuffle = true"
    runner.run_experiment(cfg, output=tmp_path / "run", echo=False)
    # two federations, one after the other: the private point's, then the reference's own
    assert [[e["privacy.mechanism"] for e in p] for p in policies] == [["laplace-l1"], ["none"]]
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["baseline"]["federation"] == "separate"
    assert saved["baseline"]["computed_by"].startswith(runner.OWN_FEDERATION_SOURCE)
    assert saved["federation"]["server_received"].startswith("shuffled, sender-free privatized uploads")


@pytest.mark.parametrize("mechanism", ["none", "privunitg"])
def test_a_secure_sum_points_reference_is_the_task_without_the_sums_noise(mechanism):
    # under server.aggregate = secagg the clients add the sum's noise whatever privacy.mechanism says: a reference
    # that kept the secure sum was still private (central epsilon client.secagg-epsilon) and sat at the majority
    secagg = ExperimentConfig.from_flat({"server.aggregate": "secagg", "privacy.mechanism": mechanism,
                                         "server.learner": "auto"})
    reference = runner.baseline_point(secagg)
    assert reference is not None and reference.server.aggregate == "uploads"
    assert reference.privacy.mechanism == "none" and runner.releases_in_clear(reference)
    assert runner.plain_blocker(reference) == ""  # the referee's plain loop, no client at all
    assert runner.baseline_point(ExperimentConfig.from_flat({"privacy.mechanism": "none"})) is None
