"""An ``fx.Interpreter`` that leaves ``torch.fx.traceback``'s process-wide node metadata alone.

``fx.Interpreter.run_node`` swaps ``torch.fx.traceback.current_meta`` (a module global) for each
node's metadata whenever ``should_preserve_node_meta`` (another module global) is set, and puts
the old one back after. Both are set by whichever thread is tracing: while one rank thread
compiles (AOTAutograd traces the joint graph, its autograd hooks counting ``in_grad_fn`` in
``current_meta``), another rank thread interpreting a graph (the bridge's CPU check) would swap
the dict under it, and the tracing thread then fails with "Expected current_level > 0". The
bridge's interpreters run graphs, they do not trace them: they need no node metadata.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch import fx


class Interpreter(fx.Interpreter):
    """``fx.Interpreter`` without the node-metadata swap (module docstring)."""

    @contextlib.contextmanager
    def _set_current_node(self, node: fx.Node) -> Iterator[None]:
        yield
