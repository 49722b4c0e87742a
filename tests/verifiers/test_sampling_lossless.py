"""Statistical tests that speculative *sampling* is lossless: the emitted tokens follow the target's
(warped) distribution exactly, whatever the drafter proposes.

Every statistical check is a Pearson chi-square goodness-of-fit test (``scipy.stats.chisquare``) of
observed counts against *exact* probabilities, at significance level ``ALPHA = 1e-4`` per check:
a correct implementation fails a given check for at most a 1e-4 fraction of random seeds (asymptotic
chi-square level). Cells with expected count < 5 are pooled (the pooling depends only on the expected
counts, never on the observations), and an observation in a cell of probability exactly 0 fails
outright (that check cannot fail a correct implementation). Seeds are fixed, so a run is
reproducible; the ``N_CHECKS`` = 56 checks of the default run that a correct implementation could
fail give a family-wise false-failure rate of at most ``N_CHECKS * ALPHA`` (about 6e-3) over seeds.
(Calibration was checked offline: over 25 seeds the p-values of the end-to-end checks are uniform,
Kolmogorov-Smirnov p > 0.1 overall.)

The negative controls run a deliberately wrong acceptance rule through the same machinery at the same
sample sizes and require rejection, showing the checks have power (observed p-values 1e-104 and below).

The regression tests at the end reproduce two library bugs found while writing this file (a child the
proposal gives probability 0 was always accepted; a row's last step committed past its budget and
overflowed the shared cache); both are fixed.

Sample sizes: unit tests use ``B_UNIT`` identical rows in one vectorised ``sampling_accept`` call; the
end-to-end tests use ``B_E2E`` identical prompts in one ``generate`` call (rows are independent).
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from scipy import stats  # noqa: E402

from mmspec import SpeculativeGenerator, TreeTemplate  # noqa: E402
from mmspec.drafters import AutoregressiveDrafter, DEERDrafter, DiffusionLM, PromptLookupDrafter  # noqa: E402
from mmspec.drafters.diffuspec import ADLConfig, CPSConfig, DiffuSpecDrafter  # noqa: E402
from mmspec.tiny import tiny_model  # noqa: E402
from mmspec.tree import DraftTree  # noqa: E402
from mmspec.verifiers import tree_verifier  # noqa: E402
from mmspec.verifiers.acceptance import AcceptResult, sampling_accept  # noqa: E402
from mmspec.verifiers.logits import SamplingConfig  # noqa: E402

ALPHA = 1e-4  # per-check false-failure rate of a correct implementation
MIN_EXPECTED = 5.0  # cells with a smaller expected count are pooled
N_CHECKS = 56  # null-hypothesis checks in the default run, for the family-wise rate above

B_UNIT = 20_000
B_E2E = 4_000
V = 6  # unit-test vocabulary


# ---------------------------------------------------------------------------------------- chi-square
def _pooled(obs: np.ndarray, exp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop structural zeros (asserting nothing was observed there) and pool cells with expected < 5."""
    obs = np.asarray(obs, dtype=np.float64).ravel()
    exp = np.asarray(exp, dtype=np.float64).ravel()
    impossible = exp == 0
    assert obs[impossible].sum() == 0, (
        f"observed {int(obs[impossible].sum())} outcome(s) of probability 0 "
        f"(cells {np.flatnonzero(impossible & (obs > 0)).tolist()})")
    obs, exp = obs[~impossible], exp[~impossible]
    small = exp < MIN_EXPECTED
    if not small.any():
        return obs, exp
    big_obs, big_exp = obs[~small], exp[~small]
    pool_obs, pool_exp = obs[small].sum(), exp[small].sum()
    if pool_exp >= MIN_EXPECTED or big_exp.size == 0:
        return np.append(big_obs, pool_obs), np.append(big_exp, pool_exp)
    j = int(np.argmin(big_exp))  # pool too small on its own: fold it into the smallest big cell
    big_obs[j] += pool_obs
    big_exp[j] += pool_exp
    return big_obs, big_exp


def chisq_pvalue(counts, probs) -> float:
    """Goodness of fit of ``counts`` (any shape) to the exact distribution ``probs`` (same shape)."""
    counts = np.asarray(counts, dtype=np.float64).ravel()
    probs = np.asarray(probs, dtype=np.float64).ravel()
    probs = probs / probs.sum()
    obs, exp = _pooled(counts, counts.sum() * probs)
    if obs.size < 2:
        return 1.0
    return float(stats.chisquare(obs, exp).pvalue)


