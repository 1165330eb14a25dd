"""`fl-privtext run`: validate, pre-extract into the cache, then run the Flower simulation (Ray backend).

`run_points` runs many experiment points (a sweep) inside ONE simulation, so Flower/Ray start-up is paid once and
every point still goes through the federated path: `fl_privtext.federation.simulation` starts it, and each point's
traffic is ordered by `fl_privtext.pipeline.federated.serve_point`.

The clients' randomness: secret (OS entropy) unless ``run.client-seed`` is set; then the seed reaches the Ray workers
as the ``FL_PRIVTEXT_CLIENT_SEED`` environment variable, and the ServerApp gets the points WITHOUT it (`_server_view`).
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from fl_privtext.client import ClientPolicy, mechanism_for
from fl_privtext.config import ClientConfig, ExperimentConfig
from fl_privtext.extract import resolve_cache_dir
from fl_privtext.federation.simulation import fixed_costs, quiet_env, simulate
from fl_privtext.federation.training import check_training
from fl_privtext.learn import warm_up
from fl_privtext.memory import check_memory_budget, drop_dataset_pages
from fl_privtext.pipeline.checks import check_extractor, check_output, check_resources
from fl_privtext.pipeline.clients import build_app
from fl_privtext.pipeline.federated import serve
from fl_privtext.pipeline.point import run_plain
from fl_privtext.pipeline.preparation import Prepared, load, prepare
from fl_privtext.progress import run_log
from fl_privtext.public import PublicSpec, public_projection
from fl_privtext.report import finalize
from fl_privtext.report.tracking import Tracker
from fl_privtext.rundir import claim
from fl_privtext.threads import fork_safe, local_actors
from fl_privtext.traffic import Round


def validate(cfg: ExperimentConfig) -> Prepared:
    """Checks that need the data (cheap, before any extraction or Flower start); returns the prepared split."""
    check_resources(cfg.federation, cfg.extractor)
    check_extractor(cfg.extractor)
    n_users = load(cfg).num_users
    if cfg.federation.num_clients > n_users:
        raise ValueError(
            f"federation.num-clients={cfg.federation.num_clients} exceeds the {n_users} users of dataset "
            f"{cfg.data.name!r}; use at most {n_users} clients."
        )
    prep = prepare(cfg, features="none")
    # the budget (run.memory-gb) against the calibrated estimate of this run's peak, before Ray or extraction; the
    # largest reply: a client's whole shard, or its slice of one round under the stream schedule
    rounds = cfg.federation.rounds if cfg.federation.schedule == "stream" else 1
    reply = max((-(-len(s) // rounds) for s in prep.shards), default=0)
    check_memory_budget(cfg.run.memory_gb, len(prep.ds), int(prep.extractor.dim), local_actors(cfg.federation),
                        reply_records=reply)
    if cfg.federation.schedule == "stream" and min(len(s) for s in prep.shards) < cfg.federation.rounds:
        raise ValueError(
            f"federation.schedule='stream' spreads each client's users over {cfg.federation.rounds} rounds, but a "
            f"client holds only {min(len(s) for s in prep.shards)}; lower federation.rounds or the client count."
        )
    try:
        # unknown mechanism / bad parameters fail here, before any work (a pca projection needs the real width)
        # server.aggregate = secagg: the statistics' clients apply the projection, no mechanism does
        check = cfg if cfg.server.aggregate != "secagg" else dataclasses.replace(
            cfg, privacy=dataclasses.replace(cfg.privacy, projection="none", proj_dim=0))
        width = int(prep.extractor.dim) if check.privacy.projection != "none" else 8
        mechanism_for(PublicSpec.of(check), width)
    except ValueError as exc:  # the mechanism names its parameter; say which config section holds it
        raise ValueError(f"[privacy] (privacy.mechanism={cfg.privacy.mechanism!r}): {exc}") from None
    if cfg.train.rounds > 0 and cfg.client.max_epsilon != float("inf"):
        raise ValueError(f"train.rounds = {cfg.train.rounds} (Phase A) with client.max-epsilon = "
                         f"{cfg.client.max_epsilon:g}: a Phase A update costs inf per user (the server sees it in the "
                         "clear), so the clients would refuse it; leave client.max-epsilon = inf or train.rounds = 0.")
    if cfg.train.rounds > 0:
        check_training(cfg, prep)
    if cfg.attack.enabled and not prep.ds.attributes:
        logging.getLogger(__name__).info("dataset %s has no private attributes: no attack is run", prep.ds.name)
    return prep


def _server_view(cfg: ExperimentConfig) -> ExperimentConfig:
    """The point as the untrusted server may hold it: without the clients' seed and without their [client] policy
    (the defaults stand in; the server never sends them, `fl_privtext.federation.requests.query`)."""
    return dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, client_seed=None), client=ClientConfig())


def run_points(points: Sequence[ExperimentConfig], *, keep_observations: bool = False,
               on_result: Callable[[int, dict[str, Any]], None] | None = None,
               on_round: Callable[[int, int, int, Round, float], None] | None = None,
               state_dir: str | Path | None = None) -> list[dict[str, Any]]:
    """Serve every point through one Flower simulation. All points must share the federation size/resources.
    ``state_dir``: the clients' state (their per-user ledgers, stored answers, refusal logs), kept across calls
    (`fl-privtext run --client-state DIR`; `fl-privtext ledger DIR` reads it); None: a temporary one, removed after.
    ``on_result(i, point)`` gets each point's result as soon as it is computed (in a worker thread);
    ``on_round(i, seed, round, Round, seconds)`` each round as soon as its uploads are in (per-round metrics).

    Every point is validated before anything starts. Then Ray starts while a driver thread fills the feature
    cache and saves the client-data snapshot that actors map in (instead of re-parsing the dataset);
    the server's computation of each point runs in a worker thread, overlapping the next point's uploads and,
    after the last point, Flower's shutdown (`fl_privtext.federation.simulation.simulate`).
    """
    t_start = time.perf_counter()
    clock: dict[str, float] = {}  # seconds since t_start: the simulation's fixed costs (result["simulation"])

    def mark(name: str) -> None:
        clock.setdefault(name, time.perf_counter() - t_start)

    quiet_env()
    first = points[0].federation
    for p in points:
        f = p.federation
        if (f.num_clients, f.client_cpus, f.client_gpus, f.ray_address, f.client_threads, p.run.client_seed) != (
            first.num_clients, first.client_cpus, first.client_gpus, first.ray_address, first.client_threads,
                points[0].run.client_seed):
            raise ValueError("All points of one simulation must share federation.num-clients, client-cpus, "
                             "client-gpus, ray-address, client-threads and run.client-seed.")
    refuse_mixed_policy(points)  # a no-privacy entry beside a private one, before anything starts
    for p in points:
        validate(p)  # every point, before anything starts
    policy = _client_policy(points)
    # the clients' ledgers (each node's own directory under it): kept where the caller says, else this call's only
    keep_state = state_dir is not None
    state = str(Path(state_dir).resolve()) if state_dir is not None else tempfile.mkdtemp(prefix="fl-privtext-clients-")
    Path(state).mkdir(parents=True, exist_ok=True)
    served = [_server_view(p) for p in points]

    def restore(i: int, result: dict[str, Any]) -> None:
        result["config"] = points[i]  # the driver's own record (with run.client-seed) for results.json
        result["simulation"] = clock  # filled in further until run_points returns
        ran, asked = result["privacy"]["randomness"], points[i].run.randomness
        if ran != asked:
            raise RuntimeError(f"run.client-seed asks for {asked!r} client randomness but the clients ran {ran!r}: "
                               "the seed did not reach them (an already running Ray cluster keeps its workers' "
                               "environment: set FL_PRIVTEXT_CLIENT_SEED there, or unset run.client-seed).")
        if on_result is not None:
            on_result(i, result)

    def round_done(i: int, seed: int, rnd: int, r: Round, dt: float) -> None:
        mark("first_round_done")  # the first round includes the actors' start-up
        if on_round is not None:
            on_round(i, seed, rnd, r, dt)

    def serve_all(grid: Any, snapshots: list[str], submit: Callable[..., Any], settle: Callable[[], None]) -> None:
        serve(grid, served, snapshots=snapshots, keep_observations=keep_observations, on_result=restore,
              submit=submit, on_round=round_done, settle=settle)

    driver = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fl-privtext-driver")
    try:
        mark("validated")
        prepared = driver.submit(_prepare_driver, points)  # fills the cache while the simulation starts Ray
        results = simulate(points[0], client_app=build_app(), serve_all=serve_all, prepared=prepared,
                           policy=policy, state_dir=state, keep_state=keep_state, mark=mark)
    except BaseException:
        # Ctrl-C: do not wait for the extraction thread (the cache stores only complete, atomically renamed
        # entries, so abandoning it loses no cached data and corrupts nothing)
        driver.shutdown(wait=False, cancel_futures=True)
        raise
    driver.shutdown(wait=True)
    if len(results) != len(points):
        raise RuntimeError(f"The simulation returned {len(results)} of {len(points)} results.")
    clock.update(fixed_costs(clock))
    return results


@fork_safe  # it overlaps ray.init's forks: BLAS single-threaded (`fl_privtext.threads.limited`, fork hazard)
def _prepare_driver(points: Sequence[ExperimentConfig]) -> list[str]:
    """The driver's work while Ray starts: fill the feature cache, save each point's client-data snapshot, and
    warm up the server's trainer (torch's lazy imports). Returns the snapshot paths."""
    snapshots = [_snapshot(p) for p in points]
    warm_up()
    return snapshots


def _snapshot(cfg: ExperimentConfig) -> str:
    """Fill the feature cache once (on the driver), store the public pca map (`fl_privtext.public`: every client
    reads it instead of fitting its own) and save the clients' snapshot; its path, or "" when clients must load
    the data themselves (word dropout extracts on the client)."""
    prep = prepare(cfg, features="extract", progress=cfg.run.progress)
    if cfg.privacy.projection == "pca":
        public_projection(PublicSpec.of(cfg), int(prep.extractor.dim))
    if cfg.privacy.mu > 0 or not isinstance(prep.features, np.memmap):
        return ""
    path = prep.client.save(resolve_cache_dir(cfg.extractor.cache_dir or None))
    drop_dataset_pages(prep.ds)  # the columns the snapshot read (`fl_privtext.data.TextDataset.hold`)
    return str(path)


def releases_in_clear(cfg: ExperimentConfig) -> bool:
    """Whether a point's clients hand the server their clean features and labels: ``privacy.mechanism = none`` with
    per-user uploads (a no-privacy reference point). Under ``server.aggregate = secagg`` the clients' own noise
    (``client.secagg-epsilon``) protects the sums, so that point is a private one."""
    return cfg.privacy.mechanism == "none" and cfg.server.aggregate != "secagg"


def _client_policy(points: Sequence[ExperimentConfig]) -> str:
    """The clients' policy of this simulation (`fl_privtext.client.policy`): one entry per point, from the driver's
    own configs (the points the clients agree to take part in, their [client] sections); JSON for the workers'
    environment, never given to the ServerApp, with the digest of the one shard they name (a client uses a
    snapshot only when it holds that shard).

    Clients that hold a no-privacy entry (`releases_in_clear`) would give their clean data to any server that
    asks for it, whatever the private point's epsilon says: such an entry never sits beside a private one (the
    no-privacy reference runs in its own federation, `run_experiment`; a sweep's in its own simulation group)."""
    refuse_mixed_policy(points)
    prep = prepare(points[0], features="none")  # validate() memoised the split
    digest = prep.client.shard_digest()
    drop_dataset_pages(prep.ds)  # the columns the digest read (`fl_privtext.data.TextDataset.hold`)
    return ClientPolicy.from_points(list(points), shard_digest=digest).to_json()


