"""LANTERN / LANTERN++ relaxed acceptance, latent neighbourhoods and classifier-free guidance in the loop."""

import os

import pytest
import torch

from mmspec import SpeculativeGenerator, TreeTemplate
from mmspec.drafters import AutoregressiveDrafter
from mmspec.guidance import CFGModel
from mmspec.tiny import tiny_model
from mmspec.verifiers.relaxed import Relaxation, cached_neighbours, latent_neighbours

os.environ.setdefault("HF_HUB_OFFLINE", "1")
CODES, CLASSES = 24, 3
NULL = CODES + CLASSES
VOCAB = NULL + 1


def test_latent_neighbours_match_brute_force_when_chunked():
    g = torch.Generator().manual_seed(0)
    book = torch.randn(50, 6, generator=g)
    d = torch.cdist(book, book)
    d.fill_diagonal_(float("inf"))
    want = d.argsort(1)[:, :5]
    for chunk in (7, 64):
        assert torch.equal(latent_neighbours(book, 5, chunk=chunk), want)
    assert torch.equal(cached_neighbours(book, 5), want)
    with pytest.raises(ValueError, match="k must be"):
        latent_neighbours(book, 50)


def _relax(delta=None, lam=None, k=4):
    book = torch.randn(CODES, 4, generator=torch.Generator().manual_seed(1))
    return Relaxation.from_codebook(book, VOCAB, k, delta=delta, lam=lam)


def test_relaxation_moves_bounded_mass_towards_the_draft():
    g = torch.Generator().manual_seed(2)
    p = torch.softmax(torch.randn(200, VOCAB, generator=g) * 2, -1).double()
    p[:, CODES:] = 0
    p = p / p.sum(1, keepdim=True)
    x = torch.randint(0, CODES, (200,), generator=g)
    for delta in (0.0, 0.05, 0.3):
        r = _relax(delta=delta)
        pt, moved = r.apply(p, x)
        tv = 0.5 * (pt - p).abs().sum(1)
        assert torch.allclose(tv, moved, atol=1e-12) and (moved <= delta + 1e-12).all()
        assert torch.allclose(pt.sum(1), torch.ones(200, dtype=torch.float64))
        if delta == 0.0:
            assert torch.equal(pt, p)
        else:
            assert (moved > 0).any()
    for lam in (1.0, 2.0):
        pt, moved = _relax(lam=lam).apply(p, x)
        rows = torch.arange(200)
        assert (pt[rows, x] <= lam * p[rows, x] + 1e-12).all()
        if lam == 1.0:
            assert torch.equal(pt, p)


def test_relaxation_errors():
    book = torch.randn(CODES, 4)
    with pytest.raises(ValueError, match="delta must be >= 0"):
        Relaxation.from_codebook(book, VOCAB, 3, delta=-0.1)
    with pytest.raises(ValueError, match="lam must be >= 1"):
        Relaxation.from_codebook(book, VOCAB, 3, lam=0.5)
    with pytest.raises(ValueError, match="exactly one"):
        Relaxation.from_codebook(book, VOCAB, 3)
    with pytest.raises(ValueError, match="does not fit"):
        Relaxation.from_codebook(torch.randn(VOCAB, 4), VOCAB, 3, code_offset=1, delta=0.1)


def _models():
    target = tiny_model("llama", seed=0, vocab_size=VOCAB, hidden_size=32)
    draft = tiny_model("llama", seed=3, vocab_size=VOCAB, hidden_size=32, num_layers=1)
    return target, draft


@torch.no_grad()
def guided_greedy(model: CFGModel, cls: torch.LongTensor, n: int) -> torch.LongTensor:
    """Reference: re-run the whole sequence every step (no cache), cond and uncond rows explicitly."""
    seq = cls[:, None]
    for _ in range(n):
        unc = seq.clone()
        unc[:, 0] = NULL
        c = model.model(seq).logits[:, -1].float()
        u = model.model(unc).logits[:, -1].float()
        logits = (u + model.scale * (c - u)).masked_fill(~model.allowed, float("-inf"))
        seq = torch.cat([seq, logits.argmax(-1, keepdim=True)], 1)
    return seq


