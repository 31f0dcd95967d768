"""A tiny random-weight vision-language model for the images kind's engine tests, made locally (nothing from a hub)
and cached per machine under ``~/.cache/cardgen`` (``CARDGEN_CACHE`` elsewhere):

    python tests/engines/tiny_vlm.py hf TOKENIZER_DIR     -> <cache>/cardgen-tiny-idefics3-v1/       (vLLM CPU)
    python tests/engines/tiny_vlm.py gguf LLAMACPP_DIR    -> <cache>/cardgen-tiny-idefics3-v1-gguf/  (llama.cpp:
                                                              text.gguf and mmproj.gguf)

After ``/work/shared/reference/tiny_models/`` (checked 2026-12-01): an Idefics3 of 3.6M parameters whose vision
tower is a 2-layer SigLIP of 224-px tiles (16-px patches, 49 image tokens per tile after the pixel shuffle); the
processor rescales the longest edge to 448 px and splits it into tiles, so the image tokens follow the aspect
ratio, not the resolution. llama.cpp's projector is that model converted with ``convert_hf_to_gguf.py --mmproj``
from the llama-cpp-python sdist (the same source the server is built from), and its text model a Llama GGUF of
the same width whose vocabulary holds the tokens the image path looks up. Each part is built in a temporary
directory and renamed into place, so a crash half-way leaves nothing to reuse.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

NAME = "cardgen-tiny-idefics3-v1"
LLAMACPP_VERSION = "0.3.36"  # the llama-cpp-python sdist whose converter writes the projector (build_llamacpp.sh's)
TEXT_HIDDEN, TEXT_FFN, TEXT_HEADS, TEXT_LAYERS = 256, 512, 4, 2


def cache() -> Path:
    return Path(os.environ.get("CARDGEN_CACHE", Path.home() / ".cache" / "cardgen"))


def _fresh(target: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))


def _place(work: Path, target: Path) -> Path:
    if target.exists():  # another process finished first
        shutil.rmtree(work, ignore_errors=True)
    else:
        work.rename(target)
    return target


def make_hf(tokenizer_dir: Path) -> Path:
    """The Idefics3 (HF format, for vLLM) under the cache, made first if missing (~20 s)."""
    target = cache() / NAME
    if (target / "config.json").is_file():
        return target
    work = _fresh(target)
    import torch
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3Processor,
        LlamaConfig,
        PreTrainedTokenizerFast,
    )
    from transformers.models.idefics3.configuration_idefics3 import Idefics3VisionConfig
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil

    tok = PreTrainedTokenizerFast.from_pretrained(str(tokenizer_dir))
    extra = ["<fake_token_around_image>", "<image>", "<end_of_utterance>", "<global-img>"] + \
        [f"<row_{i + 1}_col_{j + 1}>" for i in range(6) for j in range(6)]
    tok.add_special_tokens({"additional_special_tokens": extra})
    template = ("{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n"
                "{% if message['content'] is string %}{{ message['content'] }}{% else %}"
                "{% for c in message['content'] %}{% if c['type'] == 'image' or c['type'] == 'image_url' %}<image>"
                "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}"
                "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
    tok.chat_template = template
    vision = Idefics3VisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                  image_size=224, patch_size=16)
    text = LlamaConfig(vocab_size=len(tok), hidden_size=TEXT_HIDDEN, intermediate_size=TEXT_FFN,
                       num_hidden_layers=TEXT_LAYERS, num_attention_heads=TEXT_HEADS, num_key_value_heads=TEXT_HEADS,
                       max_position_embeddings=8192, bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    config = Idefics3Config(vision_config=vision, text_config=text, image_token_id=tok.convert_tokens_to_ids("<image>"),
                            scale_factor=2, tie_word_embeddings=False)
    torch.manual_seed(0)
    Idefics3ForConditionalGeneration(config).to(torch.bfloat16).save_pretrained(str(work))
    images = Idefics3ImageProcessorPil(size={"longest_edge": 448}, max_image_size={"longest_edge": 224},
                                       do_image_splitting=True)
    Idefics3Processor(image_processor=images, tokenizer=tok, image_seq_len=49, chat_template=template) \
        .save_pretrained(str(work))
    tok.save_pretrained(str(work))
    cfg = json.loads((work / "config.json").read_text())
    cfg["pad_token_id"] = None  # vLLM refuses the random model's pad id
    (work / "config.json").write_text(json.dumps(cfg, indent=2))
    return _place(work, target)


def _converter(into: Path, python: str) -> Path:
    """``convert_hf_to_gguf.py`` of the llama-cpp-python sdist (downloaded from PyPI once, kept in the cache)."""
    tools = cache() / f"llamacpp-{LLAMACPP_VERSION}-convert"
    script = tools / "convert_hf_to_gguf.py"
    if script.is_file():
        return script
    work = _fresh(tools)
    subprocess.run([python, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                    "--no-binary", ":all:", "-d", str(work), f"llama-cpp-python=={LLAMACPP_VERSION}"], check=True)
    sdist = next(work.glob("llama_cpp_python-*.tar.gz"))
    keep = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")  # the converter, its package, the gguf it writes with
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name
                   and m.name.split("/vendor/llama.cpp/", 1)[1].startswith(keep)]
        tar.extractall(work / "src", members=members, filter="data")
    src = next((work / "src").glob("llama_cpp_python-*/vendor/llama.cpp"))
    for name in ("convert_hf_to_gguf.py", "conversion", "gguf-py"):
        if (src / name).exists():
            shutil.move(str(src / name), work / name)
    shutil.rmtree(work / "src")
    sdist.unlink()
    return _place(work, tools) / "convert_hf_to_gguf.py"


def _text_gguf(path: Path, vocab_size: int) -> None:
    """A Llama GGUF of the Idefics3's text width with random weights and an SPM vocabulary holding the image path's
    tokens as single tokens (after ``tiny_models/make_gguf_mm.py``)."""
    import gguf
    import numpy as np

    base = (np.random.default_rng(0).standard_normal(1 << 20, dtype=np.float32) * 0.02).astype(np.float16)

    def mat(rows: int, cols: int) -> np.ndarray:
        return np.resize(base, (rows, cols))

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("cardgen tiny Idefics3 text (random weights)")
    w.add_context_length(8192)
    w.add_embedding_length(TEXT_HIDDEN)
    w.add_block_count(TEXT_LAYERS)
    w.add_feed_forward_length(TEXT_FFN)
    w.add_head_count(TEXT_HEADS)
    w.add_head_count_kv(TEXT_HEADS)
    w.add_rope_dimension_count(TEXT_HIDDEN // TEXT_HEADS)
    w.add_rope_freq_base(1e4)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_vocab_size(vocab_size)
    toks, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    toks += [f"<0x{b:02X}>" for b in range(256)]
    scores += [0.0] * 256
    types += [6] * 256
    letters = "abcdefghijklmnopqrstuvwxyz"
    pieces = ["▁"] + list(letters + letters.upper() + "0123456789.,;:!?'\"()-") + ["▁" + c for c in letters]
    pieces += ["▁" + x + y for x in letters for y in letters] + [x + y for x in letters for y in letters]
    image_path = ["\n\n", "<fake_token_around_image>", "<global-img>", "<image>", "<end_of_utterance>"]
    seen = set(toks)
    for s in pieces:
        if len(toks) >= vocab_size - len(image_path):
            break
        if s not in seen:
            seen.add(s)
            toks.append(s)
            scores.append(-float(len(toks)))
            types.append(1)
    toks += image_path
    scores += [0.0] * len(image_path)
    types += [4] * len(image_path)
    extra = vocab_size - len(toks)
    toks += [f"<extra_{i}>" for i in range(extra)]
    scores += [-1e9] * extra
    types += [4] * extra
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    ones = np.ones(TEXT_HIDDEN, dtype=np.float32)
    w.add_tensor("token_embd.weight", mat(vocab_size, TEXT_HIDDEN))
    for layer in range(TEXT_LAYERS):
        pre = f"blk.{layer}."
        w.add_tensor(pre + "attn_norm.weight", ones)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(pre + name + ".weight", mat(TEXT_HIDDEN, TEXT_HIDDEN))
        w.add_tensor(pre + "ffn_norm.weight", ones)
        w.add_tensor(pre + "ffn_gate.weight", mat(TEXT_FFN, TEXT_HIDDEN))
        w.add_tensor(pre + "ffn_up.weight", mat(TEXT_FFN, TEXT_HIDDEN))
        w.add_tensor(pre + "ffn_down.weight", mat(TEXT_HIDDEN, TEXT_FFN))
    w.add_tensor("output_norm.weight", ones)
    w.add_tensor("output.weight", mat(vocab_size, TEXT_HIDDEN))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def make_gguf(hf_dir: Path, llamacpp_dir: Path, python: str = sys.executable) -> Path:
    """The directory with ``text.gguf`` and ``mmproj.gguf`` for llama.cpp, made first if missing (~15 s; the first
    time also a download of the llama-cpp-python sdist for its converter)."""
    target = cache() / f"{NAME}-gguf"
    if (target / "mmproj.gguf").is_file() and (target / "text.gguf").is_file():
        return target
    converter = _converter(target, python)
    work = _fresh(target)
    sys.path.insert(0, str(Path(llamacpp_dir) / "gguf-py"))
    _text_gguf(work / "text.gguf", 4096)
    env = {**os.environ, "PYTHONPATH": str(converter.parent / "gguf-py"), "HF_HUB_OFFLINE": "1"}
    subprocess.run([python, str(converter), str(hf_dir), "--mmproj", "--outfile", str(work / "mmproj.gguf"),
                    "--outtype", "f16"], check=True, env=env, capture_output=True, text=True)
    return _place(work, target)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("hf", "gguf"):
        sys.exit(f"usage: {sys.argv[0]} hf TOKENIZER_DIR | gguf LLAMACPP_DIR")
    if sys.argv[1] == "hf":
        print(make_hf(Path(sys.argv[2])))
    else:
        print(make_gguf(cache() / NAME, Path(sys.argv[2])))