def refuse_mixed_policy(points: Sequence[ExperimentConfig]) -> None:
    """ValueError when no-privacy points (`releases_in_clear`) would share clients with private ones."""
    clear = [p for p in points if releases_in_clear(p)]
    if clear and len(clear) < len(points):
        raise ValueError(f"A client policy with {len(clear)} no-privacy point(s) (privacy.mechanism = none) beside "
                         f"{len(points) - len(clear)} private one(s) would let the server of the private points "
                         "ask the same clients for their clean data: run the no-privacy points in a separate "
                         "run_points call (their own federation).")


def run_experiment(cfg: ExperimentConfig, *, output: str | Path | None = None, echo: bool = True,
                   keep_observations: bool = False, overwrite: bool = False,
                   client_state: str | Path | None = None) -> dict[str, Any]:
    """One federated experiment: returns the results dict (also written to ``output``, with the per-round
    ``metrics.jsonl`` and the trackers ``run.tensorboard`` / ``run.mlflow`` enable). ``keep_observations`` adds
    the eavesdropper's raw observations of the main point under ``observations`` (not written to disk).
    The output directory is claimed for the run (`fl_privtext.rundir.claim`): a directory another run is using,
    or one holding a finished run's results.json (unless ``overwrite``), is refused before any work.
    ``client_state``: the clients' state directory (their per-user ledgers), kept across runs; default
    ``<output>/clients`` (this run's own)."""
    t0 = time.perf_counter()
    if output or cfg.run.output:
        check_output(output or cfg.run.output)  # before the work, not after it
    reference = baseline_point(cfg)
    out = Path(output or cfg.run.output or Path("runs") / time.strftime("%Y%m%d-%H%M%S"))
    # run.log: the full trace of a failing client (one line on the console), Flower's warnings
    with claim(out, overwrite=overwrite), run_log(out), Tracker(cfg, out, points=("main", "baseline")) as tracker:
        (main,) = run_points([cfg], on_round=tracker.on_round, keep_observations=keep_observations,
                             state_dir=client_state if client_state is not None else out / "clients")
        base, source = None, ""
        if reference is not None:
            base, source = no_privacy_reference(reference, on_round=lambda *r: tracker.on_round(1, *r))
        results = finalize(main, cfg, total_s=time.perf_counter() - t0, output=out, echo=echo, baseline=base,
                           baseline_source=source)
        tracker.on_results(results)
    if keep_observations:
        results["observations"] = main.get("observations", [])
    return results