@pytest.mark.parametrize("tree", [None, TreeTemplate.full((2, 2, 1))])
@pytest.mark.parametrize("delta", [None, 0.0])
def test_cfg_speculative_greedy_is_exact(tree, delta):
    """CFG rows run stacked with one cache; with the lossless rule (or δ = 0) greedy output equals guided
    greedy decoding."""
    target, draft = _models()
    allowed = torch.arange(CODES)
    t, d = CFGModel(target, 3.0, NULL, allowed), CFGModel(draft, 3.0, NULL, allowed)
    relax = _relax(delta=delta) if delta is not None else None
    cls = torch.tensor([CODES, CODES + 2])
    drafter = AutoregressiveDrafter(d, num_tokens=3, tree=tree)
    out = SpeculativeGenerator(t, drafter, relaxation=relax).generate(cls[:, None], max_new_tokens=10,
                                                                      eos_token_id=[])
    assert torch.equal(out.sequences, guided_greedy(t, cls, 10))
    assert (out.sequences[:, 1:] < CODES).all()  # only codes are ever emitted
    if relax is not None:
        assert max(out.stats.moved_mass) == 0.0


def test_relaxed_greedy_accepts_more_and_reports_its_bound():
    target, draft = _models()
    allowed = torch.arange(CODES)
    t, d = CFGModel(target, 2.0, NULL, allowed), CFGModel(draft, 2.0, NULL, allowed)
    cls = torch.tensor([CODES, CODES + 1, CODES + 2, CODES])
    base = SpeculativeGenerator(t, AutoregressiveDrafter(d, num_tokens=4, adaptive=False)).generate(
        cls[:, None], max_new_tokens=24, eos_token_id=[])
    loose = SpeculativeGenerator(t, AutoregressiveDrafter(d, num_tokens=4, adaptive=False),
                                 relaxation=_relax(delta=0.5, k=8)).generate(cls[:, None], max_new_tokens=24,
                                                                            eos_token_id=[])
    assert loose.stats.mean_accepted_tokens > base.stats.mean_accepted_tokens
    assert 0.0 < max(loose.stats.moved_mass) <= 0.5


def test_relaxed_sampling_bound_never_exceeded():
    target, draft = _models()
    allowed = torch.arange(CODES)
    t, d = CFGModel(target, 2.0, NULL, allowed), CFGModel(draft, 2.0, NULL, allowed)
    cls = torch.tensor([CODES, CODES + 1] * 4)
    for relax, limit in ((_relax(delta=0.2, k=6), 0.2), (_relax(lam=3.0, k=6), 1.0)):
        out = SpeculativeGenerator(t, AutoregressiveDrafter(d, tree=TreeTemplate.full((2, 1, 1))),
                                   relaxation=relax).generate(cls[:, None], max_new_tokens=20, do_sample=True,
                                                              eos_token_id=[], generator=torch.Generator().manual_seed(0))
        assert out.stats.moved_mass and max(out.stats.moved_mass) <= limit
        assert (out.sequences[:, 1:] < CODES).all()



@pytest.mark.parametrize("do_sample", [True, False])
def test_loop_measures_the_output_tv(do_sample):
    """measure_output_tv: one exact figure per generating row and step, 0 under δ = 0, positive under a loose δ
    (greedy: 1 where the first token left the target's argmax), its time kept out of total_time."""
    target, draft = _models()
    allowed = torch.arange(CODES)
    t, d = CFGModel(target, 2.0, NULL, allowed), CFGModel(draft, 2.0, NULL, allowed)
    cls = torch.tensor([CODES, CODES + 1] * 2)
    figures = {}
    for delta in (0.0, 0.5):
        out = SpeculativeGenerator(t, AutoregressiveDrafter(d, tree=TreeTemplate.full((2, 1, 1))),
                                   relaxation=_relax(delta=delta, k=8), measure_output_tv=True).generate(
            cls[:, None], max_new_tokens=16, do_sample=do_sample, eos_token_id=[],
            generator=torch.Generator().manual_seed(0))
        st = out.stats
        assert len(st.output_tv) == st.row_forwards - len(cls) and st.output_tv_skipped == 0  # prefill: no draft
        assert all(0.0 <= v <= 1.0 + 1e-9 for v in st.output_tv) and st.output_tv_time >= 0.0
        figures[delta] = st.as_dict()
    assert figures[0.0]["max_output_tv"] < 1e-6
    assert figures[0.5]["max_output_tv"] > 0.0 and figures[0.5]["mean_output_tv"] <= figures[0.5]["max_output_tv"]


