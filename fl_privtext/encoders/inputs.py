"""A client's training data for Phase A: the inputs each encoder reads, the task label y and the private z.

z lives here, on the client: it is read to compute the defence's loss and never leaves (only model parameters do).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fl_privtext.config import TrainConfig
from fl_privtext.encoders.nets import UNK
from fl_privtext.extract.glove import glove_table, tokenize
from fl_privtext.extract.transformer import default_model_dir, load_model


@dataclass
class TrainData:
    labels: np.ndarray  # (N,) int64 task labels
    attributes: dict[str, np.ndarray]  # name -> (N,) int64 or (N, K) int8
    features: np.ndarray | None = None  # (N, D) frozen extractor features (trunk)
    texts: Sequence[str] | None = None  # (lstm, minilm, generation)
    _tokens: dict[int, list[int]] = field(default_factory=dict, repr=False)

    @classmethod
    def from_prepared(cls, prep: Any) -> TrainData:
        attrs = {a.name: prep.ds.attribute(a.name) for a in prep.ds.attributes}
        return cls(labels=np.asarray(prep.ds.labels, np.int64), attributes=attrs, features=prep.features,
                   texts=prep.ds.texts)

    def _need_texts(self, what: str) -> Sequence[str]:
        if self.texts is None:
            raise ValueError(f"{what} needs the clients' texts; this client holds cached features only.")
        return self.texts

    def inputs(self, kind: str, rows: np.ndarray, cfg: TrainConfig, device: torch.device) -> dict[str, torch.Tensor]:
        """The encoder's inputs for ``rows``: features (B, D), token ids (B, T) + lengths, or a MiniLM batch."""
        if kind == "features":
            if self.features is None:
                raise ValueError("The trunk encoder needs the extractor's cached features on the client.")
            return {"x": torch.from_numpy(np.asarray(self.features[rows], np.float32)).to(device)}
        texts = self._need_texts(f"train.encoder={cfg.encoder!r}")
        if kind == "tokens":
            seqs = [self._token_ids(int(i), texts, cfg) for i in rows]
            width = max(1, max(len(s) for s in seqs))
            ids = np.zeros((len(seqs), width), np.int64)
            for j, s in enumerate(seqs):
                ids[j, : len(s)] = s
            return {"ids": torch.from_numpy(ids).to(device),
                    "lengths": torch.tensor([max(1, len(s)) for s in seqs], dtype=torch.int64)}
        if kind == "transformer":
            tokenizer, _, _ = load_model(str(default_model_dir()), torch.device("cpu"))
            enc = tokenizer([texts[int(i)] for i in rows], truncation=True, max_length=cfg.max_tokens,
                            padding=True, return_tensors="pt")
            return {"input_ids": enc["input_ids"].to(device), "attention_mask": enc["attention_mask"].to(device)}
        raise ValueError(f"Unknown encoder input kind {kind!r}.")

    def _token_ids(self, row: int, texts: Sequence[str], cfg: TrainConfig) -> list[int]:
        # GloVe tokenisation; word i of GloVe's frequency-ordered vocabulary -> id i + 2 when i < vocab_size.
        if row not in self._tokens:
            vocab = glove_table().vocab
            ids = []
            for tok in tokenize(texts[row])[: cfg.max_tokens]:
                i = vocab.get(tok)
                ids.append(i + 2 if i is not None and i < cfg.vocab_size else UNK)
            self._tokens[row] = ids
        return self._tokens[row]

    def targets(self, rows: np.ndarray, device: torch.device) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        y = torch.from_numpy(self.labels[rows]).to(device)
        z = {}
        for name, values in self.attributes.items():
            v = values[rows]
            z[name] = torch.from_numpy(v.astype(np.float32) if v.ndim == 2 else v.astype(np.int64)).to(device)
        return y, z

    def chars(self, rows: np.ndarray, n: int, device: torch.device) -> torch.Tensor:
        """(B, n) UTF-8 bytes of the texts' first characters, -1 = padding (the generation defence's target)."""
        texts = self._need_texts("train.defense='generation'")
        out = np.full((len(rows), n), -1, np.int64)
        for j, i in enumerate(rows):
            b = texts[int(i)].encode("utf-8")[:n]
            out[j, : len(b)] = np.frombuffer(b, np.uint8)
        return torch.from_numpy(out).to(device)
