"""Training the DFlash drafter: the many-anchor forward equals one block at a time, a killed run resumes to the same
weights, training raises held-out block acceptance, and `mmspec train dflash` writes a directory the pipeline runs
exactly."""

import json

import pytest
import torch

from mmspec.drafters.dflash_io import load_dflash
from mmspec.drafters.dflash_model import DFlashDraftModel, make_config, teacher_forced_logits
from mmspec.tiny import tiny_model
from mmspec.training import dflash as dflash_training
from mmspec.training.deer import DEERConfig, target_generations
from mmspec.training.dflash import DFlashTrainConfig, Responses, block_acceptance, target_responses, train_dflash, \
    validation_batches
from tests.tiny_models import sharpen

V = 48


@pytest.fixture(scope="module")
def target():
    return sharpen(tiny_model("llama", seed=0, vocab_size=V, num_layers=3, hidden_size=32), seed=0)


@pytest.fixture(scope="module")
def data(target):
    stream = torch.randint(3, V, (4000,), generator=torch.Generator().manual_seed(0))
    cfg = DEERConfig(gen_len=12, prefix_min=4, prefix_max=10, gen_batch=16)
    return (target_generations(target, stream, 48, cfg, seed=1, progress=False),
            target_generations(target, stream, 16, cfg, seed=2, progress=False))


def net_for(target, seed=0):
    torch.manual_seed(seed)
    return DFlashDraftModel(make_config(target.config, num_layers=1, block_size=4, mask_token_id=2))


def test_many_anchors_in_one_forward_equal_one_block_at_a_time(target, data):
    """The block mask keeps blocks apart: each anchor's slots are what that block alone gives."""
    train, _ = data
    net = sharpen(net_for(target), seed=3)
    tokens = train.tokens[:2, :20]
    feats, _ = dflash_training.target_outputs(target, net, tokens)
    anchors = torch.tensor([[6, 9, 13], [5, 11, 16]])
    emb, head = target.get_input_embeddings(), target.get_output_embeddings()
    with torch.no_grad():
        together = teacher_forced_logits(net, emb, head, tokens, feats, anchors)
        for j in range(3):
            alone = teacher_forced_logits(net, emb, head, tokens, feats, anchors[:, j:j + 1])
            assert torch.allclose(together[:, j], alone[:, 0], atol=1e-5)
        # a block sees no context at or after its anchor: changing a later feature leaves it as it is
        later = feats.clone()
        later[0, 6:] += 1.0
        moved = teacher_forced_logits(net, emb, head, tokens, later, anchors)
    assert torch.allclose(moved[0, 0], together[0, 0], atol=1e-5) and not torch.allclose(moved[0, 1], together[0, 1])


def _train(target, data, ckpt, fail_at=None, monkeypatch=None, steps=12, eval_every=4):
    train, val = data
    cfg = DFlashTrainConfig(steps=steps, batch_size=4, anchors=3, lr=5e-3, warmup=2, eval_every=eval_every,
                            patience=100, val_rows=8)
    if fail_at is not None:
        real, calls = dflash_training.make_batch, {"n": 0}

        def failing(*a, **k):
            calls["n"] += 1
            if calls["n"] == fail_at:
                raise KeyboardInterrupt("killed")
            return real(*a, **k)

        monkeypatch.setattr(dflash_training, "make_batch", failing)
    net = net_for(target)
    report = train_dflash(net, target, train, val, cfg, progress=False, checkpoint=ckpt, checkpoint_every_s=0.0)
    return net, report


def test_killed_training_resumes_to_the_same_weights(target, data, tmp_path, monkeypatch):
    straight, ref = _train(target, data, tmp_path / "a.pt")
    with pytest.raises(KeyboardInterrupt):
        _train(target, data, tmp_path / "b.pt", fail_at=8, monkeypatch=monkeypatch)
    monkeypatch.undo()
    again, res = _train(target, data, tmp_path / "b.pt")
    assert res["steps"] == ref["steps"] == 12 and res["val_history"] == ref["val_history"]
    for (k, a), b in zip(straight.state_dict().items(), again.state_dict().values()):
        assert torch.equal(a, b), k


