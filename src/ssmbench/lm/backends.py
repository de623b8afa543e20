"""The whole-model backends, the hf-eager isolation, and which implementation each layer ran.

transformers (5.x) binds its fast kernels when a modeling module is first imported:
``use_kernel_func_from_hub_with_fallback`` (integrations/hub_kernels.py) tries
``importlib.import_module("mamba_ssm" | "causal_conv1d" | "fla")`` at decoration time and,
if that works, closes over the package's function as ``implementation``; otherwise over
the module's own PyTorch function.  This happens whatever the device, so on a CPU with fla
installed Qwen3-Next's gated-DeltaNet layers are bound to fla's Triton kernels, and a
Triton-only mamba_ssm would bind Mamba-1's prefill to a CUDA extension that is not there.
Hence the hf-eager cell process calls :func:`prepare` before anything imports transformers:
the kernel packages are made unimportable (``sys.modules[name] = None``, which makes
``import`` raise ModuleNotFoundError and ``importlib.util.find_spec`` return None, as for a
package that is not installed).

:func:`bound_kernels` reads what a modeling module bound (the closure's ``implementation``);
:func:`trace_kernels` records, per decoder layer, which of those functions a forward really
called, so the record names the implementation each layer ran (:func:`layer_report`, and
:func:`layer_summary` in a line).

    hf-eager    transformers' own PyTorch paths, kernel packages blocked (any device)
    hf-kernels  the same classes with mamba_ssm / causal_conv1d / fla / flash-attn bound (GPU)
    hf-static   a StaticCache and a compiled decode step, attention classes (GPU; on a CPU
                uncompiled, only with SSMBENCH_LM_STATIC_ON_CPU=1: ssmbench.lm.static)
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from types import ModuleType

from ssmbench.lm import static
from ssmbench.lm.zoo import ModelEntry, entry

BACKENDS = ("hf-eager", "hf-kernels", "hf-static")
# the packages transformers binds at import time, by import name
KERNEL_PACKAGES = ("mamba_ssm", "causal_conv1d", "fla", "flash_attn")

# hf-kernels: per config class, the import names that must be there (required) and those
# whose absence leaves one op on its PyTorch path (optional).  Mamba-1's prefill runs
# mamba_ssm's selective_scan_fn, a CUDA extension (selective_scan_cuda): a Triton-only
# mamba_ssm build has its decode step but raises on prefill.
KERNEL_NEEDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "MambaConfig": (("mamba_ssm", "selective_scan_cuda"), ("causal_conv1d",)),
    "Mamba2Config": (("mamba_ssm",), ("causal_conv1d",)),
    "FalconH1Config": (("mamba_ssm",), ("causal_conv1d", "flash_attn")),
    "Zamba2Config": (("mamba_ssm",), ("causal_conv1d", "flash_attn")),
    "Qwen3NextConfig": (("fla",), ("causal_conv1d", "flash_attn")),
    "Qwen2Config": (("flash_attn",), ()),
    "LlamaConfig": (("flash_attn",), ()),
}


class IsolationError(RuntimeError):
    """The kernel packages could not be blocked: something imported them (or transformers,
    which may have bound them) first."""


def block_kernels(names: tuple[str, ...] = KERNEL_PACKAGES) -> None:
    """Make ``names`` unimportable in this process.  Refuses when one of them, or
    transformers, is already imported: their bindings would be made already."""
    loaded = sorted(
        m for m in sys.modules if m.split(".")[0] in (*names, "transformers") and sys.modules[m]
    )
    if loaded:
        raise IsolationError(
            f"cannot block {', '.join(names)}: already imported in this process: "
            f"{', '.join(loaded[:5])}{' ...' if len(loaded) > 5 else ''} "
            "(call ssmbench.lm.backends.prepare first thing in the cell process)"
        )
    for name in names:
        sys.modules[name] = None  # import raises ModuleNotFoundError, find_spec gives None


def blocked() -> list[str]:
    return [name for name in KERNEL_PACKAGES if name in sys.modules and sys.modules[name] is None]


def prepare(backend: str) -> None:
    """First call of a whole-model cell process: hf-eager blocks the kernel packages."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; known: {list(BACKENDS)}")
    if backend == "hf-eager":
        block_kernels()


def _implementation(fn: Callable) -> tuple[Callable, Callable] | None:
    """(the implementation ``fn`` dispatches to, transformers' own PyTorch function) for a
    function decorated by ``use_kernel_func_from_hub_with_fallback``; None for any other."""
    seen = 0
    while fn is not None and seen < 4:  # the hub wrapper may wrap it once more
        if getattr(fn, "__closure__", None):
            names = inspect.getclosurevars(fn).nonlocals
            if "implementation" in names and "torch_function" in names:
                return names["implementation"], names["torch_function"]
        fn, seen = getattr(fn, "__wrapped__", None), seen + 1
    return None


def _qualname(fn: Callable) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def bound_kernels(module: ModuleType) -> dict[str, str]:
    """The kernel-or-torch functions of a transformers modeling module: global name ->
    the qualified name of the implementation it dispatches to."""
    bound = {}
    for name, value in vars(module).items():
        found = _implementation(value) if callable(value) else None
        if found:
            bound[name] = _qualname(found[0])
    return bound


def _modeling_modules(lm) -> list[ModuleType]:
    names = {type(m).__module__ for m in lm.modules()}
    return [sys.modules[n] for n in sorted(names) if n.startswith("transformers.models.")]


def _layers(lm):
    layers = getattr(lm.base_model, "layers", None)
    if layers is None:
        raise ValueError(f"{type(lm).__name__}: no base_model.layers to report on")
    return layers