def test_output_tv_on_the_first_rows_only():
    """measure_output_tv=n measures the batch's first n rows, with the figures all rows would give them, and
    does not change what is generated."""
    target, draft = _models()
    allowed = torch.arange(CODES)
    t, d = CFGModel(target, 2.0, NULL, allowed), CFGModel(draft, 2.0, NULL, allowed)
    cls = torch.tensor([CODES, CODES + 1, CODES + 2, CODES])
    runs = []  # (True and 1 are one dict key)
    for measure in (True, 1):
        out = SpeculativeGenerator(t, AutoregressiveDrafter(d, tree=TreeTemplate.full((2, 1, 1))),
                                   relaxation=_relax(delta=0.5, k=8), measure_output_tv=measure).generate(
            cls[:, None], max_new_tokens=16, do_sample=True, eos_token_id=[],
            generator=torch.Generator().manual_seed(0))
        runs.append(out)
    every, first = runs[0].stats, runs[1].stats
    assert torch.equal(runs[0].sequences, runs[1].sequences)
    steps = every.target_forwards - 1  # the prefill drafts nothing
    assert len(every.output_tv) == steps * len(cls) and len(first.output_tv) == steps
    assert first.output_tv == pytest.approx(every.output_tv[:: len(cls)], abs=1e-12)  # row 0 of every step
    with pytest.raises(ValueError, match="measure_output_tv"):
        SpeculativeGenerator(t, AutoregressiveDrafter(d), measure_output_tv=-1)


def _feature_net(guided: CFGModel, sar: int = 1, seed: int = 7):
    from mmspec.drafters.feature_model import FeatureDrafterConfig, FeatureDraftModel

    torch.manual_seed(seed)
    cfg = FeatureDrafterConfig.for_target(guided, "eagle", sar_tokens=sar, guidance_scale=guided.scale)
    net = FeatureDraftModel(cfg)
    if sar > 1:  # the SAR head starts at zero (slots = slot 0); give it something to draft with
        torch.nn.init.normal_(net.sar[2].weight, std=0.3)
    return net.eval()


def test_guided_feature_maps_to_the_guided_logits():
    """CFGModel's last hidden state is h_u + s (h_c - h_u): the LM head turns it into the guided logits (what
    an image feature drafter learns to predict)."""
    target, _ = _models()
    t = CFGModel(target, 3.0, NULL, torch.arange(CODES))
    ids = torch.tensor([[CODES, 1, 2, 3], [CODES + 1, 4, 5, 6]])
    with torch.no_grad():
        out = t(input_ids=ids, attention_mask=torch.ones_like(ids), output_hidden_states=True)
        via_head = target.lm_head(out.hidden_states[-1]).float().masked_fill(~t.allowed, float("-inf"))
    assert out.hidden_states[-1].shape == (2, 4, 32)
    finite = torch.isfinite(out.logits)
    assert torch.equal(finite, torch.isfinite(via_head)) and finite[..., :CODES].all()
    torch.testing.assert_close(via_head[finite], out.logits[finite], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("tree,sar", [("chain", 1), ("static", 1), ("dynamic", 1), ("chain", 3), ("lattice", 3)])
def test_image_feature_drafter_is_exact_under_cfg(tree, sar):
    """A feature drafter reading the guided target's features drafts only codes, and greedy output equals
    guided greedy decoding (chain, static tree, dynamic tree; semi-autoregressive chain and lattice)."""
    from mmspec.drafters.feature import FeatureDrafter

    target, _ = _models()
    t = CFGModel(target, 3.0, NULL, torch.arange(CODES))
    net = _feature_net(t, sar)
    if tree == "chain":
        drafter = FeatureDrafter(net, t, num_tokens=sar if sar > 1 else 3)
    elif tree == "static":
        drafter = FeatureDrafter(net, t, tree=TreeTemplate.full((2, 2, 1)))
    elif tree == "lattice":
        drafter = FeatureDrafter(net, t, tree=TreeTemplate.full((2, 2, 1)))
    else:
        drafter = FeatureDrafter(net, t, num_tokens=3, tree="dynamic", top_k=3, num_nodes=8)
    cls = torch.tensor([CODES, CODES + 2])
    seen = []
    inner = drafter.propose

    def spy(*a, **kw):
        tree_ = inner(*a, **kw)
        seen.append(tree_.tokens[:, 1:])
        return tree_

    drafter.propose = spy
    out = SpeculativeGenerator(t, drafter).generate(cls[:, None], max_new_tokens=10, eos_token_id=[])
    assert torch.equal(out.sequences, guided_greedy(t, cls, 10))
    assert seen and all((d < CODES).all() for d in seen)  # drafts are codes only, like the target's output


def _dflash_net(guided: CFGModel, seed: int = 7, block: int = 5, layers=(0, 1)):
    """A random DFlash block drafter for the guided tiny target (weights at std 0.2: sharp slot distributions)."""
    from mmspec.drafters.dflash_model import DFlashDraftModel, make_config

    torch.manual_seed(seed)
    net = DFlashDraftModel(make_config(guided.config, num_layers=1, block_size=block, mask_token_id=guided.null_token_id,
                                       target_layer_ids=list(layers)))
    with torch.no_grad():
        for p in net.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.2)
    return net.eval()


