"""A client's class statistics for secure aggregation (``server.aggregate = secagg``), with its share of the noise.

Instead of per-user uploads, each client sends ONE vector through SecAgg+: for its non-test users (train and aux
roles, the users whose uploads the server would train on) and per class k,

- ``counts[k]``  = sum over users u of (records of u in class k) / n_u,
- ``sums[k]``    = sum over users u of sum over u's records r of class k of x_r / n_u,
- ``second``     (optional, ``StatsLayout.second``) = sum over users of sum_r x_r x_r^T / n_u, sent as its upper
  triangle with the off-diagonal entries scaled by sqrt(2) (so the vector's L2 norm is the matrix's Frobenius norm),

where x_r = r(x) / ||r(x)||_2 (unit L2 norm; r(x) = the representation, or its image under the public map of
``privacy.projection`` = random | pca, `stats_projection`, applied before the normalisation: the layout's width is
then ``privacy.proj-dim``, and the on-device evaluation maps the test users' records the same way, `stats_input`) and
n_u is the number of u's records this client holds. The label of each record is inside the statistic: no label
leaves the client on its own. The second moment may be sent scaled by a public weight beta
(``StatsLayout.second_weight``, 1 by default).

Two folds (``StatsLayout.folds = 2``, what ``server.learner = auto`` asks for: the server's model selection,
`fl_privtext.server.aggregate_selection`): the vector is two such blocks, block f holding the statistics of the users
whose `user_fold` (a keyed hash of the user id with the request's PUBLIC ``fold_seed``: no data enters) is f.

Privacy contract (the mechanism, documented here where it is applied):
- Neighbouring relation: user-level replacement; all records of one user are replaced by arbitrary records (any
  number, any labels).
- Sensitivity: a user contributes c_k = n_{u,k} / n_u (a probability vector over classes), s_k with
  ||s_k|| <= c_k and M with ||M||_F <= 1. Jointly over counts and sums, per class
  (c_k - c'_k)^2 + ||s_k - s'_k||^2 <= (c_k - c'_k)^2 + (c_k + c'_k)^2 = 2 (c_k^2 + c'_k^2), and
  sum_k c_k^2 <= 1, so the squared distance is <= 4 (attained: one class, opposite unit vectors); ||M - M'||_F <= 2,
  i.e. <= 2 beta for the weighted block. The vector's L2 sensitivity is 2, or sqrt(4 + 4 beta^2) with ``second``.
  Two folds: the same. A user's records all lie in the block of its fold; replacing them (the id kept) moves that
  block only, by at most the bound above. Were the replacement also to change the id (a user of the other fold),
  one block loses a contribution and the other gains one: squared distance <= |a|^2 + |b|^2, each user's own
  contribution having squared norm sum_k (c_k^2 + ||s_k||^2) + beta^2 ||M||_F^2 <= 2 + beta^2, so <= 4 + 2 beta^2,
  within the bound. Concatenating overlapping blocks (every user's statistics plus one fold's again) would not be:
  a fold-0 user then moves two blocks, sqrt(2) times further (tested).
- Noise: the sum over c >= t contributing clients carries N(0, c * sigma_share^2) per coordinate, with
  sigma_share = sigma(eps, delta, sensitivity) / sqrt(t), sigma from the analytic Gaussian mechanism (Balle & Wang,
  ICML 2018, Thm 8). t (``client.secagg-min-clients``), eps, delta (``client.secagg-epsilon`` / ``-delta``) are the
  CLIENT's policy, never the server's message; a request promising fewer than t contributors is refused, as is one
  asking for a larger epsilon than the policy's.
- Guarantee: (eps, delta)-DP of the released sum against the server (and any observer of the SecAgg+ traffic),
  provided at least t clients' noise is in it and SecAgg+ hides each masked vector (its threat model: an
  honest-but-curious server; a server that drops or forges clients to leave fewer than t in the sum gets less noise,
  which is why the client only takes part when the protocol's threshold promises t). With c > t contributors the
  sum has more noise: `central_epsilon` gives the actual epsilon. The client charges each of its users eps once per
  release in its ledger (basic composition over repetitions).
- Not deployment-grade: floating-point Gaussian noise added before SecAgg+'s quantisation (Mironov 2012; the
  distributed discrete Gaussian of Kairouz, Liu & Steinke, ICML 2021, is the deployment choice). SecAgg+
  quantises to ``clipping_range * 2 / quantization_range`` steps; that rounding is post-processing of the noisy
  vector.

Three public entries are appended after the noise (data-independent, no privacy cost): 1 (the contributor count),
sigma_share^2 (so the server knows the sum's noise variance exactly, whatever the dropouts) and 1 when the client
runs the reproducible simulation mode (a client seed) else 0 (the clients' own statement, as an upload's "seeded").

Why the second moment is optional and off by default: at d = 384 (MiniLM) the noise of a d x d second moment has a
spectral norm of about 2 sigma sqrt(d) (GOE), i.e. ~0.08 per user at eps 1 with blog's 5,208 training users, while the
within-class covariance of unit vectors has mean eigenvalue <= 1/d ~ 0.003: LDA from it is mostly noise (measured on
blog 10k: lda 0.53 vs centroid 0.58 on-device at eps 1), and it costs sqrt(2) more noise on the means.
`fl_privtext.server.aggregate.wants_second` asks for it only when it is resolvable (one fold). A public
low-dimensional projection (``privacy.projection = pca`` on AG news, the public data for blog) loses more signal than
it saves noise on blog 10k (docs/results/secagg_selection.md).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fl_privtext.client.ledger import Ledger
from fl_privtext.client.policy import (
    ClientPolicy,
    Refused,
    checked_entry,
    release_digest,
    release_key,
    release_stats,
)
from fl_privtext.client.upload import ClientData, client_generator, point_key
from fl_privtext.config import ExperimentConfig
from fl_privtext.memory import take_rows
from fl_privtext.privacy.calibration import analytic_gaussian_sigma, gaussian_delta
from fl_privtext.privacy.projection import PublicProjection, random_projection
from fl_privtext.public import PublicSpec, public_projection  # loads the public dataset when called: pca only

__all__ = [
    "PUBLIC_TAIL",
    "TASK",
    "StatsLayout",
    "central_epsilon",
    "client_statistics",
    "release_statistics",
    "session_key",
    "share_noise_std",
    "stats_input",
    "stats_projection",
    "user_fold",
    "user_statistics",
]

TASK = "phase-b-stats"  # the secure-sum task name (fl_privtext.federation.secagg.SECAGG_TASKS)
PUBLIC_TAIL = 3  # entries after the noisy statistics: [1 (one contributor), sigma_share^2, 1 if seeded else 0]


@dataclass(frozen=True)
class StatsLayout:
    """What the statistics vector holds (the server's request; public): K classes, width D, second moment or not,
    and ``folds`` blocks (1, or 2 for the server's model selection: `user_fold` with the public ``fold_seed``)."""

    num_classes: int
    dim: int
    second: bool = False
    folds: int = 1
    fold_seed: int = 0
    second_weight: float = 1.0  # beta: the second moment is sent as beta * M (public; its share of the sensitivity)

    def __post_init__(self) -> None:
        if self.num_classes < 1 or self.dim < 1:
            raise ValueError(f"StatsLayout needs num_classes >= 1 and dim >= 1; got {self.num_classes}, {self.dim}.")
        if self.folds not in (1, 2):
            raise ValueError(f"StatsLayout needs folds = 1 or 2; got {self.folds}.")
        if not 0 < self.second_weight <= 1:
            raise ValueError(f"StatsLayout needs 0 < second_weight <= 1; got {self.second_weight}.")

    def __repr__(self) -> str:  # one fold: the repr of the layouts before folds existed (the noise streams' key)
        extra = f", folds={self.folds}, fold_seed={self.fold_seed}" if self.folds > 1 else ""
        extra += f", second_weight={self.second_weight!r}" if self.second and self.second_weight != 1 else ""
        return f"StatsLayout(num_classes={self.num_classes}, dim={self.dim}, second={self.second}{extra})"

    @property
    def second_size(self) -> int:
        return self.dim * (self.dim + 1) // 2 if self.second else 0

    @property
    def block_size(self) -> int:
        """Length of one fold's block: counts, sums and the second moment's upper triangle."""
        return self.num_classes * (1 + self.dim) + self.second_size

    @property
    def size(self) -> int:
        """Length of the noisy part (the vector sent is ``size + PUBLIC_TAIL`` long)."""
        return self.folds * self.block_size

    @property
    def sensitivity(self) -> float:
        """L2 sensitivity of the statistics vector under user-level replacement (module docstring; the same
        with two folds: a user lies in one block)."""
        return math.sqrt(4.0 + (4.0 * self.second_weight ** 2 if self.second else 0.0))

    @property
    def second_var(self) -> float:
        """Factor of the second moment's noise variance (as read, divided by beta) over the vector's."""
        return 1.0 / self.second_weight ** 2 if self.second else 0.0

    def split(self, vec: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(counts (K,), sums (K, D), second (D, D) symmetric or None) of a statistics vector (tail ignored), summed
        over the folds (the statistics of every user)."""
        parts = [self.split_fold(vec, f) for f in range(self.folds)]
        counts = np.sum([p[0] for p in parts], axis=0)
        sums = np.sum([p[1] for p in parts], axis=0)
        second = np.sum([p[2] for p in parts if p[2] is not None], axis=0) if self.second else None
        return counts, sums, second

    def split_fold(self, vec: np.ndarray, fold: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(counts, sums, second or None) of fold ``fold``'s block."""
        v = np.asarray(vec, np.float64)
        k, d = self.num_classes, self.dim
        if v.shape[0] not in (self.size, self.size + PUBLIC_TAIL):
            raise ValueError(f"a statistics vector of this layout has {self.size} (+{PUBLIC_TAIL}) entries; "
                             f"got {v.shape[0]}.")
        if not 0 <= fold < self.folds:
            raise ValueError(f"fold must lie in 0..{self.folds - 1}; got {fold}.")
        v = v[fold * self.block_size:(fold + 1) * self.block_size]
        counts, sums = v[:k], v[k:k + k * d].reshape(k, d)
        if not self.second:
            return counts, sums, None
        iu = np.triu_indices(d)
        m = np.zeros((d, d))
        m[iu] = v[k + k * d:] / np.where(iu[0] == iu[1], 1.0, math.sqrt(2.0)) / self.second_weight
        m = m + np.triu(m, 1).T
        return counts, sums, m


def user_fold(users: np.ndarray, fold_seed: int, folds: int = 2) -> np.ndarray:
    """(N,) the fold of each user id: the first 8 bytes of sha256("fl_privtext-fold", seed, id) modulo ``folds``. A
    PUBLIC rule (anybody can compute it from the id and the public seed; no data enters): a user lies in exactly
    one fold, whatever records it holds, so replacing its records moves one fold's block only."""
    out = np.empty(len(users), np.int64)
    memo: dict[str, int] = {}
    for i, u in enumerate(np.asarray(users).tolist()):
        key = str(u)
        if key not in memo:
            h = hashlib.sha256(f"fl_privtext-fold:{int(fold_seed)}:{key}".encode()).digest()
            memo[key] = int.from_bytes(h[:8], "big") % folds
        out[i] = memo[key]
    return out


def stats_projection(public: PublicSpec, dim: int) -> PublicProjection | None:
    """The public map the clients apply before normalising (``privacy.projection`` = random | pca with
    ``privacy.proj-dim``; None for none): its output width is the layout's ``dim``."""
    p = public.privacy
    if p.projection == "none":
        return None
    if p.projection == "random":
        return random_projection(dim, p.proj_dim, p.proj_seed)
    return public_projection(public, dim)


def stats_input(x: np.ndarray, projection: PublicProjection | None = None) -> np.ndarray:
    """(N, D) -> the records as the statistics hold them: projected (public map, if any), then unit L2 norm
    (a zero row stays zero). The on-device evaluation applies the same map to the test users' records."""
    x = np.asarray(x, np.float64)
    if projection is not None:
        x = np.asarray(projection.apply(x), np.float64)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)


def user_statistics(x: np.ndarray, y: np.ndarray, users: np.ndarray, layout: StatsLayout,
                    projection: PublicProjection | None = None) -> np.ndarray:
    """The clean statistics vector (``layout.size``,) of records ``x`` (N, D) with labels ``y`` (N,) held by
    ``users`` (N,): each record mapped by `stats_input` (``projection``, then unit L2 norm) and weighted
    1 / (its user's record count); with two folds, each user's records go into its `user_fold` block."""
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.int64)
    width = layout.dim if projection is None else projection.in_dim
    if projection is not None and projection.out_dim != layout.dim:
        raise ValueError(f"the projection maps to {projection.out_dim} dimensions; the layout has {layout.dim}.")
    if x.ndim != 2 or x.shape[1] != width or len(y) != len(x) or len(users) != len(x):
        raise ValueError(f"user_statistics expects x (N, {width}) with N labels and N users; got "
                         f"{x.shape}, {len(y)}, {len(users)}.")
    if len(y) and (y.min() < 0 or y.max() >= layout.num_classes):
        raise ValueError(f"labels must lie in 0..{layout.num_classes - 1}.")
    x = stats_input(x, projection)
    _, inv, per_user = np.unique(np.asarray(users), return_inverse=True, return_counts=True)
    w = 1.0 / per_user[inv]  # (N,) each user's records weigh 1 in total
    fold = user_fold(users, layout.fold_seed, layout.folds) if layout.folds > 1 else np.zeros(len(y), np.int64)
    blocks = []
    for f in range(layout.folds):
        wf = np.where(fold == f, w, 0.0)
        onehot = np.eye(layout.num_classes)[y] * wf[:, None]  # (N, K)
        blocks += [onehot.sum(0), (onehot.T @ x).reshape(-1)]
        if layout.second:
            m = (x * wf[:, None]).T @ x  # (D, D)
            iu = np.triu_indices(layout.dim)
            blocks.append(m[iu] * np.where(iu[0] == iu[1], 1.0, math.sqrt(2.0)) * layout.second_weight)
    return np.concatenate(blocks)


def share_noise_std(epsilon: float, delta: float, sensitivity: float, min_contributors: int) -> float:
    """sigma_share: the noise std one client adds so that the sum over ``min_contributors`` clients is the
    analytic Gaussian mechanism at (epsilon, delta) for L2 ``sensitivity``."""
    if min_contributors < 1:
        raise ValueError(f"min_contributors must be >= 1; got {min_contributors}.")
    return analytic_gaussian_sigma(epsilon, delta, sensitivity) / math.sqrt(min_contributors)


def central_epsilon(noise_std: float, delta: float, sensitivity: float) -> float:
    """The smallest epsilon at which N(0, noise_std^2) per coordinate is (epsilon, delta)-DP for L2
    ``sensitivity`` (Balle & Wang 2018, Thm 8, inverted by bisection; inf without noise)."""
    if not noise_std > 0:
        return math.inf
    if gaussian_delta(noise_std, 0.0, sensitivity) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while gaussian_delta(noise_std, hi, sensitivity) > delta:
        lo, hi = hi, hi * 2.0
        if hi > 1e6:
            return math.inf
    while hi - lo > 1e-10 * max(hi, 1e-12):
        mid = (lo + hi) / 2
        if gaussian_delta(noise_std, mid, sensitivity) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


def client_statistics(data: ClientData, client: int, layout: StatsLayout,
                      projection: PublicProjection | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The clean statistics of ``client``'s non-test records (through the public ``projection``, if any) and the
    users they concern (each once)."""
    if data.features is None:
        raise ValueError(f"client {client}: secure aggregation of statistics needs the cached representations.")
    rows = np.asarray(data.shards[client], np.int64)
    if data.test is not None:
        rows = rows[~np.asarray(data.test, bool)[rows]]
    rows = np.sort(rows)
    x = np.asarray(take_rows(data.features, rows), np.float64)  # a map's pages dropped as read (issue #38)
    if len(x) and not np.isfinite(x).all():
        raise ValueError(f"client {client}: non-finite representations; this client refuses to contribute.")
    users = data.user_of(rows)
    return user_statistics(x, data.labels_of(rows), users, layout, projection), np.unique(users)


def release_statistics(data: ClientData, client: int, request: ExperimentConfig, seed: int, *,
                       layout: StatsLayout, min_contributors: int, epsilon: float, policy: ClientPolicy,
                       state_dir: str, client_seed: int | None, data_key: str = "",
                       participants: Sequence[int] = ()) -> tuple[np.ndarray, dict[str, Any]]:
    """The vector ``client`` puts into SecAgg+ for repetition ``seed``: its noisy statistics (noise from ITS
    policy) followed by the public tail [1, sigma_share^2, seeded]. ``min_contributors`` and ``epsilon`` are what the
    server's request promises and expects: fewer contributors than ``client.secagg-min-clients`` or a larger
    epsilon than ``client.secagg-epsilon`` is `Refused`. Each user is charged ``client.secagg-epsilon`` once per
    (point, seed, data, participant set) in the ledger; a repeated request in a session with the same participant
    set gets the same vector back (same noise). The returned stats carry the ledger ``key`` (`unmask_once`).

    Why the participant set (``participants``: `fl_privtext.federation.secagg.session_participants`, the node ids
    this client masks with in the SecAgg+ session; empty outside SecAgg+): a stored vector replayed into sessions
    over different sets lets an honest-but-curious server difference the sums. Four sessions over the 3-of-4
    subsets of four clients give T = (S_1 + .. + S_4) / 3 and each client's vector v_i = T - S_(without i),
    whose noise is one share, sigma / sqrt(t): epsilon 2.15 for the 1.0 charged at t = 4. Bound to the set, each
    session over a new set is a new release: fresh noise, each user charged ``client.secagg-epsilon`` again (basic
    composition). Differencing then gains nothing beyond the charge: the sums are independent Gaussian releases,
    each (eps, delta)-DP with at least t clients' fresh shares in it (`require_contributors`), so a client in k of
    them is charged k eps, which covers their composition. A same-set session that would unmask the vector over
    another active set (a dropout after masking) is refused at the unmask stage (`unmask_once`)."""
    entry, cfg = checked_entry(policy, request, seed)
    mine = entry.client
    if min_contributors < mine.secagg_min_clients:
        raise Refused("policy mismatch", f"the request promises {min_contributors} contributing clients, this client's policy needs "
                      f"client.secagg-min-clients = {mine.secagg_min_clients}")
    if epsilon > mine.secagg_epsilon * (1 + 1e-12):
        raise Refused("policy mismatch", f"the request asks for central epsilon {epsilon:g} (less noise), this client's policy runs "
                      f"client.secagg-epsilon = {mine.secagg_epsilon:g}")
    if mine.secagg_epsilon < epsilon / 4 or mine.secagg_delta < 1e-6:
        raise Refused("policy mismatch", f"this client's noise (client.secagg-epsilon = {mine.secagg_epsilon:g}, delta "
                      f"{mine.secagg_delta:g}) would overflow the sum's range, sized for epsilon >= {epsilon / 4:g} "
                      "and delta >= 1e-6")
    if layout.num_classes != data.num_classes:
        raise Refused("malformed request", f"the request's layout has {layout.num_classes} classes, this client's data has "
                      f"{data.num_classes}")
    sigma = share_noise_std(mine.secagg_epsilon, mine.secagg_delta, layout.sensitivity, mine.secagg_min_clients)
    ledger = Ledger(state_dir, client, entry.scope)
    # keyed by what changes the vector (release_key), never the server's or the eavesdropper's settings: a request
    # that differs only in those replays the stored vector instead of buying fresh noise (as uploads do)
    key = release_digest("secagg-stats", seed, release_key(cfg), layout, mine.secagg_min_clients, data_key,
                         session_key(participants))

    # a new participant set draws new noise in the seeded mode too, keyed by the set's ordinal among this release's
    # sessions (node ids are random per Flower run; outside SecAgg+ the plain loop's stream is unchanged). Secret
    # mode draws fresh OS entropy whatever the keys, so it needs no ordinal.
    session = (() if not participants or client_seed is None else
               (ledger.ordinal(release_digest("secagg-sessions", seed, release_key(cfg), layout, data_key),
                               session_key(participants)),))

    def compute(_spent: Any) -> tuple[dict[str, np.ndarray], np.ndarray, float]:
        proj = (None if cfg.privacy.projection == "none" or data.features is None else
                stats_projection(PublicSpec.of(cfg), int(data.features.shape[1])))
        clean, users = client_statistics(data, client, layout, proj)
        g = client_generator(client_seed, "secagg-stats", point_key(cfg), seed, client, str(layout),
                             mine.secagg_epsilon, mine.secagg_delta, mine.secagg_min_clients, *session)
        noisy = clean + g.normal(0.0, sigma, clean.shape)
        tail = [1.0, sigma * sigma, float(client_seed is not None)]
        return {"vector": np.concatenate([noisy, tail])}, users, mine.secagg_epsilon

    answer, charged, top, replayed = ledger.release(key, mine.max_epsilon, compute)
    return np.asarray(answer["vector"], np.float64), {**release_stats(entry.scope, charged, top, replayed), "key": key}


def session_key(participants: Sequence[int]) -> str:
    """The participant set as a ledger key's part (sorted node ids; "" outside SecAgg+)."""
    return ",".join(str(int(n)) for n in sorted(participants))