REFEREE_SOURCE = ("the referee's plain loop (fl_privtext.pipeline.run_plain) on the same data and seeds, without "
                  "clients: no client, actor, policy or ledger of the private point's federation took part")
OWN_FEDERATION_SOURCE = ("its own Flower simulation after the private point's: its own clients, actors, policy "
                         "and ledgers, nothing shared with the private point's federation")


def plain_blocker(cfg: ExperimentConfig) -> str:
    """"" when the referee's plain loop (`fl_privtext.pipeline.run_plain`) computes what a federation would for
    ``cfg`` (tests/federation/test_simulation.py: the Flower path equals it); else the setting it does not run."""
    return ("federation.shuffle = true" if cfg.federation.shuffle else
            "train.rounds > 0 (Phase A)" if cfg.train.rounds > 0 else
            "server.aggregate = secagg" if cfg.server.aggregate == "secagg" else "")


def no_privacy_reference(reference: ExperimentConfig, *,
                         on_round: Callable[[int, int, Round, float], None] | None = None
                         ) -> tuple[dict[str, Any], str]:
    """The no-privacy reference point (`baseline_point`), outside the private point's federation: the referee's
    plain loop where it computes the same figures (no client at all; the Flower path equals it), else a Flower
    simulation of its own (fresh Ray workers whose policy holds only this point, their own ledgers). Returns the
    served point and how it was computed (results.json ``baseline.computed_by``)."""
    why = plain_blocker(reference)
    if not why:
        return run_plain(reference, on_round=on_round), REFEREE_SOURCE
    (point,) = run_points([reference], on_round=None if on_round is None else lambda _i, *r: on_round(*r))
    return point, f"{OWN_FEDERATION_SOURCE} (the plain loop does not run {why})"