def chisq_conditional_pvalue(cond: torch.Tensor, outcome: torch.Tensor, table: torch.Tensor) -> float:
    """Test that ``outcome | cond == c`` follows ``table[c]`` for every group ``c``.

    ``cond`` [n] group ids, ``outcome`` [n] tokens, ``table`` [G, V] exact conditional distributions.
    Given the group sizes the groups are independent multinomials, so the concatenated Pearson
    statistic is chi-square with sum_g (k_g - 1) degrees of freedom (``ddof`` = groups - 1).
    """
    G, Vt = table.shape
    counts = torch.bincount(cond * Vt + outcome, minlength=G * Vt).view(G, Vt).double().numpy()
    tab = table.double().numpy()
    obs_all, exp_all, groups = [], [], 0
    for g in range(G):
        n = counts[g].sum()
        if n == 0:
            continue
        o, e = _pooled(counts[g], n * tab[g] / tab[g].sum())
        obs_all.append(o)
        exp_all.append(e)
        groups += 1
    obs, exp = np.concatenate(obs_all), np.concatenate(exp_all)
    if obs.size - groups < 1:
        return 1.0
    return float(stats.chisquare(obs, exp, ddof=groups - 1).pvalue)


# ---------------------------------------------------------------------------------- unit fixtures
# Target p has a zero (token 3); the drafter q is deliberately bad: it loves token 3 and token 1.
P = torch.tensor([0.30, 0.05, 0.25, 0.00, 0.15, 0.25], dtype=torch.float64)
Q = torch.tensor([0.02, 0.50, 0.03, 0.30, 0.10, 0.05], dtype=torch.float64)


def _random_dist(gen: torch.Generator, *shape: int, zeros: bool = True) -> torch.Tensor:
    """Peaky random distributions over V tokens (some exact zeros when ``zeros``)."""
    logits = 2.0 * torch.randn(*shape, V, generator=gen, dtype=torch.float64)
    if zeros:
        drop = torch.rand(*shape, V, generator=gen, dtype=torch.float64) < 0.2
        drop &= logits < logits.max(-1, keepdim=True).values  # keep the mode
        logits = logits.masked_fill(drop, float("-inf"))
    return torch.softmax(logits, -1)


def _sample(probs: torch.Tensor, k: int, gen: torch.Generator, replacement: bool = True) -> torch.LongTensor:
    """k draws per row of probs [..., V] -> [..., k] (sequential without replacement if asked)."""
    flat = probs.reshape(-1, probs.shape[-1]).float()
    return torch.multinomial(flat, k, replacement=replacement, generator=gen).view(*probs.shape[:-1], k)


def _one_level_tree(children: torch.LongTensor, q: torch.Tensor | None, rule: str) -> DraftTree:
    """root -> k children. children [B, k]; q [V] (shared proposal) or None (deterministic)."""
    B, k = children.shape
    tokens = torch.cat([torch.zeros(B, 1, dtype=torch.long), children], 1)
    parents = torch.tensor([-1] + [0] * k).expand(B, k + 1).clone()
    full_q = None if q is None else q.float().expand(B, k + 1, V).clone()
    return DraftTree(tokens, parents, q=full_q, sibling_rule=rule)


def _first_token_counts(result: AcceptResult, tree: DraftTree) -> np.ndarray:
    emitted, _ = result.emitted_tokens(tree)
    return torch.bincount(emitted[:, 0], minlength=V).numpy()


def _wrong_chain_accept(tree: DraftTree, target_probs: torch.Tensor,
                        generator: torch.Generator | None = None) -> AcceptResult:
    """BROKEN ON PURPOSE (negative control), chains only: accept draft x with min(1, p(x)/q(x)) but on
    rejection draw the bonus from p itself instead of the residual norm(max(p - q, 0))."""
    B, N, Vt = target_probs.shape
    rows = torch.arange(B)
    p = target_probs.double()
    alive = torch.ones(B, dtype=torch.bool)
    n_acc = torch.zeros(B, dtype=torch.long)
    for level in range(1, N):
        x = tree.tokens[:, level]
        ratio = p[rows, level - 1, x] / tree.q[rows, level, x].double().clamp_min(1e-300)
        u = torch.rand(B, generator=generator, dtype=torch.float64)
        alive = alive & tree.valid[:, level] & (u < ratio.clamp(max=1.0))
        n_acc += alive.long()
    bonus = torch.multinomial(p[rows, n_acc].float(), 1, generator=generator).squeeze(1)
    j = torch.arange(N)[None, :]
    paths = torch.where(j <= n_acc[:, None], j, 0)
    return AcceptResult(paths, n_acc + 1, bonus)