@pytest.mark.parametrize("branches", [1, 2])
def test_feature_entries_on_both_paths(branches):
    """With ``feature_entries`` CFGModel returns h_u + s (h_c − h_u) of each named layer (with ``feature_branches=2``
    [h_c, h_u] side by side; the last entry stays guided either way: the LM head maps it to the guided logits), the
    same through the stock forward (training features) and its direct module calls on our cache (decoding)."""
    from mmspec.cache import SpecKVCache
    from mmspec.verifiers.tree_forward import chain_parents, tree_forward

    target, _ = _models()
    named = [1, 2] if branches == 1 else [1]  # (2 is this two-layer target's last entry)
    t = CFGModel(target, 3.0, NULL, torch.arange(CODES), feature_entries=named, feature_branches=branches)
    ids = torch.tensor([[CODES, 1, 2, 3], [CODES + 1, 4, 5, 6]])
    unc = ids.clone()
    unc[:, 0] = NULL
    with torch.no_grad():
        stock = t(input_ids=ids, output_hidden_states=True).hidden_states
        c = target(ids, output_hidden_states=True).hidden_states
        u = target(unc, output_hidden_states=True).hidden_states
        cache = SpecKVCache.for_model(t, 2, 16)
        valid = torch.ones_like(ids, dtype=torch.bool)
        direct = tree_forward(t, cache, ids, chain_parents(valid), valid, output_hidden_states=True).hidden_states
    last = len(c) - 1
    for i in (*named, last):
        want = torch.cat([c[i], u[i]], dim=-1) if branches == 2 and i != last else u[i] + 3.0 * (c[i] - u[i])
        torch.testing.assert_close(stock[i], want, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(direct[i], want, rtol=1e-4, atol=1e-4)
    assert stock[0] is None and direct[0] is None  # entries not named are left out


def test_branch_features_are_refused_where_they_cannot_apply():
    target, _ = _models()
    with pytest.raises(ValueError, match="feature_branches must be 1"):
        CFGModel(target, 3.0, NULL, feature_entries=[1], feature_branches=3)
    with pytest.raises(ValueError, match="name them"):
        CFGModel(target, 3.0, NULL, feature_branches=2)
    with pytest.raises(ValueError, match="cannot name the last"):
        CFGModel(target, 3.0, NULL, feature_entries=[1, 2], feature_branches=2)


def _branch_net(guided: CFGModel, seed: int = 7, block: int = 5):
    """A random two-branch DFlash drafter: :func:`with_branch_features` of a random one, its ``fc`` then moved off
    the guided combination (so the branches are read apart)."""
    from mmspec.drafters.dflash_model import with_branch_features

    net = with_branch_features(_dflash_net(guided, seed, block, layers=(0,)), guided.scale)
    with torch.no_grad():
        net.fc.weight.add_(torch.randn(net.fc.weight.shape, generator=torch.Generator().manual_seed(seed)) * 0.2)
    return net


def test_branch_drafter_starts_as_the_guided_one_and_is_refused_by_the_wrong_target():
    """``with_branch_features`` drafts exactly the slots the guided-feature drafter drafts (its fc is the guided
    combination, split), and a drafter is refused by a target that returns the other kind of features."""
    from mmspec.drafters.dflash import DFlashDrafter
    from mmspec.drafters.dflash_model import teacher_forced_logits, with_branch_features

    target, _ = _models()
    net = _dflash_net(CFGModel(target, 3.0, NULL, torch.arange(CODES)), layers=(0,))
    wide = with_branch_features(net, 3.0)
    entries = [i + 1 for i in net.target_layer_ids]
    guided = CFGModel(target, 3.0, NULL, torch.arange(CODES), feature_entries=entries)
    both = CFGModel(target, 3.0, NULL, torch.arange(CODES), feature_entries=entries, feature_branches=2)
    ids = torch.tensor([[CODES, 1, 2, 3, 4, 5, 6], [CODES + 1, 4, 5, 6, 7, 8, 9]])
    anchors = torch.tensor([[0, 2], [1, 3]])
    with torch.no_grad():
        f1 = net.select_features(guided(input_ids=ids, output_hidden_states=True).hidden_states)
        f2 = wide.select_features(both(input_ids=ids, output_hidden_states=True).hidden_states)
        embed, head = target.get_input_embeddings(), target.get_output_embeddings()
        want = teacher_forced_logits(net, embed, head, ids, f1, anchors)
        got = teacher_forced_logits(wide, embed, head, ids, f2, anchors)
    assert f2.shape[-1] == 2 * f1.shape[-1] and wide.feature_branches == 2
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="reads 2 feature"):
        DFlashDrafter(wide, guided)
    with pytest.raises(ValueError, match="reads 1 feature"):
        DFlashDrafter(net, both)
    with pytest.raises(ValueError, match="already"):
        with_branch_features(wide, 3.0)


