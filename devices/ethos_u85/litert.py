"""LiteRT (ai-edge-litert), the reference an Ethos-U85 program is compared with: one place that
opens an interpreter with the reference kernels, for the per-layer diff, the CPU operators of a
partly mapped model, dataset runs and the tests. Why the reference kernels (BUILTIN_REF): they
are the kernels TFLite Micro runs beside the NPU; LiteRT's default XNNPACK path is not bit-exact
with them. LiteRT is a test extra, not a dependency: it is imported only when used."""
from __future__ import annotations

from pathlib import Path
from typing import Any


def open_litert(model: str | Path | bytes, *, resolver: str = "BUILTIN_REF",
                keep_tensors: bool = False, what: str = "a .tflite reference") -> Any:
    """An allocated LiteRT interpreter for ``model`` (a path, or the model's bytes) with the
    OpResolverType ``resolver``; ``keep_tensors``: every intermediate tensor stays readable.
    ImportError (with the install command) when LiteRT is missing, ValueError naming the file
    when LiteRT refuses the model. The interpreter is untyped: LiteRT ships no type
    information."""
    name = "the model" if isinstance(model, bytes) else str(model)
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ImportError:
        raise ImportError(f"{name}: {what} is run by LiteRT, which is not installed: "
                          "pip install ai-edge-litert") from None
    source = {"model_content": model} if isinstance(model, bytes) else {"model_path": str(model)}
    try:
        it = Interpreter(**source, experimental_op_resolver_type=getattr(OpResolverType, resolver),
                         experimental_preserve_all_tensors=keep_tensors)
        it.allocate_tensors()
    except (ValueError, RuntimeError) as e:
        raise ValueError(f"{name}: LiteRT cannot load it ({' '.join(str(e).split())})") from None
    return it
