"""MiniLM extraction on CUDA against the raw encoder's batched forward (issue #14's GPU goal; not a test).

    python benchmarks/bench_extract_cuda.py --texts TEXTS.json[.gz] [--model DIR] [--ref REF.npy] [--json OUT]
    python benchmarks/bench_extract_cuda.py --dataset ag_news --data-root ../shared/data

For each precision (float32, bf16, fp16) and batch size it times, on the same texts:
  - ``extract``: ``HFExtractor.extract`` end to end (tokenise, sort by length, pad, forward, pool, copy back);
  - ``forward``: the raw encoder on the SAME length-sorted padded batches, already on the GPU (no tokenisation,
    sorting, padding, pooling or copies): the ceiling ``extract`` is compared with (goal: >= 80% of it);
  - ``tokenize``: the tokenizer's call alone (transformers' per-text conversion included), and ``token_ids``: the
    Rust backend as ``extract`` calls it (`transformer.token_ids`), each once (the CPU share of ``extract``).
It also checks the features: float32 on CUDA against CPU reference features of the same weights (``--ref``, the
first rows of the texts; max abs difference and the lowest cosine), and bf16/fp16 against float32 on CUDA (lowest
cosine). Times are the best of ``--repeats`` after a warm-up (the weights loaded, cuDNN/SDPA kernels chosen).
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fl_privtext.extract.transformer import PRECISIONS, HFExtractor, load_model, token_ids


def read_texts(args: argparse.Namespace) -> list[str]:
    if args.texts:
        path = Path(args.texts)
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as fh:
            texts = json.load(fh)
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise ValueError(f"{path} must hold a JSON list of strings.")
        return texts
    from fl_privtext.data import load_dataset

    return list(load_dataset(args.dataset, data_root=args.data_root).texts)


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def best_of(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return min(times)


def sorted_batches(ext: HFExtractor, texts: list[str]) -> list[dict[str, torch.Tensor]]:
    """The batches ``extract`` builds (`HFExtractor._batches`: longest first, padded to each batch's longest), moved
    to the GPU once."""
    tokenizer, _, _ = load_model(ext.model, ext.device, ext._weight_dtype)
    enc = tokenizer(
        texts, truncation=True, max_length=ext.max_length, padding=False, return_attention_mask=False
    )
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return [
        {k: torch.from_numpy(v).to(ext.device) for k, v in arrays.items()}
        for _, arrays in ext._batches(enc["input_ids"], enc.get("token_type_ids"), pad_id)
    ]


def cosine_min(a: np.ndarray, b: np.ndarray) -> float:
    num = (a * b).sum(1)
    den = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return float((num / den).min())


def measure(
    args: argparse.Namespace, texts: list[str], precision: str, bs: int
) -> tuple[dict[str, Any], np.ndarray]:
    """One (precision, batch size): extract vs raw forward timings, and the extracted features."""
    ext = HFExtractor(
        model=args.model, device=args.device, precision=precision, batch_size=bs, max_length=args.max_length
    )
    _, net, _ = load_model(ext.model, ext.device, ext._weight_dtype)
    ext.extract(texts[:512], progress=False)  # warm-up: weights, kernels
    holder: dict[str, np.ndarray] = {}
    t_extract = best_of(lambda: holder.update(x=ext.extract(texts, progress=False)), args.repeats)
    batches = sorted_batches(ext, texts)
    with torch.inference_mode():
        t_forward = best_of(lambda: [net(**b).last_hidden_state for b in batches], args.repeats)
    tokens = int(sum(int(b["attention_mask"].sum()) for b in batches))
    padded = int(sum(b["attention_mask"].numel() for b in batches))
    cuda = torch.cuda.is_available()
    run = {
        "precision": precision,
        "batch_size": bs,
        "extract_s": round(t_extract, 4),
        "extract_texts_per_s": round(len(texts) / t_extract),
        "forward_s": round(t_forward, 4),
        "forward_texts_per_s": round(len(texts) / t_forward),
        "extract_over_forward": round(t_forward / t_extract, 3),
        "tokens": tokens,
        "padding_share": round(1 - tokens / padded, 4),
        "peak_mem_mb": round(torch.cuda.max_memory_allocated() / 2**20) if cuda else None,
    }
    return run, holder["x"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--texts", help="JSON (or .json.gz) list of strings")
    p.add_argument("--dataset", default="ag_news")
    p.add_argument("--data-root", default=None)
    p.add_argument(
        "--model", default=None, help="local model folder (default: the packaged all-MiniLM-L6-v2)"
    )
    p.add_argument("--ref", help="CPU float32 features of the first rows (.npy), same weights")
    p.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=PRECISIONS)
    p.add_argument("--batch-sizes", nargs="+", type=int, default=[256])
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="cuda", help="cuda (the point); cpu only to try the script")
    p.add_argument("--limit", type=int, default=0, help="first rows only (0 = all)")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(
            "bench_extract_cuda.py needs a CUDA device; torch sees none (--device cpu to try it)."
        )

    texts = read_texts(args)
    texts = texts[: args.limit] if args.limit > 0 else texts
    res: dict[str, Any] = {
        "rows": len(texts),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torch": torch.__version__,
        "max_length": args.max_length,
        "runs": [],
    }
    ext0 = HFExtractor(model=args.model, device=args.device, max_length=args.max_length)
    tokenizer, _, _ = load_model(ext0.model, ext0.device, torch.float32)
    res["tokenize_s"] = round(
        best_of(
            lambda: tokenizer(
                texts, truncation=True, max_length=args.max_length, padding=False, return_attention_mask=False
            ),
            args.repeats,
        ),
        4,
    )
    # what extract tokenises with: the tokenizer's Rust backend directly (token_ids), without transformers' per-text
    # conversion that tokenize_s above includes
    res["token_ids_s"] = round(best_of(lambda: token_ids(tokenizer, texts, None, args.max_length), args.repeats), 4)
    feats: dict[str, np.ndarray] = {}
    for precision in args.precisions:
        for bs in args.batch_sizes:
            run, x = measure(args, texts, precision, bs)
            res["runs"].append(run)
            print(json.dumps(run), flush=True)
            feats.setdefault(precision, x)
    if "float32" in feats:
        f32 = feats["float32"]
        if args.ref:
            ref = np.load(args.ref)
            got = f32[: len(ref)]
            res["float32_cuda_vs_cpu"] = {
                "rows": len(ref),
                "max_abs_diff": float(np.abs(got - ref).max()),
                "min_cosine": cosine_min(got, ref),
            }
        for precision in ("bf16", "fp16"):
            if precision in feats:
                res[f"{precision}_vs_float32_min_cosine"] = cosine_min(feats[precision], f32)
    print(json.dumps({k: v for k, v in res.items() if k != "runs"}, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
