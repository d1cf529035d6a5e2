"""KV-cache plumbing for the local engine: caches that grow in place, a shared prompt-prefix cache, and a
left-padded batch of rows.

Why not transformers' ``DynamicCache`` as it is: its ``DynamicLayer`` grows by ``torch.cat``, so every decode
step copies the whole cache of every layer, and under bfloat16 autocast the float32 keys and values it holds
are cast to bfloat16 again by every attention call. With 8 clinic episodes of ~4,000 tokens those two copies
were ~60% of a decode step of SmolLM2 on CPU (torch profiler: ``aten::cat`` and ``aten::copy_``). A
:class:`GrowingLayer` writes each new token into spare capacity it owns and stores keys and values in the
dtype attention reads them in (bfloat16 under autocast: the same rounding autocast applied at every call, done
once), so a step copies only what is new.

Facts this relies on:

- a layer never writes into tensors it does not own: a new layer built on someone else's tensors (the shared
  prefix, a row taken out of a batch) copies them into its own storage on its first append. So several
  caches may start from the *same* prefix tensors, and the shared prefix is never modified;
- keys are cached after the rotary embedding, at their true positions. A row can therefore be moved into a
  batch with *left* padding (zeros that the attention mask hides) and out again, without recomputing
  anything; its position ids stay its own.

Only plain ``DynamicLayer`` caches (and :class:`GrowingLayer`) are handled: sliding-window or
linear-attention layers keep state that cannot be re-padded this way, and are refused with a clear error.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

LayerKV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values of shape [batch, heads, seq, head_dim]
MIN_HEADROOM = 256  # tokens of spare capacity a growing layer allocates beyond what it needs (at least)


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` that appends into spare capacity instead of concatenating.

    ``keys`` / ``values`` are views of the first ``n`` positions of storage this layer allocated; when the
    storage is full, or ``keys`` was replaced from outside (a shared prefix handed in, transformers cropping or
    reindexing the cache), the next append allocates new storage with headroom and copies the current tensors
    once. ``dtype``, when given, is the storage dtype: incoming states are cast to it as they are written."""

    def __init__(self, dtype: torch.dtype | None = None):
        super().__init__()
        self.storage_dtype = dtype
        self._storage: tuple[torch.Tensor, torch.Tensor] | None = None
        self._view: tuple[torch.Tensor, torch.Tensor] | None = None  # what this layer last set keys/values to

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        if self.storage_dtype is not None:
            self.dtype = self.storage_dtype
            self.keys, self.values = self.keys.to(self.dtype), self.values.to(self.dtype)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, new = self.get_seq_length(), key_states.shape[-2]
        owned = self._view is not None and self._view[0] is self.keys and self._view[1] is self.values
        if not owned or self._storage[0].shape[-2] < n + new:
            self._allocate(n, n + new, key_states)
        keys, values = self._storage
        keys[:, :, n:n + new].copy_(key_states)
        values[:, :, n:n + new].copy_(value_states)
        self.keys, self.values = keys[:, :, :n + new], values[:, :, :n + new]
        self._view = (self.keys, self.values)
        return self.keys, self.values

    def _allocate(self, n: int, need: int, like: torch.Tensor) -> None:
        capacity = need + max(MIN_HEADROOM, need // 8)
        dtype = self.storage_dtype or like.dtype
        storage = []
        for current in (self.keys, self.values):
            shape = (like.shape[0], like.shape[1], capacity, like.shape[3])
            buffer = torch.empty(shape, dtype=dtype, device=like.device)
            if n:
                buffer[:, :, :n].copy_(current)
            storage.append(buffer)
        self._storage = (storage[0], storage[1])


def growing_cache(dtype: torch.dtype | None = None) -> Any:
    """An empty ``DynamicCache`` whose layers are :class:`GrowingLayer` s storing ``dtype``."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = functools.partial(GrowingLayer, dtype)
    return cache


def cache_layers(cache: Any) -> LayerKV:
    """The (keys, values) tensors of every layer of a ``DynamicCache`` (no copy)."""
    out = []
    for layer in cache.layers:
        if type(layer) not in (DynamicLayer, GrowingLayer):
            raise TypeError(f"only plain DynamicLayer caches can be shared or batched, got {type(layer).__name__}")
        if not layer.is_initialized:
            raise ValueError("the cache has a layer that was never filled")
        out.append((layer.keys, layer.values))
    return out


def make_cache(layers: LayerKV, *, growing: bool = False) -> Any:
    """A ``DynamicCache`` holding these tensors as they are (no copy, and never written into: a
    ``DynamicLayer`` only concatenates, a ``GrowingLayer`` (``growing``, storing the tensors' dtype) copies
    them into its own storage on its first append)."""
    cache = DynamicCache()
    for keys, values in layers:
        layer = GrowingLayer(keys.dtype) if growing else DynamicLayer()
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
        return make_cache(layers, growing=True)


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
            self.cache, self.lengths, self.pads = make_cache(row, growing=True), [length], [0]
            return 0
        width = self.width
        grow = max(0, length - width)
        layers = []
        for (keys, values), (row_keys, row_values) in zip(cache_layers(self.cache), row):
            layers.append((torch.cat([_left_pad(keys, grow), _left_pad(row_keys, width + grow - length)]),
                           torch.cat([_left_pad(values, grow), _left_pad(row_values, width + grow - length)])))
        self.cache = make_cache(layers, growing=True)
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
            taken.append(make_cache([(k[r:r + 1, :, pad:].clone(), v[r:r + 1, :, pad:].clone()) for k, v in layers], growing=True))
        keep = [r for r in range(len(self)) if r not in set(rows)]
        if not keep:
            self.cache, self.lengths, self.pads = None, [], []
            return taken
        trim = min(self.pads[r] for r in keep)
        index = torch.tensor(keep)
        self.cache = make_cache([(k[index, :, trim:], v[index, :, trim:]) for k, v in layers], growing=True)
        self.lengths = [self.lengths[r] for r in keep]
        self.pads = [self.pads[r] - trim for r in keep]
        return taken


def _left_pad(x: torch.Tensor, n: int) -> torch.Tensor:
    if n == 0:
        return x
    return torch.cat([x.new_zeros(*x.shape[:2], n, x.shape[3]), x], dim=2)
