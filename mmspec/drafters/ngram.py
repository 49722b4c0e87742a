"""Token-level n-gram LM: the cheap causal proxy p_causal(token | previous tokens) of DiffuSpec.

DiffuSpec's path search scores each candidate path through the diffusion drafter's token lattice
with λ·log q_dlm + (1−λ)·log p_causal. The proxy is queried ~60 times per decoding step (beams ×
positions) with ≤ 15 candidates each, so it must cost microseconds, not a transformer forward. A
count-based n-gram model fitted on the target's domain corpus is the classic choice; we fit our own
(no KenLM binary) so the zoo stays self-contained.

Smoothing: **interpolated Kneser–Ney with one absolute discount D** shared by all orders (Kneser &
Ney 1995, "Improved backing-off for m-gram language modeling"; the interpolated form of Chen &
Goodman 1998, "An empirical study of smoothing techniques for language modeling", Sec. 3.5;
not their *modified* KN with three discounts). For a context h, its one-token-shorter suffix h':

    P_k(w | h) = max(c_k(h w) − D, 0) / c_k(h)  +  γ_k(h) · P_{k−1}(w | h')
    γ_k(h)     = (c_k(h) − Σ_kept c_k(h ·) + D · N_k(h ·)) / c_k(h)          (= 1 if h unseen)
    P_0(w)     = 1 / vocab_size

* highest order: c = raw counts; lower orders: c = continuation counts N1+(• h w) (number of
  distinct tokens seen right before ``h w``), which is what makes it Kneser–Ney. n-grams that start
  with the BOS pad cannot have a left neighbour, so they keep raw counts (as KenLM does);
* N_k(h ·) = number of distinct kept continuations of h; c_k(h) is the context's total *before*
  pruning, so the mass of n-grams pruned by ``min_count`` goes to the lower order (γ grows) and each
  P_k(· | h) still sums to one exactly;
* the uniform floor P_0 gives every id in [0, vocab_size) a nonzero probability.

Documents are independent: each is left-padded with order−1 BOS tokens (id −1, internal only), so
no n-gram spans two documents and a query context shorter than order−1 means "document start".

Storage: n-grams are keyed by a base-(vocab_size+1) integer of their tokens (BOS = digit 0), kept in
sorted int64 arrays (no Python objects per n-gram: ~24 bytes each in memory). Two query paths read
the same tables: a vectorised one (``np.searchsorted``; :meth:`NGramLM.score_batch`,
:meth:`NGramLM.log_probs`, :meth:`NGramLM.perplexity`) and, for one context with a few candidates,
plain-Python bisection (:meth:`NGramLM.log_prob`), which avoids numpy's fixed per-call cost. On disk
a directory holds ``ngram.json`` (settings, counts summary) and ``ngram.safetensors`` (per order:
context keys, continuation-list sizes, words, counts, each as the narrowest int type; no pickle).
Probabilities are recomputed from the integer tables on load with the same code, so a round trip
is bit-exact.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

BOS = -1
CONFIG_NAME = "ngram.json"
WEIGHTS_NAME = "ngram.safetensors"
FORMAT = "mmspec-ngram"
FORMAT_VERSION = 1


def _narrow(a: np.ndarray) -> np.ndarray:
    """The narrowest signed int dtype that holds ``a`` (the file is mostly small numbers)."""
    for dt in (np.int8, np.int16, np.int32):
        info = np.iinfo(dt)
        if a.size == 0 or (int(a.min()) >= info.min and int(a.max()) <= info.max):
            return np.ascontiguousarray(a, dtype=dt)
    return np.ascontiguousarray(a, dtype=np.int64)


def _as_ids(tokens, vocab_size: int, what: str) -> np.ndarray:
    """``tokens`` (sequence, array or tensor) as an int64 array, checked to lie in [0, vocab_size)."""
    if isinstance(tokens, torch.Tensor):
        if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
            raise ValueError(f"{what}: token ids must be integers, got dtype {tokens.dtype}")
        a = tokens.detach().cpu().numpy()
    else:
        a = np.asarray(tokens)
        if a.size == 0:
            a = a.astype(np.int64)
        elif a.dtype.kind not in "iu":
            raise ValueError(f"{what}: token ids must be integers, got {a.dtype} values")
    a = a.astype(np.int64, copy=False)
    if a.size:
        lo, hi = int(a.min()), int(a.max())
        if lo < 0 or hi >= vocab_size:
            raise ValueError(f"{what}: token id {lo if lo < 0 else hi} is out of range [0, {vocab_size})")
    return a


def _lookup(keys: np.ndarray, values: np.ndarray, query: np.ndarray, default: float) -> np.ndarray:
    """values[keys == query] elementwise, ``default`` where the query is absent.

    ``keys`` is sorted and ends with a sentinel larger than any query, so ``searchsorted`` never
    runs off the end (one numpy op less on the hot path)."""
    idx = np.searchsorted(keys, query)
    return np.where(keys[idx] == query, values[idx], default)


class _Order:
    """One order k of the model: the n-grams of length k grouped by their (k−1)-token context.

    Integer tables (what is saved): ``contexts`` (sorted keys), ``sizes`` (kept continuations per
    context), ``words`` (continuation token ids, grouped by context, ascending), ``counts`` (the
    count used at this order), ``totals`` (per-context total before pruning). The float tables
    queries use come from :meth:`probabilities`.
    """

    def __init__(self, contexts, sizes, words, counts, totals=None):
        self.contexts = np.asarray(contexts, dtype=np.int64)
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.words = np.asarray(words, dtype=np.int64)
        self.counts = np.asarray(counts, dtype=np.int64)
        if self.sizes.size != self.contexts.size or self.words.size != self.counts.size \
                or int(self.sizes.sum()) != self.words.size or (self.sizes.size and self.sizes.min() < 1):
            raise ValueError("inconsistent n-gram tables")
        kept = np.add.reduceat(self.counts, np.cumsum(self.sizes) - self.sizes) if self.sizes.size \
            else np.zeros(0, dtype=np.int64)
        self.totals = kept if totals is None else np.asarray(totals, dtype=np.int64)
        if self.totals.shape != kept.shape or np.any(self.totals < kept):
            raise ValueError("inconsistent n-gram context totals")
        self._kept_equals_totals = totals is None or np.array_equal(self.totals, kept)
        self._kept = kept

    def probabilities(self, base: int, discount: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(n-gram keys, α per n-gram, γ per context): the float tables queries use."""
        keys = np.repeat(self.contexts, self.sizes) * base + (self.words + 1)
        totals = self.totals.astype(np.float64)
        alpha = (self.counts - discount) / np.repeat(totals, self.sizes)
        gamma = (totals - self._kept + discount * self.sizes) / totals
        return keys, alpha, gamma

    @classmethod
    def from_keys(cls, keys: np.ndarray, counts: np.ndarray, totals_by_context, base: int):
        """From sorted unique n-gram keys; ``totals_by_context`` = (context keys, totals) or None."""
        contexts, sizes = np.unique(keys // base, return_counts=True)
        totals = None
        if totals_by_context is not None:
            all_contexts, all_totals = totals_by_context
            totals = all_totals[np.searchsorted(all_contexts, contexts)]
        return cls(contexts, sizes, keys % base - 1, counts, totals)

    def tensors(self, k: int) -> dict[str, np.ndarray]:
        out = {f"order{k}.contexts": _narrow(self.contexts), f"order{k}.sizes": _narrow(self.sizes),
               f"order{k}.words": _narrow(self.words), f"order{k}.counts": _narrow(self.counts)}
        if not self._kept_equals_totals:
            out[f"order{k}.totals"] = _narrow(self.totals)
        return out


class NGramLM:
    """Interpolated Kneser–Ney n-gram LM over token ids in [0, vocab_size); see the module docstring.

    Build with :meth:`fit` or :meth:`from_pretrained`. Queries: :meth:`log_prob` (a few candidates
    after one context: the DiffuSpec use), :meth:`score_batch` (many contexts at once),
    :meth:`log_probs` (the full next-token distribution), :meth:`perplexity`.

    For speed all orders share one sorted n-gram table and one sorted context table: an order-k key
    gets a leading marker digit 1 (key + base**k for an n-gram, + base**(k−1) for its context), so
    one ``searchsorted`` answers every order and candidate of a batch at once.

    Cost on the project's 2-core CPU (zoo code corpus, order 4, shared with two training jobs): one
    :meth:`log_prob` of 15 candidates ≈ 25–50 µs; :meth:`score_batch` of 3 contexts × 15 ≈ 70–120 µs;
    of 60 × 15 ≈ 0.5–1 ms.
    """

    def __init__(self, orders: list[_Order], vocab_size: int, discount: float, min_count: int,
                 stats: dict | None = None):
        self._check_settings(vocab_size, len(orders), discount, min_count)
        self._orders = orders  # index k−1 holds order k
        self.order = len(orders)
        self.vocab_size = int(vocab_size)
        self.discount = float(discount)
        self.min_count = int(min_count)
        self.stats = dict(stats or {})
        self._base = self.vocab_size + 1
        self._uniform = 1.0 / self.vocab_size
        self._markers = [self._base ** k for k in range(self.order)]  # context marker of order k+1
        ng_keys, ng_alpha, ctx_keys, ctx_gamma = [], [], [], []
        for k, o in enumerate(orders, 1):
            keys, alpha, gamma = o.probabilities(self._base, self.discount)
            ng_keys.append(keys + self._base ** k)
            ng_alpha.append(alpha)
            ctx_keys.append(o.contexts + self._base ** (k - 1))
            ctx_gamma.append(gamma)
        sentinel = [np.array([np.iinfo(np.int64).max])]
        self._ng_keys = np.concatenate(ng_keys + sentinel)
        self._ng_alpha = np.concatenate(ng_alpha + [np.zeros(1)])
        self._ctx_keys = np.concatenate(ctx_keys + sentinel)
        self._ctx_gamma = np.concatenate(ctx_gamma + [np.ones(1)])
        # n-grams are sorted by (marked context, word) and contexts by marked key, so the n-grams of
        # context i are the block [offsets[i], offsets[i+1]) of the n-gram table
        self._ctx_offsets = np.concatenate([[0], np.cumsum(np.concatenate([o.sizes for o in orders]))])
        # zero-copy views whose items are plain Python numbers, for the bisect fast path
        self._views = tuple(memoryview(a) for a in (self._ctx_keys, self._ctx_gamma, self._ctx_offsets,
                                                        self._ng_keys, self._ng_alpha))
        # order 1 as a dense list (same arithmetic as _probs): the fast path's starting point
        unigram = np.zeros(self.vocab_size)
        unigram[orders[0].words] = ng_alpha[0]
        self._unigram = (unigram + ctx_gamma[0][0] * self._uniform).tolist()

    # ------------------------------------------------------------------ fitting

    @staticmethod
    def _check_settings(vocab_size, order, discount, min_count) -> None:
        if not isinstance(vocab_size, (int, np.integer)) or vocab_size < 1:
            raise ValueError(f"vocab_size must be an int >= 1, got {vocab_size!r}")
        if not isinstance(order, (int, np.integer)) or order < 1:
            raise ValueError(f"order must be an int >= 1, got {order!r}")
        if not 0.0 < float(discount) <= 1.0:
            raise ValueError(f"discount must be in (0, 1] (Kneser-Ney absolute discount), got {discount!r}")
        if not isinstance(min_count, (int, np.integer)) or min_count < 1:
            raise ValueError(f"min_count must be an int >= 1, got {min_count!r}")
        if (int(vocab_size) + 1) ** int(order) >= 2 ** 62:
            raise ValueError(f"order {order} with vocab_size {vocab_size} does not fit the int64 n-gram keys "
                             f"((vocab_size + 1) ** order must be < 2**62); use a lower order")

    @staticmethod
    def _stream_keys(sequences: Iterable[Sequence[int]], order: int, vocab_size: int) -> tuple[list[np.ndarray], int]:
        """Key of the k-gram ending at every token, for k = 1..order, over BOS-padded documents.

        Returns (keys per order, number of documents). The k-gram key of position i is
        Σ_j digit[i−j]·base^j (j < k), digit = token + 1 and BOS = 0; padding every document with
        order−1 BOS digits keeps i−j inside the same document.
        """
        pad, base = order - 1, vocab_size + 1
        digits, is_token, docs = [], [], 0
        for doc in sequences:
            a = _as_ids(doc, vocab_size, f"document {docs}")
            docs += 1
            if a.ndim != 1:
                raise ValueError(f"document {docs - 1}: expected a 1-D sequence of token ids, got shape {a.shape}")
            if a.size:
                digits += [np.zeros(pad, dtype=np.int64), a + 1]
                is_token += [np.zeros(pad, dtype=bool), np.ones(a.size, dtype=bool)]
        if not digits:
            raise ValueError("empty corpus: need at least one document with at least one token")
        digits = np.concatenate(digits)
        pos = np.flatnonzero(np.concatenate(is_token))
        keys, key, scale = [], digits[pos], 1
        keys.append(key)
        for j in range(1, order):
            scale *= base
            key = key + digits[pos - j] * scale
            keys.append(key)
        return keys, docs

    @classmethod
    def fit(cls, sequences: Iterable[Sequence[int]], vocab_size: int, order: int = 3, discount: float = 0.75,
            min_count: int = 1) -> NGramLM:
        """Count the n-grams of ``sequences`` (separate documents) and build the smoothed model.

        ``min_count`` drops highest-order n-grams seen fewer times (their mass backs off to the lower
        order); lower orders are kept whole so that every backed-off query still has a good estimate.
        """
        cls._check_settings(vocab_size, order, discount, min_count)
        vocab_size, order, min_count = int(vocab_size), int(order), int(min_count)  # no numpy int overflow
        base = vocab_size + 1
        keys, docs = cls._stream_keys(sequences, order, vocab_size)
        uniq = [np.unique(k, return_counts=True) for k in keys]
        orders = []
        for k in range(1, order + 1):
            ngrams, raw = uniq[k - 1]
            if k < order:
                # continuation count of g = number of distinct (k+1)-grams ending in g; every k-gram
                # has a left neighbour (a token or BOS pad), so both sides list the same k-grams
                suffixes, cont = np.unique(uniq[k][0] % base ** k, return_counts=True)
                assert np.array_equal(suffixes, ngrams)
                starts_with_bos = ngrams < base ** (k - 1)  # leading digit 0
                orders.append(_Order.from_keys(ngrams, np.where(starts_with_bos, raw, cont), None, base))
            else:
                contexts, first = np.unique(ngrams // base, return_index=True)
                totals = (contexts, np.add.reduceat(raw, first))
                keep = raw >= min_count
                orders.append(_Order.from_keys(ngrams[keep], raw[keep], totals, base))
        stats = {"train_documents": docs, "train_tokens": int(keys[0].size),
                 "distinct_ngrams_per_order": [int(u[0].size) for u in uniq]}
        return cls(orders, vocab_size, discount, min_count, stats)

    # ------------------------------------------------------------------ queries

    def _context_keys(self, context: Sequence[int] | torch.Tensor) -> list[int]:
        """Marked key of the last k−1 context tokens (BOS-padded) for each order k = 1..order."""
        n = self.order
        if n == 1:
            return [1]
        tail = context[-(n - 1):]
        tail = tail.tolist() if isinstance(tail, (torch.Tensor, np.ndarray)) else list(tail)
        for t in tail:
            if not (isinstance(t, (int, np.integer)) and 0 <= t < self.vocab_size):
                raise ValueError(f"context token {t!r} is not an id in [0, {self.vocab_size})")
        out, key = [1], 0
        for j in range(1, n):
            if j <= len(tail):
                key += (tail[-j] + 1) * self._markers[j - 1]  # BOS digits are 0: nothing to add
            out.append(key + self._markers[j])
        return out

    def _probs(self, contexts: np.ndarray, ngrams: np.ndarray) -> np.ndarray:
        """P(w | h) by the interpolation recursion, lowest order first (float64).

        ``contexts`` [..., order] and ``ngrams`` [..., order, C]: marked keys of each order."""
        gamma = _lookup(self._ctx_keys, self._ctx_gamma, contexts, 1.0)
        alpha = _lookup(self._ng_keys, self._ng_alpha, ngrams, 0.0)
        p = self._uniform
        for k in range(self.order):
            p = alpha[..., k, :] + gamma[..., k, None] * p
        return p

    def _score(self, contexts: list, candidates: np.ndarray) -> np.ndarray:
        """P[i, j] = P(candidates[i, j] | contexts[i])."""
        ctx = np.array([self._context_keys(c) for c in contexts], dtype=np.int64)  # [N, order]
        return self._probs(ctx, ctx[:, :, None] * self._base + (candidates[:, None, :] + 1))

    def _candidates(self, candidates, ndim: int) -> np.ndarray:
        a = _as_ids(candidates, self.vocab_size, "candidates")
        if a.ndim != ndim:
            raise ValueError(f"candidates must be {ndim}-D, got shape {tuple(a.shape)}")
        return a

    def log_prob(self, context: Sequence[int] | torch.Tensor, candidates: Sequence[int] | torch.Tensor) -> torch.Tensor:
        """log P(c | context) for each candidate (natural log, float32, shape [len(candidates)]).

        Only the last order−1 context tokens matter; a shorter context is read as a document start.
        """
        if isinstance(candidates, (torch.Tensor, np.ndarray)):  # (len() of a tensor is slow)
            small = candidates.ndim == 1 and candidates.shape[0] <= self.SMALL_QUERY
        else:
            small = len(candidates) <= self.SMALL_QUERY
        if small:
            return self._log_prob_small(context, candidates)
        cand = self._candidates(candidates, 1)
        p = self._score([context], cand[None, :])[0]
        return torch.from_numpy(p).log_().float()

    #: up to this many candidates :meth:`log_prob` takes the pure-Python path (cheaper than numpy's per-call cost)
    SMALL_QUERY = 64

    def _log_prob_small(self, context, candidates) -> torch.Tensor:
        """:meth:`log_prob` for a few candidates, in plain Python: per order, one bisection for the
        context, then one per candidate inside that context's (short) block of continuations.

        This is the DiffuSpec hot path. numpy costs a fixed ~1-2 µs per call whatever the array
        size, which dominates a 15-candidate query; bisecting memoryviews of the same sorted tables
        costs no extra memory (Python dicts would take ~100 bytes per n-gram) and is about twice as
        fast. The float64 arithmetic is that of :meth:`_probs`, in the same order, so both paths give
        the same probabilities.
        """
        if isinstance(candidates, torch.Tensor):
            if candidates.is_floating_point() or candidates.is_complex() or candidates.dtype == torch.bool \
                    or candidates.dim() != 1:
                raise ValueError(f"candidates must be a 1-D integer tensor, got {candidates.dtype} "
                                 f"{tuple(candidates.shape)}")
            cands = candidates.tolist()
        else:
            cands = [int(c) if isinstance(c, np.integer) else c for c in candidates]
            if not all(type(c) is int for c in cands):
                raise ValueError("candidates must be integer token ids")
        if cands and (min(cands) < 0 or max(cands) >= self.vocab_size):
            bad = min(cands) if min(cands) < 0 else max(cands)
            raise ValueError(f"candidates: token id {bad} is out of range [0, {self.vocab_size})")
        ctx_keys, ctx_gamma, offsets, ng_keys, ng_alpha = self._views
        p = [self._unigram[c] for c in cands]
        for ctx in self._context_keys(context)[1:]:
            i = bisect_left(ctx_keys, ctx)  # the sentinel keeps i in range
            if ctx_keys[i] != ctx:
                continue  # unseen context: α = 0, γ = 1, p unchanged
            g, lo, hi, prefix = ctx_gamma[i], offsets[i], offsets[i + 1], ctx * self._base + 1
            new = []
            for c, q in zip(cands, p):
                key = prefix + c  # marked n-gram key = marked context · base + digit
                j = bisect_left(ng_keys, key, lo, hi)
                new.append((ng_alpha[j] if j < hi and ng_keys[j] == key else 0.0) + g * q)
            p = new
        return torch.tensor(p, dtype=torch.float64).log_().float()

    def log_probs(self, context: Sequence[int] | torch.Tensor) -> torch.Tensor:
        """The full next-token distribution log P(· | context), float32 [vocab_size]."""
        return self.log_prob(context, np.arange(self.vocab_size))

    def score_batch(self, contexts: list[Sequence[int]], candidates: torch.Tensor) -> torch.Tensor:
        """log P(candidates[i, j] | contexts[i]) as float32 [N, C], all rows in one vectorised pass."""
        cand = self._candidates(candidates, 2)
        if cand.shape[0] != len(contexts):
            raise ValueError(f"got {len(contexts)} contexts for {cand.shape[0]} candidate rows")
        if cand.shape[0] == 0:
            return torch.zeros(cand.shape, dtype=torch.float32)
        return torch.from_numpy(self._score(list(contexts), cand)).log_().float()

    def perplexity(self, sequences: Iterable[Sequence[int]]) -> float:
        """exp(mean −log P(token | previous tokens)) over every token of every document (natural base,
        each document starting from the BOS context, as in fitting)."""
        keys, _ = self._stream_keys(sequences, self.order, self.vocab_size)
        marked_ctx = np.stack([k // self._base + m for k, m in zip(keys, self._markers)], -1)  # [T, order]
        marked_ng = np.stack([k + m * self._base for k, m in zip(keys, self._markers)], -1)[..., None]
        p = self._probs(marked_ctx, marked_ng)[:, 0]
        return float(np.exp(-np.log(p).mean()))

    @property
    def num_entries(self) -> int:
        """Number of stored n-grams, all orders together."""
        return sum(self.entries_per_order())

    def entries_per_order(self) -> list[int]:
        return [int(o.words.size) for o in self._orders]

    def __repr__(self) -> str:
        return (f"NGramLM(order={self.order}, vocab_size={self.vocab_size}, discount={self.discount}, "
                f"min_count={self.min_count}, entries={self.entries_per_order()})")

    # ------------------------------------------------------------------ persistence

    def save(self, path: str | Path) -> Path:
        """Write ``<path>/ngram.json`` and ``<path>/ngram.safetensors`` (integer tables only)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        tensors = {}
        for k, o in enumerate(self._orders, 1):
            tensors.update(o.tensors(k))
        save_file(tensors, str(path / WEIGHTS_NAME))
        config = {"format": FORMAT, "version": FORMAT_VERSION, "order": self.order, "vocab_size": self.vocab_size,
                  "discount": self.discount, "min_count": self.min_count, "bos_id": BOS,
                  "smoothing": "interpolated Kneser-Ney, one absolute discount for all orders",
                  "num_entries": self.num_entries, "entries_per_order": self.entries_per_order(),
                  "contexts_per_order": [int(o.contexts.size) for o in self._orders], **self.stats}
        (path / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n")
        return path

    @classmethod
    def from_pretrained(cls, path: str | Path) -> NGramLM:
        """Load a directory written by :meth:`save`."""
        path = Path(path)
        if not (path / CONFIG_NAME).is_file() or not (path / WEIGHTS_NAME).is_file():
            raise ValueError(f"{path} is not an n-gram model directory (needs {CONFIG_NAME} and {WEIGHTS_NAME})")
        config = json.loads((path / CONFIG_NAME).read_text())
        if config.get("format") != FORMAT or config.get("version") != FORMAT_VERSION:
            raise ValueError(f"{path / CONFIG_NAME}: unsupported format {config.get('format')!r} "
                             f"version {config.get('version')!r}")
        tables = load_file(str(path / WEIGHTS_NAME))
        orders = []
        for k in range(1, int(config["order"]) + 1):
            try:
                parts = [tables[f"order{k}.{name}"] for name in ("contexts", "sizes", "words", "counts")]
            except KeyError as e:
                raise ValueError(f"{path / WEIGHTS_NAME}: missing table {e}") from None
            orders.append(_Order(*parts, tables.get(f"order{k}.totals")))
        stats = {k: config[k] for k in ("train_documents", "train_tokens", "distinct_ngrams_per_order") if k in config}
        return cls(orders, config["vocab_size"], config["discount"], config["min_count"], stats)

