"""NGramLM: the interpolated Kneser-Ney n-gram model used as DiffuSpec's causal proxy."""

import json

import numpy as np
import pytest
import torch

from mmspec.drafters.ngram import CONFIG_NAME, WEIGHTS_NAME, NGramLM


def markov_corpus(seed: int, docs: int, length: int, vocab: int = 8, order: int = 3) -> list[list[int]]:
    """Documents from a fixed random (order−1)-th order Markov chain with peaked transitions; the chain
    (seeded by ``order``) is the same for every ``seed``, so train and held-out share a distribution."""
    table_rng = np.random.default_rng(1000 + order)
    table = table_rng.dirichlet(np.full(vocab, 0.2), size=(vocab,) * (order - 1))
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(docs):
        seq = list(rng.integers(0, vocab, size=order - 1))
        for _ in range(length):
            seq.append(int(rng.choice(vocab, p=table[tuple(seq[-(order - 1):])])))
        out.append([int(t) for t in seq])
    return out


@pytest.fixture(scope="module")
def corpus():
    return markov_corpus(seed=0, docs=40, length=60)


def reference_kn(docs, vocab, order, discount, min_count):
    """Straightforward interpolated Kneser-Ney over tuples (slow, obviously-correct reference)."""
    from collections import Counter

    raw = [Counter() for _ in range(order + 1)]  # raw[k][k-gram tuple]
    for doc in docs:
        padded = [-1] * (order - 1) + list(doc)
        for i in range(order - 1, len(padded)):
            for k in range(1, order + 1):
                raw[k][tuple(padded[i - k + 1: i + 1])] += 1
    counts = [None] * (order + 1)
    for k in range(1, order):
        left = Counter(g[1:] for g in raw[k + 1])  # distinct left extensions
        counts[k] = {g: (c if g[0] == -1 else left[g]) for g, c in raw[k].items()}
    totals_full = Counter()
    for g, c in raw[order].items():
        totals_full[g[:-1]] += c
    counts[order] = {g: c for g, c in raw[order].items() if c >= min_count}
    tables = []
    for k in range(1, order + 1):
        total, kept, types = Counter(), Counter(), Counter()
        for g, c in counts[k].items():
            kept[g[:-1]] += c
            types[g[:-1]] += 1
            total[g[:-1]] += c
        if k == order:
            total = {h: totals_full[h] for h in kept}
        tables.append((counts[k], total, kept, types))

    def prob(context, w):
        h = ([-1] * (order - 1) + list(context))[len(context):] if order > 1 else []
        p = 1.0 / vocab
        for k, (cnt, total, kept, types) in enumerate(tables, 1):
            ctx = tuple(h[len(h) - (k - 1):]) if k > 1 else ()
            if ctx not in total:
                continue
            gamma = (total[ctx] - kept[ctx] + discount * types[ctx]) / total[ctx]
            p = max(cnt.get(ctx + (w,), 0) - discount, 0) / total[ctx] + gamma * p
        return p

    return prob


@pytest.mark.parametrize("order,min_count", [(1, 1), (2, 1), (3, 1), (3, 3), (4, 2)])
def test_matches_reference_implementation(corpus, order, min_count):
    m = NGramLM.fit(corpus, vocab_size=9, order=order, discount=0.7, min_count=min_count)
    ref = reference_kn(corpus, 9, order, 0.7, min_count)
    for ctx in ([], [2], corpus[0][:1], corpus[0][:2], corpus[5][:10], [8, 8, 1]):
        expected = torch.tensor([ref(ctx, w) for w in range(9)], dtype=torch.float64)
        assert torch.allclose(m.log_probs(ctx).double().exp(), expected, rtol=1e-6, atol=0)


def test_hand_computed_bigram_model():
    # padded doc: BOS 0 1 0 2. Unigram continuation counts: 0 <- {BOS, 1} = 2, 1 <- {0}, 2 <- {0}: total 4,
    # 3 types, so P1 = (N - .5)/4 + .5*3/4 * 1/3 = (.5, .25, .25).
    m = NGramLM.fit([[0, 1, 0, 2]], vocab_size=3, order=2, discount=0.5)
    expected = {(): [0.75, 0.125, 0.125],  # context BOS: c = 1, one type (0)
                (0,): [0.25, 0.375, 0.375],  # c = 2, two types (1, 2)
                (1,): [0.75, 0.125, 0.125],  # c = 1, one type (0)
                (2,): [0.5, 0.25, 0.25]}  # unseen context: the unigram level itself
    for ctx, p in expected.items():
        assert torch.allclose(m.log_probs(list(ctx)).double().exp(), torch.tensor(p, dtype=torch.float64), atol=1e-7)
    assert m.entries_per_order() == [3, 4] and m.num_entries == 7