# ------------------------------------------------------------------------------------ unit tests
def test_chain_bad_drafter_first_token():
    """(a) chain root -> d1 -> d2 with d ~ q (bad drafter): the first emitted token ~ p."""
    g = torch.Generator().manual_seed(101)
    drafts = _sample(Q.expand(B_UNIT, 2, V), 1, g).squeeze(-1)  # [B, 2]
    tree = DraftTree.chain(torch.zeros(B_UNIT, dtype=torch.long), drafts, q=Q.float().expand(B_UNIT, 2, V))
    target = P.float().expand(B_UNIT, 3, V)
    result = sampling_accept(tree, target, g)
    assert chisq_pvalue(_first_token_counts(result, tree), P) > ALPHA


def test_negative_control_wrong_residual_is_rejected():
    """Power check: the same chain and sample size with the bonus drawn from p instead of the residual
    must be rejected (noncentrality n * sum (p_wrong - p)^2 / p ~ 1400, power ~ 1)."""
    g = torch.Generator().manual_seed(101)
    drafts = _sample(Q.expand(B_UNIT, 2, V), 1, g).squeeze(-1)
    tree = DraftTree.chain(torch.zeros(B_UNIT, dtype=torch.long), drafts, q=Q.float().expand(B_UNIT, 2, V))
    target = P.float().expand(B_UNIT, 3, V)
    counts = _first_token_counts(_wrong_chain_accept(tree, target, g), tree)
    wrong = torch.minimum(P, Q) + (1 - torch.minimum(P, Q).sum()) * P  # what the broken rule emits
    assert chisq_pvalue(counts, wrong) > ALPHA  # the machinery recognises the broken distribution...
    assert chisq_pvalue(counts, P) < ALPHA  # ...and rejects it as the target


@pytest.mark.parametrize("rule", ["iid", "without_replacement"])
def test_one_level_tree_three_children(rule):
    """(b) 3 children drawn iid from q / (c) drawn without replacement from q (sequential draws):
    the first emitted token (accepted child, or bonus) ~ p."""
    g = torch.Generator().manual_seed(202 if rule == "iid" else 303)
    children = _sample(Q.expand(B_UNIT, V), 3, g, replacement=rule == "iid")
    tree = _one_level_tree(children, Q, rule)
    target = torch.cat([P.float().expand(B_UNIT, 1, V), _random_dist(g, B_UNIT, 3).float()], 1)
    result = sampling_accept(tree, target, g)
    assert chisq_pvalue(_first_token_counts(result, tree), P) > ALPHA


def test_negative_control_without_replacement_needs_its_rule():
    """Power check: children drawn without replacement but verified with the iid rule are rejected."""
    g = torch.Generator().manual_seed(303)
    children = _sample(Q.expand(B_UNIT, V), 3, g, replacement=False)
    tree = _one_level_tree(children, Q, "iid")
    target = P.float().expand(B_UNIT, 4, V)
    assert chisq_pvalue(_first_token_counts(sampling_accept(tree, target, g), tree), P) < ALPHA


@pytest.mark.parametrize("children", ["fixed", "random"])
def test_one_level_tree_deterministic_children(children):
    """(d) point-mass proposals (q=None): children [3 (p=0), 0, 4, 0 (duplicate)], or per-row
    uniformly random children chosen independently of the verifier: the first emitted token ~ p."""
    g = torch.Generator().manual_seed(404)
    if children == "fixed":
        kids = torch.tensor([3, 0, 4, 0]).expand(B_UNIT, 4)
    else:
        kids = torch.randint(0, V, (B_UNIT, 4), generator=g)
    tree = _one_level_tree(kids, None, "deterministic")
    target = P.float().expand(B_UNIT, 5, V)
    result = sampling_accept(tree, target, g)
    counts = _first_token_counts(result, tree)
    assert counts[3] == 0  # p(3) = 0 is never emitted, even though it is the first child tried
    assert chisq_pvalue(counts, P) > ALPHA


