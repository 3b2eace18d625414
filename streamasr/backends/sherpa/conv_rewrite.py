"""Same math, a faster kernel: Zipformer's depthwise 1-D convolutions, run as 2-D ones.

Why: every Zipformer layer has two depthwise Conv1d (a causal one and a chunkwise one, one
group per channel). ONNX Runtime's CPU kernel for a grouped 1-D Conv loops over the groups,
one tiny im2col and GEMM each (512 of them per call), and in a profile of `streamasr serve`
these convolutions were a quarter of the full-size encoder's time, for a sliver of its
arithmetic. Written as Unsqueeze -> Conv2d with a 1 x K kernel -> Squeeze, the same
convolution gets ONNX Runtime's blocked (NCHWc) depthwise kernel when the session optimises
the graph: 10-30x faster per node at the encoder's shapes, equal up to float rounding (the
sums are taken in another order).

Only a Conv whose weight is an initializer of shape (C, 1, K) with `group` C and no
`auto_pad` is rewritten; anything else is left as exported. The 1-D weight is dropped only
where nothing else reads it (another node, a graph output, an If or Loop body).
"""

from __future__ import annotations

from typing import Any  # onnx's protobuf classes carry no useful types

import numpy as np

from streamasr.backends.sherpa.graph_reads import read_in_subgraphs

AXIS = 2  # the height axis the 1-D signal gets, of size 1


def rewrite_depthwise_conv1d(model: Any) -> int:
    """Rewrite every depthwise Conv1d of `model`'s main graph in place; how many."""
    from onnx import numpy_helper

    graph = model.graph
    weights = {t.name: t for t in graph.initializer if t.data_location != t.EXTERNAL}
    readers: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    taken = {t.name for t in graph.initializer} | {o for n in graph.node for o in n.output}
    axes = _unused("depthwise_conv1d/axes", taken) if opset >= 13 else None
    planar: dict[str, str] = {}  # a 1-D weight's name -> its (C, 1, 1, K) form's
    replaced: dict[int, list[Any]] = {}
    for index, node in enumerate(graph.node):
        weight = weights.get(node.input[1]) if node.op_type == "Conv" and not node.domain \
            and len(node.input) >= 2 else None
        if weight is None or not _is_depthwise_1d(node, weight):
            continue
        if weight.name not in planar:
            planar[weight.name] = _unused(f"{weight.name}/planar", taken)
            kernel = numpy_helper.to_array(weight)[:, :, None, :]
            graph.initializer.append(numpy_helper.from_array(kernel, planar[weight.name]))
        replaced[index] = _replacement(node, planar[weight.name], axes, taken)
        readers[weight.name] -= 1
    if replaced:
        still_read = {value.name for value in graph.output} | read_in_subgraphs(graph)
        for name in planar:
            if readers[name] == 0 and name not in still_read:
                graph.initializer.remove(weights[name])
        if axes is not None:
            graph.initializer.append(numpy_helper.from_array(np.array([AXIS], np.int64), axes))
        nodes = [new for index, node in enumerate(graph.node)
                 for new in replaced.get(index, [node])]
        del graph.node[:]
        graph.node.extend(nodes)
    return len(replaced)


def _is_depthwise_1d(node: Any, weight: Any) -> bool:
    """A Conv over one axis with one filter per channel and explicit (or no) padding."""
    dims = list(weight.dims)
    if len(dims) != 3 or dims[1] != 1:
        return False
    attributes = {a.name: a for a in node.attribute}
    if "auto_pad" in attributes and attributes["auto_pad"].s not in (b"", b"NOTSET"):
        return False
    lengths = {"kernel_shape": 1, "pads": 2, "strides": 1, "dilations": 1}
    if any(len(attributes[name].ints) != length
           for name, length in lengths.items() if name in attributes):
        return False  # not a well-formed 1-D Conv: left for ONNX Runtime to judge
    return attributes["group"].i == dims[0] if "group" in attributes else dims[0] == 1


def _replacement(conv: Any, weight: str, axes: str | None, taken: set[str]) -> list[Any]:
    """Unsqueeze -> Conv (1 x K) -> Squeeze, writing `conv`'s output."""
    from onnx import helper

    base = conv.name or conv.output[0]
    planar_in = _unused(f"{base}/planar/in", taken)
    planar_out = _unused(f"{base}/planar/out", taken)
    attributes = {a.name: helper.get_attribute_value(a) for a in conv.attribute}
    pads = list(attributes.get("pads", [0, 0]))
    planar = {
        "group": attributes.get("group", 1),
        "kernel_shape": [1, *attributes["kernel_shape"]] if "kernel_shape" in attributes else None,
        "pads": [0, pads[0], 0, pads[1]],
        "strides": [1, *attributes.get("strides", [1])],
        "dilations": [1, *attributes.get("dilations", [1])],
    }
    axis_args: dict[str, Any] = {} if axes else {"axes": [AXIS]}
    axis_input = [axes] if axes else []
    return [
        helper.make_node("Unsqueeze", [conv.input[0], *axis_input], [planar_in],
                         name=f"{base}/planar/unsqueeze", **axis_args),
        helper.make_node("Conv", [planar_in, weight, *conv.input[2:]], [planar_out],
                         name=f"{base}/planar",
                         **{k: v for k, v in planar.items() if v is not None}),
        helper.make_node("Squeeze", [planar_out, *axis_input], [conv.output[0]],
                         name=f"{base}/planar/squeeze", **axis_args),
    ]


def _unused(name: str, taken: set[str]) -> str:
    """`name`, or it lengthened until nothing in `taken` has it; then taken too."""
    while name in taken:
        name += "_"
    taken.add(name)
    return name