@pytest.mark.parametrize("kw", [dict(num_tokens=4), dict(tree_nodes=6, top_k=3), dict(num_tokens=4, branches=2)])
def test_image_dflash_drafter_is_exact_under_cfg(kw):
    """The DFlash block drafter on the guided target's layers drafts codes only, and greedy output equals guided
    greedy decoding (chain and DDTree; and a drafter reading both CFG branches' features)."""
    from mmspec.drafters.dflash import DFlashDrafter

    target, _ = _models()
    kw = dict(kw)
    branches = kw.pop("branches", 1)
    make = _branch_net if branches == 2 else _dflash_net
    net = make(CFGModel(target, 3.0, NULL, torch.arange(CODES)))
    t = CFGModel(target, 3.0, NULL, torch.arange(CODES), feature_entries=[i + 1 for i in net.target_layer_ids],
                 feature_branches=branches)
    drafter = DFlashDrafter(net, t, **kw)
    seen = []
    inner = drafter.propose

    def spy(*a, **k):
        tree_ = inner(*a, **k)
        seen.append(tree_.tokens[:, 1:][tree_.valid[:, 1:]])
        return tree_

    drafter.propose = spy
    cls = torch.tensor([CODES, CODES + 2])
    out = SpeculativeGenerator(t, drafter).generate(cls[:, None], max_new_tokens=12, eos_token_id=[])
    assert torch.equal(out.sequences, guided_greedy(t, cls, 12))
    assert seen and all((d < CODES).all() for d in seen)  # no class or null id is ever drafted


def test_cfg_needs_a_null_condition():
    target, _ = _models()
    with pytest.raises(ValueError, match="null"):
        CFGModel(target, 3.0, None)
    CFGModel(target, 1.0, None)  # no guidance: no null token needed


@pytest.mark.slow
def test_zoo_image_cli_and_suite(tmp_path):
    """`mmspec image` writes a grid and stats with the bound it enforced; the image suite's report is
    consistent (plain AR τ = 1, LANTERN's moved mass within δ, quality figures finite)."""
    import json
    import math

    from mmspec.cli import main
    from mmspec.eval.image_suite import run_image_suite

    out = tmp_path / "img"
    assert main(["image", "--method", "lantern", "--delta", "0.1", "--tree", "chain", "--classes", "0,3",
                 "--out", str(out)]) == 0
    stats = json.loads((out / "stats.json").read_text())
    assert (out / "grid.png").exists() and stats["images"] == 2
    assert 0.0 <= stats["max_moved_mass"] <= 0.1 and stats["tau"] >= 1.0
    report = run_image_suite(per_class=1, sweep=False, latency_images=2, out_dir=tmp_path / "bench", progress=False)
    rows = {r["name"]: r for r in report["results"]}
    assert rows["plain AR"]["tau"] == 1.0 and rows["plain AR"]["speedup_vs_ar"] == 1.0
    assert rows["LANTERN δ=0.1 chain"]["max_moved_mass"] <= 0.1
    for r in report["results"]:
        assert math.isfinite(r["fd_vs_reference"]) and 0.0 <= r["precision"] <= 1.0 and r["tau"] >= 1.0
    for name in ("image_bench.json", "image_bench.md", "speed_quality.png", "samples_ar.png"):
        assert (tmp_path / "bench" / name).exists()


