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

from muarl.models.prefix_attention import SharedPrefix

LayerKV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values of shape [batch, heads, seq, head_dim]
MIN_HEADROOM = 256  # tokens of spare capacity a growing layer allocates beyond what it needs (at least)


class GrowingLayer(DynamicLayer):
    """A ``DynamicLayer`` that appends into spare capacity instead of concatenating.

    ``keys`` / ``values`` are views of a window of storage this layer owns: the first ``rows`` rows, columns
    ``start`` to ``start + n`` (``start`` is 0 except in a :class:`RowBatch`, which trims padding by moving it).
    When the storage is full, or ``keys`` was replaced from outside (a shared prefix handed in, transformers
    cropping or reindexing the cache), the next append allocates new storage with headroom and copies the
    current tensors once. ``dtype``, when given, is the storage dtype: incoming states are cast to it as they
    are written."""

    def __init__(self, dtype: torch.dtype | None = None):
        super().__init__()
        self.storage_dtype = dtype
        self.storage: tuple[torch.Tensor, torch.Tensor] | None = None  # keys, values: [slots, heads, columns, head_dim]
        self.start = 0  # the storage column ``keys`` begins at
        self._view: tuple[torch.Tensor, torch.Tensor] | None = None  # what this layer last set keys/values to

    @classmethod
    def owning(cls, storage: tuple[torch.Tensor, torch.Tensor], rows: int, start: int, end: int) -> GrowingLayer:
        """A layer that owns ``storage`` (nobody else writes into it) and holds its window ``[:rows, start:end]``."""
        layer = cls(storage[0].dtype)
        layer.lazy_initialization(storage[0], storage[1])
        layer.storage = storage
        layer.set_window(rows, start, end)
        return layer

    @property
    def owns_keys(self) -> bool:
        """True when ``keys`` / ``values`` are still the window of ``storage`` this layer set them to."""
        return self._view is not None and self._view[0] is self.keys and self._view[1] is self.values

    def set_window(self, rows: int, start: int, end: int) -> None:
        keys, values = self.storage
        self.keys, self.values = keys[:rows, :, start:end], values[:rows, :, start:end]
        self.start = start
        self._view = (self.keys, self.values)

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        if self.storage_dtype is not None:
            self.dtype = self.storage_dtype
            self.keys, self.values = self.keys.to(self.dtype), self.values.to(self.dtype)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n, new = self.get_seq_length(), key_states.shape[-2]
        if not self.owns_keys or self.storage[0].shape[-2] < self.start + n + new:
            self._allocate(n + new, key_states)
        keys, values = self.storage
        end = self.start + n
        keys[:key_states.shape[0], :, end:end + new].copy_(key_states)
        values[:key_states.shape[0], :, end:end + new].copy_(value_states)
        self.set_window(key_states.shape[0], self.start, end + new)
        return self.keys, self.values

    def _allocate(self, need: int, like: torch.Tensor) -> None:
        """New storage with room for ``need`` tokens and headroom, holding the current keys at column 0."""
        n = self.get_seq_length()
        self.storage = new_storage(like.shape[0], like.shape[1], capacity(need), like.shape[3],
                                   self.storage_dtype or like.dtype, like.device)
        if n:
            for buffer, current in zip(self.storage, (self.keys, self.values)):
                buffer[:, :, :n].copy_(current)
        self.start = 0


