"""Latency arithmetic against the worked examples, encoder metadata, and the real engine.

The measuring tests run sherpa-onnx on the bundled tiny Zipformer2 exports (real
architecture, random weights): when an encoder step can run depends only on the export's
chunk settings and the engine, not on the weights.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import onnx
import pytest
import typer
from onnx import TensorProto, helper
from typer.testing import CliRunner
from warm_nemo import WarmNemo

from streamasr.analysis.latency import chunk_budget, with_measurement
from streamasr.backends.nemo.budget import nemo_budget
from streamasr.backends.sherpa.budget import (
    PUBLISHED_ALIASES,
    budget_for_zipformer2_chunk,
    budget_from_metadata,
    budget_from_published,
    published_export,
    zipformer_budget,
)
from streamasr.backends.sherpa.onnx_meta import read_encoder_metadata
from streamasr.commands.latency import register
from streamasr.errors import ModelError, UsageError
from streamasr.session.measure import measure_engine


def ms(budget, key: str) -> float:
    return budget.get(key).value


# --- the worked examples ----------------------------------------------------------------


def test_nemo_70_13_worked_example():
    b = nemo_budget(70, 13)
    assert ms(b, "step_ms") == 80
    assert ms(b, "chunk_ms") == 1120
    assert ms(b, "lookahead_ms") == 1040
    assert ms(b, "lookahead_last_ms") == 0
    assert ms(b, "history_s") == pytest.approx(5.6)
    assert ms(b, "history_chunks") == 5
    assert ms(b, "average_ms") == 520
    assert ms(b, "eil_ms") == 560
    assert ms(b, "depth_lookahead_ms") == 1040  # depth adds nothing to a chunk-aware mask
    assert b.get("lookahead_ms").formula == "R x step = 13 x 80 ms"
    assert b.get("average_ms").note and b.get("eil_ms").note  # both conventions labelled


def test_nemo_70_0_has_no_lookahead():
    b = nemo_budget(70, 0)
    assert ms(b, "chunk_ms") == 80
    assert ms(b, "lookahead_ms") == 0
    assert ms(b, "average_ms") == 0


def test_nemo_regular_band_lookahead_grows_with_depth():
    b = nemo_budget(70, 2, style="regular", layers=17, subsampling=4)
    assert ms(b, "lookahead_ms") == 1360  # NeMo docs: 17 x 2 x 10 ms x 4
    assert b.get("lookahead_ms").formula == "layers x R x step = 17 x 2 x 40 ms"
    assert ms(b, "layer_lookahead_ms") == 80
    assert ms(nemo_budget(70, 2, style="regular"), "lookahead_ms") == 2720  # the 8x model


def test_nemo_unlimited_left_context():
    b = nemo_budget(-1, 13)
    assert math.isinf(ms(b, "history_s"))
    line = b.get("history_s").to_dict()
    assert line["value"] is None and line["text"] == "unlimited"
    json.dumps(b.to_dict(), allow_nan=False)  # strict JSON, no Infinity


def test_nemo_refuses_left_context_that_is_not_a_chunk_multiple():
    with pytest.raises(UsageError, match="multiple"):
        nemo_budget(70, 12)


def test_icefall_chunk_16_needs_about_458_ms_before_the_first_chunk():
    b = budget_for_zipformer2_chunk(16)
    assert ms(b, "chunk_ms") == 320
    assert ms(b, "lookahead_ms") == 130
    assert ms(b, "window_tail_ms") == 7.5
    assert ms(b, "first_step_ms") == 457.5
    assert round(ms(b, "first_step_ms")) == 458
    assert ms(b, "step_interval_ms") == 320
    assert ms(b, "worst_ms") == 457.5
    assert ms(b, "best_ms") == 137.5
    assert ms(b, "average_ms") == 297.5
    assert ms(b, "output_rate_hz") == 25
    assert b.settings["decode_chunk_len"] == 32 and b.settings["T"] == 45


def test_u2_chunk_16_is_640_ms_worst_and_320_ms_average():
    b = chunk_budget(16, subsampling=4)
    assert ms(b, "chunk_ms") == 640
    assert ms(b, "worst_ms") == 640
    assert ms(b, "average_ms") == 320
    assert ms(b, "lookahead_ms") == 600  # the same chunk in NeMo's convention
    assert ms(chunk_budget(16, subsampling=4, left_chunks=2), "history_s") == pytest.approx(1.28)


def test_every_line_has_a_formula():
    for b in (nemo_budget(70, 13), nemo_budget(70, 2, style="regular"),
              budget_for_zipformer2_chunk(32), chunk_budget(8)):
        assert b.lines and all(line.formula for line in b.lines)
        assert len(set(b.keys())) == len(b.keys())


def test_zipformer_budget_rejects_inconsistent_metadata():
    with pytest.raises(ModelError):
        zipformer_budget(32, 20)


# --- published export settings -----------------------------------------------------------


def test_published_aliases_and_settings():
    en20m = published_export("en-20M")
    assert en20m.release == "sherpa-onnx-streaming-zipformer-en-20M-2023-02-17"
    assert (en20m.decode_chunk_len, en20m.T, en20m.chunk) == (32, 39, 16)
    en = published_export("en")
    assert en.release == "sherpa-onnx-streaming-zipformer-en-2023-06-26"
    assert (en.model_type, en.decode_chunk_len, en.T) == ("zipformer2", 32, 45)
    assert published_export(en.release) == en
    b = budget_from_published(en)
    assert ms(b, "first_step_ms") == 457.5
    assert ms(b, "left_context_s") == pytest.approx(2.56)


def test_unknown_model_name_suggests_the_closest_valid_names():
    with pytest.raises(ModelError) as err:
        published_export("en-30M")
    assert "did you mean" in str(err.value) and "en-20M" in str(err.value)
    close = str(err.value).split("did you mean", 1)[1].split("?")[0]
    assert all(name.strip() in PUBLISHED_ALIASES for name in close.split(","))


def test_published_model_refuses_a_chunk_it_was_not_released_with():
    with pytest.raises(ModelError, match="released with chunk 16"):
        published_export("en", chunk=32)


# --- encoder metadata ---------------------------------------------------------------------


def test_metadata_of_the_bundled_exports(random_transducer: Path, random_ctc: Path):
    m16 = read_encoder_metadata(random_transducer / "encoder-epoch-0-avg-1-chunk-16-left-64.onnx")
    assert (m16.model_type, m16.decode_chunk_len, m16.T) == ("zipformer2", 32, 45)
    assert m16.left_context_len == (64, 32, 16, 8, 16, 32)
    assert (m16.chunk, m16.lookahead_frames) == (16, 13)
    assert m16.raw["decode_chunk_len"] == "32"
    m32 = read_encoder_metadata(random_transducer / "encoder-epoch-0-avg-1-chunk-32-left-64.onnx")
    assert (m32.decode_chunk_len, m32.T, m32.chunk, m32.lookahead_frames) == (64, 77, 32, 13)
    ctc = read_encoder_metadata(random_ctc / "ctc-epoch-0-avg-1-chunk-16-left-64.onnx")
    assert (ctc.decode_chunk_len, ctc.T) == (32, 45)
    b = budget_from_metadata(m32)
    assert ms(b, "chunk_ms") == 640 and ms(b, "first_step_ms") == 777.5
    assert ms(b, "left_context_s") == pytest.approx(1.28)


def _tiny_onnx(path: Path, props: dict[str, str]) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph)
    helper.set_model_props(model, props)
    onnx.save(model, str(path))
    return path


def test_metadata_errors_name_the_problem(tmp_path: Path):
    with pytest.raises(ModelError, match="does not exist"):
        read_encoder_metadata(tmp_path / "missing.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"this is not a protobuf \xff\xfe")
    with pytest.raises(ModelError, match="not a readable ONNX file"):
        read_encoder_metadata(junk)
    plain = _tiny_onnx(tmp_path / "plain.onnx", {"model_type": "zipformer2"})
    with pytest.raises(ModelError, match="no 'decode_chunk_len'"):
        read_encoder_metadata(plain)
    bad = _tiny_onnx(tmp_path / "bad.onnx", {"decode_chunk_len": "32", "T": "20"})
    with pytest.raises(ModelError, match="inconsistent"):
        read_encoder_metadata(bad)


# --- the real engine ----------------------------------------------------------------------


def _engine(files_dir: Path, chunk: int | None = None):
    """The export's files (for the derived budget) and the model loaded by its plan, the way
    `latency --measure` loads it."""
    from streamasr.backends.plan import make_plan
    from streamasr.backends.sherpa.modeldir import resolve_model

    files = resolve_model(str(files_dir), chunk)
    return files, make_plan(str(files_dir), given={"chunk": chunk}, threads=1).load()


@pytest.mark.parametrize(("model", "chunk"), [("transducer", 16), ("transducer", 32), ("ctc", 16)])
def test_measured_steps_follow_the_export(model, chunk, random_transducer, random_ctc):
    files, engine = _engine(random_transducer if model == "transducer" else random_ctc, chunk)
    timing = measure_engine(engine, steps=4)
    derived = budget_from_metadata(files.metadata)
    first, interval = ms(derived, "first_step_ms"), ms(derived, "step_interval_ms")
    # The engine waits for one fbank frame more than T (design.md, sherpa-onnx 2.0.1):
    # 467.5 ms for chunk 16, not the textbook 457.5 ms; then one step per chunk.
    assert timing.first_step_ms == first + 10
    assert timing.step_audio_ms == tuple(first + 10 + k * interval for k in range(4))
    assert len(timing.decode_ms) == 4 and all(d > 0 for d in timing.decode_ms)


def test_measurement_lines_flag_the_difference_and_end_with_expected(random_transducer):
    files, engine = _engine(random_transducer, 16)
    timing = measure_engine(engine, steps=3)
    b = with_measurement(budget_from_metadata(files.metadata), timing, threads=1)
    first = b.get("measured_first_step_ms")
    assert first.value == 467.5 and first.flagged and "10 ms later" in first.note
    assert not b.get("measured_step_interval_ms").flagged
    assert b.get("measured_first_tokens_ms").value == 467.5
    compute = b.get("decode_ms").value
    assert compute == pytest.approx(sorted(timing.decode_ms)[1])
    assert b.lines[-1].key == "expected_ms"
    assert b.lines[-1].quantity == "expected first-token latency on this machine"
    assert b.lines[-1].value == pytest.approx(297.5 + 10 + compute)
    assert b.get("expected_worst_ms").value == pytest.approx(467.5 + compute)
    json.dumps(b.to_dict(), allow_nan=False)


def test_measure_refuses_a_non_streaming_recognizer():
    class NeverReady:
        info = SimpleNamespace(sample_rate_hz=16000)

        def create_stream(self):
            return self

        def accept(self, sample_rate, samples):
            pass

        def decode_batch(self, streams, *, checked=False):
            return [False] * len(streams)

    with pytest.raises(ModelError, match="no encoder step"):
        measure_engine(NeverReady(), max_audio_s=0.1)


# --- the command ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cli() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def run(cli: typer.Typer, *args: str):
    return CliRunner().invoke(cli, ["latency", *args])


def lines_by_key(result) -> dict[str, dict]:
    return {line["key"]: line for line in json.loads(result.stdout)["lines"]}


def test_cli_att_context_size_json(cli):
    result = run(cli, "--att-context-size", "70,13", "--format", "json")
    assert result.exit_code == 0, result.output
    lines = lines_by_key(result)
    assert lines["chunk_ms"]["value"] == 1120
    assert lines["lookahead_ms"]["value"] == 1040
    assert lines["history_chunks"]["value"] == 5


def test_cli_table_shows_values_and_formulas(cli):
    result = run(cli, "--att-context-size", "70,2", "--style", "regular", "--layers", "17",
                 "--subsampling", "4")
    assert result.exit_code == 0, result.output
    assert "1360 ms" in result.stdout
    assert "layers x R x step = 17 x 2 x 40 ms" in result.stdout
    assert "formula" in result.stdout


def test_cli_model_name_and_directory(cli, random_transducer):
    result = run(cli, "--model", "en-20M", "--chunk", "16", "-f", "json")
    assert result.exit_code == 0, result.output
    assert lines_by_key(result)["first_step_ms"]["value"] == 397.5  # T = 39: zipformer v1
    result = run(cli, "--model", str(random_transducer), "--chunk", "32", "-f", "json")
    assert result.exit_code == 0, result.output
    assert lines_by_key(result)["chunk_ms"]["value"] == 640
    encoder = random_transducer / "encoder-epoch-0-avg-1-chunk-16-left-64.onnx"
    result = run(cli, "--model", str(encoder), "-f", "json")
    assert result.exit_code == 0, result.output
    assert lines_by_key(result)["first_step_ms"]["value"] == 457.5


def test_cli_chunk_alone_and_u2(cli):
    result = run(cli, "--chunk", "16", "-f", "json")
    assert lines_by_key(result)["first_step_ms"]["value"] == 457.5
    result = run(cli, "--chunk", "16", "--subsampling", "4", "-f", "json")
    lines = lines_by_key(result)
    assert (lines["worst_ms"]["value"], lines["average_ms"]["value"]) == (640, 320)


def test_cli_measure_table_ends_with_expected_latency(cli, random_transducer):
    result = run(cli, "--model", str(random_transducer), "--measure", "--threads", "1")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "467.5 ms !" in out and "457.5 ms" in out
    body = [line for line in out.splitlines() if line.startswith("│")]
    assert "expected first-token latency on this machine" in body[-3] + body[-2] + body[-1]


def test_cli_errors_go_to_stderr_with_exit_codes(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("STREAMASR_HOME", str(tmp_path / "empty-cache"))  # nothing pulled
    result = run(cli, "--model", "no-such-model-name")
    assert result.exit_code == 1
    assert "unknown model 'no-such-model-name'" in result.stderr and result.stdout == ""
    assert "streamasr models list" in result.stderr
    result = run(cli, "--att-context-size", "70,12")
    assert result.exit_code == 2 and "multiple" in result.stderr
    result = run(cli, "--model", "en-20M", "--measure")
    assert result.exit_code == 2 and "Download it" in result.stderr
    result = run(cli, "--att-context-size", "70,13", "--model", "en")
    assert result.exit_code == 2
    result = run(cli, "--layers", "3")
    assert result.exit_code == 2 and "--att-context-size" in result.stderr
    result = run(cli, "--att-context-size", "70,13", "-f", "yaml")
    assert result.exit_code == 2 and "table" in result.stderr


# --- every catalog name, and pulled models ---------------------------------------------------


def test_every_catalog_alias_and_release_name_has_a_budget(cli):
    from streamasr.backends.registry import released
    from streamasr.distribution import catalog

    for entry in catalog.CATALOG:
        if entry.kind == "punctuation":  # not a speech model: refused, naming --punctuate
            result = run(cli, "--model", entry.short_name, "-f", "json")
            assert result.exit_code == 2 and "--punctuate" in result.output, result.output
            continue
        for name in (*entry.aliases, entry.name):
            result = run(cli, "--model", name, "-f", "json")
            assert result.exit_code == 0, (name, result.output)
            lines = lines_by_key(result)
            assert lines["chunk_ms"]["value"] == 20 * max(released(entry).chunks), name


def test_kroko_first_decode_comes_after_about_1_4_s(cli):
    result = run(cli, "--model", "en-kroko", "-f", "json")
    assert result.exit_code == 0, result.output
    lines = lines_by_key(result)
    assert lines["chunk_ms"]["value"] == 1280  # decode_chunk_len 128: chunk 64
    assert lines["lookahead_ms"]["value"] == 130
    assert lines["first_step_ms"]["value"] == 1417.5  # T = 141: 1410 ms + 7.5 ms


def test_nemo_catalog_models_pick_their_trained_look_aheads(cli):
    result = run(cli, "--model", "nemo-fastconformer-multi", "-f", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    lines = {line["key"]: line for line in data["lines"]}
    assert (lines["chunk_ms"]["value"], lines["lookahead_ms"]["value"]) == (1120, 1040)
    assert "[70,13], [70,6], [70,1], [70,0]" in data["notes"][-1]
    low = lines_by_key(
        run(cli, "--model", "nemo-fastconformer-multi", "--chunk", "4", "-f", "json")
    )
    assert (low["chunk_ms"]["value"], low["lookahead_ms"]["value"]) == (80, 0)
    eou = lines_by_key(run(cli, "--model", "parakeet-eou-120m", "-f", "json"))
    assert (eou["chunk_ms"]["value"], eou["lookahead_ms"]["value"]) == (160, 80)
    bad = run(cli, "--model", "nemo-fastconformer-multi", "--chunk", "16")
    assert bad.exit_code == 2 and "not trained for --chunk 16" in bad.stderr
    measure = run(cli, "--model", "nemo-fc-80ms", "--measure")
    assert measure.exit_code == 2 and "NeMo FastConformer" in measure.stderr


def _latency_process(home: Path, *args: str):
    from test_store_security import streamasr

    return streamasr(home, "latency", *args)


def test_ctc_alias_in_a_fresh_process(tmp_path):
    result = _latency_process(tmp_path / "cache", "--model", "ctc-multi-zh-hans", "-f", "json")
    assert result.returncode == 0, result.stderr
    lines = {line["key"]: line for line in json.loads(result.stdout)["lines"]}
    assert lines["first_step_ms"]["value"] == 457.5
    assert json.loads(result.stdout)["settings"]["left_context"] == 128


def test_measure_finds_a_pulled_model_the_way_file_does(tmp_path):
    """`models pull en` (here from a local archive of the tiny model, its own digest given
    because the catalog's is the real release's), then `latency --model en --measure`."""
    from test_store import build_archive
    from test_store_security import streamasr

    from streamasr.distribution.manifest import sha256_file

    home = tmp_path / "cache"
    missing = _latency_process(home, "--model", "en", "--measure")
    assert missing.returncode == 2
    assert "Download it with `streamasr models pull en`" in missing.stderr

    archive = tmp_path / "en.tar.bz2"
    archive.write_bytes(build_archive("sherpa-onnx-streaming-zipformer-en-2023-06-26"))
    pulled = streamasr(home, "models", "pull", "en", "--archive", str(archive),
                       "--sha256", sha256_file(archive))
    assert pulled.returncode == 0, pulled.stderr
    result = _latency_process(home, "--model", "en", "--measure", "-f", "json")
    assert result.returncode == 0, result.stderr
    lines = {line["key"]: line for line in json.loads(result.stdout)["lines"]}
    assert lines["measured_first_step_ms"]["value"] == 467.5  # the engine really ran
    assert lines["measured_step_interval_ms"]["value"] == 320
    by_path = _latency_process(home, "--model", str(home / "sherpa-onnx-streaming-zipformer-en-"
                                                      "2023-06-26"), "-f", "json")
    assert by_path.returncode == 0


# --- any backend, through the step protocol ---------------------------------------------------

NEMO = Path(__file__).resolve().parent.parent / "models" / "tiny-nemo-streaming"


def _latency(*args: str):
    """`streamasr latency ...` in a fresh interpreter, with the test backend importable."""
    import os
    import subprocess
    import sys

    here = Path(__file__).resolve().parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(here), str(here.parent)]))
    return subprocess.run(
        [sys.executable, "-m", "streamasr.cli", "latency", *args],
        env=env, cwd=here.parent, capture_output=True, text=True, timeout=600,
    )


def _nemo_latency(warm_nemo: WarmNemo, *args: str):
    """`streamasr latency ...` on the NeMo model, forked from the process that imported torch
    and NeMo once (tests/warm_nemo.py) instead of importing them afresh."""
    return warm_nemo.cli("latency", *args, timeout=600)


@pytest.mark.parametrize(("att", "chunk_ms", "lookahead_ms"), [("70,1", 160, 80),
                                                               ("70,13", 1120, 1040)])
def test_measure_runs_a_nemo_model_at_the_look_ahead_asked_for(
    warm_nemo, att, chunk_ms, lookahead_ms
):
    done = _nemo_latency(warm_nemo, "--model", str(NEMO), "--att-context-size", att, "--measure",
                         "-f", "json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    lines = {line["key"]: line for line in report["lines"]}
    assert report["settings"]["backend"] == "nemo"
    assert report["settings"]["att_context_size"] == att
    # derived from what the loaded model declares
    assert (lines["chunk_ms"]["value"], lines["lookahead_ms"]["value"]) == (chunk_ms, lookahead_ms)
    assert lines["output_frame_ms"]["value"] == 80
    # measured: one step per chunk; the first chunk is shorter (it holds the look-ahead of
    # its first frame, with no history before it), so the first step comes within one chunk
    assert lines["measured_step_interval_ms"]["value"] == chunk_ms
    first = lines["measured_first_step_ms"]["value"]
    assert lookahead_ms < first <= chunk_ms
    # the backend derives its shorter first chunk: (first chunk frames - 1) x 10 ms + 16 ms
    assert lines["first_step_ms"]["value"] == first == lookahead_ms + 16
    assert not lines["measured_first_step_ms"]["flagged"]
    assert lines["decode_ms"]["value"] > 0


def test_measure_refuses_a_look_ahead_the_model_was_not_trained_with(warm_nemo):
    done = _nemo_latency(warm_nemo, "--model", str(NEMO), "--att-context-size", "70,3",
                         "--measure")
    assert done.returncode == 2, done.stderr
    assert "70,13, 70,6, 70,1, 70,0" in done.stderr and "Traceback" not in done.stderr


def test_settings_of_the_wrong_engine_are_usage_errors(random_transducer):
    chunk = _latency("--model", str(NEMO), "--chunk", "16", "--measure")
    assert chunk.returncode == 2 and "--att-context-size" in chunk.stderr
    att = _latency("--model", str(random_transducer), "--att-context-size", "70,1", "--measure")
    assert att.returncode == 2 and "--chunk" in att.stderr
    energy = _latency("--backend", "energy_backend:BACKEND", "--model", "energy-bursts",
                      "--att-context-size", "70,1", "--measure")
    assert energy.returncode == 2 and "energy backend has none" in energy.stderr
    cuda = _latency("--model", str(random_transducer), "--device", "cuda", "--measure")
    assert cuda.returncode == 2 and "run on the CPU" in cuda.stderr
    for done in (chunk, att, energy, cuda):
        assert "Traceback" not in done.stderr