def test_chain_node_dependent_targets():
    """(e) chain root -> d1 -> d2 where the target distribution depends on the node: the target at
    node 1 is P2[d1], at node 2 P3[d1, d2]; the drafter draws d1 ~ Q1, d2 ~ Q2[d1].

    Exact facts checked: x1 ~ P1; given that the step accepted d1 (so x1 = d1 = a), x2 ~ P2[a];
    given it accepted d1, d2 (= a, b), the bonus x3 ~ P3[a, b]. And the joint of the first two tokens,
    completing a step that ended after x1 with a fresh draw x2 ~ P2[x1] (what any correct next step
    produces), is exactly P1(x1) P2[x1](x2).
    """
    g = torch.Generator().manual_seed(505)
    P1, P2, P3 = _random_dist(g), _random_dist(g, V), _random_dist(g, V, V)
    Q1, Q2 = _random_dist(g, zeros=False), _random_dist(g, V, zeros=False)
    d1 = _sample(Q1.expand(B_UNIT, V), 1, g).squeeze(-1)
    d2 = _sample(Q2[d1], 1, g).squeeze(-1)
    tree = DraftTree.chain(torch.zeros(B_UNIT, dtype=torch.long), torch.stack([d1, d2], 1),
                           q=torch.stack([Q1.expand(B_UNIT, V), Q2[d1]], 1).float())
    target = torch.stack([P1.expand(B_UNIT, V), P2[d1], P3[d1, d2]], 1).float()
    result = sampling_accept(tree, target, g)
    emitted, length = result.emitted_tokens(tree)
    x1, x2, x3 = emitted[:, 0], emitted[:, 1], emitted[:, 2]

    assert chisq_pvalue(torch.bincount(x1, minlength=V).numpy(), P1) > ALPHA
    reached1, reached2 = length >= 2, length >= 3
    assert reached1.sum() > 1000 and reached2.sum() > 500  # the deep branches are really exercised
    assert chisq_conditional_pvalue(x1[reached1], x2[reached1], P2) > ALPHA
    assert chisq_conditional_pvalue((x1 * V + x2)[reached2], x3[reached2], P3.reshape(V * V, V)) > ALPHA
    fresh = _sample(P2[x1], 1, g).squeeze(-1)
    x2_full = torch.where(reached1, x2, fresh)
    joint = torch.bincount(x1 * V + x2_full, minlength=V * V).numpy()
    assert chisq_pvalue(joint, P1[:, None] * P2) > ALPHA


@pytest.mark.parametrize("rule", ["iid", "without_replacement"])
def test_two_level_tree_node_dependent_targets(rule):
    """Tree shaped TreeTemplate.full((3, 2)): 3 children of the root drawn from Q1, 2 children of each
    drawn from Q2[parent token] (iid or without replacement); the target at a node is P2[token] at
    depth 1 and P3[token path] at depth 2. Checks the exact joint of the first two emitted tokens
    (completed with a fresh x2 ~ P2[x1] when the step ended after x1) and the bonus after depth 2."""
    g = torch.Generator().manual_seed(606 if rule == "iid" else 707)
    P1, P2, P3 = _random_dist(g), _random_dist(g, V), _random_dist(g, V, V)
    Q1, Q2 = _random_dist(g, zeros=False), _random_dist(g, V, zeros=False)
    B, iid = B_UNIT, rule == "iid"
    level1 = _sample(Q1.expand(B, V), 3, g, replacement=iid)  # [B, 3]
    level2 = _sample(Q2[level1], 2, g, replacement=iid).view(B, 6)  # [B, 6]: children of nodes 1, 1, 2, 2, 3, 3
    par_tok = level1.repeat_interleave(2, dim=1)
    tokens = torch.cat([torch.zeros(B, 1, dtype=torch.long), level1, level2], 1)
    parents = torch.tensor(TreeTemplate.full((3, 2)).parents).expand(B, 10).clone()
    assert parents[0].tolist() == [-1, 0, 0, 0, 1, 1, 2, 2, 3, 3]
    q = torch.cat([torch.zeros(B, 1, V, dtype=torch.float64), Q1.expand(B, 3, V), Q2[par_tok]], 1).float()
    tree = DraftTree(tokens, parents, q=q, sibling_rule=rule)
    target = torch.cat([P1.expand(B, 1, V), P2[level1], P3[par_tok, level2]], 1).float()
    result = sampling_accept(tree, target, g)
    emitted, length = result.emitted_tokens(tree)
    x1, x2, x3 = emitted[:, 0], emitted[:, 1], emitted[:, 2]

    reached1, reached2 = length >= 2, length >= 3
    assert reached1.sum() > 1000 and reached2.sum() > 500
    x2_full = torch.where(reached1, x2, _sample(P2[x1], 1, g).squeeze(-1))
    joint = torch.bincount(x1 * V + x2_full, minlength=V * V).numpy()
    assert chisq_pvalue(joint, P1[:, None] * P2) > ALPHA
    assert chisq_conditional_pvalue((x1 * V + x2)[reached2], x3[reached2], P3.reshape(V * V, V)) > ALPHA


