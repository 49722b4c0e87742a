"""The KV cache manager shared by every target and drafter.

``SpecKVCache`` subclasses transformers' ``Cache`` so stock models read and write it through
``cache=`` (``past_key_values=`` in older transformers; :mod:`mmspec.hf_args` picks the name). Memory is
preallocated per layer as ``[B, H_kv, max_len + 1, D]`` (the extra slot is scratch for padded compaction
writes).

Layout of row ``b``:

* slots ``[0, lengths[b])`` are *committed*; the first ``starts[b]`` of them are left padding and are
  never attended to;
* ``write_base = max(lengths)`` is where a forward appends *pending* nodes (tree nodes, or a ragged
  chunk of new tokens), common to all rows. Slots between ``lengths[b]`` and ``write_base`` are stale
  for row ``b`` and masked out;
* ``commit(paths)`` moves each row's chosen pending nodes to ``lengths[b], lengths[b] + 1, ...`` with
  one gather per layer, then drops all pending nodes.

The manager also builds the 4-D boolean attention mask for the nodes it is about to append: the row's
committed prefix, plus ancestors among pending nodes, plus an optional sliding window (by position).
For models mixing sliding-window and full-attention layers it returns one mask per layer type
(``mmspec.layer_masks``).
"""

from __future__ import annotations

import weakref
from dataclasses import replace

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

from .kernels.dispatch import backend_for
from .kernels.kv_compaction import compact_kv_
from .layer_masks import AttentionLayout, attention_layout, masks_by_type, map_masks
from .tree import ancestor_mask


class _PreallocatedLayer(CacheLayerMixin):
    """One layer's K/V buffers; writes go where the owning cache says."""

    def __init__(self, owner: "SpecKVCache", index: int):
        super().__init__()
        self.index = index
        # a weak reference: a strong one makes a cycle (cache -> layers -> cache), and a cycle's buffers (GBs for a
        # large batch) are freed only when the garbage collector next runs, so every generate call held on to
        # its cache: sampling 512 pictures at a time grew by the cache's 5 GB per call until the build ran out
        self._owner = weakref.proxy(owner)

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        B, H, _, D = key_states.shape
        shared = self._owner._shared_views(self.index, key_states, value_states)
        if shared is not None:
            self.keys, self.values = shared
        else:
            size = self._owner.max_len + 1
            self.keys = key_states.new_zeros(B, H, size, D)
            self.values = value_states.new_zeros(B, H, size, value_states.shape[-1])
        self.dtype, self.device = key_states.dtype, key_states.device
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start = self._owner._write_offset
        end = start + key_states.shape[2]
        if end > self._owner.max_len:
            raise ValueError(
                f"sequence longer than the cache: needs {end} slots but the cache holds {self._owner.max_len}"
            )
        self.keys[:, :, start:end] = key_states
        self.values[:, :, start:end] = value_states
        return self.keys[:, :, :end], self.values[:, :, :end]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self._owner._write_offset + query_length, 0

    def get_seq_length(self) -> int:
        return self._owner._write_offset

    def get_max_length(self) -> int:
        return self._owner.max_len

    def get_max_cache_shape(self) -> int:  # the name (abstract) before transformers 5.15
        return self.get_max_length()


