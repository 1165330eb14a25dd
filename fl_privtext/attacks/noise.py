"""The eavesdropper's noise law: the server's (`fl_privtext.server.noise.noise_law`) for the attacker's inputs.

The attacker knows what the server knows (Kerckhoffs: the mechanism and its parameters; public data), so its
learners get the same law, built the same way: the full structured moments for the cap mechanisms (PrivUnitG,
PrivUnit, Duchi: a I + b E[v v^T] - E[m m^T]), with E||E[u | x]||^2 measured on the attacker's own public texts
(its view's ``public_features`` through the mechanism's public projection and clipping) where the server measures
it on ``privacy.public-data`` (`fl_privtext.server.training.public_input_norm2`).

The attacker's inputs are w = [u, e]: the upload u (width D) and, when task labels travel with it, the one-hot
label e (width L). The law of w given the record x extends the upload's exactly (`LabelledLaw`):
- Cov(w | x) is block-diagonal: the mechanism's noise and the label's randomisation are independent. The upload
  block is the server's law; the label block is 0 for labels in the clear, and for k-ary label RR with
  R[y, j] = Pr[uploaded j | true y] it is E[Cov(e | x)] = diag(f) - R^T diag(pi) R, f the uploaded labels'
  frequencies (the label block of the second moment) and pi = R^-T f the true labels' (clipped to the simplex).
- The learners take the clean within-class covariance by the method of moments, S_w - E[Cov(w | x)], with the
  structured upload block (E[v v^T] = (M - a I) / b from the uploads' second moment M). They do not take the
  server's second path for the cap laws (E[m m^T] = r2 E[v v^T] identified, `NoiseLaw.input_second`; its cross
  and label blocks would be E[u e^T] and E[e e^T] - E[Cov(e | x)], estimable too): the LDA's spectral
  regularisation then uses the upload block's estimation error, (r2 / b tr M)^2 / n, for the whole matrix, and
  shrinks the nearly exact label block with it. Measured (tests/attacks/test_attacker_noise_law.py's world,
  PrivUnitG eps 2, 6 seeds, per-upload accuracy of the attacker's lda): identified path 0.661 (worst seed 0.602),
  method of moments 0.681, per-coordinate law 0.681; at eps 8: 0.692, 0.692, 0.692. ``record()["path"]`` says so.
  Without label columns the attacker gets the server's law as it is (`attacker_law`), both paths included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fl_privtext.memory import take_rows
from fl_privtext.server.learners import label_rr_matrix
from fl_privtext.server.noise import NoiseLaw, noise_law

__all__ = ["LabelledLaw", "attacker_law"]


@dataclass(frozen=True)
class LabelledLaw(NoiseLaw):
    """The law of [upload (D), one-hot label (L)] (module docstring): ``upload`` the server's law of the upload
    block, ``label_rr`` the (L, L) label-RR matrix (None: labels in the clear, noise-free)."""

    upload: NoiseLaw | None = None
    label_rr: np.ndarray | None = None

    @classmethod
    def of(cls, upload: NoiseLaw, num_labels: int, label_frequencies: np.ndarray | None = None,
           label_rr: np.ndarray | None = None) -> LabelledLaw:
        if num_labels < 1:
            raise ValueError(f"num_labels must be >= 1 for a labelled law; got {num_labels}.")
        rr = None if label_rr is None or np.allclose(label_rr, np.eye(num_labels)) else np.asarray(label_rr)
        freq = (np.full(num_labels, 1.0 / num_labels) if label_frequencies is None
                else np.asarray(label_frequencies, np.float64))
        law = cls(np.zeros(0), upload.method, upload.moments, upload.input_norm2, upload.assumption, upload, rr)
        var = np.concatenate([upload.variance, np.diag(law.label_covariance(np.diag(freq)))])
        object.__setattr__(law, "variance", var)
        return law

    @property
    def width(self) -> int:
        assert self.upload is not None
        return int(self.upload.variance.shape[0])

    def label_covariance(self, label_second: np.ndarray) -> np.ndarray:
        """(L, L) E[Cov(e | x)] from the label block of the second moment (its diagonal: the frequencies)."""
        f = np.clip(np.diag(np.asarray(label_second, np.float64)), 0.0, None)
        if self.label_rr is None:
            return np.zeros((len(f), len(f)))
        r = self.label_rr
        pi = np.clip(np.linalg.solve(r.T, f), 0.0, None)
        pi = pi / max(float(pi.sum()), 1e-300) * float(f.sum())
        return np.diag(f) - (r.T * pi) @ r

    def covariance(self, second: np.ndarray, directions: np.ndarray | None = None) -> np.ndarray:
        """``directions`` unused: this law is not structured (the learners never pass it)."""
        d, s = self.width, np.asarray(second, np.float64)
        assert self.upload is not None
        out = np.zeros_like(s)
        out[:d, :d] = self.upload.covariance(s[:d, :d])
        out[d:, d:] = self.label_covariance(s[d:, d:])
        return out

    @property
    def structured(self) -> bool:
        """False: the learners take the method-of-moments path with this (full) covariance (module docstring)."""
        return False

    def input_second(self, second: np.ndarray, directions: np.ndarray | None = None) -> np.ndarray | None:
        return None

    def record(self) -> dict[str, Any]:
        assert self.upload is not None
        out = self.upload.record()
        num = self.variance.shape[0] - self.width
        if self.upload.structured:
            out["path"] = ("method of moments, S_w - E[Cov(w | x)] with the structured upload block; not the "
                           "identified E[m m^T] (its spectral regularisation would shrink the label block by the "
                           "upload block's error)")
        out["columns"] = (f"{self.width} upload columns under this law, then {num} one-hot label columns: "
                          + ("noise-free (labels in the clear)" if self.label_rr is None else
                             "k-ary label RR, E[Cov(e | x)] = diag(f) - R^T diag(pi) R"))
        return out


def attacker_law(view: Any, rows: np.ndarray, width: int, generator: np.random.Generator) -> NoiseLaw:
    """The noise law of the attacker's inputs (width ``width`` = D, or D + L with the one-hot label) for the
    uploads ``rows`` of ``view`` (an `fl_privtext.attacks.view.AttackView`): the server's `noise_law` of the
    mechanism, E||E[u | x]||^2 measured on the view's public texts for the cap mechanisms (round map), extended to
    the label columns (`LabelledLaw`)."""
    mech = view.mechanism
    up = take_rows(view.uploads, rows)
    dim = int(getattr(mech, "dim", None) or up.shape[1])
    norm2, source = public_norm2(view)
    base = noise_law(mech, dim, up.mean(axis=0, dtype=np.float64), generator, input_norm2=norm2,
                     norm_source=source)
    if width == up.shape[1]:
        return base
    num = width - up.shape[1]
    if num != view.num_labels:
        raise ValueError(f"width must be the uploads' {up.shape[1]} or that plus {view.num_labels} label columns; "
                         f"got {width}.")
    freq = np.bincount(np.asarray(view.labels[rows]), minlength=num) / max(len(rows), 1)
    rr = label_rr_matrix(num, view.label_epsilon) if not view.labels_in_clear and view.label_epsilon > 0 else None
    return LabelledLaw.of(base, num, freq, rr)


def public_norm2(view: Any) -> tuple[float | None, str]:
    """E||E[u | x]||^2 over the view's public texts through the mechanism's own projection and clipping, for the cap
    mechanisms under the round map (as `fl_privtext.server.training.public_input_norm2` on public data); (None, "")
    when not applicable or the attacker holds no public features."""
    mech = view.mechanism
    mo = mech.noise_moments() if hasattr(mech, "noise_moments") else None
    if mo is None or mo.kind != "cap" or mo.sphere_map != "round" or view.public_features is None:
        return None, ""
    if len(view.public_features) == 0:
        return None, ""
    m = np.asarray(mech.expected(np.asarray(view.public_features, np.float32)), np.float64)
    c2 = float(mo.clip_norm) ** 2
    return min(float(np.einsum("ij,ij->i", m, m).mean()), c2), f"the attacker's public texts ({len(m)} rows)"