def test_training_raises_heldout_block_acceptance(target, data):
    net, report = _train(target, data, None, steps=150, eval_every=25)
    before, after = report["heldout_before"], report["heldout_after"]
    # a random 3-layer target's continuations, 48 rows: the first slot goes from chance (~2%) to ~19%
    assert after["slot_agreement"][0] > before["slot_agreement"][0] + 0.1
    assert after["accepted_length"] > before["accepted_length"] + 0.15
    assert report["rows_seen"] == 150 * 4 and report["tokens_seen"] > 0


def test_block_choices_train_shorter_blocks_and_report_each(target, data):
    """block_choices: each step runs blocks of one of the lengths (the loss over that many slots), and the report
    gives the held-out figures of each length; a length the drafter cannot run is refused before any work."""
    train, val = data
    cfg = DFlashTrainConfig(steps=60, batch_size=4, anchors=3, lr=5e-3, warmup=2, eval_every=30, patience=100,
                            val_rows=8, block_choices=(2, 3, 0))
    net = net_for(target)
    seen = []
    real = dflash_training.dflash_loss

    def spy(model, tgt, batch, c):
        seen.append(batch.get("block"))
        return real(model, tgt, batch, c)

    dflash_training.dflash_loss = spy
    try:
        report = train_dflash(net, target, train, val, cfg, progress=False)
    finally:
        dflash_training.dflash_loss = real
    assert set(seen) == {2, 3, None}
    by = report["heldout_after_by_block"]
    assert set(by) == {"2", "3", "4"} and [len(by[k]["slot_agreement"]) for k in ("2", "3", "4")] == [1, 2, 3]
    assert by["4"] == report["heldout_after"]
    # a block of 2 is the first slot alone: its accepted length is that slot's agreement
    assert by["2"]["accepted_length"] == pytest.approx(by["2"]["slot_agreement"][0])
    assert by["2"]["accepted_length"] > report["heldout_before"]["slot_agreement"][0] + 0.05
    with pytest.raises(ValueError, match="block must be in 2..4"):
        train_dflash(net_for(target), target, train, val, DFlashTrainConfig(block_choices=(5,)), progress=False)


def _kl_batch(target, net, train, cached: bool):
    idx = torch.arange(4)
    anchors = dflash_training.sample_anchors(train, idx, 3, torch.Generator().manual_seed(5))
    if not cached:
        return dflash_training.make_batch(train, idx, anchors)
    width = int(dflash_training.row_lengths(train)[idx].max())
    with torch.no_grad():
        hidden = target(input_ids=train.tokens[idx, :width], output_hidden_states=True).hidden_states
    feats, last = dflash_training.split_last(dflash_training.with_last_hidden(net)(hidden), target.config.hidden_size)
    batch = dflash_training.make_batch(train, idx, anchors)
    return {**batch, "features": feats, "target_last": last}


def test_kl_from_cached_last_hidden_states_equals_kl_from_the_online_target(target, data):
    """KL with cached features takes the target's distributions from its cached last hidden states: the same loss as
    running the target online, and larger than the cross-entropy alone; without them it is refused."""
    train, _ = data
    net = sharpen(net_for(target), seed=4)
    cfg = DFlashTrainConfig(kl_weight=0.5)
    online = dflash_training.dflash_loss(net, target, _kl_batch(target, net, train, False), cfg)
    batch = _kl_batch(target, net, train, True)
    cached = dflash_training.dflash_loss(net, target, batch, cfg)
    ce = dflash_training.dflash_loss(net, target, batch, DFlashTrainConfig())
    assert cached.item() == pytest.approx(online.item(), rel=1e-5) and cached.item() > ce.item() + 1e-3
    with pytest.raises(ValueError, match="needs the target's distributions"):
        dflash_training.dflash_loss(net, target, {k: v for k, v in batch.items() if k != "target_last"}, cfg)


