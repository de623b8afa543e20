"""The hf-static backend: greedy decoding through one preallocated ``StaticCache`` with the
decode step compiled, the path serving engines take (STYLE.md: a new token's key and value
are written in place, no cache is concatenated per step).

transformers' ``StaticCache(config=..., max_cache_len=...)`` (both 5.17 and 5.24) allocates,
at the first forward, every attention layer's keys and values for ``max_cache_len`` tokens
and marks them as static addresses, so a CUDA graph of the step can be replayed.  The
prefill runs eagerly (transformers compiles only the one-token step: a prompt's length
would recompile it); the step is ``torch.compile(mode="reduce-overhead")`` on CUDA, which
records CUDA graphs.  On a CPU hf-static is unavailable unless :data:`STATIC_ON_CPU` is
``1`` (tests): then the same cache, prefill and loop run with the step not compiled, and
the record's ``static_mode`` note says so.

Which classes: those transformers marks compilable (``_can_compile_fullgraph``) whose
layers are all attention (family ``transformer``: Qwen2, Llama).  Per class, from the
5.24 source: Mamba (``MambaForCausalLM``) is not marked compilable; Falcon-H1 and Zamba2
are marked not compilable (Falcon-H1: "StaticCache has no entry for hybrid layers");
Mamba-2 and Qwen3-Next are marked compilable, but their SSM / gated-DeltaNet layers keep
a fixed-size state that StaticCache uses as-is (``LinearAttentionLayer``, "static and
dynamic"), so there is no KV to preallocate in Mamba-2, and in Qwen3-Next only the few
attention layers' would be: this backend is built and gated for attention classes only.
"""

from __future__ import annotations

import inspect
import os

from ssmbench.lm.build import DTYPES
from ssmbench.lm.zoo import ModelEntry

STATIC_ON_CPU = "SSMBENCH_LM_STATIC_ON_CPU"
STATIC_FAMILIES = ("transformer",)
CUDA_MODE = 'torch.compile(mode="reduce-overhead", fullgraph=False): CUDA graphs'
CPU_MODE = f"not compiled (CPU, {STATIC_ON_CPU}=1): the static cache and loop only"


def static_on_cpu() -> bool:
    """Whether this process opted in to hf-static on a CPU (tests)."""
    return os.environ.get(STATIC_ON_CPU, "") == "1"


def static_mode(device: str) -> str:
    """How the decode step is compiled on ``device`` (the record's ``static_mode`` note)."""
    return CUDA_MODE if str(device).startswith("cuda") else CPU_MODE


def static_support(model: ModelEntry) -> tuple[bool, str]:
    """(supported, reason) of hf-static for ``model``'s class (module docstring)."""
    import transformers

    cls = getattr(transformers, model.model_class)
    version = transformers.__version__
    if not getattr(cls, "_can_compile_fullgraph", False):
        return False, (
            f"hf-static: transformers {version} does not mark {model.model_class} "
            "compilable with a static cache (_can_compile_fullgraph is False)"
        )
    if model.family not in STATIC_FAMILIES:
        return False, (
            f"hf-static: {model.model_class} ({model.family}) keeps fixed-size SSM / "
            "linear-attention state that StaticCache uses as-is; the static path is built "
            "and gated for attention-only classes"
        )
    return True, f"{model.model_class}._can_compile_fullgraph, attention layers only"


