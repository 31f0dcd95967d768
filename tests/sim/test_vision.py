"""The virtual server's vision encoder: an image's tokens and FLOPs by tiles or at its own size, a preset's encoder
read from its ``vision_config`` (Mistral-Small-3.1's Pixtral), the default for a text model, a config it cannot
read in one line; and the encoder's time in the step that starts a request's prefill, once."""

from __future__ import annotations

import pytest

from cardgen.errors import UsageError
from cardgen.sim.catalog import find_model, parse_hf_config
from cardgen.sim.perf import FixedPerf
from cardgen.sim.roofline import build_perf_model
from cardgen.sim.scheduler import Scheduler, Seq
from cardgen.sim.vision import DEFAULT_VISION, VisionEncoder, parse_vision_config

TILES = VisionEncoder(name="t", layers=2, hidden=64, intermediate=128, patch_size=16, image_size=224, merge=2,
                      max_side=448)


def test_tiles_rescale_to_the_longest_edge_then_cut_with_a_global_tile():
    assert TILES.tokens(224, 224) == 49  # one tile: 14 x 14 patches, 2 x 2 per token
    assert TILES.tokens(100, 100) == 49  # a small image is one tile too
    assert TILES.tokens(448, 448) == TILES.tokens(1000, 1000) == 5 * 49  # 2 x 2 tiles and the global one
    assert TILES.tokens(448, 224) == 3 * 49
    assert TILES.flops(448, 448) == pytest.approx(5 * TILES.flops(224, 224))
    assert TILES.flops(224, 224) == pytest.approx(2 * TILES.params * 196 + 4 * 2 * 64 * 196 ** 2)


def test_native_size_patches_until_the_largest_side():
    pixtral = find_model("Mistral-Small-3.1-24B").vision
    assert pixtral is not None and pixtral.cut == "native" and (pixtral.patch_size, pixtral.merge) == (14, 2)
    assert pixtral.tokens(448, 448) == 16 * 16  # 32 x 32 patches, 2 x 2 per token
    assert pixtral.tokens(3080, 3080) == pixtral.tokens(1540, 1540) == 55 * 55  # rescaled to 1540 px
    assert 0.25e9 < pixtral.params < 0.45e9


def test_a_text_preset_has_none_and_is_modelled_with_the_default():
    assert find_model("CodeLlama-7b").vision is None
    perf = build_perf_model(model="CodeLlama-7b", model_config=None, gpu="A100-80GB")
    assert perf.vision == DEFAULT_VISION and "vision" not in perf.describe()["architecture"]  # type: ignore[operator]
    assert 0 < perf.encode_time_s(DEFAULT_VISION.flops(384, 384)) < 0.1


def test_a_vision_config_that_cannot_be_read_is_one_line():
    with pytest.raises(UsageError, match="cannot read the vision_config of m: 'patch_size'"):
        parse_vision_config({"hidden_size": 8, "num_hidden_layers": 1}, name="m")
    with pytest.raises(UsageError, match="vision_cut"):
        parse_vision_config({"hidden_size": 8, "num_hidden_layers": 1, "patch_size": 2}, name="m",
                            outer={"vision_cut": "slices"})
    assert parse_vision_config(None, name="m") is None
    wrapped = parse_hf_config({"model_type": "idefics3", "scale_factor": 2, "text_config": {
        "model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
        "num_attention_heads": 4, "vocab_size": 4096, "torch_dtype": "bfloat16"},
        "vision_config": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "patch_size": 16,
                          "image_size": 224}}, name="tiny")
    assert wrapped.vision is not None and wrapped.vision.tokens(224, 224) == 49 and wrapped.layers == 2


def test_the_encoder_runs_in_the_step_that_starts_the_prefill_once():
    perf = FixedPerf(prefill_tok_s=10_000.0, step_overhead_s=0.01, per_seq_s=0.0, encode_flop_s=1e12)
    s = Scheduler(perf)
    seq = s.add(Seq(1000, 3, encode_flops=5e10), 0.0)
    plain = s.add(Seq(1000, 3), 0.0)
    step = s.next_step(0.0)
    assert step is not None and step.duration_s == pytest.approx(0.01 + 2000 / 10_000 + 0.05)
    s.finish_step(step)
    assert seq.encode_s == pytest.approx(0.05) and plain.encode_s is None
    step = s.next_step(step.end_s)
    assert step is not None and step.duration_s == pytest.approx(0.01)  # decoding: the encoder is done


def test_a_performance_model_without_an_encoder_says_so():
    class Bare:
        kv_capacity_tokens, block_size, max_num_seqs, max_num_batched_tokens = 4096, 16, 8, 2048

        def step_time_s(self, prefill, decode):
            return 0.01

        def describe(self):
            return {}

    s = Scheduler(Bare())
    s.add(Seq(10, 2, encode_flops=1.0), 0.0)
    with pytest.raises(ValueError, match="does not model an encoder's work"):
        s.next_step(0.0)
