"""Endpointing in the core: one set of rules for every engine.

An utterance ends when enough trailing non-speech output has been decoded. The rules are
sherpa-onnx's (rule1/rule2/rule3), applied here to what every backend reports after each
encoder step: the audio decoded in the open segment and the time of its last token. A model
that emits an end-of-utterance token ends the utterance on that token instead.

Trailing silence is counted in output frames after the last token's frame, as sherpa-onnx
counts trailing blanks of a transducer; so for a sherpa-onnx transducer the segmentation is
the engine's own (tests/test_endpointing.py compares them step by step). For a CTC model
the engine counts a label held over several frames as speech, while a token time marks only
its first frame; the tests pin that difference.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamasr.backends.base import EndpointOptions, Hypothesis
from streamasr.backends.options import check_number

#: where an endpoint rule (--rule1/2/3, a session's rule1_s ...) makes sense, in seconds
RULE_S_RANGE = (0.01, 3600.0)


@dataclass(frozen=True)
class RuleOption:
    """One endpoint setting on the command line: its EndpointOptions field, flag and help
    (the CLI wiring is commands/options.py's)."""

    field: str
    flag: str
    help: str


ENDPOINT_SWITCH = RuleOption(
    "endpoint", "--endpoint/--no-endpoint",
    "Cut the stream into utterances at silences (endpoint rules).",
)  # fmt: skip
RULE_OPTIONS: tuple[RuleOption, ...] = (
    RuleOption(
        "rule1_s", "--rule1",
        "Silence in s that ends an utterance with no text yet.",
    ),
    RuleOption(
        "rule2_s", "--rule2",
        "Silence in s that ends an utterance after its text.",
    ),
    RuleOption("rule3_s", "--rule3", "Longest utterance (s) before a cut."),
)  # fmt: skip


def endpoint_options(
    enabled: bool, rule1_s: float, rule2_s: float, rule3_s: float
) -> EndpointOptions:
    """The rules as given, each in RULE_S_RANGE (else a UsageError naming its flag)."""
    for option, value in zip(RULE_OPTIONS, (rule1_s, rule2_s, rule3_s), strict=True):
        check_number(option.flag, value, *RULE_S_RANGE, "s")
    return EndpointOptions(enabled=enabled, rule1_s=rule1_s, rule2_s=rule2_s, rule3_s=rule3_s)

# float slack so 30 x 0.04 s of silence counts as 1.2 s
_EPSILON_S = 1e-6


@dataclass(frozen=True)
class EndpointDecision:
    """Which rule ended the utterance, with the figures it was decided on."""

    rule: str  # "rule1" | "rule2" | "rule3" | "eou"
    utterance_s: float
    trailing_silence_s: float


class Endpointer:
    """Decides after each encoder step whether the open utterance has ended."""

    def __init__(self, options: EndpointOptions, output_frame_s: float) -> None:
        self.options = options
        self.output_frame_s = output_frame_s
        self._decoded_s = 0.0

    def reset(self) -> None:
        """A new utterance starts: nothing decoded in it yet."""
        self._decoded_s = 0.0

    def step(self, decoded_s: float, hyp: Hypothesis) -> EndpointDecision | None:
        """Account for one encoder step that decoded `decoded_s` seconds of audio (or what
        the hypothesis says was decoded in the segment, where the engine reports it)."""
        if hyp.segment_decoded_s is not None:
            self._decoded_s = hyp.segment_decoded_s
        else:
            self._decoded_s += decoded_s
        if not self.options.enabled:
            return None
        utterance_s = self._decoded_s
        if hyp.end_of_utterance:
            return EndpointDecision("eou", utterance_s, 0.0)
        trailing_s = self.trailing_silence_s(hyp)
        return self._rule(utterance_s, trailing_s)

    def trailing_silence_s(self, hyp: Hypothesis) -> float:
        """Decoded audio after the last token's output frame (all of it if no token).

        Counted in whole output frames, as an engine counts trailing blanks, so rounding of
        token times cannot move a decision by a frame.
        """
        if not hyp.token_times_s:
            return self._decoded_s
        frame = self.output_frame_s
        decoded_frames = round(self._decoded_s / frame)
        last_token_frame = round((hyp.token_times_s[-1] - hyp.segment_start_s) / frame)
        return max(0, decoded_frames - last_token_frame - 1) * frame

    def _rule(self, utterance_s: float, trailing_s: float) -> EndpointDecision | None:
        rules = self.options
        has_speech = utterance_s > trailing_s + _EPSILON_S
        if not has_speech and trailing_s + _EPSILON_S >= rules.rule1_s:
            return EndpointDecision("rule1", utterance_s, trailing_s)
        if has_speech and trailing_s + _EPSILON_S >= rules.rule2_s:
            return EndpointDecision("rule2", utterance_s, trailing_s)
        if utterance_s + _EPSILON_S >= rules.rule3_s:
            return EndpointDecision("rule3", utterance_s, trailing_s)
        return None