class SpecKVCache(Cache):
    """Preallocated, per-row-length KV cache with tree append / commit / rollback."""

    def __init__(self, num_layers: int, batch_size: int, max_len: int, device: torch.device | str = "cpu",
                 sliding_window: int | None = None, layer_types: list[str] | tuple[str, ...] | None = None):
        """``sliding_window``: every layer sees only that many positions back, or, with ``layer_types``
        (one ``"full_attention"`` / ``"sliding_attention"`` per layer), the sliding layers do."""
        self.max_len = int(max_len)
        self.batch_size_ = batch_size
        if layer_types is not None and len(layer_types) != num_layers:
            raise ValueError(f"layer_types names {len(layer_types)} layers, the cache has {num_layers}")
        self.layout = AttentionLayout(sliding_window, tuple(layer_types) if layer_types is not None
                                      and sliding_window is not None else None)
        super().__init__(layers=[_PreallocatedLayer(self, i) for i in range(num_layers)])
        # every layer's K and V in one buffer when their shapes agree (_shared_views): a commit then moves all
        # layers with one gather and one scatter instead of two per layer
        self._store: torch.Tensor | None = None
        self._store_views: list = [None] * num_layers
        # the committed-prefix part of the mask, kept while lengths, starts and the write base stay the same
        self._prefix_key: tuple | None = None
        self._prefix: torch.Tensor | None = None
        self.device = torch.device(device)
        self.lengths = torch.zeros(batch_size, dtype=torch.long, device=self.device)
        self.starts = torch.zeros(batch_size, dtype=torch.long, device=self.device)  # sets self._padded
        self._base = 0  # write base for the current pending block
        self._pending_parents = torch.zeros(batch_size, 0, dtype=torch.long, device=self.device)
        self._pending_valid = torch.zeros(batch_size, 0, dtype=torch.bool, device=self.device)
        self._pending_pos = torch.zeros(batch_size, 0, dtype=torch.long, device=self.device)
        self._pending_anc = torch.zeros(batch_size, 0, 0, dtype=torch.bool, device=self.device)
        self._write_offset = 0
        # how the model's position ids differ from the text positions above (M-RoPE rope_deltas after images,
        # PaliGemma's 1-based count): a mmspec.families.PositionShift set at prefill, None for most models
        self.position_shift = None

    @classmethod
    def for_model(cls, model, batch_size: int, max_len: int) -> "SpecKVCache":
        cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        layout = attention_layout(cfg)
        return cls(cfg.num_hidden_layers, batch_size, max_len, device=model.device, sliding_window=layout.window,
                   layer_types=layout.layer_types)

    def _shared_views(self, index: int, key_states: torch.Tensor, value_states: torch.Tensor):
        """(K, V) views of layer ``index`` into the one buffer ``[B, 2 · layers · H, max_len + 1, D]``, allocated
        by the first layer that writes; None (the layer gets its own buffers) for a layer whose shape, dtype
        or device differs from the first one's."""
        B, H, _, D = key_states.shape
        if value_states.shape != key_states.shape or value_states.dtype != key_states.dtype:
            return None
        if self._store is None:
            self._store = key_states.new_zeros(B, 2 * len(self.layers) * H, self.max_len + 1, D)
        store = self._store
        if (store.shape[0], store.shape[-1], store.shape[1] // (2 * len(self.layers))) != (B, D, H) \
                or store.dtype != key_states.dtype or store.device != key_states.device:
            return None
        views = store[:, 2 * index * H: (2 * index + 1) * H], store[:, (2 * index + 1) * H: (2 * index + 2) * H]
        self._store_views[index] = views[0]
        return views

    def _all_layers_in_store(self) -> bool:
        """True when every layer written so far keeps its K and V in the shared buffer (a layer replaced by
        code outside mmspec, e.g. ``Cache.reorder_cache``, no longer does)."""
        return self._store is not None and all(
            not layer.is_initialized or layer.keys is self._store_views[i] for i, layer in enumerate(self.layers))

    def _prefix_mask(self, base: int) -> torch.BoolTensor:
        """[B, base]: the committed, non-padding slots each row attends to (the same for every append
        between two commits)."""
        # keyed by the tensors and their version counters (an in-place change bumps them); inference tensors
        # (torch.inference_mode) keep no counter, so their mask is rebuilt every time
        versioned = not (self.lengths.is_inference() or self.starts.is_inference())
        key = (base, self.lengths, self.starts, self.lengths._version, self.starts._version) if versioned else None
        cached = self._prefix_key
        if key is not None and cached is not None and cached[0] == key[0] and cached[1] is key[1] \
                and cached[2] is key[2] and cached[3:] == key[3:]:
            return self._prefix
        slot = torch.arange(base, device=self.device)
        self._prefix = (slot[None, :] >= self.starts[:, None]) & (slot[None, :] < self.lengths[:, None])
        self._prefix_key = key
        return self._prefix

    @property
    def starts(self) -> torch.LongTensor:
        """[B] left-padding slots per row."""
        return self._starts

    @starts.setter
    def starts(self, value: torch.LongTensor) -> None:
        self._starts = value
        # set once per prefill (one sync): a lone unpadded row's next token sees every slot, so a plain step
        # needs no mask at all (:meth:`_append_one`)
        self._padded = bool(value.any())

    @property
    def lone_unpadded_row(self) -> bool:
        """One row with no left padding: nodes appended onto it see every committed slot (no window either)."""
        return self.batch_size_ == 1 and not self._padded and self.layout.window is None

    @property
    def sliding_window(self) -> int | None:
        return self.layout.window

    # ------------------------------------------------------------------ views
    @property
    def num_pending(self) -> int:
        return self._pending_parents.shape[1]

    @property
    def write_base(self) -> int:
        return self._base if self.num_pending else int(self.lengths.max())

    @property
    def seen_tokens(self) -> torch.LongTensor:
        """Real (non-padding) committed tokens per row: the position id of the next token."""
        return self.lengths - self.starts

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.write_base + self.num_pending

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        return self.get_seq_length() + query_length, 0

    # ------------------------------------------------------------------ appending
    def prepare_append(self, parents: torch.LongTensor, valid: torch.BoolTensor,
                       ancestors: torch.BoolTensor | None = None, depth: torch.LongTensor | None = None):
        """Register ``T`` new pending nodes and return ``(position_ids [B, T], mask [B, 1, T, S])``; the mask is
        None when the one new node of a lone unpadded row sees every slot (a plain decode step).

        ``parents[b, t]`` indexes the pending nodes *including* the new ones (-1 = hangs directly off
        the committed prefix). Invalid nodes are padding: only they attend to themselves and nobody
        attends to them. Call the model right after, with this cache as its KV cache argument.
        ``ancestors`` ([B, T, T], optional) is the new nodes' ancestor mask when already known
        (a DraftTree's), used when no nodes are pending; it is then simply "who sees whom" and may be any
        visibility pattern (e.g. a diffusion drafter's mask slots seeing each other), in which case
        ``depth`` ([B, T], offsets from the committed length) gives the positions.
        """
        B, T = parents.shape
        old = self.num_pending
        if old == 0:
            self._base = int(self.lengths.max())
        base = self._base
        self._check_room(base + old + T)
        if T == 1 and old == 0 and depth is None and self.layout.window is None:
            return self._append_one(parents, valid, base)
        all_parents = torch.cat([self._pending_parents, parents], dim=1)
        all_valid = torch.cat([self._pending_valid, valid], dim=1)
        if ancestors is not None and old == 0:
            anc = ancestors
        elif old > 0 and bool((parents < old).all()):
            # new nodes hang off already pending ones (drafting level by level): extend the stored mask
            # instead of recomputing it over every pending node
            rows = self._pending_anc.gather(1, parents.clamp(min=0)[..., None].expand(B, T, old))
            rows = rows & (parents >= 0)[..., None]
            eye = torch.eye(T, dtype=torch.bool, device=self.device).expand(B, T, T)
            top = torch.cat([self._pending_anc, rows.new_zeros(B, old, T)], dim=2)
            anc = torch.cat([top, torch.cat([rows, eye], dim=2)], dim=1)
        else:
            anc = ancestor_mask(all_parents)  # [B, old+T, old+T]
        new_anc = anc[:, old:, :] & all_valid[:, None, :]
        if depth is None:
            depth = new_anc.sum(-1) - 1
        positions = self.seen_tokens[:, None] + depth
        positions = torch.where(valid, positions, torch.zeros_like(positions))

        prefix = self._prefix_mask(base)  # [B, base]
        mask = torch.cat([prefix[:, None, :].expand(B, T, base), new_anc], dim=2)  # [B, T, base+old+T]
        if self.layout.window is not None:
            slot = torch.arange(base, device=self.device)
            key_pos = torch.cat([slot[None, :] - self.starts[:, None], self._pending_pos, positions], dim=1)
            mask = masks_by_type(mask, key_pos, positions, self.layout)
        # padding nodes see themselves so no attention row is empty (their outputs are ignored)
        pad_rows = ~valid
        if pad_rows.any():
            eye = torch.zeros(B, T, base + old + T, dtype=torch.bool, device=self.device)
            eye[:, torch.arange(T, device=self.device), base + old + torch.arange(T, device=self.device)] = True
            mask = map_masks(mask, lambda m: m | (eye & pad_rows[:, :, None]))

        self._pending_parents = all_parents
        self._pending_valid = all_valid
        self._pending_anc = anc
        self._pending_pos = torch.cat([self._pending_pos, positions], dim=1)
        self._write_offset = base + old
        return positions, map_masks(mask, lambda m: m[:, None, :, :])

    def _check_room(self, slots: int) -> None:
        if slots > self.max_len:
            raise ValueError(f"sequence longer than the cache: {slots} slots needed, cache holds {self.max_len} "
                             "(raise max_cache_len or lower max_new_tokens)")

    def prepare_chain(self, valid: torch.BoolTensor) -> torch.LongTensor:
        """:meth:`prepare_append` of ``T`` new nodes that form one chain per row through its ``valid`` ones (a
        prompt, left padded, or the tokens a row accepted, right padded: what ``prefill_parents`` /
        ``chain_parents`` describe), for entries that attend to nothing (a drafter's context keys / values):
        the positions ``[B, T]`` only, without the attention mask's [B, T, S] work."""
        if self.num_pending:
            raise ValueError("prepare_chain appends onto the committed prefix: commit or discard pending nodes first")
        B, T = valid.shape
        base = self._base = int(self.lengths.max())
        self._check_room(base + T)
        order = torch.arange(T, device=self.device)
        depth = valid.long().cumsum(1) - 1
        positions = torch.where(valid, self.seen_tokens[:, None] + depth, 0)
        last = torch.cummax(torch.where(valid, order, -1), dim=1).values  # the latest valid node at or before t
        parents = torch.where(valid, torch.cat([last.new_full((B, 1), -1), last[:, :-1]], 1), -1)
        anc = torch.tril(torch.ones(T, T, dtype=torch.bool, device=self.device)) & valid[:, None, :] & valid[:, :, None]
        self._pending_parents, self._pending_valid = parents, valid
        self._pending_anc = anc | torch.eye(T, dtype=torch.bool, device=self.device)
        self._pending_pos = positions
        self._write_offset = base
        return positions

    def extend_committed(self, kv: list[tuple[torch.Tensor, torch.Tensor]], counts: torch.LongTensor) -> None:
        """Commit each row's first ``counts[b]`` of the entries ``kv[i]`` = (keys, values) ``[B, H_kv, n, D]`` of layer
        i right after its committed prefix, with no pending step (entries that attend to nothing and were computed
        elsewhere: a DFlash drafter's new context keys / values, from its block's forward). A row's entries past its
        count land beyond its new length, where nothing reads them."""
        if self.num_pending:
            raise ValueError("extend_committed writes after the committed prefix: commit or discard pending nodes first")
        n = kv[0][0].shape[2]
        base = int(self.lengths.max())
        self._check_room(base + n)
        same = self.batch_size_ == 1 or bool((self.lengths == base).all())
        if not same:
            B, H, _, D = kv[0][0].shape
            index = (self.lengths[:, None] + torch.arange(n, device=self.device))[:, None, :, None].expand(B, H, n, D)
        for layer, (k, v) in zip(self.layers, kv):
            if same:
                layer.keys[:, :, base: base + n] = k
                layer.values[:, :, base: base + n] = v
            else:
                layer.keys.scatter_(2, index, k)
                layer.values.scatter_(2, index, v)
        self.lengths = self.lengths + counts.to(self.lengths)

    def block_view(self, T: int):
        """What a block of ``T`` new nodes that sees each row's committed prefix and the whole block attends to, when
        its keys / values are thrown away after the forward (a DFlash drafter's block): ``(positions [B, T], mask
        [B, 1, T, L + T] boolean or None for a lone unpadded row, keys, values)``, ``keys`` / ``values`` each layer's
        committed entries ``[B, H_kv, L, D]`` (L: the longest row's committed length) for the caller to put in front
        of the block's own. Nothing is registered or written: the cache is left as it was."""
        if self.num_pending:
            raise ValueError("block_view reads the committed prefix: commit or discard pending nodes first")
        if self.layout.window is not None:
            raise ValueError("block_view builds one full-attention mask: a sliding-window cache needs prepare_append")
        L = int(self.lengths.max())
        self._check_room(L + T)
        positions = self.seen_tokens[:, None] + torch.arange(T, device=self.device)
        mask = None
        if not self.lone_unpadded_row:
            B = self.batch_size_
            prefix = self._prefix_mask(L)
            mask = torch.cat([prefix[:, None, :].expand(B, T, L), prefix.new_ones(B, T, T)], dim=2)[:, None]
        keys = [layer.keys[:, :, :L] for layer in self.layers]
        values = [layer.values[:, :, :L] for layer in self.layers]
        return positions, mask, keys, values

    def _append_one(self, parents: torch.LongTensor, valid: torch.BoolTensor, base: int):
        """:meth:`prepare_append` of one node per row onto the committed prefix (a plain step, a root): the same
        result in a few tensor ops. The node sees the row's prefix and itself (a padding node too: no attention
        row is empty); its position is the row's next one (0 for padding)."""
        B = parents.shape[0]
        positions = torch.where(valid, self.seen_tokens[:, None], 0)
        self._pending_parents, self._pending_valid, self._pending_anc = parents, valid, valid[:, :, None]
        self._pending_pos = positions
        self._write_offset = base
        if self.lone_unpadded_row:
            # a lone unpadded row: its committed length is the write base, so the node sees every slot. None
            # says so: no mask to build here, nor to scan in :func:`~mmspec.verifiers.tree_forward.to_model_mask`
            return positions, None
        itself = torch.ones(B, 1, 1, dtype=torch.bool, device=self.device)
        mask = torch.cat([self._prefix_mask(base)[:, None, :], itself], dim=2)  # [B, 1, base + 1]
        return positions, mask[:, None]

    # ------------------------------------------------------------------ commit / rollback
    def commit(self, paths: torch.LongTensor, path_lengths: torch.LongTensor) -> None:
        """Keep, for row b, the pending nodes ``paths[b, :path_lengths[b]]`` (in that order) and drop
        the rest. ``paths`` index pending nodes; the kept entries land right after the committed prefix.
        """
        if self.num_pending == 0:
            if int(path_lengths.max()) > 0:
                raise ValueError("commit called with no pending nodes")
            return
        B, L = paths.shape
        if L == 1 and self.num_pending == 1:
            # one pending node (a plain step): it already sits at write_base, so rows whose committed length is
            # write_base keep it in place (a lone row's always is); only rows behind the base (ragged) need a move
            if B == 1 or bool(((self.lengths == self._base) | (path_lengths == 0)).all()):
                self.lengths = self.lengths + path_lengths
                self.discard_pending()
                return
        j = torch.arange(L, device=self.device)[None, :]
        real = j < path_lengths[:, None]
        scratch = self.max_len
        src = torch.where(real, self._base + paths, scratch)
        dst = torch.where(real, self.lengths[:, None] + j, scratch)
        if int(dst.max()) > self.max_len:
            raise ValueError("sequence longer than the cache while committing accepted tokens")
        if (src != dst).any():
            # all layers at once through the shared buffer when they all live there, else layer by layer
            buffers = [(self._store, None)] if self._all_layers_in_store() else \
                [(layer.keys, layer.values) for layer in self.layers if layer.is_initialized]
            moves, backends = {}, {}  # per row repeat and per device: the same for every buffer
            for keys, values in buffers:
                # a model that runs each row several times (classifier-free guidance: cond and uncond copies,
                # stacked) stores rep * B rows that all keep the same path
                rep = keys.shape[0] // B
                if rep not in moves:
                    moves[rep] = (src, dst) if rep == 1 else (src.repeat(rep, 1), dst.repeat(rep, 1))
                s, d = moves[rep]
                if keys.device not in backends:
                    backends[keys.device] = backend_for(keys, s)
                compact_kv_(keys, values, s, d, backends[keys.device])
        self.lengths = self.lengths + path_lengths
        self.discard_pending()

    def commit_first(self, counts: torch.LongTensor) -> None:
        """Keep each row's first ``counts[b]`` pending nodes in order (a chunk of new tokens fed as a ragged
        chain: a prompt, or the tokens a drafter catches up on) and drop the rest."""
        B, n = counts.shape[0], self.num_pending
        self.commit(torch.arange(n, device=self.device).expand(B, n), counts)

    def discard_pending(self) -> None:
        self._pending_parents = self._pending_parents[:, :0]
        self._pending_valid = self._pending_valid[:, :0]
        self._pending_pos = self._pending_pos[:, :0]
        self._pending_anc = self._pending_anc[:, :0, :0]

    def rollback(self, lengths: torch.LongTensor) -> None:
        """Forget committed tokens beyond ``lengths[b]`` (slots are simply overwritten later)."""
        self.discard_pending()
        self.lengths = torch.minimum(self.lengths, lengths.to(self.lengths))

    def select_rows(self, keep: torch.LongTensor) -> None:
        """Keep only rows ``keep`` (ascending indices), in that order: the loop drops rows that finished, so that
        later forwards stop computing them. Between steps only (nothing pending). A model that runs each row
        several times (classifier-free guidance) keeps the same rows of each copy."""
        if self.num_pending:
            raise ValueError("select_rows drops rows between steps: commit or discard pending nodes first")
        B, keep = self.batch_size_, keep.to(self.device)

        def pick(t: torch.Tensor) -> torch.Tensor:
            rep = t.shape[0] // B
            rows = keep if rep == 1 else (keep[None, :] + B * torch.arange(rep, device=keep.device)[:, None]).flatten()
            return t.index_select(0, rows.to(t.device))

        in_store = [layer.is_initialized and self._store is not None and layer.keys is self._store_views[i]
                    for i, layer in enumerate(self.layers)]
        if self._store is not None:
            self._store = pick(self._store)
        H = self._store.shape[1] // (2 * len(self.layers)) if self._store is not None else 0
        for i, layer in enumerate(self.layers):
            if in_store[i]:
                layer.keys = self._store[:, 2 * i * H: (2 * i + 1) * H]
                layer.values = self._store[:, (2 * i + 1) * H: (2 * i + 2) * H]
                self._store_views[i] = layer.keys
            elif layer.is_initialized:
                layer.keys, layer.values = pick(layer.keys), pick(layer.values)
        n = keep.shape[0]
        self.batch_size_ = n
        self.lengths = self.lengths.index_select(0, keep)
        self.starts = self.starts.index_select(0, keep)
        self._prefix_key, self._prefix = None, None
        self._pending_parents = self._pending_parents.new_zeros(n, 0)
        self._pending_valid = self._pending_valid.new_zeros(n, 0)
        self._pending_pos = self._pending_pos.new_zeros(n, 0)
        self._pending_anc = self._pending_anc.new_zeros(n, 0, 0)
        shift = self.position_shift
        if shift is not None:
            self.position_shift = replace(shift, shift=shift.shift.index_select(0, keep.to(shift.shift.device)))

    # ------------------------------------------------------------------ inspection
    def committed_kv(self, layer_idx: int, row: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V of the real committed tokens of one row: [H, n, D] each."""
        layer = self.layers[layer_idx]
        s, e = int(self.starts[row]), int(self.lengths[row])
        return layer.keys[row, :, s:e], layer.values[row, :, s:e]

    @property
    def batch_size(self) -> int:
        return self.batch_size_
