"""Greedy generation through transformers' own cache, one call at a time: what the gate
compares and the cell times.

    prefill          a forward over a prompt into a new cache: (logits (b, t, vocab), cache)
    prefill_forward  the cell's TTFT call: the same forward keeping the last position's
                     logits only (``logits_to_keep=1``, what ``generate`` asks for)
    prefill_first    (logits (b, 1, vocab), cache) of :func:`prefill_forward`
    decode_step      one token (b, 1) through a cache: (logits (b, vocab), cache)
    manual_greedy    a prefill and n - 1 decode steps, argmax each time
    generate_greedy  transformers' greedy ``generate``, the same tokens when all is well
    Greedy           a greedy decode from one prefill, stepped one token at a time and
                     forked (a copy of its cache) so rounds of steps start alike

:func:`cache_kwarg` names the keyword under which this transformers version's forward
takes the cache.  Imports torch; no other module of :mod:`ssmbench.lm`.
"""

from __future__ import annotations

import copy
import inspect

import torch


def cache_kwarg(lm) -> str:
    """The name under which this transformers version's forward takes the cache (5.24:
    ``cache``; earlier 5.x: ``past_key_values``, Mamba's ``cache_params``)."""
    params = inspect.signature(lm.forward).parameters
    for name in ("cache", "past_key_values", "cache_params"):
        if name in params:
            return name
    raise TypeError(f"{type(lm).__name__}.forward takes no cache argument")


def _out_cache(out):
    for name in ("cache", "past_key_values", "cache_params"):
        value = getattr(out, name, None)
        if value is not None:
            return value
    raise TypeError(f"{type(out).__name__} returned no cache")


@torch.no_grad()
def prefill(lm, ids: torch.Tensor):
    """(logits (b, t, vocab), cache) of a forward over ``ids`` that fills a new cache."""
    out = lm(input_ids=ids, use_cache=True)
    return out.logits, _out_cache(out)


@torch.no_grad()
def decode_step(lm, token: torch.Tensor, cache):
    """(logits (b, vocab), cache) of one token (b, 1) through ``cache``."""
    out = lm(input_ids=token, use_cache=True, **{cache_kwarg(lm): cache})
    return out.logits[:, -1], _out_cache(out)


@torch.no_grad()
def manual_greedy(lm, prompt: torch.Tensor, n_new: int) -> torch.Tensor:
    """Greedy tokens (b, n_new) of a prefill and n_new - 1 decode steps."""
    logits, cache = prefill(lm, prompt)
    token = logits[:, -1].argmax(-1, keepdim=True)  # (b, 1)
    tokens = [token]
    for _ in range(n_new - 1):
        logits, cache = decode_step(lm, token, cache)
        token = logits.argmax(-1, keepdim=True)
        tokens.append(token)
    return torch.cat(tokens, dim=1)


@torch.no_grad()
def generate_greedy(lm, prompt: torch.Tensor, n_new: int) -> torch.Tensor:
    """transformers' greedy ``generate``: the n_new tokens after ``prompt``."""
    out = lm.generate(
        input_ids=prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=n_new,
        min_new_tokens=n_new,  # no stop at a random model's eos
        do_sample=False,
        pad_token_id=0,
    )
    return out[:, prompt.shape[1] :]


def prefill_forward(lm, ids):
    """One TTFT call: a forward over T tokens into a fresh cache, first token's logits."""
    return lm(input_ids=ids, use_cache=True, logits_to_keep=1)


def prefill_first(lm, ids):
    """(logits (b, 1, vocab), cache) of :func:`prefill_forward`."""
    out = prefill_forward(lm, ids)
    return out.logits, _out_cache(out)


class Greedy:
    """A greedy decode from a prefill of ``ids (b, t)``: ``step()`` feeds the last token
    through the cache and takes the argmax, as ``generate`` does without sampling."""

    def __init__(self, lm, ids):
        logits, self.cache = prefill_first(lm, ids)  # logits (b, 1, vocab)
        self.lm = lm
        self.token = logits[:, -1].argmax(-1, keepdim=True)  # (b, 1)

    def fork(self) -> Greedy:
        """The same decode from the same prefill, with a copy of the cache: SSM caches
        update their states in place, so each round of steps starts from its own copy (a
        copy costs far less than the prefill it saves: seconds at T = 4096 on a CPU)."""
        twin = copy.copy(self)
        twin.cache = copy.deepcopy(self.cache)
        return twin

    def step(self) -> None:
        logits, self.cache = decode_step(self.lm, self.token, self.cache)  # (b, vocab)
        self.token = logits.argmax(-1, keepdim=True)
