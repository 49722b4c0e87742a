import pytest
import torch

from mmspec import DEFAULT_TREE, DraftTree, TreeTemplate
from mmspec.tree import ancestor_mask, select_best_nodes, subtree
from mmspec.verifiers.tree_forward import prefill_parents


def test_derived_views():
    tree = DraftTree(torch.tensor([[9, 1, 2, 3, 4]]), torch.tensor([[-1, 0, 0, 1, 3]]))
    anc = tree.ancestor_mask[0].int().tolist()
    assert anc == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0], [1, 1, 0, 1, 0], [1, 1, 0, 1, 1]]
    assert tree.depth.tolist() == [[0, 1, 1, 2, 3]]
    assert tree.position_ids(torch.tensor([7])).tolist() == [[7, 8, 8, 9, 10]]
    assert sorted(tree.paths(0)) == [[0, 1, 3, 4], [0, 2]]
    assert tree.max_depth == 3
    assert tree.retrieve_indices().shape == (1, 2, 4)


def test_chain_is_a_tree_with_one_child_per_node():
    tree = DraftTree.chain(torch.tensor([5, 6]), torch.tensor([[1, 2, 3], [4, 5, 6]]), lengths=torch.tensor([3, 1]))
    assert tree.parents.tolist() == [[-1, 0, 1, 2]] * 2
    assert tree.valid.tolist() == [[True] * 4, [True, True, False, False]]
    assert tree.paths(0) == [[0, 1, 2, 3]]


def test_bad_parents_rejected():
    with pytest.raises(ValueError):
        DraftTree(torch.tensor([[1, 2]]), torch.tensor([[-1, 1]]))
    with pytest.raises(ValueError):
        DraftTree(torch.tensor([[1, 2]]), torch.tensor([[0, -1]]))


def test_templates():
    t = TreeTemplate.full((3, 2, 1))
    assert t.num_nodes == 1 + 3 + 6 + 6
    assert t.depth == 3
    parents = t.parents
    assert all(p < i for i, p in enumerate(parents) if i > 0)
    assert TreeTemplate.chain(4).parents == [-1, 0, 1, 2, 3]
    assert DEFAULT_TREE.depth == 5
    with pytest.raises(ValueError):
        TreeTemplate(((0, 0),))


@pytest.mark.parametrize("branching", [(1,), (3, 2, 1, 1, 1), (2, 2, 1, 1, 1), (4, 2, 1, 1), (1, 3, 2)])
def test_template_layout_matches_the_computed_views(branching):
    """A template's precomputed tensors (what static drafting uses every step) equal the views a DraftTree
    computes from its parents, and each depth's frontier rows point at the right parents."""
    t = TreeTemplate.full(branching)
    layout = t.layout("cpu")
    tokens = torch.randint(0, 50, (3, t.num_nodes))
    fast, slow = layout.tree(tokens), DraftTree(tokens, torch.tensor(t.parents).expand(3, -1).clone())
    assert torch.equal(fast.parents, slow.parents)
    assert torch.equal(fast.ancestor_mask, slow.ancestor_mask)
    assert torch.equal(fast.depth, slow.depth) and fast.max_depth == slow.max_depth == t.depth
    frontier = [0]
    for d, level in enumerate(layout.levels, start=1):
        nodes = t.level(d)
        assert [frontier[i] for i in level.local.tolist()] == [t.parents[i] for i in nodes]
        assert level.ranks.tolist() == [t.ranks[i] for i in nodes]
        if level.expand is None:
            assert d == t.depth
        else:  # the next frontier: this depth's nodes that have children, in node order
            frontier = level.expand.tolist()
            assert frontier == sorted({t.parents[i] for i in t.level(d + 1)})
    assert t.layout("cpu") is layout  # built once


def test_best_nodes_are_ancestor_closed():
    torch.manual_seed(0)
    B, N = 4, 30
    parents = torch.cat([torch.full((B, 1), -1), torch.stack([torch.randint(0, n, (B,)) for n in range(1, N)], 1)], 1)
    logp = -torch.rand(B, N)
    logp[:, 0] = 0
    tree = DraftTree(torch.zeros(B, N, dtype=torch.long), parents)
    anc = tree.ancestor_mask.float()
    scores = (anc * logp[:, None, :]).sum(-1)  # cumulative log-prob along the path
    keep = select_best_nodes(scores, parents, tree.depth, tree.valid, 10)
    for b in range(B):
        kept = set(keep[b].tolist())
        assert 0 in kept and len(kept) == 10
        for n in kept:
            assert n == 0 or int(parents[b, n]) in kept
        # they are the 10 best by score
        others = [n for n in range(N) if n not in kept]
        assert min(scores[b, list(kept)]) >= max(scores[b, others]) - 1e-6
    tok, par, _, _ = subtree(torch.arange(N).expand(B, N), parents, keep)
    DraftTree(tok, par)  # re-indexed parents are valid