def test_sampled_figure_is_each_slots_overlap_with_the_target_chained(target, data):
    """block_acceptance(sampled=True): per slot α = Σ min(p, q) with p the target's distribution of the token at
    anchor + k given the true context and q the slot's, and the expected accepted length Σ_k Π_{j≤k} α_j, computed
    here block by block from the target's full forward."""
    _, val = data
    net = sharpen(net_for(target), seed=6)
    batches = validation_batches(val, DFlashTrainConfig(val_rows=6), net.block_size)
    got = block_acceptance(net, target, batches, sampled=True)
    overlap, expected, blocks = torch.zeros(3), 0.0, 0
    with torch.no_grad():
        for b in batches:
            feats, logits = dflash_training.target_outputs(target, net, b["tokens"])
            q = torch.softmax(dflash_training.slot_logits(net, target, b, feats), -1)
            p = torch.softmax(logits.float(), -1)
            for r in range(b["tokens"].shape[0]):
                for j, a in enumerate(b["anchors"][r].tolist()):
                    if a + 1 >= int(b["lengths"][r]):
                        continue
                    alphas = [float(torch.minimum(p[r, a + k - 1], q[r, j, k - 1]).sum())
                              if a + k < int(b["lengths"][r]) else 0.0 for k in (1, 2, 3)]
                    overlap += torch.tensor(alphas)
                    expected += sum(float(torch.tensor(alphas[:k + 1]).prod()) for k in range(3))
                    blocks += 1
    assert got["blocks"] == blocks
    assert got["sampled_accepted_length"] == pytest.approx(expected / blocks, rel=1e-4)
    counts = torch.tensor([sum(1 for b in batches for r in range(b["tokens"].shape[0]) for a in b["anchors"][r].tolist()
                               if a + k < int(b["lengths"][r])) for k in (1, 2, 3)], dtype=torch.float)
    assert got["slot_overlap"] == pytest.approx((overlap / counts).tolist(), rel=1e-4)
    assert "sampled_accepted_length" not in block_acceptance(net, target, batches)


def test_kl_training_selected_by_the_sampled_figure_raises_it(target, data):
    """kl_weight with cached features and select_by="sampled": the held-out sampled figure rises, and the report
    carries it; an unknown selection is refused."""
    train, val = data
    cfg = DFlashTrainConfig(steps=120, batch_size=4, anchors=3, lr=5e-3, warmup=2, eval_every=30, patience=100,
                            val_rows=8, kl_weight=1.0, select_by="sampled")
    report = train_dflash(net_for(target), target, train, val, cfg, progress=False)
    before, after = report["heldout_before"], report["heldout_after"]
    assert after["sampled_accepted_length"] > before["sampled_accepted_length"] + 0.1
    assert after["slot_overlap"][0] > before["slot_overlap"][0] + 0.03
    assert report["best_accepted_length"] == pytest.approx(max(v for _, v in report["val_history"]))
    with pytest.raises(ValueError, match="select_by must be one of"):
        DFlashTrainConfig(select_by="tau")


def test_responses_of_any_length(target):
    rows = [([5, 6, 7], [8, 9, 10, 11]), ([5, 6], [9, 10]), ([4, 5, 6, 7, 8], [12, 13, 14])]
    data = Responses.from_rows(rows)
    assert data.lengths.tolist() == [7, 4, 8] and data.prefix.tolist() == [3, 2, 5]
    anchors = dflash_training.sample_anchors(data, torch.arange(3), 50, torch.Generator().manual_seed(0))
    assert ((anchors >= data.prefix[:, None]) & (anchors <= data.lengths[:, None] - 2)).all()
    net = net_for(target)
    got = block_acceptance(net, target, validation_batches(data, DFlashTrainConfig(val_rows=3), net.block_size))
    # anchors every 2nd response position (0, 2 after the prompt), those with a label only: 2 + 1 + 1
    assert got["blocks"] == 4
    with pytest.raises(ValueError, match="shorter than 2"):
        Responses.from_rows([([1, 2], [3])])


def _rows_file(tmp_path, answered: int, unanswered=()):
    """A --data .jsonl of ``answered`` rows with a response and a row for each prompt of ``unanswered`` without."""
    rows = [{"prompt": f"def f{i}(x):\n", "response": f"    return x + {i}\n\n"} for i in range(answered)]
    rows += [{"prompt": p} for p in unanswered]
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows))
    return data


