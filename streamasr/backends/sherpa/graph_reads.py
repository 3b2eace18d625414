"""What reads a name in an ONNX graph beyond its nodes' inputs, for the graph rewrites.

Why: a rewrite drops what nothing reads any more (the nodes it replaced, a weight it
reshaped). If, Loop and Scan bodies read outer results and initializers by name, not
through their node's inputs, so a rewrite that counted only inputs would drop what a body
still needs and leave a graph ONNX Runtime refuses.
"""

from __future__ import annotations

from typing import Any  # onnx's protobuf classes carry no useful types


def read_in_subgraphs(graph: Any) -> set[str]:
    """The names read by nodes of `graph`'s subgraphs (If, Loop, Scan bodies), at any depth:
    a body reads outer results and initializers by name, not through its node's inputs, so
    what makes them must stay."""
    read: set[str] = set()
    for node in graph.node:
        for attribute in node.attribute:
            for body in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
                read |= {name for inner in body.node for name in inner.input}
                read |= read_in_subgraphs(body)
    return read