# ------------------------------------------------------------------------------ end to end (generate)
VOCAB = 8
PROMPT = torch.tensor([3, 4, 5, 3, 4])  # repeats, so prompt lookup finds n-gram matches
NEW = 3  # generated tokens; the test checks their exact joint over VOCAB**3 cells


def _models():
    """Tiny llama target and an unrelated (seed 7) drafter; lm_heads scaled x10 so both are peaky and
    the drafter is bad (total variation to the target ~0.4-0.5 per position)."""
    target = tiny_model("llama", seed=0, vocab_size=VOCAB, hidden_size=32)
    draft = tiny_model("llama", seed=7, vocab_size=VOCAB, hidden_size=32)
    with torch.no_grad():
        target.lm_head.weight.mul_(10.0)
        draft.lm_head.weight.mul_(10.0)
    return target, draft


@torch.no_grad()
def exact_joint(target, prompt: torch.LongTensor, cfg: SamplingConfig, n: int = NEW) -> torch.Tensor:
    """Exact target distribution of the next ``n`` tokens, [VOCAB] * n, by enumerating every prefix."""
    seqs = prompt[None]
    joint = torch.ones(1, dtype=torch.float64)
    for _ in range(n):
        p = cfg.probs(target(seqs).logits[:, -1]).double()  # [M, VOCAB]
        joint = (joint[:, None] * p).reshape(-1)
        M = seqs.shape[0]
        seqs = torch.cat([seqs.repeat_interleave(VOCAB, 0), torch.arange(VOCAB).repeat(M)[:, None]], 1)
    return joint.view([VOCAB] * n)


def _generate(target, drafter, warp, seed, ids=None, mask=None, max_new_tokens=NEW, max_cache_len=None):
    """Generated tokens [B, max_new_tokens] of one sampling ``generate`` call (EOS disabled)."""
    ids = PROMPT.expand(B_E2E, PROMPT.numel()) if ids is None else ids
    out = SpeculativeGenerator(target, drafter, max_cache_len=max_cache_len).generate(
        ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=True, eos_token_id=[],
        generator=torch.Generator().manual_seed(seed), **warp)
    new = out.sequences[:, ids.shape[1]:]
    assert new.shape == (ids.shape[0], max_new_tokens)
    assert out.stats.new_tokens == ids.shape[0] * max_new_tokens
    return new


def _joint_counts(new: torch.LongTensor) -> np.ndarray:
    idx = (new[:, 0] * VOCAB + new[:, 1]) * VOCAB + new[:, 2]
    return torch.bincount(idx, minlength=VOCAB ** 3).numpy()


PLAIN = {}
WARPED = {"temperature": 0.7, "top_k": 5, "top_p": 0.9}

E2E_CASES = {
    "chain": (lambda d: AutoregressiveDrafter(d, num_tokens=3), PLAIN),
    "chain-warped": (lambda d: AutoregressiveDrafter(d, num_tokens=3), WARPED),
    "static-tree": (lambda d: AutoregressiveDrafter(d, tree=TreeTemplate.full((2, 2))), PLAIN),
    "static-tree-warped": (lambda d: AutoregressiveDrafter(d, tree=TreeTemplate.full((2, 2))), WARPED),
    "dynamic-tree": (lambda d: AutoregressiveDrafter(d, tree="dynamic", top_k=2, num_nodes=4), PLAIN),
    "dynamic-tree-warped": (lambda d: AutoregressiveDrafter(d, tree="dynamic", top_k=2, num_nodes=4), WARPED),
    "prompt-lookup": (lambda d: PromptLookupDrafter(num_tokens=3), PLAIN),
    "prompt-lookup-warped": (lambda d: PromptLookupDrafter(num_tokens=3), WARPED),
    # diffusion drafting: per-slot proposals (DEER) and deterministic lattice trees (DiffuSpec)
    "deer": (lambda d: DEERDrafter(DiffusionLM(d, 2, context="cache"), num_tokens=3), PLAIN),
    "deer-warped": (lambda d: DEERDrafter(DiffusionLM(d, 2, context="full"), num_tokens=3), WARPED),
    "deer-confident": (lambda d: DEERDrafter(DiffusionLM(d, 2, context="cache"), num_tokens=3, confidence=0.3), PLAIN),
    "diffuspec-lattice": (lambda d: DiffuSpecDrafter(DiffusionLM(d, 2), num_tokens=3, adl=False, lattice=True,
                                                     cps_config=CPSConfig(mass=0.95)), PLAIN),
    "diffuspec-confident": (lambda d: DiffuSpecDrafter(DiffusionLM(d, 2), num_tokens=3, confidence=0.3,
                                                       adl_config=ADLConfig(k_min=1, k_max=3, delta=1)), PLAIN),
}