def test_prompt_lookup_prefers_a_full_continuation():
    from mmspec.drafters.prompt_lookup import lookup_continuation

    ctx = torch.tensor([7, 8, 1, 2, 3, 4, 9, 7, 8, 5, 7, 8])
    # "7 8" occurs at 0 (followed by 1 2 3) and at 7 (followed by 5 7 8): both give 3 tokens -> most recent
    assert lookup_continuation(ctx, 3, 2, 1).tolist() == [5, 7, 8]
    # with k = 5 the earlier match has the longer continuation
    assert lookup_continuation(ctx, 5, 2, 1).tolist() == [1, 2, 3, 4, 9]
    assert lookup_continuation(torch.tensor([1, 2, 3]), 4, 2, 1).numel() == 0


def test_greedy_chain_fast_path_equals_general_rule():
    from mmspec.verifiers.acceptance import greedy_accept

    g = torch.Generator().manual_seed(0)
    B, k, V = 64, 5, 4  # tiny vocabulary: many accepted prefixes of every length
    logits = torch.randn(B, k + 1, V, generator=g)
    drafts = torch.randint(0, V, (B, k), generator=g)
    lengths = torch.randint(0, k + 1, (B,), generator=g)
    fast = greedy_accept(DraftTree.chain(torch.zeros(B, dtype=torch.long), drafts, lengths=lengths), logits)
    general_tree = DraftTree.chain(torch.zeros(B, dtype=torch.long), drafts, lengths=lengths)
    general_tree._cache.clear()
    general_tree._cache["chain"] = False
    general = greedy_accept(general_tree, logits)
    assert torch.equal(fast.path_lengths, general.path_lengths)
    assert torch.equal(fast.bonus, general.bonus)
    assert len(set(fast.path_lengths.tolist())) > 3
    for b in range(B):
        n = int(fast.path_lengths[b])
        assert torch.equal(fast.paths[b, :n], general.paths[b, :n])


def _walked_ancestors(parents: torch.LongTensor) -> torch.BoolTensor:
    """The ancestor-or-self mask by walking each node's parents one by one (the definition)."""
    B, N = parents.shape
    out = torch.zeros(B, N, N, dtype=torch.bool)
    for b in range(B):
        for i in range(N):
            j = i
            while j >= 0:
                out[b, i, j] = True
                j = int(parents[b, j])
    return out


def test_ancestor_mask_of_chains_and_trees_is_the_walked_one():
    """Chains (a left-padded prompt of every padding width, a one-token prompt, chains restarting mid-row) take
    the direct construction, trees pointer doubling: both give the walked ancestor mask."""
    for T in (1, 2, 7):
        pads = torch.arange(T)  # row b has b padding slots on the left
        valid = torch.arange(T)[None, :] >= pads[:, None]
        parents = prefill_parents(valid.long())
        assert torch.equal(ancestor_mask(parents), _walked_ancestors(parents))
    restarts = torch.tensor([[-1, 0, 1, -1, 3, 4], [-1, -1, 1, 2, -1, 4]])
    tree = torch.tensor([[-1, 0, 0, 1, 1, 2], [-1, 0, 1, 1, 3, 0]])
    for parents in (restarts, tree):
        assert torch.equal(ancestor_mask(parents), _walked_ancestors(parents))


def test_kept_drops_nodes_and_maps_them_back():
    """A kept subtree (nodes 2 and 4 dropped, a non-prefix set) keeps its nodes' order, tokens, parents and q, and
    ``index`` maps each new node to its original; rows of different sizes pad with the root."""
    tokens = torch.tensor([[9, 1, 2, 3, 4, 5], [8, 6, 7, 6, 7, 8]])
    parents = torch.tensor([[-1, 0, 0, 1, 2, 1], [-1, 0, 0, 1, 1, 3]])
    q = torch.rand(2, 6, 10)
    tree = DraftTree(tokens, parents, q=q, sibling_rule="iid")
    keep = torch.tensor([[True, True, False, True, False, True], [True, True, True, True, True, True]])
    kept, index = tree.kept(keep)
    assert index.tolist() == [[0, 1, 3, 5, 0, 0], [0, 1, 2, 3, 4, 5]]
    assert kept.valid.tolist() == [[True] * 4 + [False] * 2, [True] * 6]
    assert kept.tokens.tolist() == [[9, 1, 3, 5, 9, 9], [8, 6, 7, 6, 7, 8]]
    assert kept.parents.tolist() == [[-1, 0, 1, 1, 0, 0], [-1, 0, 0, 1, 1, 3]]
    assert torch.equal(kept.q[0, :4], q[0, [0, 1, 3, 5]]) and torch.equal(kept.q[1], q[1])
    assert kept.sibling_rule == "iid"
    # the paths of the kept tree are the original's paths through kept nodes
    assert sorted(index[0].gather(0, torch.tensor(p)).tolist() for p in kept.paths(0)) == [[0, 1, 3], [0, 1, 5]]


