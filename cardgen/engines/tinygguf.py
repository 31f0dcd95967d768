"""A tiny random-weight Llama as a GGUF file, made offline, for running llama.cpp's ``llama-server`` and
``llama-bench`` in tests and benchmarks.

    path = make_tiny_gguf(cache_dir)                     # cache_dir/cardgen-tiny-llama-<shape>.gguf, made once

Architecture ``llama`` with an SPM vocabulary (``<unk>``, ``<s>``, ``</s>``, the 256 byte tokens, then pieces:
letters, ``▁`` + letters, letter pairs and triples), random f16 weights (a dense model's speed does not depend on
its weights' values) and a chat template. Outputs are random text and may hit EOS, so requests must force their
length (llama.cpp honours ``ignore_eos``). Needs the ``gguf`` package (PyPI; the ``test`` extra) and numpy.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from cardgen.errors import UsageError

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@dataclass(frozen=True)
class GgufShape:
    """The model's shape: small enough for two CPU cores by default."""

    layers: int = 4
    hidden: int = 256
    ffn: int = 704
    heads: int = 4
    kv_heads: int = 4
    vocab: int = 4096
    context: int = 16384  # n_ctx_train: the longest context llama-server gives a slot

    @property
    def name(self) -> str:
        return (f"cardgen-tiny-llama-l{self.layers}-h{self.hidden}-f{self.ffn}-a{self.heads}-kv{self.kv_heads}"
                f"-v{self.vocab}-c{self.context}")


def spm_vocabulary(size: int) -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and token types (1 normal, 2 unknown, 3 control, 4 unused, 6 byte) of an SPM vocabulary of
    ``size`` tokens that covers English text."""
    tokens, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    for b in range(256):
        tokens.append(f"<0x{b:02X}>")
        scores.append(0.0)
        types.append(6)
    letters = "abcdefghijklmnopqrstuvwxyz"
    pieces = ["▁", *(letters + letters.upper() + "0123456789.,;:!?'\"()-"), *("▁" + c for c in letters + letters.upper())]
    pieces += ["▁" + x + y for x in letters for y in letters] + [x + y for x in letters for y in letters]
    pieces += ["▁" + x + y + z for x in letters for y in letters for z in letters]
    seen = set(tokens)
    for piece in pieces:
        if len(tokens) >= size:
            break
        if piece not in seen:
            seen.add(piece)
            tokens.append(piece)
            scores.append(-float(len(tokens)))
            types.append(1)
    while len(tokens) < size:
        tokens.append(f"<extra_{len(tokens)}>")
        scores.append(-1e9)
        types.append(4)
    return tokens, scores, types


def make_tiny_gguf(cache_dir: Path, shape: GgufShape = GgufShape(), *, seed: int = 0) -> Path:
    """The GGUF of ``shape`` under ``cache_dir`` (written once, atomically; then reused)."""
    try:
        import gguf  # noqa: PLC0415  a test extra: only tests and benchmarks write a GGUF
    except ImportError:
        raise UsageError("writing a GGUF needs the 'gguf' package: pip install 'cardgen[test]'") from None
    cache_dir = Path(cache_dir)
    out = cache_dir / f"{shape.name}.gguf"
    if out.is_file():
        return out
    cache_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    base = (rng.standard_normal(1 << 20, dtype=np.float32) * 0.02).astype(np.float16)

    def matrix(rows: int, cols: int) -> np.ndarray:
        return np.resize(base, (rows, cols))

    fd, tmp = tempfile.mkstemp(dir=cache_dir, suffix=".gguf.part")
    os.close(fd)
    try:
        w = gguf.GGUFWriter(tmp, "llama")
        w.add_name(shape.name)
        w.add_context_length(shape.context)
        w.add_embedding_length(shape.hidden)
        w.add_block_count(shape.layers)
        w.add_feed_forward_length(shape.ffn)
        w.add_head_count(shape.heads)
        w.add_head_count_kv(shape.kv_heads)
        w.add_rope_dimension_count(shape.hidden // shape.heads)
        w.add_rope_freq_base(10000.0)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
        w.add_vocab_size(shape.vocab)
        tokens, scores, types = spm_vocabulary(shape.vocab)
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_unk_token_id(0)
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)
        w.add_chat_template(CHAT_TEMPLATE)
        kv = shape.kv_heads * (shape.hidden // shape.heads)
        ones = np.ones(shape.hidden, dtype=np.float32)
        w.add_tensor("token_embd.weight", matrix(shape.vocab, shape.hidden))
        for layer in range(shape.layers):
            pre = f"blk.{layer}."
            w.add_tensor(pre + "attn_norm.weight", ones)
            w.add_tensor(pre + "attn_q.weight", matrix(shape.hidden, shape.hidden))
            w.add_tensor(pre + "attn_k.weight", matrix(kv, shape.hidden))
            w.add_tensor(pre + "attn_v.weight", matrix(kv, shape.hidden))
            w.add_tensor(pre + "attn_output.weight", matrix(shape.hidden, shape.hidden))
            w.add_tensor(pre + "ffn_norm.weight", ones)
            w.add_tensor(pre + "ffn_gate.weight", matrix(shape.ffn, shape.hidden))
            w.add_tensor(pre + "ffn_up.weight", matrix(shape.ffn, shape.hidden))
            w.add_tensor(pre + "ffn_down.weight", matrix(shape.hidden, shape.ffn))
        w.add_tensor("output_norm.weight", ones)
        w.add_tensor("output.weight", matrix(shape.vocab, shape.hidden))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out
