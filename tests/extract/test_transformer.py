"""HF encoder with the packaged all-MiniLM-L6-v2 (offline): semantics, pooling, order, pairs, identity."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import numpy as np
import pytest

from fl_privtext.extract import EmbeddingCache, HFExtractor, extract_cached, make_extractor, transformer
from fl_privtext.extract.transformer import default_model_dir

from .conftest import TinyDataset


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_loads_offline_from_the_package(minilm: HFExtractor) -> None:
    assert minilm.name == "minilm" and minilm.dim == 384
    assert Path(minilm.model) == default_model_dir().resolve()
    assert os.environ.get("HF_HUB_OFFLINE") is not None
    x = minilm.extract(["a short text", "another one that is a bit longer", "x"], progress=False)
    assert x.shape == (3, 384) and x.dtype == np.float32 and np.isfinite(x).all()


def test_default_model_loads_without_any_network_access(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("the packaged model must load without opening a network connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(transformer, "_MODELS", {})  # force a fresh load in this process
    ext = HFExtractor()
    assert ext.extract(["offline"], progress=False).shape == (1, 384)


def test_paraphrases_are_closer_than_unrelated_texts(minilm: HFExtractor) -> None:
    x = minilm.extract(
        [
            "A man is playing a guitar on stage.",
            "Someone performs a song with his guitar at a concert.",
            "The central bank raised interest rates to fight inflation.",
        ],
        progress=False,
    )
    para, unrelated = cosine(x[0], x[1]), cosine(x[0], x[2])
    assert para > 0.5 > unrelated + 0.3, (para, unrelated)


def test_mean_and_cls_pooling_differ(minilm: HFExtractor) -> None:
    texts = ["The stock market fell sharply today.", "A cat sleeps on the warm windowsill."]
    cls = make_extractor("minilm", pooling="cls")
    xm, xc = minilm.extract(texts, progress=False), cls.extract(texts, progress=False)
    assert xc.shape == xm.shape == (2, 384)
    assert not np.allclose(xm, xc, atol=1e-2)
    assert cls.identity() != minilm.identity() and cls.identity()["pooling"] == "cls"


def test_length_sorted_batches_are_restored_to_input_order(minilm: HFExtractor) -> None:
    texts = [
        "short",
        "a considerably longer sentence about the weather in the mountains during the winter months",
        "medium length text here",
        "",
        "one two three four five six seven",
        "tiny",
    ]
    batched = HFExtractor(batch_size=2)
    x = batched.extract(texts, progress=False)
    assert batched.forward_passes == 3
    one_by_one = np.stack([minilm.extract([t], progress=False)[0] for t in texts])
    np.testing.assert_allclose(x, one_by_one, atol=2e-5)


def test_chunked_tokenisation_gives_the_same_rows_in_input_order(minilm: HFExtractor) -> None:
    # the CUDA path's chunks (tokenised ahead on a worker thread), exercised on CPU with 3-text chunks
    a = [f"sentence number {i} " + "word " * (i % 5) for i in range(8)]
    b = [f"and its pair {i}" for i in range(8)]
    chunked = HFExtractor(batch_size=2)
    chunked.tokenize_chunk = 3
    x = chunked.extract(a, b, progress=False)
    assert chunked.forward_passes == 5  # chunks of 3, 3, 2 texts in batches of 2
    np.testing.assert_allclose(x, minilm.extract(a, b, progress=False), atol=2e-5)
    assert HFExtractor(device="cpu").tokenize_chunk is None  # CPU: one chunk, as before


def test_pairs_go_through_the_tokenizer_as_pairs(minilm: HFExtractor) -> None:
    a = ["The cat sat on the mat.", "He bought a car."]
    b = ["A cat was sitting on a mat.", "The weather is nice."]
    x = minilm.extract(a, b, progress=False)
    assert x.shape == (2, 384) and minilm.output_dim(paired=True) == 384
    assert not np.allclose(x, minilm.extract(a, progress=False), atol=1e-3)
    assert not np.allclose(x, minilm.extract(b, a, progress=False), atol=1e-3)  # segment order matters
    with pytest.raises(ValueError, match="must match"):
        minilm.extract(a, b[:1], progress=False)


def test_max_length_truncates_and_changes_identity(minilm: HFExtractor) -> None:
    long_text = "word " * 300
    short = make_extractor("minilm", max_length=8)
    assert not np.allclose(
        short.extract([long_text], progress=False), minilm.extract([long_text], progress=False)
    )
    assert short.identity() != minilm.identity()
    assert short.identity()["max_length"] == 8


def test_identity_hashes_model_files(minilm: HFExtractor) -> None:
    ident = minilm.identity()
    assert json.loads(json.dumps(ident)) == ident
    files = ident["files_sha256"]
    assert {"model.safetensors", "config.json", "tokenizer.json", "vocab.txt"} <= set(files)
    assert all(len(h) == 64 for h in files.values())


def test_hf_accepts_a_local_folder_identified_by_content(minilm: HFExtractor, tmp_path: Path) -> None:
    # A copy of the model (symlinked weights) in another folder is the same model; an edited config is not.
    src = default_model_dir()
    same, edited = tmp_path / "same", tmp_path / "edited"
    for d in (same, edited):
        d.mkdir()
        for f in src.iterdir():
            if f.is_file():
                (d / f.name).symlink_to(f)
    (edited / "config.json").unlink()
    cfg = json.loads((src / "config.json").read_text())
    cfg["layer_norm_eps"] = 1e-5
    (edited / "config.json").write_text(json.dumps(cfg))
    hf_same = make_extractor("hf", model=str(same))
    assert hf_same.name == "hf" and hf_same.dim == 384
    assert hf_same.identity() == minilm.identity()
    hf_edited = make_extractor("hf", model=str(edited))
    assert hf_edited.identity() != minilm.identity()
    texts = ["The weather is nice."]
    np.testing.assert_allclose(
        hf_same.extract(texts, progress=False), minilm.extract(texts, progress=False), atol=1e-6
    )


def test_options_are_validated() -> None:
    with pytest.raises(ValueError, match="pooling must be one of mean, cls"):
        make_extractor("hf", pooling="max")
    with pytest.raises(ValueError, match="use 'hf'"):
        make_extractor("minilm", model="sentence-transformers/all-MiniLM-L6-v2")
    with pytest.raises(ValueError, match="max_length"):
        make_extractor("minilm", max_length=0)
    with pytest.raises(ValueError, match="accepted: model, pooling, max_length, batch_size, device"):
        make_extractor("hf", normalize=True)


def test_hf_without_model_is_the_packaged_minilm(minilm: HFExtractor) -> None:
    ext = HFExtractor()
    assert ext.name == "minilm" and ext.model == minilm.model and ext.identity() == minilm.identity()


# Precision (issue #14): bf16 / fp16 forwards, float32 outputs, refused where unsupported, part of the identity.


@pytest.fixture(scope="module")
def default_texts() -> list[str]:
    from fl_privtext.data import load_dataset

    return load_dataset("default").texts[:32]


def _assert_close_not_identical(low: np.ndarray, full: np.ndarray) -> None:
    assert low.dtype == np.float32 and low.shape == full.shape and np.isfinite(low).all()
    assert not np.array_equal(low, full)  # the setting was applied
    low_n = low / np.linalg.norm(low, axis=1, keepdims=True)
    full_n = full / np.linalg.norm(full, axis=1, keepdims=True)
    sim = low_n @ full_n.T  # (N, N): row i of one precision against every row of the other
    assert np.diag(sim).min() >= 0.99, np.diag(sim).min()
    assert (sim.argmax(axis=1) == np.arange(len(sim))).all()  # each row is still nearest to its own text


def test_bf16_on_cpu_is_close_to_float32_but_not_identical(minilm: HFExtractor, default_texts: list[str]) -> None:
    bf16 = make_extractor("minilm", precision="bf16", device="cpu")
    assert isinstance(bf16, HFExtractor) and bf16.precision == "bf16"
    _assert_close_not_identical(bf16.extract(default_texts, progress=False), minilm.extract(default_texts, progress=False))


def test_fp16_on_cpu_and_unknown_precisions_are_refused() -> None:
    with pytest.raises(ValueError, match="precision 'fp16' needs a CUDA device"):
        make_extractor("minilm", precision="fp16", device="cpu")
    with pytest.raises(ValueError, match="precision must be one of float32, bf16, fp16; got 'int8'"):
        make_extractor("hf", precision="int8")
    with pytest.raises(ValueError, match=r"accepted: model, pooling, max_length, batch_size, device\.$"):
        make_extractor("glove", precision="bf16")  # GloVe is float32 numpy


def test_precision_is_part_of_the_cache_identity(minilm: HFExtractor, tmp_path: Path) -> None:
    bf16 = HFExtractor(precision="bf16", device="cpu")
    assert minilm.identity()["dtype"] == "float32" and bf16.identity()["dtype"] == "bfloat16-autocast"
    ds = TinyDataset(["The weather is nice today.", "Stocks fell sharply.", "A cat sleeps."])
    assert EmbeddingCache.key(ds.fingerprint, minilm.identity()) != EmbeddingCache.key(ds.fingerprint, bf16.identity())
    full = np.asarray(extract_cached(ds, minilm, tmp_path, progress=False))
    low = np.asarray(extract_cached(ds, bf16, tmp_path, progress=False))
    assert bf16.forward_passes == 1  # not served the float32 entry
    assert not np.array_equal(low, full)
    assert len(list(tmp_path.glob("*.npy"))) == 2


def test_default_batch_size_is_large_on_cuda_and_an_explicit_one_wins() -> None:
    # Building the extractor reads only the config, so the CUDA default is checkable on a machine without CUDA.
    assert HFExtractor(device="cpu").batch_size == transformer.CPU_BATCH_SIZE == 64
    assert HFExtractor(device="cuda").batch_size == transformer.CUDA_BATCH_SIZE == 256
    assert HFExtractor(device="cuda", batch_size=32).batch_size == 32
    with pytest.raises(ValueError, match="batch_size must be a positive integer or None"):
        HFExtractor(batch_size=0)


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_half_precision_on_cuda_is_close_to_float32(precision: str, default_texts: list[str]) -> None:
    import torch

    full = make_extractor("minilm", device="cuda")
    low = make_extractor("minilm", device="cuda", precision=precision)
    assert isinstance(low, HFExtractor) and low.batch_size == 256
    x = low.extract(default_texts, progress=False)
    _assert_close_not_identical(x, full.extract(default_texts, progress=False))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    net = transformer.load_model(low.model, low.device, dtype)[1]
    assert next(net.parameters()).dtype == dtype  # the weights were cast, not autocast
    assert low.identity()["dtype"] == str(dtype).removeprefix("torch.")


@pytest.mark.parametrize("max_length", [128, 12, None])
def test_backend_token_ids_equal_the_tokenizer_call(minilm: HFExtractor, max_length: int | None) -> None:
    """`token_ids` (the Rust backend, called directly for the GPU's feed) gives exactly transformers' ids and type
    ids for texts and pairs, truncated or not; a tokenizer whose call is checked against itself would pass anything,
    so the reference here is the documented `tokenizer(...)` call."""
    tokenizer, _, _ = transformer.load_model(minilm.model, minilm.device)
    long = " ".join(["privacy"] * 600)  # past the model's 512 positions too
    texts = ["A short review.", "Ünïcödé, punctuation -- and numbers 12,345!", "", long, "the the the"]
    pairs = ["first", long, "a pair's second text", "x", ""]
    for p in (None, pairs):
        ids, types = transformer.token_ids(tokenizer, texts, p, max_length)
        ref = tokenizer(texts, p, truncation=True, max_length=max_length, padding=False)
        assert ids == ref["input_ids"]
        assert types == ref["token_type_ids"]
    assert max(map(len, ids)) == (max_length or tokenizer.model_max_length)  # the long input was truncated