def test_kept_prefix_keeps_node_indices():
    """Where every row keeps its first nodes (a chain cut short), the tree is its first columns and no index is
    needed; a chain stays a chain."""
    chain = DraftTree.chain(torch.tensor([5, 6]), torch.tensor([[1, 2, 3], [4, 5, 6]]))
    keep = torch.tensor([[True, True, False, False], [True, True, True, False]])
    kept, index = chain.kept(keep)
    assert index is None
    assert kept.tokens.tolist() == [[5, 1, 5], [6, 4, 5]] and kept.valid.tolist() == [[True, True, False], [True] * 3]
    assert kept.is_chain and kept.ancestor_mask.shape == (2, 3, 3)
    root_kept, _ = chain.kept(torch.zeros(2, 4, dtype=torch.bool))  # the root is always kept
    assert root_kept.tokens.tolist() == [[5], [6]]


def _random_rows(gen: torch.Generator, rows: int, vocab: int):
    """Random trees as lists (a chain now and then), rows of different sizes: padding in all but the longest."""
    tokens, parents = [], []
    for _ in range(rows):
        n = int(torch.randint(1, 18, (1,), generator=gen))
        if bool(torch.rand(1, generator=gen) < 0.3):
            par = [-1] + list(range(n - 1))
        else:
            par = [-1] + [int(torch.randint(0, i, (1,), generator=gen)) for i in range(1, n)]
        parents.append(par)
        tokens.append(torch.randint(0, vocab, (n,), generator=gen).tolist())
    return tokens, parents


@pytest.mark.parametrize("seed", range(6))
def test_trees_from_lists_carry_the_views_their_tensors_give(seed):
    """from_rows computes the ancestor mask, depth, max depth and chain flag from its lists: each must be what the
    tree's tensors give (padding nodes included, which hang off the root)."""
    gen = torch.Generator().manual_seed(seed)
    for _ in range(20):
        tokens, parents = _random_rows(gen, int(torch.randint(1, 5, (1,), generator=gen)), 50)
        tree = DraftTree.from_rows(tokens, parents)
        plain = DraftTree(tree.tokens, tree.parents, tree.valid)  # the same tensors, views computed from them
        assert torch.equal(tree.ancestor_mask, plain.ancestor_mask)
        assert torch.equal(tree.depth, plain.depth)
        assert tree.max_depth == plain.max_depth and tree.is_chain == plain.is_chain


@pytest.mark.parametrize("seed", range(6))
def test_greedy_walk_on_lists_equals_the_tensor_rule(seed):
    """A tree from lists is accepted by a Python walk over them on a CPU: the same path lengths, bonus tokens and
    paths (up to each length) as the tensor rule on the same tree, over a small vocabulary where long accepted
    paths and sibling ties are common."""
    from mmspec.verifiers.acceptance import greedy_accept

    gen = torch.Generator().manual_seed(100 + seed)
    lengths = set()
    for _ in range(30):
        tokens, parents = _random_rows(gen, int(torch.randint(1, 5, (1,), generator=gen)), 3)
        tree = DraftTree.from_rows(tokens, parents)
        if tree.is_root_only:
            continue
        logits = torch.randn(tree.batch_size, tree.num_nodes, 3, generator=gen)
        walked = greedy_accept(tree, logits)
        plain = greedy_accept(DraftTree(tree.tokens, tree.parents, tree.valid), logits)
        assert torch.equal(walked.path_lengths, plain.path_lengths)
        assert torch.equal(walked.bonus, plain.bonus)
        for b, n in enumerate(walked.path_lengths.tolist()):
            assert walked.paths[b, :n].tolist() == plain.paths[b, :n].tolist()
            lengths.add(n)
    assert len(lengths) > 3  # the walk went deep as well as shallow