def test_cli_trains_a_drafter_the_pipeline_runs_exactly(tmp_path):
    """`mmspec train dflash` on the zoo target with a small --data file (responses given, and one row whose
    response the target writes), then mmspec.pipeline picks the directory up as method dflash, greedy-exact."""
    import mmspec
    from mmspec.cli import main

    data = _rows_file(tmp_path, 7, ["def g(a, b):\n"])
    out = tmp_path / "drafter"
    assert main(["train", "dflash", "--data", str(data), "--steps", "3", "--batch-size", "2", "--anchors", "2",
                 "--layers", "1", "--block-size", "4", "--block-choices", "2,0", "--max-new-tokens", "8",
                 "--out", str(out)]) == 0
    record = json.loads((out / "mmspec.json").read_text())
    assert record["kind"] == "dflash" and record["method"] == "dflash"
    assert json.loads((out / "config.json").read_text())["dflash_config"]["mask_token_id"] == 2
    pipe = mmspec.pipeline("zoo:code-target", drafter=str(out))
    assert pipe.method == "dflash"
    got = pipe("def add(a, b):\n", max_new_tokens=12, stop_at_eos=False)
    ids = pipe.tokenizer("def add(a, b):\n", return_tensors="pt", add_special_tokens=False).input_ids
    ref = pipe.model.generate(ids, do_sample=False, max_new_tokens=12, eos_token_id=None, pad_token_id=0)
    assert torch.equal(got.sequences, ref)


def test_cli_samples_the_missing_responses_at_the_temperature_given(tmp_path, monkeypatch, capsys):
    """``--temperature``: the rows without a response get one sampled from the target at that temperature (the
    responses the run trains on, not its greedy ones); it is refused without --data rows to answer."""
    import mmspec.cli_train as cli_train
    from mmspec.cli import main

    data = _rows_file(tmp_path, 6, ["def g(a, b):\n", "def h(c):\n"])
    asked = []
    real = cli_train.target_responses

    def recording(target, prompts, *a, **kw):
        asked.append((len(prompts), kw.get("temperature")))
        return real(target, prompts, *a, **kw)

    monkeypatch.setattr(cli_train, "target_responses", recording)
    assert main(["train", "dflash", "--data", str(data), "--steps", "1", "--batch-size", "2", "--anchors", "2",
                 "--layers", "1", "--block-size", "4", "--max-new-tokens", "6", "--temperature", "0.8",
                 "--out", str(tmp_path / "drafter")]) == 0
    assert asked == [(2, 0.8)]
    capsys.readouterr()
    assert main(["train", "dflash", "--generate", "8", "--temperature", "1.0", "--out", str(tmp_path / "o")]) == 2
    assert "--temperature samples the responses of --data rows" in capsys.readouterr().err
    assert not (tmp_path / "o.ckpt").exists()


def test_cli_kl_with_cached_features_and_the_sampled_selection(tmp_path):
    """``--kl-weight`` no longer needs the target online, and ``--select-by sampled`` reports each slot's overlap and
    the expected accepted length of independent draws before and after training."""
    from mmspec.cli import main

    data = _rows_file(tmp_path, 8)
    out = tmp_path / "drafter"
    assert main(["train", "dflash", "--data", str(data), "--steps", "2", "--batch-size", "2", "--anchors", "2",
                 "--layers", "1", "--block-size", "4", "--kl-weight", "0.5", "--select-by", "sampled",
                 "--out", str(out)]) == 0
    report = json.loads((out / "train_report.json").read_text())
    assert report["config"]["kl_weight"] == 0.5 and report["config"]["cache_features"] is True
    for when in ("heldout_before", "heldout_after"):
        assert len(report[when]["slot_overlap"]) == 3 and 0 < report[when]["sampled_accepted_length"] < 3