CFG_SAMPLING_CASES = ["chain", "tree", "tree-delta0", "feature-tree", "sar-lattice", "dflash-chain", "dflash-ddtree",
                      "dflash-branches"]


@pytest.mark.parametrize("case", CFG_SAMPLING_CASES)
def test_cfg_sampling_is_lossless(case):
    """Under sampling, speculative decoding through CFGModel (and LANTERN with δ = 0) draws two codes from
    exactly the guided target's joint (chi-square, α = 1e-4; cells with expected count < 5 left out)."""
    from scipy import stats

    C, K = 6, 2
    null = C + K
    V = null + 1
    t = tiny_model("llama", seed=0, vocab_size=V, hidden_size=32)
    d = tiny_model("llama", seed=5, vocab_size=V, hidden_size=32, num_layers=1)
    with torch.no_grad():
        t.lm_head.weight.mul_(4)
        d.lm_head.weight.mul_(4)
    allowed = torch.arange(C)
    T, D = CFGModel(t, 2.0, null, allowed), CFGModel(d, 2.0, null, allowed)

    @torch.no_grad()
    def guided_probs(seq):
        unc = seq.clone()
        unc[:, 0] = null
        c, u = t(seq).logits[:, -1].float(), t(unc).logits[:, -1].float()
        return torch.softmax((u + 2.0 * (c - u)).masked_fill(~T.allowed, float("-inf")), -1).double()

    cls = C
    p1 = guided_probs(torch.tensor([[cls]]))[0]
    joint = torch.stack([p1[a] * guided_probs(torch.tensor([[cls, a]]))[0] for a in range(V)])
    drafter = AutoregressiveDrafter(D, num_tokens=2, adaptive=False) if case == "chain" else \
        AutoregressiveDrafter(D, tree=TreeTemplate.full((2, 1)))
    if case == "feature-tree":  # a feature drafter on the guided target's features
        from mmspec.drafters.feature import FeatureDrafter

        drafter = FeatureDrafter(_feature_net(T, seed=11), T, tree=TreeTemplate.full((2, 1)))
    if case == "sar-lattice":  # two slots from one forward; children drawn from their slot without replacement
        from mmspec.drafters.feature import FeatureDrafter

        drafter = FeatureDrafter(_feature_net(T, sar=2, seed=11), T, tree=TreeTemplate.full((2, 1)))
    if case.startswith("dflash"):  # each slot drawn from its own q; DDTree's children without replacement
        from mmspec.drafters.dflash import DFlashDrafter

        net = (_branch_net if case == "dflash-branches" else _dflash_net)(T, seed=11, block=3)
        T = CFGModel(t, 2.0, null, allowed, feature_entries=[i + 1 for i in net.target_layer_ids],
                     feature_branches=net.feature_branches)
        drafter = DFlashDrafter(net, T, **(dict(tree_nodes=4, top_k=2) if case == "dflash-ddtree" else {}))
    relax = None
    if case == "tree-delta0":
        relax = Relaxation.from_codebook(torch.randn(C, 3, generator=torch.Generator().manual_seed(0)), V, 3, delta=0.0)
    n = 6000
    out = SpeculativeGenerator(T, drafter, relaxation=relax).generate(
        torch.full((n, 1), cls), max_new_tokens=2, do_sample=True, eos_token_id=[],
        generator=torch.Generator().manual_seed(1 + CFG_SAMPLING_CASES.index(case)))
    new = out.sequences[:, 1:]
    counts = torch.bincount(new[:, 0] * V + new[:, 1], minlength=V * V).double()
    exp = joint.flatten() * n
    assert counts[exp == 0].sum() == 0
    keep = exp >= 5
    scaled = exp[keep] * counts[keep].sum() / exp[keep].sum()
    assert stats.chisquare(counts[keep].numpy(), scaled.numpy()).pvalue > 1e-4


@pytest.mark.parametrize("layout", ["zlab", "speculators"])
def test_branch_drafter_round_trips_through_both_layouts(layout, tmp_path):
    """A two-branch drafter keeps ``feature_branches`` (and its wider fc) through either directory layout."""
    from mmspec.drafters.dflash_io import load_dflash, save_dflash

    target, _ = _models()
    net = _branch_net(CFGModel(target, 3.0, NULL, torch.arange(CODES)))
    back = load_dflash(save_dflash(net, tmp_path / layout, layout=layout))
    assert back.feature_branches == 2
    for (k, a), (_, b) in zip(net.state_dict().items(), back.state_dict().items()):
        assert torch.equal(a, b), k
