"""Same math, fewer passes: the softplus inside Zipformer's Swoosh activations, rewritten.

Why: icefall exports SwooshL/SwooshR (`softplus(x - c) - 0.08 x - d`) with softplus written
as `max(0, y) + log(1 + exp(-|0 - y|))`: eight ONNX nodes, each a whole pass over the
tensor, plus a tensor of zeros made on every call. ONNX Runtime runs them one by one, and
in a profile of `streamasr serve` they were a third of the engine's time (the encoder's
convolutional front end applies them to its largest tensors). Here that subgraph becomes
`relu(y) - log(sigmoid(|y|))`: five nodes, with ONNX Runtime's vectorised Sigmoid in place
of Exp and Add. The two are equal in exact arithmetic (log(1 + e^-|y|) = -log sigmoid(|y|));
in float32 they differ by rounding only (|y| > 17: sigmoid rounds to 1 and the term to 0,
where its true value is below 4e-8). ONNX Runtime's own Softplus is no help: its kernel is
scalar, four times slower than the eight nodes.

Only that exact shape is rewritten, only in the main graph, and only where the zero is a
constant; a graph whose weights live in external files is left alone (its paths are not
ours to follow). Intermediate results something else reads are kept. The cache's build
step runs this, and conv_rewrite.py's depthwise convolutions, before ONNX Runtime optimises
the graph (graph_build.py).
"""

from __future__ import annotations

import importlib.util
from collections import defaultdict
from typing import Any  # onnx's protobuf classes carry no useful types

from streamasr.backends.sherpa.conv_rewrite import rewrite_depthwise_conv1d
from streamasr.backends.sherpa.graph_reads import read_in_subgraphs

VERSION = 2  # part of a cache entry's key: bump when what is rewritten changes


def key() -> str:
    """What a cache entry's key says of the rewrites: their VERSION, or "off" where the onnx
    package (the `serve` extra) is not installed, so installing it later rebuilds the entry."""
    return str(VERSION) if importlib.util.find_spec("onnx") is not None else "off"


