"""HF encoder with the packaged all-MiniLM-L6-v2 (offline): semantics, pooling, order, pairs, identity."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import numpy as np
import pytest

from fl_privtext.extract import HFExtractor, make_extractor, transformer
from fl_privtext.extract.transformer import default_model_dir


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