@pytest.mark.parametrize("order", [1, 2, 3, 4])
@pytest.mark.parametrize("min_count", [1, 2, 3])
def test_distribution_sums_to_one(corpus, order, min_count):
    vocab = 10  # ids 8 and 9 never occur in the corpus
    m = NGramLM.fit(corpus, vocab_size=vocab, order=order, min_count=min_count)
    contexts = [[], [3], corpus[0][:2], corpus[1][:7], [9, 9, 9], [8], [1, 9, 2], torch.tensor(corpus[2][:5])]
    for ctx in contexts:
        lp = m.log_probs(ctx)
        assert lp.dtype == torch.float32 and lp.shape == (vocab,)
        p = lp.double().exp()
        assert torch.all(p > 0)
        assert abs(float(p.sum()) - 1.0) < 1e-5, (ctx, float(p.sum()))
        # the single-context fast path and the batched path agree with the full distribution exactly
        cand = torch.tensor([0, 9, 3, 3, 5])
        assert torch.equal(m.log_prob(ctx, cand), lp[cand])
        assert torch.equal(m.log_prob(ctx, cand.tolist()), lp[cand])
    rows = torch.tensor([[1, 2, 9], [0, 0, 4], [7, 8, 1]])
    batch = m.score_batch(contexts[:3], rows)
    assert batch.shape == (3, 3)
    for i in range(3):
        assert torch.equal(batch[i], m.log_probs(contexts[i])[rows[i]])


def test_pruning_drops_top_order_only_and_stays_normalised(corpus):
    full = NGramLM.fit(corpus, 8, order=3, min_count=1)
    pruned = NGramLM.fit(corpus, 8, order=3, min_count=4)
    assert pruned.entries_per_order()[:2] == full.entries_per_order()[:2]
    assert pruned.entries_per_order()[2] < full.entries_per_order()[2]
    # a context whose continuations were all pruned backs off entirely to the lower order
    everything = NGramLM.fit(corpus, 8, order=3, min_count=10 ** 6)
    assert everything.entries_per_order() == full.entries_per_order()[:2] + [0]
    for ctx in ([1, 2], [4, 4], [0], []):
        assert abs(float(pruned.log_probs(ctx).double().exp().sum()) - 1.0) < 1e-5
        assert abs(float(everything.log_probs(ctx).double().exp().sum()) - 1.0) < 1e-5
    # pruning loses information: the fit on the training data gets worse
    assert full.perplexity(corpus) < pruned.perplexity(corpus) < everything.perplexity(corpus)


def test_fast_and_vectorised_paths_agree():
    rng = np.random.default_rng(3)
    docs = [rng.integers(0, 90, size=200).tolist() for _ in range(20)]
    m = NGramLM.fit(docs, vocab_size=100, order=3, min_count=2)
    for ctx in ([], [5], docs[0][:9], [99, 98]):
        full = m.log_probs(ctx)  # 100 candidates: vectorised numpy path
        assert abs(float(full.double().exp().sum()) - 1.0) < 1e-5
        few = torch.tensor(rng.integers(0, 100, size=15))
        assert torch.equal(m.log_prob(ctx, few), full[few])  # dict fast path


def test_repetitive_corpus_predicts_the_pattern():
    docs = [[1, 2, 3, 4] * 5 for _ in range(10)] + [[5, 6, 7]]
    m = NGramLM.fit(docs, vocab_size=10, order=3)
    assert int(m.log_probs([1, 2]).argmax()) == 3
    assert int(m.log_probs([2, 3]).argmax()) == 4
    assert int(m.log_probs([4]).argmax()) == 1  # context (BOS, 4) unseen: backs off to (4) -> 1
    assert int(m.log_probs([]).argmax()) == 1  # documents start with 1
    assert int(m.log_probs([5, 6]).argmax()) == 7
    assert float(m.log_prob([1, 2], [3]).exp()) > 0.8
    # only the last order-1 tokens matter
    assert torch.equal(m.log_probs([9, 9, 7, 1, 2]), m.log_probs([1, 2]))


