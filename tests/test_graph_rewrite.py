"""The softplus rewrite (streamasr/backends/sherpa/graph_rewrite.py): the same values as the
exported subgraph (onnx's reference evaluator, float32, every range that matters), fewer
nodes, and nothing rewritten where the shape of the subgraph is not exactly the exported
one. Tokens through the real engine: test_graph_cache.py (int8 tiny-en) and here (fp32)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from streamasr.backends.sherpa import graph_cache
from streamasr.backends.sherpa.graph_rewrite import rewrite_file, rewrite_softplus

REPO = Path(__file__).resolve().parent.parent
CLIPS = sorted((REPO / "models" / "tiny-en" / "test_wavs").glob("*.wav"))
SHIFT = 4.0  # SwooshL: softplus(x - 4) - 0.08 x - 0.035


def swoosh_l(zero: str = "shaped", extra_outputs: tuple[str, ...] = ()) -> onnx.ModelProto:
    """SwooshL as icefall's export writes it: logaddexp(0, x - 4) - 0.08 x - 0.035, the 0 a
    ConstantOfShape of x's shape (`zero="shaped"`), a 0-d constant (`"scalar"`), or an
    initializer of a larger shape that broadcasts (`"wider"`)."""
    node = helper.make_node
    scalar = {name: numpy_helper.from_array(np.array(value, np.float32), name)
              for name, value in (("shift", SHIFT), ("one", 1.0), ("k", 0.08), ("d", 0.035))}
    nodes = [node("Sub", ["x", "shift"], ["y"])]
    initializers = list(scalar.values())
    if zero == "shaped":
        nodes += [node("Shape", ["x"], ["shape"]),
                  node("ConstantOfShape", ["shape"], ["zero"],
                       value=numpy_helper.from_array(np.zeros(1, np.float32)))]
    elif zero == "scalar":
        initializers.append(numpy_helper.from_array(np.array(0.0, np.float32), "zero"))
    else:
        initializers.append(numpy_helper.from_array(np.zeros((3, 1), np.float32), "zero"))
    nodes += [
        node("Max", ["zero", "y"], ["max"]),
        node("Sub", ["zero", "y"], ["diff"]),
        node("Abs", ["diff"], ["abs"]),
        node("Neg", ["abs"], ["neg"]),
        node("Exp", ["neg"], ["exp"]),
        node("Add", ["one", "exp"], ["plus_one"]),
        node("Log", ["plus_one"], ["log"]),
        node("Add", ["max", "log"], ["softplus"]),
        node("Mul", ["x", "k"], ["kx"]),
        node("Sub", ["softplus", "kx"], ["less"]),
        node("Sub", ["less", "d"], ["out"]),
    ]
    outputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [None])
               for name in ("out", *extra_outputs)]
    graph = helper.make_graph(nodes, "swoosh_l",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
                              outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


def run(model: onnx.ModelProto, x: np.ndarray) -> list[np.ndarray]:
    with np.errstate(all="ignore"):  # exp overflows in the branch the evaluator then drops
        return list(ReferenceEvaluator(model).run(None, {"x": x}))


def inputs() -> np.ndarray:
    """Both tails (where sigmoid rounds to 1 and exp to 0), the bend near the shift, zero."""
    return np.concatenate([np.linspace(-200, 200, 4001), np.linspace(SHIFT - 3, SHIFT + 3, 601),
                           [0.0, SHIFT, 1e-30, -1e-30, 3e38, -3e38]]).astype(np.float32)


@pytest.mark.parametrize("zero", ["shaped", "scalar"])
def test_the_rewritten_softplus_gives_the_same_values_in_fewer_nodes(zero: str) -> None:
    model = swoosh_l(zero)
    x = inputs()
    (before,) = run(model, x)
    nodes = len(model.graph.node)
    assert rewrite_softplus(model) == 1
    onnx.checker.check_model(model)
    (after,) = run(model, x)
    ops = [n.op_type for n in model.graph.node]
    assert "Exp" not in ops and "Max" not in ops and "ConstantOfShape" not in ops
    assert len(ops) < nodes and ops.count("Sigmoid") == 1
    exact = np.logaddexp(0.0, x.astype(np.float64) - SHIFT) - 0.08 * x.astype(np.float64) - 0.035
    finite = np.isfinite(exact) & (np.abs(x) < 1e30)
    assert np.allclose(after[finite], before[finite], rtol=1e-6, atol=1e-6)
    assert np.allclose(after[finite], exact[finite], rtol=1e-6, atol=1e-6)
    assert np.array_equal(np.isfinite(after), np.isfinite(before))


def test_a_zero_that_broadcasts_to_a_larger_shape_is_left_alone() -> None:
    model = swoosh_l("wider")
    x = inputs()[:7]
    (before,) = run(model, x)
    assert before.shape == (3, 7)
    assert rewrite_softplus(model) == 0
    assert [n.op_type for n in model.graph.node].count("Exp") == 1


def test_an_intermediate_something_else_reads_is_kept() -> None:
    model = swoosh_l("shaped", extra_outputs=("exp", "max"))
    x = inputs()
    before = run(model, x)
    assert rewrite_softplus(model) == 1
    after = run(model, x)
    assert np.array_equal(after[1], before[1]) and np.array_equal(after[2], before[2])
    assert np.allclose(after[0], before[0], rtol=1e-6, atol=1e-6)


def test_a_graph_with_external_weights_is_not_rewritten(tmp_path: Path) -> None:
    model = swoosh_l("shaped")
    model.graph.initializer.append(numpy_helper.from_array(np.ones(4096, np.float32), "w"))
    source = tmp_path / "external.onnx"
    onnx.save(model, str(source), save_as_external_data=True, location="weights.bin",
              size_threshold=1024)
    target = tmp_path / "out.onnx"
    assert rewrite_file(str(source), str(target)) == 0
    assert not target.exists()


def test_the_bundled_encoder_has_its_softplus_and_convs_rewritten(tmp_path: Path) -> None:
    (encoder,) = (REPO / "models" / "tiny-en").glob("encoder-*chunk-16-*.onnx")
    target = tmp_path / "encoder.onnx"
    # softplus: 6 stacks and the front end (39); depthwise convs: two a layer (28)
    assert rewrite_file(str(encoder), str(target)) == 39 + 28
    rewritten = onnx.load(str(target))
    onnx.checker.check_model(rewritten)
    assert not [n for n in rewritten.graph.node if n.op_type == "Exp" and "conv" in n.name]


def test_an_fp32_zipformer_decodes_the_same_tokens_rewritten(tmp_path: Path) -> None:
    """fp32 (no dynamic quantisation to amplify rounding): the same tokens, cached (rewritten)
    or not, on every bundled clip, each run in a fresh process as a user runs it."""
    model = REPO / "models" / "tiny-random-bpe"

    def tokens(cache: str) -> list[str]:
        env = {**os.environ, graph_cache.ENV_DIR: str(tmp_path / "graphs"),
               graph_cache.ENV_SWITCH: cache}
        out = []
        for clip in CLIPS:
            run = subprocess.run(
                [sys.executable, "-m", "streamasr", "file", str(clip), "--model", str(model),
                 "--format", "jsonl"], capture_output=True, text=True, env=env, check=False)
            assert run.returncode == 0, run.stderr
            out.append(run.stdout)
        return out

    cached = tokens("1")
    records = [p / graph_cache.ENTRY_FILE for p in (tmp_path / "graphs").iterdir()]
    assert any('"rewrites": 0' not in r.read_text() for r in records if r.is_file())
    plain = tokens("0")
    assert [_finals(out) for out in cached] == [_finals(out) for out in plain]
    assert any(_finals(out) for out in plain)


def _finals(jsonl: str) -> list[list[str]]:
    events = [json.loads(line) for line in jsonl.splitlines() if line.strip()]
    return [e.get("tokens", []) for e in events if e.get("type") in ("partial", "final")]


def test_without_the_onnx_package_the_cache_optimises_without_rewriting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """onnx comes with the `serve` extra only: where it is missing (a fresh process that
    cannot import it), the graph is still cached and optimised, its entry records no
    rewrites under a key of its own, and installing onnx later builds a rewritten entry."""
    (encoder,) = (REPO / "models" / "tiny-en").glob("encoder-*chunk-16-*.onnx")
    script = (
        "import sys; sys.modules['onnx'] = None\n"
        "from pathlib import Path\n"
        "from streamasr.backends.sherpa import graph_cache\n"
        f"(graph,) = graph_cache.optimised_paths([Path({str(encoder)!r})])\n"
        "print(graph_cache.rewrite_key(), graph)\n"
    )
    env = {**os.environ, graph_cache.ENV_DIR: str(tmp_path / "graphs"),
           graph_cache.ENV_SWITCH: "1"}
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=env, check=False)
    assert run.returncode == 0, run.stderr
    key, graph = run.stdout.split()
    assert key == "off"
    record = json.loads((Path(graph).parent / graph_cache.ENTRY_FILE).read_text())
    assert record["rewrites"] == 0 and "failed" not in record
    monkeypatch.setenv(graph_cache.ENV_DIR, str(tmp_path / "graphs"))
    monkeypatch.setenv(graph_cache.ENV_SWITCH, "1")
    with_onnx = graph_cache.optimised_paths([encoder])[0]
    assert with_onnx.parent != Path(graph).parent
    record = json.loads((with_onnx.parent / graph_cache.ENTRY_FILE).read_text())
    assert record["rewrites"] == 39 + 28


def test_an_intermediate_a_subgraph_reads_is_kept() -> None:
    """An If whose branch reads `exp` from the outer graph: the node making it must stay."""
    model = swoosh_l("shaped")
    branch = helper.make_graph([helper.make_node("Identity", ["exp"], ["picked"])], "branch",
                               [], [helper.make_tensor_value_info("picked", TensorProto.FLOAT,
                                                                  [None])])
    model.graph.input.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    model.graph.node.append(helper.make_node("If", ["cond"], ["chosen"], then_branch=branch,
                                             else_branch=branch))
    model.graph.output.append(helper.make_tensor_value_info("chosen", TensorProto.FLOAT, [None]))
    feeds = {"x": inputs(), "cond": np.array(True)}
    with np.errstate(all="ignore"):
        before = ReferenceEvaluator(model).run(None, feeds)
    assert rewrite_softplus(model) == 1
    onnx.checker.check_model(model)
    with np.errstate(all="ignore"):
        after = ReferenceEvaluator(model).run(None, feeds)
    assert np.array_equal(after[1], before[1])
    assert np.allclose(after[0], before[0], rtol=1e-6, atol=1e-6)