@contextlib.contextmanager
def trace_kernels(lm) -> Iterator[dict[int, dict[str, str]]]:
    """Within the block, each decorated function of ``lm``'s modeling modules records the
    implementation it runs, under the decoder layer that called it: {layer index: {function
    name: implementation}}, filled as forwards run."""
    calls: dict[int, dict[str, str]] = {}
    current: list[int] = []
    patched: list[tuple[ModuleType, str, Callable]] = []

    def recorder(name: str, fn: Callable, impl: str) -> Callable:
        def record(*args, **kwargs):
            if current:
                calls.setdefault(current[-1], {})[name] = impl
            return fn(*args, **kwargs)

        return record

    def enter(index: int) -> Callable:
        def hook(_module, _args) -> None:  # a hook's return value would replace the input
            current.append(index)

        return hook

    def leave(_module, _args, _output) -> None:  # ... and this one's the output
        current.pop()

    hooks = []
    for index, layer in enumerate(_layers(lm)):
        hooks.append(layer.register_forward_pre_hook(enter(index)))
        hooks.append(layer.register_forward_hook(leave))
    try:
        for module in _modeling_modules(lm):
            for name, value in list(vars(module).items()):
                found = _implementation(value) if callable(value) else None
                if found:
                    patched.append((module, name, value))
                    setattr(module, name, recorder(name, value, _qualname(found[0])))
        yield calls
    finally:
        for module, name, value in patched:
            setattr(module, name, value)
        for hook in hooks:
            hook.remove()


def layer_report(lm, calls: dict[int, dict[str, str]]) -> list[dict]:
    """Per decoder layer: its class, the attention implementation of its attention modules
    (None for a layer without one) and the kernels it ran (from :func:`trace_kernels`),
    with ``kernels`` true where any of them is not transformers' own PyTorch function."""
    attn = lm.config._attn_implementation
    rows = []
    for index, layer in enumerate(_layers(lm)):
        has_attention = any(
            type(m).__name__.endswith("Attention") and hasattr(m, "config") for m in layer.modules()
        )
        ran = calls.get(index, {})
        rows.append(
            {
                "layer": index,
                "class": type(layer).__name__,
                "attention": attn if has_attention else None,
                "ran": dict(sorted(ran.items())),
                "kernels": any(not impl.startswith("transformers.") for impl in ran.values()),
            }
        )
    return rows


def layer_summary(layers: list[dict]) -> str:
    """A short string of what the decoder layers ran: runs of identical layers counted,
    e.g. "24x Mamba2Block [torch_forward]" or "2x Qwen2DecoderLayer attn=eager"."""
    groups: list[list] = []
    for layer in layers:
        ran = sorted({impl.rsplit(".", 1)[-1] for impl in layer["ran"].values()})
        key = (layer["class"], layer["attention"], tuple(ran))
        if groups and groups[-1][0] == key:
            groups[-1][1] += 1
        else:
            groups.append([key, 1])
    parts = []
    for (cls, attention, ran), count in groups:
        text = f"{count}x {cls}"
        text += f" attn={attention}" if attention else ""
        text += f" [{', '.join(ran)}]" if ran else ""
        parts.append(text)
    return "; ".join(parts)


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def availability(model: ModelEntry | str, backend: str, device: str) -> tuple[bool, str]:
    """(available, reason) of ``backend`` for ``model`` on ``device`` ("cpu", "cuda"),
    decided without importing torch or transformers."""
    model = entry(model) if isinstance(model, str) else model
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; known: {list(BACKENDS)}")
    if model.unavailable:
        return False, model.unavailable
    if backend == "hf-eager":
        return True, "transformers' own PyTorch paths, kernel packages blocked"
    if backend == "hf-static" and static.static_on_cpu():
        return static.static_support(model)  # the tests' opt-in: any device
    if not str(device).startswith("cuda"):
        why = {
            "hf-kernels": "mamba_ssm / causal_conv1d / fla / flash-attn kernels are CUDA and "
            "Triton code: GPU only",
            "hf-static": f"a static cache with a compiled (CUDA-graph) decode step "
            f"({static.STATIC_ON_CPU}=1 runs it uncompiled, for tests): GPU only",
        }[backend]
        return False, f"{backend} on {device}: {why}"
    if backend == "hf-kernels":
        required, optional = KERNEL_NEEDS[model.config_class]
        missing = [name for name in required if not _importable(name)]
        if missing:
            return False, f"hf-kernels for {model.config_class}: not importable: {missing}"
        absent = [name for name in optional if not _importable(name)]
        note = f"; PyTorch path for what {absent} would run" if absent else ""
        return True, f"kernels of {list(required)}{note}"
    return static.static_support(model)


def run_in_fresh_process(backend: str, target: str, kwargs: dict, timeout_s: float = 600):
    """``target`` ("module:function") called with ``kwargs`` in a new Python process that
    first runs :func:`prepare` (``backend``); its JSON-able return value, read back.
    Raises RuntimeError with the child's stderr if it fails."""
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-m", "ssmbench.lm.backends", backend, target, json.dumps(kwargs)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "PYTHONPATH": path},
    )
    if done.returncode != 0:
        raise RuntimeError(f"{target} under {backend} exited {done.returncode}:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _main(argv: list[str]) -> int:
    backend, target, kwargs = argv
    prepare(backend)
    module, _, function = target.partition(":")
    result = getattr(importlib.import_module(module), function)(**json.loads(kwargs))
    print(json.dumps(result))
    return 0


def bindings(modules: list[str]) -> dict:
    """What this process binds: {modeling module: :func:`bound_kernels`} for the named
    transformers modeling modules, and the kernel packages blocked here.  Called in a fresh
    process by :func:`run_in_fresh_process` to show what a backend's cell would run."""
    bound = {name: bound_kernels(importlib.import_module(name)) for name in modules}
    return {"bound": bound, "blocked": blocked()}


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
