"""The test conversation: sized by the server's tokenizer, deterministic, codes findable."""

from kvtier.eviction import conversation as conv


def words(messages):  # a stand-in tokenizer: one token per whitespace-separated word
    return sum(len(m["content"].split()) for m in messages)


def test_sized_to_target_and_deterministic():
    a = conv.build(5000, seed=3, count_tokens=words)
    b = conv.build(5000, seed=3, count_tokens=words)
    assert abs(a.prompt_tokens - 5000) <= 25  # within 0.5% of the target
    assert a.prompt_tokens == words(a.messages)
    assert a.messages == b.messages and a.digest == b.digest
    assert conv.build(5000, seed=4, count_tokens=words).digest != a.digest


def test_three_codes_hidden_in_order_at_spread_positions():
    c = conv.build(3000, seed=1, count_tokens=words)
    body = c.messages[-1]["content"]
    where = [body.index(code) / len(body) for code in c.codes]
    assert len(c.codes) == 3 and len(set(c.codes)) == 3
    assert where == sorted(where)
    # hidden at about 20%, 50% and 80% of the filler
    assert [round(w, 1) for w in where] == [0.2, 0.5, 0.8]


def test_find_codes_reads_an_answer():
    codes = ["ABC-1234", "XYZ-9876", "KLM-5555"]
    assert conv.find_codes("They are XYZ-9876, ABC-1234 and KLM-5555.", codes) == codes
    assert conv.find_codes("ABC-1234 and maybe KLM-5556", codes) == ["ABC-1234"]
    assert conv.find_codes("", codes) == []
