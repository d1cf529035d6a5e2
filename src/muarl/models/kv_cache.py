"""KV-cache plumbing for the local engine: a shared prompt-prefix cache and a left-padded batch of rows.

Two facts about transformers' ``DynamicCache`` make this cheap and safe:

- a ``DynamicLayer`` grows by concatenation (``torch.cat`` makes a new tensor), it never writes into the
  tensors it holds. So several caches may start from the *same* prefix tensors: each session's first append
  allocates its own copy, and the shared prefix is never modified;
- keys are cached after the rotary embedding, at their true positions. A row can therefore be moved into a
  batch with *left* padding (zeros that the attention mask hides) and out again, without recomputing
  anything; its position ids stay its own.

Only plain ``DynamicLayer`` caches (what ``DynamicCache()`` builds) are handled: sliding-window or
linear-attention layers keep state that cannot be re-padded this way, and are refused with a clear error.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

LayerKV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values of shape [batch, heads, seq, head_dim]


def cache_layers(cache: Any) -> LayerKV:
    """The (keys, values) tensors of every layer of a ``DynamicCache`` (no copy)."""
    out = []
    for layer in cache.layers:
        if type(layer) is not DynamicLayer:
            raise TypeError(f"only plain DynamicLayer caches can be shared or batched, got {type(layer).__name__}")
        if not layer.is_initialized:
            raise ValueError("the cache has a layer that was never filled")
        out.append((layer.keys, layer.values))
    return out


def make_cache(layers: LayerKV) -> Any:
    """A ``DynamicCache`` holding these tensors as they are (no copy: the cache only ever concatenates)."""
    cache = DynamicCache()
    for keys, values in layers:
        layer = DynamicLayer()
        layer.lazy_initialization(keys, values)
        layer.keys, layer.values = keys, values
        cache.layers.append(layer)
    return cache


def weights_version(model: Any) -> int:
    """A number that changes whenever any parameter is modified in place (optimizer steps, ``load_state_dict``).

    A cached prefix computed under other weights would silently condition the policy on stale keys, so the
    prefix cache checks this before every reuse."""
    return sum(p._version for p in model.parameters())


class PrefixCache:
    """KV caches of prompt prefixes (the system turn with its tool schemas), shared by every session that
    starts with exactly the same token ids. Least recently used entries beyond ``capacity`` are dropped, and
    everything is dropped when the model's weights change."""

    def __init__(self, model: Any, capacity: int = 4):
        self.model = model
        self.capacity = capacity
        self._entries: OrderedDict[tuple[int, ...], LayerKV] = OrderedDict()
        self._version = weights_version(model)
        self.hits = 0
        self.misses = 0

    def session_cache(self, ids: Sequence[int], prefill: Callable[[list[int]], Any]) -> Any:
        """A fresh ``DynamicCache`` for a session whose context starts with ``ids``.

        ``prefill(ids)`` runs the model over ``ids`` and returns the filled cache; it is called only when this
        prefix was not cached under the current weights."""
        version = weights_version(self.model)
        if version != self._version:
            self._entries.clear()
            self._version = version
        key = tuple(ids)
        layers = self._entries.get(key)
        if layers is None:
            self.misses += 1
            layers = cache_layers(prefill(list(ids)))
            self._entries[key] = layers
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        else:
            self.hits += 1
            self._entries.move_to_end(key)
        return make_cache(layers)


class RowBatch:
    """Several single-row caches of different lengths stacked into one left-padded batch cache.

    Every row's cached tokens end at the right edge; row ``r`` has ``pads[r]`` hidden zeros on its left and
    ``lengths[r]`` real tokens. A decode step feeds one token per row, so all rows grow together and stay
    right-aligned. ``cache`` is the ``DynamicCache`` to pass to the model; it is rebuilt when rows join or
    leave (one copy of the batch), and grows by the model's own updates in between.
    """

    def __init__(self) -> None:
        self.cache: Any = None
        self.lengths: list[int] = []
        self.pads: list[int] = []

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def width(self) -> int:
        return self.lengths[0] + self.pads[0] if self.lengths else 0

    def add(self, row_cache: Any) -> int:
        """Append a single-row cache as the last row; returns its index."""
        row = cache_layers(row_cache)
        if row[0][0].shape[0] != 1:
            raise ValueError(f"a row cache must hold one sequence, got batch size {row[0][0].shape[0]}")
        length = row[0][0].shape[-2]
        if not self.lengths:
            self.cache, self.lengths, self.pads = make_cache(row), [length], [0]
            return 0
        width = self.width
        grow = max(0, length - width)
        layers = []
        for (keys, values), (row_keys, row_values) in zip(cache_layers(self.cache), row):
            layers.append((torch.cat([_left_pad(keys, grow), _left_pad(row_keys, width + grow - length)]),
                           torch.cat([_left_pad(values, grow), _left_pad(row_values, width + grow - length)])))
        self.cache = make_cache(layers)
        self.pads = [p + grow for p in self.pads] + [width + grow - length]
        self.lengths.append(length)
        return len(self.lengths) - 1

    def advance(self) -> None:
        """Record that the model appended one token to every row."""
        self.lengths = [n + 1 for n in self.lengths]

    def attention_mask(self, new_tokens: int = 1) -> torch.Tensor:
        """[rows, width + new_tokens]: 0 on each row's left padding, 1 on its tokens and the new ones."""
        mask = torch.ones(len(self), self.width + new_tokens, dtype=torch.long)
        for r, pad in enumerate(self.pads):
            mask[r, :pad] = 0
        return mask

    def positions(self) -> torch.Tensor:
        """[rows, 1]: the true position of each row's next token (its own length, padding not counted)."""
        return torch.tensor(self.lengths, dtype=torch.long)[:, None]

    def remove(self, rows: Sequence[int]) -> list[Any]:
        """Take ``rows`` out of the batch; returns each as its own single-row ``DynamicCache`` (a copy of its
        real tokens only), in the order asked. Padding no remaining row needs is trimmed."""
        layers = cache_layers(self.cache)
        taken = []
        for r in rows:
            pad = self.pads[r]
            taken.append(make_cache([(k[r:r + 1, :, pad:].clone(), v[r:r + 1, :, pad:].clone()) for k, v in layers]))
        keep = [r for r in range(len(self)) if r not in set(rows)]
        if not keep:
            self.cache, self.lengths, self.pads = None, [], []
            return taken
        trim = min(self.pads[r] for r in keep)
        index = torch.tensor(keep)
        self.cache = make_cache([(k[index, :, trim:], v[index, :, trim:]) for k, v in layers])
        self.lengths = [self.lengths[r] for r in keep]
        self.pads = [self.pads[r] - trim for r in keep]
        return taken


def _left_pad(x: torch.Tensor, n: int) -> torch.Tensor:
    if n == 0:
        return x
    return torch.cat([x.new_zeros(*x.shape[:2], n, x.shape[3]), x], dim=2)
