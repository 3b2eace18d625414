"""The depthwise Conv1d rewrite (streamasr/backends/sherpa/conv_rewrite.py): the same values
as the exported convolution (onnx's reference evaluator) at the shapes Zipformer exports
(a causal one over cache + chunk, a chunkwise one padded on both sides), for either form
of Unsqueeze, and nothing rewritten where the convolution is not depthwise over one axis.
Tokens through the real engine, rewritten or not: test_graph_rewrite.py (fp32) and
test_graph_cache.py (int8 tiny-en)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from streamasr.backends.sherpa.conv_rewrite import rewrite_depthwise_conv1d

REPO = Path(__file__).resolve().parent.parent
RNG = np.random.default_rng(7)


def conv1d(channels: int, length: int, kernel: int, *, opset: int = 13, weight_shape=None,
           group: int | None = None, weight_as_input: bool = False, twice: bool = False,
           check: bool = True, **attributes: object) -> onnx.ModelProto:
    """x (2, C, T) -> Conv(x, w, b) [-> a second Conv reading the same w], as icefall exports."""
    shape = weight_shape or (channels, 1, kernel)
    weight = numpy_helper.from_array(RNG.standard_normal(shape).astype(np.float32), "w")
    bias = numpy_helper.from_array(RNG.standard_normal(channels).astype(np.float32), "b")
    group = channels if group is None else group
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", group=group,
                              kernel_shape=[shape[-1]] if len(shape) == 3 else list(shape[2:]),
                              **attributes)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None, None])]
    if twice:
        nodes.append(helper.make_node("Conv", ["y", "w", "b"], ["z"], name="again", group=group,
                                      kernel_shape=[kernel], **attributes))
        outputs = [helper.make_tensor_value_info("z", TensorProto.FLOAT, [None, None, None])]
    dims = [2, channels, length] if len(shape) == 3 else [2, channels, length, length]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)]
    initializers = [weight, bias]
    if weight_as_input:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, list(shape)))
        initializers = [bias]
    graph = helper.make_graph(nodes, "conv1d", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if check:  # a malformed one (check=False) is what a hostile file could hold
        onnx.checker.check_model(model)
    return model


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
    return np.asarray(ReferenceEvaluator(model).run(None, feeds)[0])


@pytest.mark.parametrize(("channels", "length", "kernel", "pads", "opset"), [
    (16, 23, 16, (0, 0), 13),  # causal: the cache's 15 frames and a chunk of 8, no padding
    (16, 8, 31, (15, 15), 13),  # chunkwise: a chunk padded on both sides
    (24, 2, 15, (7, 7), 11),  # the deepest stack's two frames; Unsqueeze with `axes` as before 13
])
def test_a_depthwise_conv1d_gives_the_same_values_as_a_planar_conv(
    channels: int, length: int, kernel: int, pads: tuple[int, int], opset: int
) -> None:
    model = conv1d(channels, length, kernel, opset=opset, pads=list(pads))
    x = RNG.standard_normal((2, channels, length)).astype(np.float32)
    before = run(model, {"x": x})
    assert rewrite_depthwise_conv1d(model) == 1
    onnx.checker.check_model(model)
    ops = [n.op_type for n in model.graph.node]
    assert ops == ["Unsqueeze", "Conv", "Squeeze"]
    (conv,) = [n for n in model.graph.node if n.op_type == "Conv"]
    attributes = {a.name: helper.get_attribute_value(a) for a in conv.attribute}
    assert attributes["kernel_shape"] == [1, kernel] and attributes["group"] == channels
    assert attributes["pads"] == [0, pads[0], 0, pads[1]]
    assert [list(t.dims) for t in model.graph.initializer if t.name.startswith("w")] == [
        [channels, 1, 1, kernel]]  # the 1-D weight, read by nothing else now, is gone
    after = run(model, {"x": x})
    assert after.shape == before.shape == (2, channels, length + sum(pads) - kernel + 1)
    assert np.allclose(after, before, rtol=1e-5, atol=1e-5)


def test_strides_and_dilations_carry_over() -> None:
    model = conv1d(8, 20, 3, pads=[2, 1], strides=[2], dilations=[2])
    x = RNG.standard_normal((2, 8, 20)).astype(np.float32)
    before = run(model, {"x": x})
    assert rewrite_depthwise_conv1d(model) == 1
    after = run(model, {"x": x})
    assert after.shape == before.shape and np.allclose(after, before, rtol=1e-5, atol=1e-5)


def test_a_weight_two_convs_read_is_made_planar_once() -> None:
    model = conv1d(8, 12, 5, pads=[2, 2], twice=True)
    x = RNG.standard_normal((2, 8, 12)).astype(np.float32)
    before = run(model, {"x": x})
    assert rewrite_depthwise_conv1d(model) == 2
    onnx.checker.check_model(model)
    after = run(model, {"x": x})
    assert np.allclose(after, before, rtol=1e-5, atol=1e-5)
    assert [t.name for t in model.graph.initializer if t.name.startswith("w")] == ["w/planar"]


def test_a_weight_the_graph_also_outputs_is_kept() -> None:
    model = conv1d(8, 12, 5, pads=[2, 2])
    model.graph.output.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [8, 1, 5]))
    x = RNG.standard_normal((2, 8, 12)).astype(np.float32)
    before = ReferenceEvaluator(model).run(None, {"x": x})
    assert rewrite_depthwise_conv1d(model) == 1
    onnx.checker.check_model(model)
    after = ReferenceEvaluator(model).run(None, {"x": x})
    assert np.allclose(after[0], before[0], rtol=1e-5, atol=1e-5)
    assert np.array_equal(after[1], before[1])


def test_a_weight_a_subgraph_reads_is_kept() -> None:
    """An If whose branches read the weight from the outer graph: it must stay there."""
    model = conv1d(8, 12, 5, pads=[2, 2])
    branch = helper.make_graph(
        [helper.make_node("Identity", ["w"], ["picked"])], "branch", [],
        [helper.make_tensor_value_info("picked", TensorProto.FLOAT, [8, 1, 5])])
    model.graph.input.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    model.graph.node.append(helper.make_node("If", ["cond"], ["chosen"], then_branch=branch,
                                             else_branch=branch))
    model.graph.output.append(
        helper.make_tensor_value_info("chosen", TensorProto.FLOAT, [8, 1, 5]))
    feeds = {"x": RNG.standard_normal((2, 8, 12)).astype(np.float32), "cond": np.array(True)}
    before = ReferenceEvaluator(model).run(None, feeds)
    assert rewrite_depthwise_conv1d(model) == 1
    onnx.checker.check_model(model)
    after = ReferenceEvaluator(model).run(None, feeds)
    assert np.allclose(after[0], before[0], rtol=1e-5, atol=1e-5)
    assert np.array_equal(after[1], before[1])


@pytest.mark.parametrize("case", ["grouped", "planar", "auto_pad", "weight_as_input",
                                  "pads_of_2d"])
def test_what_is_not_a_depthwise_conv1d_is_left_alone(case: str) -> None:
    model = {
        "grouped": lambda: conv1d(8, 12, 5, weight_shape=(8, 2, 5), group=4),
        "planar": lambda: conv1d(8, 6, 3, weight_shape=(8, 1, 3, 3)),
        "auto_pad": lambda: conv1d(8, 12, 5, auto_pad="SAME_UPPER"),
        "weight_as_input": lambda: conv1d(8, 12, 5, weight_as_input=True),
        "pads_of_2d": lambda: conv1d(8, 12, 5, pads=[2, 2, 2, 2], check=False),
    }[case]()
    before = model.SerializeToString()
    assert rewrite_depthwise_conv1d(model) == 0
    assert model.SerializeToString() == before


def test_every_depthwise_conv_of_the_bundled_encoder_is_rewritten() -> None:
    """tiny-en: two per layer (causal and chunkwise), 14 layers; the front end's 2-D convs
    are not touched."""
    (encoder,) = (REPO / "models" / "tiny-en").glob("encoder-*chunk-16-*.onnx")
    model = onnx.load(str(encoder))
    convs = [n.name for n in model.graph.node if n.op_type == "Conv"]
    assert rewrite_depthwise_conv1d(model) == 28
    onnx.checker.check_model(model)
    left = [n.name for n in model.graph.node if n.op_type == "Conv" and "/planar" not in n.name]
    assert len(left) == len(convs) - 28
    assert not [name for name in left if "causal" in name or "chunkwise" in name]