def test_cli_reports_bad_rows_by_line(tmp_path, capsys):
    from mmspec.cli import main

    data = tmp_path / "bad.jsonl"
    data.write_text(json.dumps({"prompt": "x = 1\n", "response": "y"}) + "\n" + json.dumps({"prompt": ""}) + "\n")
    assert main(["train", "dflash", "--data", str(data), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"{data}:1: response of 1 token(s)" in err and f"{data}:2: prompt must be a non-empty string" in err
    assert not (tmp_path / "o").exists() and not (tmp_path / "o.ckpt").exists()  # refused before any work
    assert main(["train", "dflash", "--generate", "8", "--block-size", "8", "--block-choices", "4,9",
                 "--out", str(tmp_path / "o")]) == 2
    assert "--block-choices 4,9 must lie in 2..--block-size (8" in capsys.readouterr().err


def test_init_takes_a_drafter_of_the_same_shape_and_names_a_mismatch(tmp_path):
    """``mmspec train dflash --init``: fine-tuning starts from the given drafter's weights; one of another shape is
    refused before any work, naming what differs."""
    from mmspec import zoo
    from mmspec.cli_train import dflash_init
    from mmspec.drafters.dflash_model import make_config

    if not (zoo.zoo_home() / "code-dflash" / "zoo.json").exists():
        pytest.skip("zoo:code-dflash is not built")
    shipped = load_dflash(zoo.zoo_home() / "code-dflash")
    target_cfg = zoo.load("code-target").model.config
    same = make_config(target_cfg, num_layers=2, block_size=shipped.config.block_size,
                       mask_token_id=shipped.mask_token_id, target_layer_ids=shipped.target_layer_ids)
    state = dflash_init("zoo:code-dflash", same)
    assert all(torch.equal(state[k], v) for k, v in shipped.state_dict().items())
    other = make_config(target_cfg, num_layers=1, block_size=shipped.config.block_size,
                        mask_token_id=shipped.mask_token_id, target_layer_ids=shipped.target_layer_ids)
    with pytest.raises(ValueError, match="another shape"):
        dflash_init("zoo:code-dflash", other)
    with pytest.raises(ValueError, match="no such drafter directory"):
        dflash_init(str(tmp_path / "missing"), same)
    # more target layers than it reads (its own among them): its fc columns kept, the new layer's at zero
    deeper = make_config(target_cfg, num_layers=2, block_size=shipped.config.block_size,
                         mask_token_id=shipped.mask_token_id, target_layer_ids=shipped.target_layer_ids + [14])
    fc = dflash_init("zoo:code-dflash", deeper)["fc.weight"]
    H = shipped.config.hidden_size
    assert torch.equal(fc[:, :-H], shipped.fc.weight) and not fc[:, -H:].any()


def test_a_drafter_grown_to_more_target_layers_drafts_what_it_drafted(target, data):
    """``with_target_layers`` (what ``--init`` does when ``--target-layers`` adds layers): the grown drafter reads the
    new layers' features (nonzero) through zero ``fc`` columns, so its slots are the source's; a list that drops one
    of the source's layers is refused."""
    from mmspec.drafters.dflash_model import with_target_layers

    train, _ = data
    torch.manual_seed(0)
    net = sharpen(DFlashDraftModel(make_config(target.config, num_layers=1, block_size=4, mask_token_id=2,
                                               target_layer_ids=[0, 1])), seed=4)
    grown = with_target_layers(net, [2, 0, 1])  # a new layer, placed first
    assert grown.target_layer_ids == [2, 0, 1] and grown.fc.weight.shape[1] == 3 * target.config.hidden_size
    tokens, anchors = train.tokens[:2, :20], torch.tensor([[6, 9], [5, 11]])
    emb, head = target.get_input_embeddings(), target.get_output_embeddings()
    with torch.no_grad():
        want = teacher_forced_logits(net, emb, head, tokens, dflash_training.target_outputs(target, net, tokens)[0],
                                     anchors)
        feats = dflash_training.target_outputs(target, grown, tokens)[0]
        got = teacher_forced_logits(grown, emb, head, tokens, feats, anchors)
    assert feats[..., :32].abs().sum() > 0  # (the new layer's features are there, read through zero columns)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="include every layer"):
        with_target_layers(net, [0, 2])


def dies_on_second_batch(generate):
    """``generate`` that answers one batch, then raises as a killed run would."""
    calls = []

    def dies(self, *a, **kw):
        if calls:
            raise RuntimeError("killed")
        calls.append(1)
        return generate(self, *a, **kw)

    return dies


def test_target_responses_batched_equal_one_at_a_time_and_resume(target, tmp_path, monkeypatch):
    """Batched by length with left padding, every answer is the target's own greedy one (as ``generate`` gives it for
    the prompt alone); EOS cuts an answer after it; a run killed after its first batch goes on from the second."""
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(3, V, (n,), generator=g).tolist() for n in (3, 9, 5, 7, 4, 11, 6)]
    alone = [target.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                             do_sample=False, max_new_tokens=6, eos_token_id=None, pad_token_id=0)[0, len(p):].tolist()
             for p in prompts]
    assert target_responses(target, prompts, 6, None, 0, batch_size=3, progress=False) == alone
    eos = alone[1][2]  # a token some answer emits: that answer stops after it
    cut = target_responses(target, prompts, 6, eos, 0, batch_size=3, progress=False)
    assert cut[1] == alone[1][: alone[1].index(eos) + 1]
    assert all(len(c) < len(a) if eos in a else c == a for c, a in zip(cut, alone))

    partial = tmp_path / "responses.partial.pt"
    real = type(target).generate
    monkeypatch.setattr(type(target), "generate", dies_on_second_batch(real))
    with pytest.raises(RuntimeError, match="killed"):
        target_responses(target, prompts, 6, None, 0, partial=partial, batch_size=3, progress=False)
    monkeypatch.setattr(type(target), "generate", real)
    seen = []
    monkeypatch.setattr(type(target), "generate", lambda self, *a, **kw: seen.append(1) or real(self, *a, **kw))
    assert target_responses(target, prompts, 6, None, 0, partial=partial, batch_size=3, progress=False) == alone
    assert len(seen) == 2  # three batches of the seven prompts; the first was saved before the kill
    with pytest.raises(ValueError, match="other prompts or settings"):  # never another run's answers
        target_responses(target, prompts[::-1], 6, None, 0, partial=partial, batch_size=3, progress=False)


