"""Bench arithmetic on hand-made inputs: error counts, latencies, stability, percentiles, gate.

Why: every figure `streamasr bench` prints comes from these functions; each case here has its
expected numbers worked out by hand, so a change in a definition shows up as a failing test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from streamasr.bench.baseline import Check, Rule, compare, parse_fail_on
from streamasr.bench.metrics import (
    ErrorCounts,
    model_metric,
    normalize_text,
    percentiles,
    score,
    stability,
    timing,
    total_counts,
)
from streamasr.errors import UsageError
from streamasr.session.events import Endpoint, Final, FirstToken, Partial

# ---- normalisation and error counts -------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "normalized"),
    [
        ("Hello, World!", "hello world"),
        ("  THE   cat\tsat. ", "the cat sat"),
        ("Don\u2019t stop -- 'quoted' words", "don't stop quoted words"),
        ("well-known e.g. U.S.A", "well known e g u s a"),
        ("", ""),
        ("今天，天气很好。", "今天 天气很好"),
    ],
)
def test_normalisation_folds_case_and_drops_punctuation(raw: str, normalized: str) -> None:
    assert normalize_text(raw) == normalized


def test_wer_counts_substitutions_deletions_insertions() -> None:
    # b -> x is substituted, e deleted, y inserted; matches in between make it the only
    # alignment with 3 edits
    counts = score("a b c d e f g h i j", "a x c d f g h i y j", "wer")
    assert counts == ErrorCounts(ref_units=10, substitutions=1, deletions=1, insertions=1)
    assert counts.errors == 3
    assert counts.rate_pct == pytest.approx(30.0)


def test_wer_ignores_case_and_punctuation() -> None:
    assert score("Hello, world.", "HELLO WORLD", "wer").errors == 0


def test_empty_hypothesis_is_all_deletions() -> None:
    assert score("one two three", "", "wer") == ErrorCounts(3, 0, 3, 0)


def test_empty_reference() -> None:
    silent = score("", "", "wer")
    assert silent == ErrorCounts() and silent.rate_pct == 0.0
    noise = score("", "uh huh", "wer")
    assert noise == ErrorCounts(0, 0, 0, 2)
    assert noise.rate_pct is None  # undefined per utterance...
    total = total_counts([score("a b", "a b", "wer"), noise])  # ...but counted in a total
    assert total == ErrorCounts(2, 0, 0, 2) and total.rate_pct == pytest.approx(100.0)


def test_chinese_cer_counts_characters() -> None:
    counts = score("今天天气很好。", "今天 天气 不好", "cer")
    assert counts == ErrorCounts(ref_units=6, substitutions=1, deletions=0, insertions=0)
    # 6 reference characters, 2 missing at the end and one extra in front
    assert score("我们今天开会", "啊我们今天", "cer") == ErrorCounts(6, 0, 2, 1)


def test_cer_on_mixed_text_counts_letters_too() -> None:
    assert score("用 Python", "用 python", "cer") == ErrorCounts(7, 0, 0, 0)


def kind(tokens: Path) -> str:
    """The token type a backend declares for this token list (BackendInfo.token_type)."""
    from streamasr.text.tokens import read_vocabulary

    return read_vocabulary(str(tokens)).token_type


def test_known_release_is_judged_by_its_catalog_language(tmp_path: Path) -> None:
    pytest.importorskip("streamasr.distribution.catalog")
    zh = tmp_path / "zh.txt"
    zh.write_text("<blk> 0\n今 1\n天 2\n", encoding="utf-8")
    en = tmp_path / "en.txt"
    en.write_text("<blk> 0\n▁THE 1\nS 2\n", encoding="utf-8")
    bilingual = "sherpa-onnx-streaming-zipformer-bilingual-zh-en-2023-02-20"
    assert model_metric(bilingual, kind(en)) == "mer"
    multi_zh = "sherpa-onnx-streaming-zipformer-multi-zh-hans-2023-12-12"
    assert model_metric(multi_zh, kind(en)) == "cer"
    assert model_metric("sherpa-onnx-streaming-zipformer-en-2023-06-26", kind(zh)) == "wer"
    assert model_metric("my-own-model", kind(zh)) == "cer"


def test_unknown_model_is_judged_by_its_token_type(tmp_path: Path) -> None:
    mixed = tmp_path / "mixed.txt"
    mixed.write_text("<blk> 0\n今 1\n天 2\n▁THE 3\nS 4\n▁A 5\n", encoding="utf-8")
    byte = tmp_path / "byte.txt"
    byte.write_text("<blk> 0\n<0xE4> 1\n<0xB8> 2\n▁THE 3\n", encoding="utf-8")
    assert model_metric("my-own-model", kind(mixed)) == "mer"
    assert model_metric("my-own-model", kind(byte)) == "wer"


def test_mer_counts_chinese_characters_and_english_words() -> None:
    # units: 我 们 用 python 写 代 码 = 7; "python" misheard as "pison" is ONE substitution
    assert score("我们用Python写代码", "我们用 pison 写代码", "mer") == ErrorCounts(7, 1, 0, 0)
    # CER would count letters: 6 letters of python against 5 of pison
    assert score("我们用Python写代码", "我们用 pison 写代码", "cer").ref_units == 12
    # a deleted English word, an inserted character, a substituted character
    assert score("你好 hello world 世界", "你好 world 世间啊", "mer") == ErrorCounts(6, 1, 1, 1)
    # spacing does not matter: the same units either way
    assert score("今天 天气 很好", "今天天气很好", "mer") == ErrorCounts(6, 0, 0, 0)
    assert score("HELLO WORLD", "hello, world!", "mer") == ErrorCounts(2, 0, 0, 0)


def test_mer_of_a_whole_set_is_total_errors_over_total_units() -> None:
    total = total_counts(
        [score("我们 love 北京", "我们 LOVE 北京 TOO", "mer"), score("天气", "天", "mer")]
    )
    assert total == ErrorCounts(7, 0, 1, 1)
    assert total.rate_pct == pytest.approx(100 * 2 / 7)


# ---- percentiles --------------------------------------------------------------------------


def test_percentiles_use_linear_interpolation() -> None:
    assert percentiles([40.0, 10.0, 30.0, 20.0]) == {"p50": 25.0, "p90": 37.0, "p99": 39.7}
    assert percentiles([5.0]) == {"p50": 5.0, "p90": 5.0, "p99": 5.0}
    assert percentiles([]) == {}


# ---- latency from scripted events ----------------------------------------------------------


def scripted_events() -> list:
    """Two segments; wall times as a fake clock would stamp them under real-time pacing."""
    return [
        Partial(seq=1, audio_s=0.48, wall_s=0.50, segment=0, text=""),
        FirstToken(
            seq=2,
            audio_s=0.80,
            wall_s=0.83,
            segment=0,
            text="HI",
            onset_s=0.3,
            latency_s=0.5,
            wall_latency_s=0.53,
        ),
        Partial(seq=3, audio_s=0.80, wall_s=0.83, segment=0, text="HI"),
        Partial(seq=4, audio_s=1.76, wall_s=1.80, segment=0, text="HI THERE"),
        Endpoint(seq=5, audio_s=2.40, wall_s=2.45, segment=0),
        Final(seq=6, audio_s=2.40, wall_s=2.45, segment=0, text="HI THERE", start_s=0.5, end_s=1.4),
        FirstToken(
            seq=7,
            audio_s=3.04,
            wall_s=3.10,
            segment=1,
            text="YOU",
            onset_s=2.7,
            latency_s=0.34,
            wall_latency_s=0.4,
        ),
        Partial(seq=8, audio_s=3.04, wall_s=3.10, segment=1, text="YOU"),
        Final(seq=9, audio_s=3.50, wall_s=3.71, segment=1, text="YOU", start_s=3.0, end_s=3.3),
    ]


def test_latencies_from_dataset_span() -> None:
    # onset 0.25 s from the dataset: first text at 0.80 s of audio (0.83 s wall)
    # speech end 2.90 s: the last final at 3.50 s of audio (3.71 s wall); its text "YOU" was
    # shown whole at 3.04 s
    found = timing(scripted_events(), onset_s=0.25, end_s=2.90)
    assert found.first_token_ms == pytest.approx(550.0)
    assert found.first_token_wall_ms == pytest.approx(580.0)
    assert found.final_ms == pytest.approx(600.0)
    assert found.final_wall_ms == pytest.approx(810.0)
    assert found.complete_ms == pytest.approx(140.0)
    assert found.final_cause == "end_of_input"


def test_final_at_an_endpoint_is_labelled() -> None:
    events = scripted_events()[:6]
    found = timing(events, onset_s=0.3, end_s=1.5)
    assert found.final_cause == "endpoint"
    assert found.final_ms == pytest.approx(900.0)  # the endpoint rule waited for silence
    assert found.complete_ms == pytest.approx(260.0)  # "HI THERE" was whole at 1.76 s
    assert found.first_token_ms == pytest.approx(500.0)


def test_no_text_means_no_latency() -> None:
    events = [Partial(seq=1, audio_s=0.48, wall_s=0.5, segment=0, text="")]
    found = timing(events, onset_s=0.2, end_s=1.0)
    assert (found.first_token_ms, found.final_ms, found.final_cause) == (None, None, "none")
    assert timing(scripted_events(), onset_s=None, end_s=None).first_token_ms is None


# ---- partial stability --------------------------------------------------------------------


def test_revisions_count_changed_shown_words() -> None:
    texts = ["A", "A B", "A BC", "A C", "A C D", "X"]
    events = [Partial(seq=i, audio_s=i, wall_s=i, segment=0, text=t) for i, t in enumerate(texts)]
    events.append(Final(seq=9, audio_s=9, wall_s=9, segment=0, text="X", start_s=0, end_s=1))
    events.append(Partial(seq=10, audio_s=10, wall_s=10, segment=1, text="Y"))
    found = stability(events)
    # "A B" -> "A BC" extends the text: no revision. "A BC" -> "A C" changes 1 shown word;
    # "A C D" -> "X" changes all 3. After the final, "Y" starts a new segment: no revision.
    assert found.revisions == 2
    assert found.revised_words == (1, 3)
    assert found.revised_words_total == 4


# ---- baseline gate ------------------------------------------------------------------------


def test_parse_fail_on_units() -> None:
    rules = parse_fail_on("wer+0.5, first_token_p90+50ms,final_p50+0.1s,throughput-10%")
    assert rules == [
        Rule("wer", "+", 0.5),
        Rule("first_token_p90", "+", 50.0),
        Rule("final_p50", "+", 100.0),
        Rule("throughput", "-", 10.0, relative=True),
    ]


@pytest.mark.parametrize("bad", ["wer", "speed+1", "wer+5ms", "rtf+1pp", "", "wer*2"])
def test_parse_fail_on_refuses_nonsense(bad: str) -> None:
    with pytest.raises(UsageError):
        parse_fail_on(bad)


def doc(wer: float, p90: float, throughput: float) -> dict:
    summary = {
        "error_rate_pct": wer,
        "first_token_ms": {"p50": 100.0, "p90": p90, "p99": p90},
        "final_ms": {"p50": 300.0},
        "rtf": 0.1,
        "throughput_x": throughput,
    }
    return {"settings": [{"name": "chunk 16", "summary": summary}]}


def failures(checks: list[Check]) -> list[str]:
    return [c.metric for c in checks if c.failed]


def test_gate_passes_within_bounds_and_fails_beyond() -> None:
    rules = parse_fail_on("wer+0.5,first_token_p90+50ms,throughput-10%")
    base = doc(10.0, 400.0, 20.0)
    assert failures(compare(base, doc(10.5, 450.0, 18.0), rules)) == []
    assert failures(compare(base, doc(10.6, 451.0, 17.9), rules)) == [
        "wer",
        "first_token_p90",
        "throughput",
    ]
    # improvements never fail
    assert failures(compare(base, doc(5.0, 100.0, 40.0), rules)) == []


def test_gate_does_not_fail_on_unknown_setting() -> None:
    rules = parse_fail_on("wer+0.5")
    current = doc(50.0, 400.0, 20.0)
    current["settings"][0]["name"] = "chunk 64"
    checks = compare(doc(10.0, 400.0, 20.0), current, rules)
    assert failures(checks) == [] and checks[0].delta is None
