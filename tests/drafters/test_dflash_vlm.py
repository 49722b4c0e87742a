"""The DFlash block drafter on VLM targets with each picture's context compressed by learned queries (FLASH's latent
compression): exact under greedy on LLaVA, Qwen2-VL (M-RoPE) and Gemma3 ragged batches, chain and DDTree; the
context cache holds ``compress_to`` entries per picture; decoding sees exactly the training pattern; training with
compression settings teaches the queries; both layouts keep them; refusals."""

import pytest
import torch

from mmspec import SpeculativeGenerator
from mmspec.drafters.dflash import DFlashDrafter
from mmspec.drafters.dflash_io import load_dflash, save_dflash
from mmspec.drafters.dflash_model import DFlashDraftModel, make_config, teacher_forced_logits
from mmspec.training.dflash import DFlashTrainConfig, Responses, precompute_features, train_dflash
from mmspec.verifiers.tree_forward import text_config
from tests.tiny_models import sharpen
from tests.vlm_families import IMAGE, LLAVA_IMAGE, gemma_batch, llava_batch, qwen_batch, tiny_gemma3, tiny_llava, \
    tiny_qwen_vl

MASK = 9
QUERIES = 4


def _llava_case():
    ids, pixels = llava_batch(2, seed=3)
    ids = torch.cat([torch.zeros(1, 10, dtype=torch.long), ids[1:]], 0)  # a ragged pair: row 0 has no picture
    ids[0, -3:] = torch.tensor([40, 41, 42])
    mask = (ids != 0).long()
    mask[1] = 1
    return tiny_llava(), ids, mask, {"pixel_values": pixels[1:]}, LLAVA_IMAGE


def _qwen_case():
    ids, mask, inputs = qwen_batch()
    return tiny_qwen_vl("2"), ids, mask, inputs, IMAGE


def _gemma_case():
    ids, mask, inputs = gemma_batch(4, "gemma3")
    return tiny_gemma3(), ids, mask, inputs, IMAGE


CASES = {"llava": _llava_case, "qwen2-vl": _qwen_case, "gemma3": _gemma_case}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    return CASES[request.param]()


def make_net(target, queries=QUERIES, seed=3):
    torch.manual_seed(seed)
    net = DFlashDraftModel(make_config(text_config(target), num_layers=2, block_size=6, mask_token_id=MASK,
                                       visual_queries=queries))
    return sharpen(net, seed=seed).eval()


class Recording(DFlashDrafter):
    def begin(self, context):
        self.last_run = super().begin(context)
        return self.last_run


@pytest.mark.parametrize("kw", [dict(num_tokens=4), dict(tree_nodes=6, top_k=2)])
@pytest.mark.parametrize("compress_to", [None, 1, 3])
def test_compressed_context_is_exact_under_greedy(case, greedy_reference, kw, compress_to):
    target, ids, mask, inputs, image_id = case
    ref = greedy_reference(target, ids, 12, attention_mask=mask, **inputs)
    drafter = Recording(make_net(target), target, compress_to=compress_to, **kw)
    out = SpeculativeGenerator(target, drafter).generate(ids, attention_mask=mask, max_new_tokens=12,
                                                         eos_token_id=[], pad_token_id=0, **inputs)
    assert torch.equal(out.sequences, ref)
    run = drafter.last_run
    pictures = [int(((ids[b] == image_id) & mask[b].bool()).sum()) for b in range(ids.shape[0])]
    if compress_to is None:
        assert run.shift == 0
    else:  # the row whose pictures lose the most entries sets the context's width; every row keeps its own
        runs = [_runs((ids[b] == image_id) & mask[b].bool()) for b in range(ids.shape[0])]
        kept = [int(mask[b].sum()) - pictures[b] + compress_to * runs[b] for b in range(ids.shape[0])]
        assert run.shift == ids.shape[1] - max(kept)
        starts = run.cache.starts.tolist()
        assert [ids.shape[1] - run.shift - s for s in starts] == kept


def _runs(flags: torch.Tensor) -> int:
    f = flags.long()
    return int(((f[1:] - f[:-1]) == 1).sum() + f[0])


