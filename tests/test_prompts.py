import pytest

from cardgen.prompts import ID_SLOT, build_template, request_id


def words(text: str) -> int:
    return len(text.split())


def bpe_like(text: str) -> int:
    # a stand-in tokenizer with multi-token words and digit runs: 1 token per 3 characters of each word
    return sum(max(1, (len(w) + 2) // 3) for w in text.split()) + 1  # +1: a BOS token


@pytest.mark.parametrize("counter", [words, bpe_like])
@pytest.mark.parametrize("target", [8, 32, 100, 1024, 4000])
def test_template_has_exact_length_for_any_request_id(counter, target):
    t = build_template(target, counter)
    assert t.tokens == target
    assert t.text.count(ID_SLOT) == 1
    for rid in (request_id(1, 0, 1), request_id(9999, 99, 999_999), request_id(42, 3, 123)):
        assert counter(t.render(rid)) == target


def test_ids_have_a_fixed_width_and_differ():
    ids = {request_id(7, w, c) for w in range(3) for c in range(100)}
    assert len(ids) == 300
    assert len({len(i) for i in ids}) == 1


def test_a_target_below_the_id_gives_the_id_alone():
    t = build_template(3, bpe_like)
    assert t.text == ID_SLOT and t.tokens == bpe_like(request_id(1, 2, 3)) > 3