FEATURE_CASES = {  # feature drafters read the target's features: built from the target itself
    "feature-chain-warped": (dict(method="eagle"), dict(num_tokens=3), WARPED),
    "feature-dynamic": (dict(method="msd"), dict(num_tokens=3, tree="dynamic", top_k=2, num_nodes=4), PLAIN),
    "flash-sar": (dict(method="flash", compress_tokens=2, sar_tokens=3), {}, PLAIN),
    "flash-lattice-warped": (dict(method="flash", compress_tokens=2, sar_tokens=3),
                             dict(tree=TreeTemplate.full((2, 2))), WARPED),
    # int8 weight-only products (a CPU): q is whatever the drafter draws from
    "eagle-chain-int8-warped": (dict(method="eagle"), dict(num_tokens=3, weights="int8"), WARPED),
}


DFLASH_CASES = {  # block diffusion on the target's features: per-slot proposals (chain) and DDTree multi-draft
    "dflash-chain": (dict(num_tokens=3), PLAIN),
    "dflash-chain-warped-confident": (dict(num_tokens=3, confidence=0.2), WARPED),
    "dflash-ddtree": (dict(num_tokens=3, tree_nodes=5, top_k=3), PLAIN),
    "dflash-ddtree-warped": (dict(num_tokens=3, tree_nodes=5, top_k=3), WARPED),
    # a DDTree cut at a path probability: its shape still a function of q alone
    "dflash-ddtree-cut": (dict(num_tokens=3, tree_nodes=5, top_k=3, tree_cut=0.05), PLAIN),
    # the greedy block under sampling: deterministic drafts verified as point masses
    "dflash-greedy-chain-warped": (dict(num_tokens=3, sampled_drafts=False), WARPED),
    "dflash-greedy-ddtree": (dict(num_tokens=3, tree_nodes=5, top_k=3, sampled_drafts=False), PLAIN),
    # a shorter block, and a draft vocabulary without the odd ids (q gives them no mass; the residual keeps them)
    "dflash-ddtree-block3": (dict(block=3, tree_nodes=4, top_k=3), PLAIN),
    "dflash-chain-draft-vocab": (dict(num_tokens=3, draft_vocab="even"), WARPED),
    "dflash-ddtree-draft-vocab": (dict(num_tokens=3, tree_nodes=5, top_k=3, draft_vocab="even"), PLAIN),
    # the greedy block's DDTree with a prompt-lookup branch grafted on: every node a point mass
    "dflash-greedy-ddtree-lookup": (dict(num_tokens=3, tree_nodes=4, top_k=2, sampled_drafts=False, lookup=3), WARPED),
    # int8 weight-only products (a CPU): q is whatever the drafter draws from, so the rule stays lossless
    "dflash-ddtree-int8": (dict(num_tokens=3, tree_nodes=5, top_k=3, weights="int8"), WARPED),
}


