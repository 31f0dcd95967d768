"""A point's identity across runs (``cardgen.diff.sample.point_key``): its lengths and load, and its name where its
kind tells its points apart by name (``Kind.diff_by_name``: the images kind, whose image count and size are not
among the lengths and loads every point has)."""

from __future__ import annotations

from cardgen.diff.sample import point_key, point_label


def test_points_of_a_kind_told_apart_by_name_differ_by_their_names_only():
    one = {"kind": "images", "scenario": "images-k1-224px-in64-out32-p1", "prompt_tokens": 64, "output_tokens": 32,
           "parallel": 1}
    two = {**one, "scenario": "images-k2-448px-in64-out32-p1"}
    assert point_key(one) != point_key(two)
    assert point_key(one) == point_key(dict(one))
    assert point_label(point_key(one)) == "images · 64 → 32 tokens · 1 parallel"


def test_other_kinds_are_their_lengths_and_load_whatever_their_names():
    closed = {"kind": "closed", "scenario": "closed-in1024-out128-p10", "prompt_tokens": 1024, "output_tokens": 128,
              "parallel": 10}
    assert point_key(closed) == point_key({**closed, "scenario": "renamed"})
    assert dict(point_key(closed)) == {"kind": "closed", "prompt_tokens": 1024, "output_tokens": 128, "parallel": 10}