def baseline_point(cfg: ExperimentConfig) -> ExperimentConfig | None:
    """The counterfactual "without privacy" of ``cfg`` (None when ``run.baseline = false`` or ``cfg`` is itself
    ``none``): mechanism ``none`` and clean labels, uncapped, per-user uploads (a secure-sum point's reference is
    the same task WITHOUT the sum's noise: under ``server.aggregate = secagg`` with mechanism ``none`` the clients
    still add the sum's Gaussian noise at ``client.secagg-epsilon``, so that reference sat at the majority on the
    default data, 0.610, and the report warned "training failed"). A referee's reference computed outside the
    private point's federation (`run_experiment`), never a policy entry of clients that serve a private point
    (`_client_policy`)."""
    if not cfg.run.baseline or releases_in_clear(cfg):
        return None
    clear = dataclasses.replace(cfg.privacy, mechanism="none", mu=0.0, label_epsilon=0.0, projection="none",
                                proj_dim=0)
    return dataclasses.replace(cfg, privacy=clear, client=dataclasses.replace(cfg.client, max_epsilon=float("inf")),
                               server=dataclasses.replace(cfg.server, aggregate="uploads"))


def run_from_cli(*, config_path: str | None, sets: dict[str, str], output: str | None, quiet: bool,
                 overwrite: bool = False, client_state: str | None = None) -> None:
    if quiet:
        sets = {**sets, "run.progress": "false"}
    cfg = ExperimentConfig.load(config_path, sets)
    run_experiment(cfg, output=output, overwrite=overwrite, client_state=client_state)
