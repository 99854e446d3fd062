"""coil options: torch.compile(options=...) merged with COIL_* environment variables.

This is the only module of coil that reads the environment. The result is a frozen
`CoilOptions`; `compile_options()` gives the dict handed to `_coil.compile` (field names of
CompileOptions in include/coil/support/options.h).

Environment:
  COIL_STRICT=1        fallbacks (whole graph or per op) become errors
  COIL_DEBUG=1         write one debug folder per compiled graph
  COIL_DEBUG_DIR       where (default ./coil_debug)
  COIL_CACHE_DIR       kernel cache (default ~/.cache/coil/kernels; "" disables it)
  COIL_CXX             host C++ compiler (default: coil's own default, g++)
Explicit options win over the environment.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Mapping

# CompileOptions fields (include/coil/support/options.h) and their Python types.
COMPILE_OPTION_FIELDS: dict[str, type] = {
    "strict": bool,
    "fuse": bool,
    "inline_pointwise": bool,
    "memory_order": bool,
    "max_inline_reads": int,
    "max_pointwise_cat": int,
    "parallel_threshold": int,
    "num_threads": int,
    "cxx": str,
    "cxx_flags": str,
    "cache_dir": str,
    "debug_dir": str,
    "runtime_headers_dir": str,
    "extern_provider": str,
    "seed": int,
    "cuda_nvrtc_path": str,
    "cuda_allow_tf32": bool,
    "cuda_conv_allow_tf32": bool,
    # cuDNN convolutions: the heuristics' first few engines timed on the first call, the
    # fastest kept (torch.backends.cudnn.benchmark's rule; the max-autotune modes); off (the
    # default): the heuristics' first.
    "cuda_conv_measure": bool,
    "cuda_autotune": bool,
    "cuda_compile_jobs": int,
    "cuda_row_entry": str,
    "cuda_online_softmax": bool,
    # Where the backend's policy has it (CUDA): a pointwise node split to the rows of a
    # reduction reading the same input, so both share one kernel (sched/align.cpp).
    "split_to_row_readers": bool,
    "cuda_fast_math": bool,
    "cuda_fast_math_f32": bool,
    # CUDA products: coil's GEMM template where it measured faster than cuBLASLt (the
    # max-autotune modes turn it on); cuda_gemm_force runs one tile configuration (tests).
    "cuda_gemm_templates": bool,
    # CUDA products: the first product of each shape times cuBLASLt's first few algorithms for
    # it and keeps the fastest (on by default; False: the heuristic's first).
    "cuda_gemm_measure": bool,
    "cuda_gemm_force": str,
    "symbol_ranges": str,
    "kernel_prefix": str,
    "compile_timeout_s": int,
    "cuda_device": int,
    "cpu_native_convolutions": bool,
    "cuda_native_depthwise": bool,
    "recompute_cheap_values": bool,
    "split_reduction_min_elements": int,
    "split_reduction_min_length": int,
    "cpu_gemm": str,
    "passes": str,
    # Graph outputs from this position on may share memory (set per graph: a forward graph's
    # saved values, which only its backward reads; -1: none).
    "shared_outputs_from": int,
    # A backend by registry name (src/runtime/backends.cpp): "portable" runs CPU graphs through
    # the portable C++ backend; "" picks the device's default (cpu / cuda).
    "backend_target": str,
}


def _compile_option_fields() -> dict[str, type]:
    """The C++ field list when the extension is built (the source of truth), else the table
    above (tests/python/test_frontend_*.py checks that the two agree)."""
    try:
        from . import _coil
    except ImportError:
        return COMPILE_OPTION_FIELDS
    if not hasattr(_coil, "option_fields"):  # a stand-in module (tests)
        return COMPILE_OPTION_FIELDS
    types = {"bool": bool, "int": int, "str": str}
    return {k: types[v] for k, v in _coil.option_fields().items()}
# Options that only the Python glue uses.
PYTHON_OPTION_FIELDS: dict[str, type] = {"debug": bool, "channels_last": bool,
                                         "channels_last_weights": bool,
                                         "cuda_graphs": bool, "cuda_graphs_training": bool,
                                         "cse": bool, "recompute": bool,
                                         "views_in_backward": bool,
                                         "recompute_pointwise": bool,
                                         "save_smaller_sources": bool,
                                         "log_softmax_via_logsumexp": bool,
                                         "fold_attention_masks": bool,
                                         "free_backward_inputs": bool,
                                         "input_mutations_in_graph": bool,
                                         "reduce_overhead": bool,
                                         "cuda_graph_max_captures": int,
                                         "cuda_graph_output_copies": bool}

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _parse_bool(name: str, v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v != 0
    s = str(v).strip().lower()
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    raise ValueError(f"coil option {name}: expected a boolean, got {v!r}")


def _convert(name: str, typ: type, v: Any) -> Any:
    if typ is bool:
        return _parse_bool(name, v)
    if typ is int:
        if isinstance(v, bool):
            raise ValueError(f"coil option {name}: expected an int, got {v!r}")
        return int(v)
    return str(v)


@dataclasses.dataclass(frozen=True)
class CoilOptions:
    strict: bool = False
    debug: bool = False
    debug_dir: str = "coil_debug"
    cache_dir: str = ""
    # Graphs with convolutions run their activations channels-last (layout.py): inference and
    # training graphs, on every device.
    channels_last: bool = True
    # And CUDA convolution weights that cuDNN would transpose inside each call are copied
    # channels-last in the graph (layout.py: _conv_weights), as Inductor does. H200, ResNet-50
    # inference in mode reduce-overhead: kernels 1.770 -> 1.729 ms a step (cuDNN's 17
    # transposes, 0.094 ms, replaced by copies taking 0.054 ms); training steps unchanged
    # within noise (docs/decisions.md).
    channels_last_weights: bool = True
    # Identical nodes of each graph are merged (the C++ cse pass, src/passes/cse.cpp).
    cse: bool = True
    # CUDA inference graphs replay a captured CUDA graph after warm-up (cuda_graphs.py).
    cuda_graphs: bool = True
    # With it, a model's CUDA training graphs (forward and backward) are captured in one pool
    # too, and kept where their replays measured faster on the first steps (training_graphs.py).
    cuda_graphs_training: bool = False
    # Training graphs split by AOTAutograd's min-cut partitioner, which recomputes cheap values
    # in the backward instead of saving them (as Inductor does). Off by default: on the H100
    # it made GPT-2 training slower (27.1 -> 29.8 ms) and its peak memory larger (6311 ->
    # 7873 MiB); docs/decisions.md.
    recompute: bool = False
    # With the default partition, a view the backward reads of a value it gets anyway (a
    # parameter's transpose) is taken again in the backward instead of saved (partition.py).
    views_in_backward: bool = True
    # With it, on CUDA graphs, cheap elementwise values the backward can compute again from what
    # it gets anyway are not saved either (GELU and LayerNorm outputs; partition.py).
    recompute_pointwise: bool = True
    # With it, a smaller forward value those elementwise values come from is saved in their
    # place where the backward would not otherwise get it (an autocast GELU's bfloat16 product
    # instead of its float32 tanh and cube; partition.py: _cheaper_sources).
    save_smaller_sources: bool = True
    # Training graphs compute float32 log_softmax / cross_entropy as x - logsumexp(x), so the
    # backward saves the logits and a value per row, not the log-probabilities
    # (log_softmax_rewrite.py).
    log_softmax_via_logsumexp: bool = True
    # An attention mask built from constants alone (no graph input) is evaluated at compile
    # time: one that keeps every position is dropped, SDPA's causal pattern becomes
    # is_causal=True, so the dispatcher may pick a fused kernel (attention_mask_fold.py).
    fold_attention_masks: bool = True
    # Backward graphs take AOTAutograd's saved activations over and drop each after its last
    # reader (from their second call on), as Inductor does; off, they live to the end of the
    # backward (ResNet-50 training: backward peak 1.1 GB above Inductor's).
    free_backward_inputs: bool = True
    # Input mutations (BatchNorm's running statistics) stay in the graph as copy_ nodes that
    # coil lowers to stores into the input (src/lower/mutation.cpp), instead of extra outputs
    # that AOTAutograd's wrapper copies back after every call.
    input_mutations_in_graph: bool = True
    # mode="reduce-overhead": every CUDA graph (inference, forward, backward) replays a
    # captured CUDA graph, in one memory pool per compiled model, without the default mode's
    # measured choice (reduce_overhead.py).
    reduce_overhead: bool = False
    # Captures per graph in that mode (one per distinct input sizes, more where earlier ones'
    # outputs are still held); past it, calls run without a CUDA graph.
    cuda_graph_max_captures: int = 8
    # That mode's inference outputs stay valid after the next call: handed out as the pool's
    # memory, they are moved to a copy when a replay would overwrite them while still held
    # (graph_memory.KeptOutputs). Off, they are the pool's memory as Inductor's mode returns
    # them: the next replay overwrites them, and reading one after it raises.
    cuda_graph_output_copies: bool = True
    # Remaining CompileOptions fields that were set explicitly (others keep C++ defaults).
    extra: tuple[tuple[str, Any], ...] = ()

    def compile_options(self, graph_dump_dir: Any = None) -> dict[str, Any]:
        """The dict for `_coil.compile`: CompileOptions field -> bool/int/str. With a debug
        folder for the graph, C++ writes its stages there (also when compilation fails)."""
        d: dict[str, Any] = dict(self.extra)
        d["strict"] = self.strict
        d["cache_dir"] = self.cache_dir
        d["debug_dir"] = str(graph_dump_dir) if graph_dump_dir else ""
        if not self.cse and "passes" not in d:
            # cse off means no merging at all: the C++ pipeline runs dce alone (src/passes).
            d["passes"] = "dce"
        return d


def _default_runtime_headers_dir() -> str | None:
    # An installed package ships runtime_headers/ next to this file (see CMakeLists.txt).
    p = Path(__file__).resolve().parent / "runtime_headers"
    return str(p) if p.is_dir() else None


def build_options(
    user: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
) -> CoilOptions:
    """Merges torch.compile options (`user`) over the environment (`env`, default os.environ)."""
    env = os.environ if env is None else env
    user = dict(user or {})
    fields = _compile_option_fields()
    known = set(fields) | set(PYTHON_OPTION_FIELDS)
    unknown = sorted(set(user) - known)
    if unknown:
        raise ValueError(f"unknown coil option(s) {unknown}; known: {sorted(known)}")

    strict = _parse_bool("COIL_STRICT", env.get("COIL_STRICT", "0"))
    debug = _parse_bool("COIL_DEBUG", env.get("COIL_DEBUG", "0"))
    debug_dir = env.get("COIL_DEBUG_DIR") or "coil_debug"
    if "COIL_CACHE_DIR" in env:
        cache_dir = env["COIL_CACHE_DIR"]
    else:
        cache_dir = str(Path.home() / ".cache" / "coil" / "kernels")
    extra: dict[str, Any] = {}
    # The glue's switches (channels_last, cse, ...), at their defaults.
    glue = {f.name: f.default for f in dataclasses.fields(CoilOptions)
            if f.name in PYTHON_OPTION_FIELDS and f.name != "debug"}
    if env.get("COIL_CXX"):
        extra["cxx"] = env["COIL_CXX"]
    rh = _default_runtime_headers_dir()
    if rh is not None:
        extra["runtime_headers_dir"] = rh

    for name, v in user.items():
        typ = fields.get(name) or PYTHON_OPTION_FIELDS[name]
        v = _convert(name, typ, v)
        if name == "strict":
            strict = v
        elif name == "debug":
            debug = v
        elif name == "debug_dir":
            debug_dir = v
            # Giving a debug dir means "dump there".
            debug = debug or bool(v)
        elif name == "cache_dir":
            cache_dir = v
        elif name in glue:
            glue[name] = v
        else:
            extra[name] = v
    return CoilOptions(
        strict=strict,
        debug=debug,
        debug_dir=debug_dir,
        cache_dir=cache_dir,
        **glue,
        extra=tuple(sorted(extra.items())),
    )