def headroom(tokens: int) -> int:
    """Spare columns to allocate next to ``tokens`` cached ones, so that many appends copy nothing."""
    return max(MIN_HEADROOM, tokens // 8)


def capacity(need: int) -> int:
    return need + headroom(need)


def new_storage(rows: int, heads: int, columns: int, head_dim: int, dtype: torch.dtype,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Uninitialised keys and values storage for a :class:`GrowingLayer` (callers fill what they expose)."""
    shape = (rows, heads, columns, head_dim)
    return torch.empty(shape, dtype=dtype, device=device), torch.empty(shape, dtype=dtype, device=device)


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
        self._entries: OrderedDict[tuple[int, ...], SharedPrefix] = OrderedDict()
        self._version = weights_version(model)
        self.hits = 0
        self.misses = 0

    def shared(self, ids: Sequence[int], prefill: Callable[[list[int]], Any]) -> SharedPrefix:
        """The prefix ``ids`` computed under the current weights, one object for every session that starts with
        it (prefix-shared attention groups rows by it).

        ``prefill(ids)`` runs the model over ``ids`` and returns the filled cache; it is called only when this
        prefix was not cached under the current weights."""
        version = weights_version(self.model)
        if version != self._version:
            self._entries.clear()
            self._version = version
        key = tuple(ids)
        prefix = self._entries.get(key)
        if prefix is None:
            self.misses += 1
            prefix = SharedPrefix(cache_layers(prefill(list(ids))), len(ids))
            self._entries[key] = prefix
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
        else:
            self.hits += 1
            self._entries.move_to_end(key)
        return prefix

    def session_cache(self, ids: Sequence[int], prefill: Callable[[list[int]], Any]) -> Any:
        """A fresh ``DynamicCache`` holding the prefix ``ids`` itself, for models whose attention cannot read a
        shared prefix (:func:`~muarl.models.prefix_attention.supports_prefix_attention`): the session copies it
        into its own storage on its first append."""
        return make_cache(self.shared(ids, prefill).layers, growing=True)


class RowBatch:
    """Several single-row caches of different lengths stacked into one left-padded batch cache.

    Every row's cached tokens end at the right edge; row ``r`` has ``pads[r]`` hidden zeros on its left and
    ``lengths[r]`` real tokens, after the shared prompt prefix ``prefixes[r]`` when it has one (kept once, outside
    the batch: :mod:`muarl.models.prefix_attention`). A decode step feeds one token per row, so all rows grow
    together and stay right-aligned. ``cache`` is the ``DynamicCache`` to pass to the model: :class:`GrowingLayer` s whose
    windows are the batch, in storage the batch owns (rows in the order they joined, then free slots).

    Rows joining and leaving copy as little as they can, because with 16 clinic episodes of ~4,000 tokens
    re-copying the whole batch each time was a quarter of a rollout (each ``add`` re-concatenated the batch,
    each ``remove`` index-copied the remaining rows, and the next append copied both again into storage with
    headroom):

    - rows join in one call (one rebuild at most, however many join) and go into free slots when they fit:
      the storage has slots left by rows that left, and ``headroom`` columns on the left of the window for
      rows longer than the batch (then only the newly exposed padding column range is zeroed);
    - otherwise the batch is rebuilt once, directly into new storage with headroom on both sides;
    - a leaving row is copied out (its real tokens only, into storage with headroom for its next turn); the
      last row that stays moves into its slot (the caller reorders its rows as :meth:`remove` says: moving every
      later row down one slot instead copied most of a 64-row batch at every removal), and padding no remaining
      row needs is dropped by moving the window's start, not by copying. So the storage does not shrink as rows leave: it is freed
      when the batch empties or is rebuilt, or when its layers outgrow it (they then copy only the rows in use).

    What the model sees is what it saw when every change rebuilt the batch: the same rows (in the order
    :meth:`remove` reports), the same width, zeros in every padding position (the attention mask hides them, and zeros, unlike
    uninitialised memory, cannot turn a hidden score into NaN), the same tokens; only the spare capacity
    around the window differs.
    """

    def __init__(self) -> None:
        self.cache: Any = None
        self.lengths: list[int] = []
        self.pads: list[int] = []
        self.prefixes: list[SharedPrefix | None] = []

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def width(self) -> int:
        return self.lengths[0] + self.pads[0] if self.lengths else 0

    def add(self, row_caches: Sequence[Any], prefixes: Sequence[SharedPrefix | None] | None = None) -> None:
        """Append single-row caches as the last rows, in order (their caches are copied, not kept), each after
        its shared prefix (``prefixes``, default none)."""
        rows = [cache_layers(c) for c in row_caches]
        prefixes = list(prefixes) if prefixes is not None else [None] * len(rows)
        if len(prefixes) != len(rows):
            raise ValueError(f"{len(rows)} row caches but {len(prefixes)} prefixes")
        for row in rows:
            if row[0][0].shape[0] != 1:
                raise ValueError(f"a row cache must hold one sequence, got batch size {row[0][0].shape[0]}")
        if not rows:
            return
        lengths = [row[0][0].shape[-2] for row in rows]
        width = max(self.width, *lengths)
        if self._has_room(len(rows), width):
            self._widen(width)
        else:
            self._rebuild(len(self) + len(rows), width, cache_layers(self.cache) if self.cache is not None else rows[0])
        layers = self.cache.layers
        for row, length in zip(rows, lengths):
            slot, end = len(self), layers[0].start + width
            for layer, (row_keys, row_values) in zip(layers, row):
                for buffer, states in zip(layer.storage, (row_keys, row_values)):
                    buffer[slot, :, layer.start:end - length].zero_()
                    buffer[slot, :, end - length:end].copy_(states[0])
            self.lengths.append(length)
            self.pads.append(width - length)
        self.prefixes.extend(prefixes)
        self._set_window(layers[0].start)

    def advance(self) -> None:
        """Record that the model appended one token to every row."""
        self.lengths = [n + 1 for n in self.lengths]

    def remove(self, rows: Sequence[int]) -> tuple[list[Any], list[int]]:
        """Take ``rows`` out of the batch. Returns each as its own single-row ``DynamicCache`` (a copy of its real
        tokens only, with headroom for the next turn), in the order asked, and the rows that stay, by their old
        index, in their new order: the last rows that stay move into the slots left free, so a removal copies
        as many rows as it takes out, however wide the batch. Padding no remaining row needs is trimmed."""
        if not self._owned():
            self._rebuild(len(self), self.width, cache_layers(self.cache))
        layers = self.cache.layers
        taken = []
        for r in rows:
            length, layer_kv = self.lengths[r], []
            for layer in layers:
                storage = new_storage(1, layer.keys.shape[1], capacity(length), layer.keys.shape[3], layer.keys.dtype, layer.keys.device)
                for buffer, current in zip(storage, (layer.keys, layer.values)):
                    buffer[0, :, :length].copy_(current[r, :, self.pads[r]:])
                layer_kv.append(GrowingLayer.owning(storage, 1, 0, length))
            taken.append(_cache_of(layer_kv))
        gone = set(rows)
        staying = len(self) - len(gone)
        if not staying:
            self.cache, self.lengths, self.pads, self.prefixes = None, [], [], []
            return taken, []
        holes = [r for r in sorted(gone) if r < staying]
        movers = [r for r in range(staying, len(self)) if r not in gone]  # as many as holes
        order = list(range(staying))
        start, end = layers[0].start, layers[0].start + self.width
        for hole, mover in zip(holes, movers):  # a different slot of the same storage: the copy never overlaps itself
            for layer in layers:
                for buffer in layer.storage:
                    buffer[hole, :, start:end].copy_(buffer[mover, :, start:end])
            order[hole] = mover
        trim = min(self.pads[r] for r in order)
        self.lengths = [self.lengths[r] for r in order]
        self.pads = [self.pads[r] - trim for r in order]
        self.prefixes = [self.prefixes[r] for r in order]
        self._set_window(start + trim)
        return taken, order

    def _owned(self) -> bool:
        return all(isinstance(layer, GrowingLayer) and layer.owns_keys for layer in self.cache.layers)

    def _has_room(self, rows: int, width: int) -> bool:
        """Whether ``rows`` more rows fit in free slots with the window widened (leftwards) to ``width``."""
        if self.cache is None or not self._owned():
            return False
        layer = self.cache.layers[0]
        return layer.storage[0].shape[0] >= len(self) + rows and layer.start >= width - self.width

    def _widen(self, width: int) -> None:
        """Move the window's start left so it is ``width`` wide, zeroing the new columns as padding."""
        grow = width - self.width
        if grow:
            start = self.cache.layers[0].start - grow
            for layer in self.cache.layers:
                for buffer in layer.storage:
                    buffer[:len(self), :, start:start + grow].zero_()
            self.pads = [p + grow for p in self.pads]
            self._set_window(start)

    def _rebuild(self, slots: int, width: int, like: LayerKV) -> None:
        """Copy the rows into new storage of ``slots`` rows, the window ``width`` wide with headroom on both
        sides (``like``: per layer, tensors of the heads, head size, dtype and device to store)."""
        left, grow = headroom(width), width - self.width
        old = cache_layers(self.cache) if self.cache is not None else [None] * len(like)
        layers = []
        for current, (keys, _) in zip(old, like):
            storage = new_storage(slots, keys.shape[1], left + capacity(width + 1), keys.shape[3], keys.dtype, keys.device)
            if current is not None:
                for buffer, states in zip(storage, current):
                    buffer[:len(self), :, left:left + grow].zero_()
                    buffer[:len(self), :, left + grow:left + width].copy_(states)
            layers.append(GrowingLayer.owning(storage, len(self), left, left + width))
        self.cache = _cache_of(layers)
        self.pads = [p + grow for p in self.pads]

    def _set_window(self, start: int) -> None:
        for layer in self.cache.layers:
            layer.set_window(len(self), start, start + self.width)


def _cache_of(layers: list[GrowingLayer]) -> Any:
    cache = DynamicCache()
    cache.layers.extend(layers)
    return cache