class StaticDecoder:
    """Greedy decoding of a batch through one StaticCache of ``max_cache_len`` tokens:
    :meth:`prefill` (eager, resets the cache) then :meth:`step` (compiled on CUDA).  The
    same cache object is reused by every round, so its addresses stay those a CUDA graph
    recorded."""

    def __init__(self, lm, max_cache_len: int, device: str):
        import torch
        from transformers import StaticCache

        from ssmbench.lm.generate import cache_kwarg

        self.lm, self.max_cache_len, self.device = lm, max_cache_len, str(device)
        self.cache = StaticCache(config=lm.config, max_cache_len=max_cache_len)
        self.cache_kwarg = cache_kwarg(lm)
        # 5.17 indexes the static cache by cache_position; 5.24 keeps its own count
        self.takes_cache_position = "cache_position" in inspect.signature(lm.forward).parameters
        self.cuda = self.device.startswith("cuda")
        self.mode = static_mode(self.device)
        self.forward = lm.forward
        if self.cuda:
            self.forward = torch.compile(lm.forward, mode="reduce-overhead", fullgraph=False)
        self.position, self.token = 0, None

    def _inputs(self, ids, start: int) -> dict:
        import torch

        positions = torch.arange(start, start + ids.shape[1], device=ids.device)
        inputs = {"input_ids": ids, "use_cache": True, "position_ids": positions[None]}
        if self.takes_cache_position:
            inputs["cache_position"] = positions
        return {**inputs, self.cache_kwarg: self.cache}

    def prefill(self, ids):
        """Logits (b, 1, vocab) of the first new token after ``ids`` (b, t), the cache
        reset and filled with their keys and values."""
        if ids.shape[1] >= self.max_cache_len:
            raise ValueError(
                f"a prompt of {ids.shape[1]} tokens leaves no room in a static cache of "
                f"max_cache_len={self.max_cache_len}"
            )
        self.cache.reset()
        out = self.lm(**self._inputs(ids, 0), logits_to_keep=1)
        self.position = ids.shape[1]
        self.token = out.logits[:, -1].argmax(-1, keepdim=True)  # (b, 1)
        return out.logits

    def full(self) -> bool:
        return self.position >= self.max_cache_len

    def step(self):
        """One greedy step: the last token through the cache; its logits (b, vocab)."""
        import torch

        if self.token is None:
            raise RuntimeError("StaticDecoder.step before prefill")
        if self.full():
            raise RuntimeError(
                f"the static cache is full: max_cache_len={self.max_cache_len} tokens"
            )
        if self.cuda:  # a new CUDA-graph step: the last one's outputs may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        out = self.forward(**self._inputs(self.token, self.position))
        logits = out.logits[:, -1]
        self.token = logits.argmax(-1, keepdim=True).clone()  # read before the next replay
        self.position += 1
        return logits

    def greedy(self, prompt, n_new: int):
        """The n_new greedy tokens (b, n_new) after ``prompt``."""
        import torch

        self.prefill(prompt)
        tokens = [self.token]
        for _ in range(n_new - 1):
            self.step()
            tokens.append(self.token)
        return torch.cat(tokens, dim=1)


def static_tokens_check(
    lm, device: str, seed: int = 0, prompt_len: int = 11, n_new: int = 6, batch: int = 2
) -> dict:
    """The hf-static gate, a check row: greedy tokens through a :class:`StaticDecoder`
    equal the eager loop's (a DynamicCache: :func:`ssmbench.lm.generate.prefill` and
    ``decode_step``) for the same random prompt, and so do the logits of every step,
    under the whole-model rule (:func:`ssmbench.numerics.compare_logits`).  The logits
    matter: a random model's greedy token barely depends on its context (a ci Qwen2.5
    repeats its input whatever the cache holds), so tokens alone miss a lost cache."""
    import torch

    from ssmbench.lm.generate import decode_step, prefill
    from ssmbench.numerics import compare_logits

    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(1, lm.config.vocab_size, (batch, prompt_len), generator=gen)
    prompt = prompt.to(device)
    with torch.inference_mode():
        logits, cache = prefill(lm, prompt)
        eager_logits = [logits[:, -1]]
        for _ in range(n_new - 1):
            step, cache = decode_step(lm, eager_logits[-1].argmax(-1, keepdim=True), cache)
            eager_logits.append(step)
        decoder = StaticDecoder(lm, prompt_len + n_new, device)
        static_logits = [decoder.prefill(prompt)[:, -1].clone()]
        for _ in range(n_new - 1):
            static_logits.append(decoder.step().clone())  # a CUDA graph reuses its output
    eager_logits, static_logits = torch.stack(eager_logits, 1), torch.stack(static_logits, 1)
    eager, static = eager_logits.argmax(-1), static_logits.argmax(-1)  # (b, n_new)
    weights = next(lm.parameters()).dtype
    dtype = next(name for name, t in DTYPES.items() if getattr(torch, t) == weights)
    logits_row = compare_logits(
        "logits.static_vs_eager", eager_logits, static_logits, dtype, lm.config.num_hidden_layers
    )
    tokens_ok = bool(torch.equal(static, eager))
    return {
        "name": "static.greedy_vs_eager",
        "ok": tokens_ok and logits_row["ok"],
        "tokens_ok": tokens_ok,
        "static": static.tolist(),
        "eager": eager.tolist(),
        "logits": logits_row,
        "static_mode": decoder.mode,
    }