@pytest.mark.parametrize("compress_to", [None, 2])
def test_decoding_blocks_equal_the_training_pattern_with_a_compressed_picture(compress_to):
    """The engine's slot logits for each block (from the drafter's compressed context cache) equal
    teacher_forced_logits at that anchor with the same compression: decoding is what training optimises."""
    target = tiny_llava()
    ids, pixels = llava_batch(1, seed=5)
    net = make_net(target)
    drafter = DFlashDrafter(net, target, num_tokens=5, compress_to=compress_to)
    seen = []
    orig = drafter.slot_hidden

    def spy(context, run):
        h = orig(context, run)
        seen.append((int(context.state.lengths[0]), drafter.lm_head(h[0]).float()))
        return h

    drafter.slot_hidden = spy
    with torch.no_grad():
        seq = SpeculativeGenerator(target, drafter).generate(ids, pixel_values=pixels, max_new_tokens=10,
                                                             eos_token_id=[]).sequences
        feats = net.select_features(target(input_ids=seq, pixel_values=pixels, output_hidden_states=True).hidden_states)
        embed, head = target.get_input_embeddings(), target.get_output_embeddings()
        for length, logits in seen:
            tf = teacher_forced_logits(net, embed, head, seq, feats, torch.tensor([[length - 1]]),
                                       image=seq == LLAVA_IMAGE, compress_to=compress_to)[0, 0]
            assert torch.allclose(logits, tf[:5].float(), atol=1e-4), length
    assert len(seen) >= 2


def test_training_with_compression_settings_teaches_the_queries():
    target = tiny_llava()
    g = torch.Generator().manual_seed(0)
    rows, pics = [], []
    for i in range(12):
        ids, pixels = llava_batch(1, seed=10 + i)
        rows.append((ids[0].tolist(), torch.randint(4, 96, (6,), generator=g).tolist()))
        pics.append(pixels)
    pixels = torch.cat(pics)
    data = Responses.from_rows(rows, 0)
    net = make_net(target)
    feats = precompute_features(target, net, data, progress=False, inputs=lambda idx, _: {"pixel_values": pixels[idx]})
    before = net.queries.detach().clone()
    cfg = DFlashTrainConfig(steps=6, batch_size=4, anchors=2, warmup=1, eval_every=3, val_rows=4,
                            compress_choices=(1, 4))
    report = train_dflash(net, target, data, data, cfg, progress=False, features=feats, val_features=feats,
                          image_token_id=LLAVA_IMAGE)
    assert not torch.equal(net.queries.detach(), before)  # compressed batches reach the queries
    assert set(report["heldout_after_by_setting"]) == {"1", "4"}
    assert report["heldout_after_by_setting"]["1"]["blocks"] > 0
    # the queries alone (stage 2 of the zoo build): every other weight stays as it was
    frozen = make_net(target)
    kept = {n: p.detach().clone() for n, p in frozen.named_parameters() if n != "queries"}
    q0 = frozen.queries.detach().clone()
    train_dflash(frozen, target, data, data, DFlashTrainConfig(**{**cfg.__dict__, "trainable": ("queries",)}),
                 progress=False, features=feats, val_features=feats, image_token_id=LLAVA_IMAGE)
    assert all(torch.equal(p, kept[n]) for n, p in frozen.named_parameters() if n != "queries")
    assert not torch.equal(frozen.queries.detach(), q0) and all(p.requires_grad for p in frozen.parameters())
    with pytest.raises(ValueError, match="image token id"):
        train_dflash(make_net(target), target, data, data, cfg, progress=False, features=feats, val_features=feats)
    with pytest.raises(ValueError, match="visual queries"):
        train_dflash(make_net(target, queries=0), target, data, data, cfg, progress=False, features=feats,
                     val_features=feats, image_token_id=LLAVA_IMAGE)


@pytest.mark.parametrize("layout", ["zlab", "speculators"])
def test_both_layouts_keep_the_visual_queries(tmp_path, layout):
    target = tiny_llava()
    net = make_net(target)
    save_dflash(net, tmp_path / layout, layout=layout)
    back = load_dflash(tmp_path / layout)
    assert back.visual_queries == QUERIES
    assert torch.equal(back.queries, net.queries)
    assert make_net(target, queries=0).visual_queries == 0 and not hasattr(make_net(target, queries=0), "queries")


def test_refusals():
    target = tiny_llava()
    with pytest.raises(ValueError, match="without visual queries"):
        DFlashDrafter(make_net(target, queries=0), target, compress_to=2)
    with pytest.raises(ValueError, match="4 visual queries"):
        DFlashDrafter(make_net(target), target, compress_to=5)
    with pytest.raises(ValueError, match="visual_queries"):
        make_config(text_config(target), mask_token_id=MASK, visual_queries=-1)