def rewrite_softplus(model: Any) -> int:
    """Rewrite every exported softplus of `model`'s main graph in place; how many."""
    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}
    readers: dict[str, list[Any]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            readers[name].append(node)
    constants = _constant_values(graph)
    replaced: dict[int, list[Any]] = {}
    for log in [node for node in graph.node if node.op_type == "Log"]:
        match = _softplus_at(log, producer, readers, constants)
        if match is not None:
            total, y = match
            replaced[id(total)] = _replacement(total, y)
    if replaced:
        still_read = {value.name for value in graph.output} | read_in_subgraphs(graph)
        nodes = [new for node in graph.node for new in replaced.get(id(node), [node])]
        del graph.node[:]
        graph.node.extend(_read_nodes(nodes, still_read))
    return len(replaced)


def _softplus_at(log: Any, producer: dict, readers: dict, constants: dict) -> tuple | None:
    """(the final Add, y) where `log` is the log1p of `max(0, y) + log(1 + exp(-|0 - y|))`,
    each 0 and 1 a constant that cannot change the result's shape."""
    plus_one = _only(producer.get(log.input[0]), "Add")
    if plus_one is None:
        return None
    ones = [name for name in plus_one.input if _is_scalar(constants.get(name), 1.0)]
    exp = _only(producer.get(_the_other(plus_one.input, ones[0]) if ones else None), "Exp")
    neg = exp and _only(producer.get(exp.input[0]), "Neg")
    absolute = neg and _only(producer.get(neg.input[0]), "Abs")
    difference = absolute and _only(producer.get(absolute.input[0]), "Sub")
    if not difference or len(difference.input) != 2:
        return None
    y = difference.input[1]  # torch.abs(0 - y), as exported; |y - 0| is the same
    if not _is_zero_for(difference.input[0], y, producer, constants):
        y = difference.input[0]
        if not _is_zero_for(difference.input[1], y, producer, constants):
            return None
    log_readers = readers.get(log.output[0], [])
    if len(log_readers) != 1 or log_readers[0].op_type != "Add" or log_readers[0].domain:
        return None
    total = log_readers[0]
    maximum = _only(producer.get(_the_other(total.input, log.output[0])), "Max")
    if maximum is None or len(maximum.input) != 2 or y not in maximum.input:
        return None
    if not _is_zero_for(_the_other(maximum.input, y), y, producer, constants):
        return None
    return total, y


def _the_other(inputs: Any, name: str) -> str | None:
    """The input of a two-input node that is not `name` (None: no such single one)."""
    others = [other for other in inputs if other != name]
    return others[0] if len(inputs) == 2 and len(others) == 1 else None


def _is_zero_for(name: str | None, y: str, producer: dict, constants: dict) -> bool:
    """A zero that leaves y's shape as it is: a 0-d constant 0, or zeros of y's shape
    (ConstantOfShape of the shape of y, or of the tensor y was made from by adding or
    subtracting a 0-d constant, as `x - 4.0` is exported)."""
    if name is None:
        return False
    value = constants.get(name)
    if _is_scalar(value, 0.0):
        return True
    maker = producer.get(name)
    if maker is None or maker.op_type != "ConstantOfShape" or maker.domain:
        return False
    fill = [a.t for a in maker.attribute if a.name == "value"]
    if fill and not _is_zeros(fill[0]):
        return False
    shape = producer.get(maker.input[0])
    if shape is None or shape.op_type != "Shape" or shape.domain or shape.attribute:
        return False
    source = shape.input[0]
    if source == y:
        return True
    made = producer.get(y)
    return (
        made is not None and made.op_type in ("Sub", "Add") and not made.domain
        and list(made.input[:1]) == [source] and len(made.input) == 2
        and _is_scalar(constants.get(made.input[1]), None)
    )


def _replacement(total: Any, y: str) -> list[Any]:
    """relu(y) - log(sigmoid(|y|)), writing `total`'s output."""
    from onnx import helper

    base = f"{total.name or total.output[0]}/softplus"
    relu, absolute, sigmoid, log = (f"{base}/{part}" for part in ("relu", "abs", "sigmoid", "log"))
    return [
        helper.make_node("Relu", [y], [relu], name=relu),
        helper.make_node("Abs", [y], [absolute], name=absolute),
        helper.make_node("Sigmoid", [absolute], [sigmoid], name=sigmoid),
        helper.make_node("Log", [sigmoid], [log], name=log),
        helper.make_node("Sub", [relu, log], [total.output[0]], name=f"{base}/sub"),
    ]


def _only(node: Any, op_type: str) -> Any:
    return node if node is not None and node.op_type == op_type and not node.domain else None


def _constant_values(graph: Any) -> dict[str, Any]:
    """The graph's constants (initializers held in the file, and Constant nodes) by name."""
    from onnx import numpy_helper

    values: dict[str, Any] = {}
    for tensor in graph.initializer:
        if tensor.data_location != tensor.EXTERNAL:
            values[tensor.name] = numpy_helper.to_array(tensor)
    for node in graph.node:
        if node.op_type == "Constant" and not node.domain:
            for attribute in node.attribute:
                if attribute.name == "value":
                    values[node.output[0]] = numpy_helper.to_array(attribute.t)
    return values


def _is_scalar(value: Any, expected: float | None) -> bool:
    """A 0-d constant (broadcasting it changes no shape) holding `expected` (None: any)."""
    if value is None or value.ndim != 0:
        return False
    return expected is None or bool(value == expected)


def _is_zeros(tensor: Any) -> bool:
    from onnx import numpy_helper

    return bool((numpy_helper.to_array(tensor) == 0).all())


def _read_nodes(nodes: list[Any], outputs: set[str]) -> list[Any]:
    """The nodes whose results something reads (a graph output, or a node kept), in order:
    one walk from the end drops the old subgraph, which nothing reads any more."""
    read = set(outputs)
    kept: list[Any] = []
    for node in reversed(nodes):
        if any(out in read for out in node.output):
            kept.append(node)
            read.update(node.input)
    kept.reverse()
    return kept


def has_external_data(model: Any) -> bool:
    """True when any initializer's bytes live in another file."""
    return any(t.data_location == t.EXTERNAL for t in model.graph.initializer)


def rewrite_file(source: str, target: str) -> int:
    """Write `source` rewritten to `target`; 0 (and nothing written) when nothing matched."""
    import onnx

    model = onnx.load(source, load_external_data=False)
    if has_external_data(model):
        return 0
    count = rewrite_softplus(model) + rewrite_depthwise_conv1d(model)
    if count:
        onnx.save(model, target)
    return count