@pytest.mark.parametrize("case", list(DFLASH_CASES))
def test_dflash_matches_exact_target_joint(case):
    """DFlash drafting samples each slot from its own q (chain: p/q rejection; DDTree: children drawn without
    replacement, multi-draft rule), or drafts the greedy block (point masses), and keeps the target's joint
    distribution."""
    from mmspec.drafters.dflash import DFlashDrafter
    from mmspec.drafters.dflash_model import DFlashDraftModel, make_config

    from mmspec.kernels.int8_linear import int8_available

    drafter_kw, warp = DFLASH_CASES[case]
    if drafter_kw.get("weights") == "int8" and not int8_available("cpu"):
        pytest.skip("no int8 weight-only kernel in this torch")
    target, _ = _models()
    torch.manual_seed(13)
    net = DFlashDraftModel(make_config(target.config, num_layers=1, block_size=4, mask_token_id=2))
    with torch.no_grad():
        net.norm.weight.mul_(10.0)  # peaky slot distributions, far from the target's
    exact = exact_joint(target, PROMPT, SamplingConfig(True, **warp))
    if drafter_kw.get("draft_vocab") == "even":
        drafter_kw = {**drafter_kw, "draft_vocab": list(range(0, target.config.vocab_size, 2))}
    new = _generate(target, DFlashDrafter(net, target, **drafter_kw), warp, 3000 + list(DFLASH_CASES).index(case))
    assert chisq_pvalue(_joint_counts(new), exact) > ALPHA


@pytest.mark.parametrize("case", list(FEATURE_CASES))
def test_feature_drafters_match_exact_target_joint(case):
    """EAGLE-style / MSD / FLASH drafting (FLASH: independent per-slot proposals from one forward) keeps
    the target's joint distribution."""
    from mmspec.drafters.feature import FeatureDrafter
    from mmspec.drafters.feature_model import FeatureDrafterConfig, FeatureDraftModel

    from mmspec.kernels.int8_linear import int8_available

    net_kw, drafter_kw, warp = FEATURE_CASES[case]
    if drafter_kw.get("weights") == "int8" and not int8_available("cpu"):
        pytest.skip("no int8 weight-only kernel in this torch")
    target, _ = _models()
    torch.manual_seed(11)
    net = FeatureDraftModel(FeatureDrafterConfig.for_target(target, **net_kw))
    exact = exact_joint(target, PROMPT, SamplingConfig(True, **warp))
    new = _generate(target, FeatureDrafter(net, target, **drafter_kw), warp, 2000 + list(FEATURE_CASES).index(case))
    assert chisq_pvalue(_joint_counts(new), exact) > ALPHA


@pytest.mark.parametrize("case", list(E2E_CASES))
def test_generate_matches_exact_target_joint(case):
    """End to end: the joint of the 3 generated tokens of B_E2E independent rows ~ the exact target
    distribution (enumerated with the target's own logits and SamplingConfig warping)."""
    make, warp = E2E_CASES[case]
    target, draft = _models()
    exact = exact_joint(target, PROMPT, SamplingConfig(True, **warp))
    seed = 1000 + list(E2E_CASES).index(case)
    new = _generate(target, make(draft), warp, seed)
    assert chisq_pvalue(_joint_counts(new), exact) > ALPHA


def test_generate_left_padded_mixed_batch():
    """Chain drafting on a batch mixing two prompts: even rows PROMPT left-padded by 2 slots, odd rows
    a 7-token prompt without padding; each group's joint ~ its own exact target distribution."""
    target, draft = _models()
    long_prompt = torch.cat([torch.tensor([6, 1]), PROMPT])
    ids = long_prompt.repeat(B_E2E, 1)
    mask = torch.ones_like(ids)
    ids[0::2, :2], mask[0::2, :2] = 0, 0
    new = _generate(target, AutoregressiveDrafter(draft, num_tokens=3), PLAIN, 1100, ids, mask)
    cfg = SamplingConfig(True)
    assert chisq_pvalue(_joint_counts(new[0::2]), exact_joint(target, PROMPT, cfg)) > ALPHA
    assert chisq_pvalue(_joint_counts(new[1::2]), exact_joint(target, long_prompt, cfg)) > ALPHA


def test_negative_control_generate_wrong_residual_is_rejected(monkeypatch):
    """Power check end to end: the chain case with the verifier's rule swapped for the broken one
    (bonus from p instead of the residual) is rejected at the same sample size."""
    monkeypatch.setattr(tree_verifier, "sampling_accept", _wrong_chain_accept)
    target, draft = _models()
    exact = exact_joint(target, PROMPT, SamplingConfig(True))
    new = _generate(target, AutoregressiveDrafter(draft, num_tokens=3), PLAIN, 1000)
    assert chisq_pvalue(_joint_counts(new), exact) < ALPHA


# --------------------------------------------------------------------- longer horizon (several steps)
LONG = 6