def test_sampled_responses_are_reproducible_resumable_and_not_the_greedy_ones(target, tmp_path, monkeypatch):
    """With a temperature the answers are draws from the target (not its greedy ones), the same draws again for the
    same seed, others for another seed, and a run killed after its first batch goes on to the draws an uninterrupted
    run makes; a greedy run's saved batches are never taken for sampled ones."""
    g = torch.Generator().manual_seed(6)
    prompts = [torch.randint(3, V, (n,), generator=g).tolist() for n in (3, 9, 5, 7, 4, 11, 6)]
    greedy = target_responses(target, prompts, 8, None, 0, batch_size=3, progress=False)
    drawn = target_responses(target, prompts, 8, None, 0, batch_size=3, progress=False, temperature=1.0, seed=3)
    assert drawn != greedy and all(len(d) == 8 for d in drawn)
    assert target_responses(target, prompts, 8, None, 0, batch_size=3, progress=False, temperature=1.0,
                            seed=3) == drawn
    assert target_responses(target, prompts, 8, None, 0, batch_size=3, progress=False, temperature=1.0,
                            seed=4) != drawn
    with pytest.raises(ValueError, match="temperature must be > 0"):
        target_responses(target, prompts, 8, None, 0, temperature=0.0, progress=False)

    partial = tmp_path / "sampled.partial.pt"
    real = type(target).generate
    monkeypatch.setattr(type(target), "generate", dies_on_second_batch(real))
    with pytest.raises(RuntimeError, match="killed"):
        target_responses(target, prompts, 8, None, 0, partial=partial, batch_size=3, progress=False, temperature=1.0,
                         seed=3)
    monkeypatch.setattr(type(target), "generate", real)
    assert target_responses(target, prompts, 8, None, 0, partial=partial, batch_size=3, progress=False,
                            temperature=1.0, seed=3) == drawn
    with pytest.raises(ValueError, match="other prompts or settings"):
        target_responses(target, prompts, 8, None, 0, partial=partial, batch_size=3, progress=False)


def test_validation_anchors_stay_inside_a_batch_of_uneven_rows(target):
    """A row with a long prompt and a short answer beside one with a long answer: the shared anchor offsets would run
    past the batch's width; they are kept inside it and count only where they have labels."""
    net = net_for(target)
    rows = [(list(range(3, 23)), [5, 6]), (list(range(3, 7)), list(range(10, 30)))]
    val = Responses.from_rows(rows)
    batches = validation_batches(val, DFlashTrainConfig(val_rows=2), net.block_size)
    width = int(max(len(p) + len(r) for p, r in rows))
    assert all(int(b["anchors"].max()) < b["tokens"].shape[1] <= width for b in batches)
    report = block_acceptance(net, target, batches)
    assert report["blocks"] == 1 + len(range(0, 19, 2))  # the short answer's one anchor with a label, the long one's
