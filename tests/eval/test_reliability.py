"""mmspec eval's run directory describes exactly one run; expected failures are one error line (exit 2);
gzipped data files read; over-long items are skipped by name and counted; chat reports questions and turns."""

import gzip
import json

import pytest

import mmspec.eval.suites as suites
from mmspec.cli import main
from mmspec.eval.datasets import chat_items, code_items, read_jsonl

ARGS = ["eval", "--suite", "code", "--methods", "plain,chain", "--prompts", "1", "--max-new-tokens", "4",
        "--repeats", "1", "--warmup", "0", "--no-progress", "--no-plots"]


def snapshot(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_failing_second_run_leaves_the_first_intact(tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    assert main([*ARGS, "--out", str(out), "--seed", "1"]) == 0
    before = snapshot(out)
    assert {"config.yaml", "results.json", "report.md"} <= set(before)

    def broken(*a, **k):
        raise ValueError("corrupt input in the middle of the run")

    monkeypatch.setattr(suites, "compare", broken)
    assert main([*ARGS, "--out", str(out), "--seed", "2"]) == 2
    assert "corrupt input" in capsys.readouterr().err
    assert snapshot(out) == before  # nothing mixed in, nothing lost
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no staging left behind

    monkeypatch.undo()
    assert main([*ARGS, "--out", str(out), "--seed", "3"]) == 0
    assert "was moved to" in capsys.readouterr().err
    moved = [p for p in tmp_path.iterdir() if p.name.startswith("run.prev-")]
    assert len(moved) == 1 and (moved[0] / "results.json").read_bytes() == before["results.json"]
    assert json.loads((out / "results.json").read_text())["config"]["seed"] == 3


def test_out_that_is_a_file_or_cannot_be_created(tmp_path, capsys):
    afile = tmp_path / "taken"
    afile.write_text("x")
    assert main([*ARGS, "--out", str(afile)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mmspec: error:") and "is a file" in err and "Traceback" not in err
    assert main([*ARGS, "--out", "/proc/mmspec-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mmspec: error:") and "/proc" in err and err.count("\n") == 1


def test_non_run_directory_refused(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert main([*ARGS, "--out", str(tmp_path)]) == 2
    assert "holds no mmspec run" in capsys.readouterr().err
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_image_out_under_an_existing_file(tmp_path, capsys):
    afile = tmp_path / "taken"
    afile.write_text("x")
    assert main(["image", "--method", "ar", "--classes", "0", "--out", str(afile / "sub")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mmspec: error:") and "taken" in err


def test_garbled_config_file(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("suites: [code\n  : :")
    assert main(["eval", "--config", str(cfg)]) == 2
    assert "cannot be read" in capsys.readouterr().err


def test_jsonl_gz_reads_like_jsonl(tmp_path):
    rows = [{"task_id": "t/0", "prompt": "def f():\n"}, {"task_id": "t/1", "prompt": "def g():\n"}]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (tmp_path / "h.jsonl").write_text(text)
    (tmp_path / "h.jsonl.gz").write_bytes(gzip.compress(text.encode()))
    assert read_jsonl(tmp_path / "h.jsonl.gz", ("prompt",)) == rows
    assert [i.id for i in code_items(0, str(tmp_path / "h.jsonl.gz"))] == ["t/0", "t/1"]
    (tmp_path / "bad.jsonl.gz").write_bytes(gzip.compress(text.encode())[:20])
    with pytest.raises(ValueError, match="bad.jsonl.gz cannot be read"):
        read_jsonl(tmp_path / "bad.jsonl.gz", ("prompt",))


def test_over_long_item_skipped_named_and_counted(tmp_path):
    rows = [{"task_id": "short", "prompt": "def add(a, b):\n    \"\"\"Add.\"\"\"\n"},
            {"task_id": "huge", "prompt": "x = 1\n" * 2500}]
    data = tmp_path / "code.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    with pytest.warns(UserWarning, match="skipping item huge"):
        assert main([*ARGS, "--prompts", "0", "--code-data", str(data), "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())["suites"]["code"]
    assert [s["id"] for s in res["skipped"]] == ["huge"]
    assert {r["id"] for r in res["records"]} == {"short"}
    assert "Skipped 1 item(s)" in (out / "report.md").read_text()


def test_chat_counts_questions_and_turns(tmp_path):
    qs = [{"question_id": 1, "category": "a", "turns": ["one", "two"]},
          {"question_id": 2, "category": "b", "turns": ["three", "four"]}]
    data = tmp_path / "q.jsonl"
    data.write_text("".join(json.dumps(q) + "\n" for q in qs))
    assert len(chat_items(str(data), 2)) == 4
    from mmspec.eval.config import EvalConfig

    suite = suites.text_suite(EvalConfig(suites=["chat"], chat_data=str(data), num_prompts=2,
                                         methods={"chat": ["plain"]}), "chat")
    assert "2 questions, 4 turns" in suite.notes


def test_chat_turn_after_an_over_long_turn_is_skipped_too(tmp_path):
    qs = [{"question_id": 1, "category": "a", "turns": ["x = 1\n" * 2500, "Now shorter."]},
          {"question_id": 2, "category": "b", "turns": ["def add(a, b):"]}]
    data = tmp_path / "q.jsonl.gz"
    data.write_bytes(gzip.compress("".join(json.dumps(q) + "\n" for q in qs).encode()))
    out = tmp_path / "run"
    args = [a if a != "code" else "chat" for a in ARGS]
    with pytest.warns(UserWarning, match="skipping item 1-2"):
        assert main([*args, "--prompts", "0", "--chat-data", str(data), "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())["suites"]["chat"]
    assert [s["id"] for s in res["skipped"]] == ["1-1", "1-2"]
    assert {r["id"] for r in res["records"]} == {"2-1"}
    assert "2 questions, 3 turns" in res["notes"]


def test_a_dflash_drafter_given_to_the_zoo_code_suite_takes_its_dflash_rows(tmp_path):
    """``mmspec eval --suite code --drafter DIR`` on the zoo target: a DFlash drafter of yours runs the dflash rows
    (the zoo's AR drafter keeps the chain rows, and the zoo's block drafter is not mixed in)."""
    from mmspec import zoo
    from mmspec.eval.config import EvalConfig

    if not (zoo.zoo_home() / "code-dflash" / "zoo.json").exists():
        pytest.skip("zoo:code-dflash is not built")
    mine = str(zoo.zoo_home() / "code-dflash")  # any DFlash directory: the shipped one, read as a path
    suite = suites.text_suite(EvalConfig(suites=["code"], drafter=mine, num_prompts=1, methods=["plain", "chain",
                                                                                                "dflash", "dflash-tree"]),
                              "code")
    assert {"chain", "dflash", "dflash-tree"} <= set(suite.available)
    assert "dflash-tree-lookup" in suite.available  # yours too
    assert not {"dflash-block", "dflash-b8", "dflash-tree-b8"} & set(suite.available)
    assert suite.methods == ["plain", "chain", "dflash", "dflash-tree"]


@pytest.fixture
def wrapped(monkeypatch) -> list:
    """The type names of the inner drafters the eval's ``-auto`` rows wrap in the adaptive policy, as they are built."""
    import mmspec.eval.bench as bench
    names = []

    class Recording(bench.AdaptiveDrafter):
        def __init__(self, inner, **kw):
            names.append(type(inner).__name__)
            super().__init__(inner, **kw)

    monkeypatch.setattr(bench, "AdaptiveDrafter", Recording)
    return names


def test_the_code_suite_times_a_drafting_method_under_the_adaptive_policy(tmp_path, wrapped):
    """``<method>-auto`` rows (what ``mmspec.pipeline`` runs by default) are timed like any other: the drafter runs
    wrapped in the adaptive policy and its output stays exact; methods with no mmspec drafter have no such row."""
    from mmspec.eval.config import EvalConfig

    cfg = EvalConfig(suites=["code"], num_prompts=1, max_new_tokens=8, progress=False, plots=False,
                     methods=["plain", "prompt-lookup-auto", "chain-auto"], out=str(tmp_path))
    suite = suites.text_suite(cfg, "code")
    assert {"chain-auto", "prompt-lookup-auto"} <= set(suite.available)
    assert not {"plain-auto", "mmspec-plain-auto", "hf-assisted-auto"} & set(suite.available)
    assert suite.methods == ["plain", "prompt-lookup-auto", "chain-auto"]
    by = {r["method"]: r for r in suite.run([0], "code")}
    assert by["chain-auto"]["exact"] and by["prompt-lookup-auto"]["exact"]
    assert sorted(set(wrapped)) == ["AutoregressiveDrafter", "PromptLookupDrafter"]
    with pytest.raises(ValueError, match="unknown methods"):
        suites.text_suite(EvalConfig(suites=["code"], num_prompts=1, methods={"code": ["plain-auto"]}), "code")


def test_the_vlm_suite_times_the_block_drafter_under_the_adaptive_policy(tmp_path, wrapped):
    """The VLM suite has ``<method>-auto`` rows too (``mmspec.pipeline`` runs a VLM's drafter under the policy): the
    block drafter wrapped, its answers exact; HF prompt lookup has none."""
    from mmspec.eval.config import EvalConfig

    cfg = EvalConfig(suites=["vlm"], num_prompts=1, max_new_tokens=8, progress=False, plots=False,
                     methods={"vlm": ["plain", "dflash-auto", "prompt-lookup-auto"]}, out=str(tmp_path))
    suite = suites.vlm_suite(cfg)
    assert {"dflash-auto", "eagle-chain-auto", "prompt-lookup-auto"} <= set(suite.available)
    assert not {"plain-auto", "hf-prompt-lookup-auto"} & set(suite.available)
    by = {r["method"]: r for r in suite.run([0], "vlm")}
    assert by["dflash-auto"]["exact"] and by["prompt-lookup-auto"]["exact"]
    assert sorted(set(wrapped)) == ["DFlashDrafter", "PromptLookupDrafter"]
