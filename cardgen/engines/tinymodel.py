"""A tiny random-weight Llama and its tokenizer, made offline, for running a real engine in tests.

    model_dir = make_tiny_model(cache_dir)      # cache_dir/cardgen-tiny-llama-v2/, made once, then reused

The model: ``transformers`` ``LlamaConfig`` (hidden 256, 4 layers, 4 heads, vocab 4096, 2048 positions,
~5.5M parameters), seeded random weights in bf16 safetensors, except that the output rows of tokens which carry
no text on their own (special tokens, partial UTF-8 bytes) are zero, so greedy decoding always streams text. The tokenizer: byte-level BPE trained with
``tokenizers`` on text that ships with Python (the standard library's own sources), saved so
``AutoTokenizer`` loads it, with a chat template. Nothing is downloaded. Needs ``torch`` and ``transformers``
(both come with vLLM); imported only when a model is made.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sysconfig
import tempfile
from pathlib import Path

from cardgen.errors import UsageError

NAME = "cardgen-tiny-llama-v2"
VOCAB_SIZE = 4096
MAX_POSITIONS = 2048
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")  # ids 0, 1, 2
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
# standard-library modules whose source is the tokenizer's training text (present in every CPython)
CORPUS_MODULES = ("argparse", "collections/__init__", "email/message", "inspect", "json/decoder", "logging/__init__",
                  "pathlib", "random", "shutil", "subprocess", "textwrap", "typing", "unittest/case", "zipfile")
ENGLISH = (
    "The quick brown fox jumps over the lazy dog. A model card describes how a model was measured: the server, "
    "the hardware, the prompts and the numbers that came out. Time to first token, inter-token latency and "
    "throughput are measured for each request and summarised per scenario. "
)


def corpus() -> list[str]:
    """Training text for the tokenizer: standard-library sources plus a little English."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts = [ENGLISH * 20]
    for module in CORPUS_MODULES:
        path = stdlib / f"{module}.py"
        if path.is_file():
            texts.append(path.read_text("utf-8", errors="replace"))
    return texts


def _train_tokenizer(out_dir: Path, *, max_positions: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: PLC0415  heavy: only the engine tests make a tiny model
    from transformers import PreTrainedTokenizerFast  # noqa: PLC0415  heavy: only the engine tests make a tiny model

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", tok.token_to_id("<s>"))])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   model_max_length=max_positions)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(str(out_dir))


def silent_token_ids(model_dir: Path) -> list[int]:
    """Tokens that produce no text on their own: the special tokens (skipped when detokenizing) and byte
    pieces of multi-byte UTF-8 characters. A server streaming one of them sends ``content: ""``, and a request
    for one output token would carry no text at all."""
    from transformers import PreTrainedTokenizerFast  # noqa: PLC0415  heavy: only the engine tests make a tiny model

    tok = PreTrainedTokenizerFast.from_pretrained(str(model_dir))
    out = []
    for token_id in range(len(tok)):
        text = tok.decode([token_id], skip_special_tokens=True)
        if not text or "\ufffd" in text:
            out.append(token_id)
    return out


def _make_weights(out_dir: Path, *, seed: int, max_positions: int, suppress: list[int]) -> None:
    import torch  # noqa: PLC0415  heavy: only the engine tests make a tiny model
    from transformers import LlamaConfig, LlamaForCausalLM  # noqa: PLC0415  heavy: only the engine tests make a tiny model

    config = LlamaConfig(
        vocab_size=VOCAB_SIZE, hidden_size=256, intermediate_size=768, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=max_positions,
        bos_token_id=1, eos_token_id=2, pad_token_id=None, tie_word_embeddings=False, torch_dtype="bfloat16",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        # a zero row gives logit 0 while the others spread around 0: greedy decoding never picks these tokens
        model.lm_head.weight[list(suppress)] = 0.0
    model.to(torch.bfloat16).save_pretrained(str(out_dir), safe_serialization=True)


def make_tiny_model(cache_dir: Path, *, seed: int = 0, max_positions: int = MAX_POSITIONS,
                    name: str | None = None) -> Path:
    """The tiny model's directory under ``cache_dir``, made there first if it is missing (~6 s).

    ``max_positions`` is its context length (2048 by default; more costs nothing but RoPE positions). The
    directory is ``cardgen-tiny-llama-v2`` (``-ctx<N>`` appended for another length, ``-seed<N>`` for another
    seed) unless ``name`` is given.

    Safe against a crash half-way: the model is built in a temporary directory and renamed into place.
    """
    cache_dir = Path(cache_dir)
    if name is None:
        name = NAME + (f"-ctx{max_positions}" if max_positions != MAX_POSITIONS else "") + \
            (f"-seed{seed}" if seed else "")
    target = cache_dir / name
    if (target / "model.safetensors").is_file() and (target / "tokenizer.json").is_file():
        return target
    missing = [name for name in ("tokenizers", "torch", "transformers") if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(f"making the tiny test model needs torch, transformers and tokenizers ({missing[0]} is "
                         f"missing): run 'bash tests/engines/install_vllm.sh'")
    cache_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=cache_dir))
    try:
        _train_tokenizer(work, max_positions=max_positions)
        silent = silent_token_ids(work)
        _make_weights(work, seed=seed, max_positions=max_positions, suppress=silent)
        (work / "cardgen-tiny-model.json").write_text(json.dumps({
            "name": name, "seed": seed, "max_positions": max_positions, "lm_head_zero_rows": len(silent),
            "note": "random weights; made offline by cardgen.engines.tinymodel",
        }, indent=2) + "\n", "utf-8")
        try:
            os.replace(work, target)
        except OSError:
            if not (target / "model.safetensors").is_file():  # someone else finished first: theirs is as good
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target