@torch.no_grad()
def exact_next_token_probs(target, prompt: torch.LongTensor, prefixes: torch.LongTensor, cfg: SamplingConfig):
    """Exact next-token distributions after ``prompt + prefix`` for each distinct row of ``prefixes``
    [n, t]: returns (probs [G, VOCAB], group id [n])."""
    uniq, group = torch.unique(prefixes, dim=0, return_inverse=True)
    seqs = torch.cat([prompt.expand(uniq.shape[0], -1), uniq], 1)
    return cfg.probs(target(seqs).logits[:, -1]).double(), group


@pytest.mark.parametrize("case", ["static-tree-warped", "chain", "dynamic-tree", "prompt-lookup-warped"])
def test_generate_long_horizon_conditionals(case):
    """LONG tokens over several draft/verify steps: the first token ~ exact p(. | prompt), and for each
    t = 2..LONG, token t given the generated prefix ~ exact p(. | prompt + prefix) (one conditional
    chi-square per t, groups = distinct observed prefixes)."""
    make, warp = E2E_CASES[case]
    target, draft = _models()
    cfg = SamplingConfig(True, **warp)
    drafter = make(draft)
    # max_cache_len works around the cache-sizing bug of test_generate_ragged_batch_cache_overflow
    room = PROMPT.numel() + LONG + 2 * drafter.max_nodes + 2
    new = _generate(target, drafter, warp, 1200 + list(E2E_CASES).index(case), max_new_tokens=LONG,
                    max_cache_len=room)
    first = exact_joint(target, PROMPT, cfg, n=1)
    assert chisq_pvalue(torch.bincount(new[:, 0], minlength=VOCAB).numpy(), first) > ALPHA
    for t in range(1, LONG):
        probs, group = exact_next_token_probs(target, PROMPT, new[:, :t], cfg)
        assert chisq_conditional_pvalue(group, new[:, t], probs) > ALPHA, f"token {t + 1}"


# ------------------------------------------------------------------------------------ regressions
def test_without_replacement_exhausted_support():
    """Siblings without replacement when q has fewer nonzero tokens than the node has children (what
    the static-tree drafter's Gumbel top-k yields once the warped drafter distribution is exhausted):
    the first two children cover supp(q) = {1, 3}, the third has q = 0. First token must still ~ p."""
    g = torch.Generator().manual_seed(808)
    q = torch.tensor([0.0, 0.6, 0.0, 0.4, 0.0, 0.0], dtype=torch.float64)
    first_two = _sample(q.expand(B_UNIT, V), 2, g, replacement=False)
    third = torch.tensor([0, 2, 4, 5])[torch.randint(0, 4, (B_UNIT, 1), generator=g)]
    tree = _one_level_tree(torch.cat([first_two, third], 1), q, "without_replacement")
    result = sampling_accept(tree, P.float().expand(B_UNIT, 4, V), g)
    assert chisq_pvalue(_first_token_counts(result, tree), P) > ALPHA


def test_generate_static_tree_top_k_1():
    """End to end: do_sample=True with top_k=1 makes the target a point mass at every step, so every
    row must be the greedy continuation; a static tree with 2 children per node has siblings with
    q = 0 under the drafter's top_k=1 warping, which must never be emitted."""
    target, draft = _models()
    warp = {"top_k": 1}
    exact = exact_joint(target, PROMPT, SamplingConfig(True, **warp))
    new = _generate(target, AutoregressiveDrafter(draft, tree=TreeTemplate.full((2, 2))), warp, 1300)
    assert chisq_pvalue(_joint_counts(new), exact) > ALPHA


def test_generate_ragged_batch_cache_overflow():
    """Greedy, two rows that progress at different rates (row 1 emits 4 tokens in its first step, then
    accepts 3 drafts while needing 1): generate must not raise 'sequence longer than the cache'."""
    target = tiny_model("llama", seed=0, vocab_size=VOCAB, hidden_size=32)
    draft = tiny_model("llama", seed=7, vocab_size=VOCAB, hidden_size=32)
    ids = torch.tensor([[2, 0, 1, 3], [0, 0, 0, 5]])
    out = SpeculativeGenerator(target, AutoregressiveDrafter(draft, num_tokens=3)).generate(
        ids, max_new_tokens=6, eos_token_id=[])
    greedy = ids
    with torch.no_grad():
        for _ in range(6):
            greedy = torch.cat([greedy, target(greedy).logits[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(out.sequences, greedy)