def test_no_ngram_crosses_documents():
    joined = NGramLM.fit([[1, 2, 3, 4]], vocab_size=6, order=2)
    split = NGramLM.fit([[1, 2], [3, 4]], vocab_size=6, order=2)
    assert int(joined.log_probs([2]).argmax()) == 3
    # in the split corpus nothing ever followed 2: its context is unseen, like 5's
    assert torch.equal(split.log_probs([2]), split.log_probs([5]))
    assert split.stats["train_documents"] == 2 and split.stats["train_tokens"] == 4


def test_save_load_round_trip_is_exact(tmp_path, corpus):
    for order, min_count in [(3, 1), (4, 2)]:
        m = NGramLM.fit(corpus, vocab_size=9, order=order, min_count=min_count)
        path = m.save(tmp_path / f"o{order}")
        assert sorted(p.name for p in path.iterdir()) == sorted([CONFIG_NAME, WEIGHTS_NAME])
        config = json.loads((path / CONFIG_NAME).read_text())
        assert (config["order"], config["min_count"], config["vocab_size"]) == (order, min_count, 9)
        assert config["num_entries"] == m.num_entries
        m2 = NGramLM.from_pretrained(path)
        assert (m2.order, m2.vocab_size, m2.discount, m2.min_count) == (m.order, m.vocab_size, m.discount, m.min_count)
        assert m2.entries_per_order() == m.entries_per_order()
        for ctx in ([], [1], corpus[3][:6], [8, 8]):
            assert torch.equal(m2.log_probs(ctx), m.log_probs(ctx))
            assert torch.equal(m2.log_prob(ctx, [0, 5, 8]), m.log_prob(ctx, [0, 5, 8]))
        assert m2.perplexity(corpus[:5]) == m.perplexity(corpus[:5])


def test_higher_order_lowers_heldout_perplexity():
    train = markov_corpus(seed=1, docs=60, length=150)
    heldout = markov_corpus(seed=2, docs=15, length=150)
    ppl = [NGramLM.fit(train, vocab_size=8, order=n).perplexity(heldout) for n in (1, 2, 3)]
    assert ppl[0] > ppl[1] > ppl[2], ppl
    assert ppl[0] < 8.0  # better than uniform even at order 1


def test_bad_input_raises_clear_errors(corpus):
    with pytest.raises(ValueError, match="empty corpus"):
        NGramLM.fit([], vocab_size=5)
    with pytest.raises(ValueError, match="empty corpus"):
        NGramLM.fit([[], []], vocab_size=5)
    with pytest.raises(ValueError, match=r"token id 5 is out of range \[0, 5\)"):
        NGramLM.fit([[0, 1], [2, 5]], vocab_size=5)
    with pytest.raises(ValueError, match="token id -1 is out of range"):
        NGramLM.fit([[0, -1]], vocab_size=5)
    with pytest.raises(ValueError, match="must be integers"):
        NGramLM.fit([[0.5, 1.0]], vocab_size=5)
    with pytest.raises(ValueError, match="order must be an int >= 1"):
        NGramLM.fit(corpus, vocab_size=8, order=0)
    with pytest.raises(ValueError, match="vocab_size must be an int >= 1"):
        NGramLM.fit(corpus, vocab_size=0)
    with pytest.raises(ValueError, match="discount"):
        NGramLM.fit(corpus, vocab_size=8, discount=0.0)
    with pytest.raises(ValueError, match="min_count"):
        NGramLM.fit(corpus, vocab_size=8, min_count=0)
    with pytest.raises(ValueError, match="use a lower order"):
        NGramLM.fit(corpus, vocab_size=50_000, order=5)
    m = NGramLM.fit(corpus, vocab_size=8)
    with pytest.raises(ValueError, match="out of range"):
        m.log_prob([1, 2], [3, 8])
    with pytest.raises(ValueError, match="out of range"):
        m.log_prob([1, 2], torch.arange(100))  # the vectorised path checks too
    with pytest.raises(ValueError, match="context token"):
        m.log_prob([1, 99], [3])
    with pytest.raises(ValueError, match="2-D"):
        m.score_batch([[1]], torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="contexts for"):
        m.score_batch([[1], [2]], torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match="not an n-gram model directory"):
        NGramLM.from_pretrained("/nonexistent/ngram")
