"""mmspec eval end to end on the committed zoo (tiny settings): the run directory, numbers that agree with each
other (τ = new tokens / target forwards, speedup = summed base seconds / summed method seconds), config
round trip, user data files and checkpoint targets, the merge of per-process records, and a real 2-process
``accelerate launch`` run whose merged records equal a single-process run's."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mmspec.cli import main
from mmspec.eval.aggregate import merge_shards, summarise, summarise_suite
from mmspec.eval.config import EvalConfig, read_config_file
from mmspec.eval.distributed import Processes

ROOT = Path(__file__).resolve().parents[2]
QUESTIONS = [
    {"question_id": 1, "category": "coding", "turns": ["Write a function that adds two numbers.", "Add a docstring."]},
    {"question_id": 2, "category": "qa", "turns": ["What does the yield keyword do?"]},
]
TEXT_METHODS = "plain,chain,deer,diffuspec-lattice"
FIXED = ("method", "item", "id", "category", "new_tokens", "target_forwards", "row_forwards", "accept_lengths", "exact")


def fixed(records):
    """What must not depend on timing or on the number of processes."""
    return [{k: r[k] for k in FIXED} for r in records]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval")
    questions = root / "question.jsonl"
    questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    out = root / "run"
    rc = main(["eval", "--suite", "code,chat,vlm,image", "--methods",
               f"{TEXT_METHODS},msd-chain,flash-1,spec-chain,lantern-chain", "--prompts", "2",
               "--max-new-tokens", "10", "--chat-data", str(questions), "--classes", "0,1", "--no-quality",
               "--out", str(out), "--no-progress"])
    assert rc == 0
    return out, json.loads((out / "results.json").read_text())


def test_run_directory(run):
    out, results = run
    for name in ("results.json", "report.md", "config.yaml"):
        assert (out / name).stat().st_size > 0
    for suite in ("code", "chat", "vlm", "image"):
        assert (out / f"{suite}_speedup.png").stat().st_size > 1000
        assert (out / f"{suite}_accept.png").stat().st_size > 1000
        assert set(results["suites"][suite]["plots"]) == {"speedup", "accepted lengths"}
    md = (out / "report.md").read_text()
    assert "## Summary" in md and "## chat" in md and "Speedup by category" in md
    assert "| method | coding | qa | overall |" in md  # the chat file's categories, Spec-Bench layout
    chat = results["suites"]["chat"]
    assert [r["id"] for r in chat["records"] if r["method"] == "plain"] == ["1-1", "1-2", "2-1"]


def test_numbers_are_consistent(run):
    _, results = run
    for name, suite in results["suites"].items():
        records = suite["records"]
        for r in records:
            if r["target_forwards"] is not None:  # one prompt per call: every forward serves the one row
                assert r["target_forwards"] == r["row_forwards"] == len(r["accept_lengths"])
                assert sum(r["accept_lengths"]) == r["new_tokens"]
        base = {r["item"]: r["seconds"] for r in records if r["method"] == suite["base"]}
        for row in suite["summary"]:
            mine = [r for r in records if r["method"] == row["method"]]
            assert row["new_tokens"] == sum(r["new_tokens"] for r in mine)
            assert row["speedup"] == pytest.approx(sum(base.values()) / sum(r["seconds"] for r in mine))
            assert row["tokens_per_s"] == pytest.approx(row["new_tokens"] / row["seconds"])
            if row["method"] == suite["base"]:
                assert row["tau"] == 1.0 and row["speedup"] == pytest.approx(1.0)
            else:
                assert row["tau"] == pytest.approx(row["new_tokens"] / row["target_forwards"])
                prefills = sum(1 for r in mine if r["accept_lengths"])  # one prefill token per prompt, not a step
                assert sum(int(k) * v for k, v in row["accept_hist"].items()) == row["new_tokens"] - prefills
                assert 0 < row["draft_share"] < 1
            if name == "image":  # sampled pictures: no exactness claim
                assert row["exact"] is None
            else:  # greedy and lossless
                assert row["exact"] == 1.0, (name, row["method"])
        cats = suite["categories"]
        for row in suite["summary"]:
            per_cat = [x for rows in cats.values() for x in rows if x["method"] == row["method"]]
            assert sum(x["seconds"] for x in per_cat) == pytest.approx(row["seconds"])
            assert sum(x["prompts"] for x in per_cat) == row["prompts"]
    assert set(results["suites"]["image"]["categories"]) == {"red circle", "green circle"}
    assert results["suites"]["code"]["methods"] == TEXT_METHODS.split(",")


def test_config_round_trip(run, tmp_path):
    out, results = run
    saved = read_config_file(out / "config.yaml")
    assert saved == results["config"] and saved["methods"]["vlm"] == ["plain", "chain", "msd-chain", "flash-1"]
    assert EvalConfig(**saved).to_dict() == saved
    # a small run re-run from its own config.yaml (JSON works as well), to another directory
    first = tmp_path / "first"
    (tmp_path / "run.json").write_text(json.dumps({"suite": "code", "methods": ["chain", "tree"],
                                                   "num_prompts": 2, "max_new_tokens": 8, "progress": False,
                                                   "plots": False, "out": str(first)}))
    assert main(["eval", "--config", str(tmp_path / "run.json")]) == 0
    again = tmp_path / "again"
    assert main(["eval", "--config", str(first / "config.yaml"), "--out", str(again)]) == 0
    a, b = (json.loads((d / "results.json").read_text()) for d in (first, again))
    assert {**a["config"], "out": None} == {**b["config"], "out": None}
    assert fixed(a["suites"]["code"]["records"]) == fixed(b["suites"]["code"]["records"])


def test_sampling_runs_repeat_with_their_seed(tmp_path):
    args = ["eval", "--suite", "code", "--methods", "chain,deer", "--prompts", "2", "--max-new-tokens", "12",
            "--do-sample", "--temperature", "0.8", "--seed", "3", "--no-progress", "--no-plots"]
    runs = []
    for name in ("a", "b"):
        assert main([*args, "--out", str(tmp_path / name)]) == 0
        runs.append(json.loads((tmp_path / name / "results.json").read_text())["suites"]["code"])
    assert fixed(runs[0]["records"]) == fixed(runs[1]["records"])
    assert all(r["exact"] is None for r in runs[0]["summary"])  # no exactness claim under sampling
    assert all(r["tau"] >= 1.0 for r in runs[0]["summary"])


def test_device_places_the_zoo_models_of_the_text_suites(tmp_path, monkeypatch):
    """``--device`` loads the code suite's zoo models (target and every drafter, which load lazily inside the
    suite's run) on that device, and leaves the image suite's where ``--image-device`` puts them; the zoo's
    placement is back to the CPU after the run."""
    import mmspec.zoo as zoo
    from mmspec.eval.run import zoo_device

    seen = []
    real_placed = zoo._placed

    def placed(entry, device):  # every zoo.load ends here, with the device it puts the model on
        seen.append((entry.name, device))
        return real_placed(entry, device)

    monkeypatch.setattr(zoo, "_placed", placed)
    assert main(["eval", "--suite", "code", "--methods", "chain,dflash", "--prompts", "1", "--max-new-tokens", "8",
                 "--device", "cpu", "--out", str(tmp_path / "run"), "--no-progress", "--no-plots"]) == 0
    res = json.loads((tmp_path / "run" / "results.json").read_text())
    assert res["config"]["device"] == "cpu" and all(r["exact"] == 1.0 for r in res["suites"]["code"]["summary"])
    names = {n for n, _ in seen}
    assert {"code-drafter", "code-dflash"} <= names and all(d == "cpu" for _, d in seen)
    assert zoo._device is None
    cfg = EvalConfig(suites="code,image", device="cuda")
    assert zoo_device(cfg, "code") == "cuda" and zoo_device(cfg, "image") is None


def test_user_data_and_checkpoint_targets(tmp_path):
    from mmspec.zoo import vlm_data as vd
    from mmspec.zoo.home import zoo_home

    code = tmp_path / "humaneval.jsonl"
    code.write_text(json.dumps({"task_id": "t/0", "prompt": "def add(a, b):\n    \"\"\"Add.\"\"\"\n"}) + "\n"
                    + json.dumps({"task_id": "t/1", "prompt": "def mul(a, b):\n"}) + "\n")
    rows = []
    for i, sc in enumerate(vd.scenes("test", 2)):
        sc.image().save(tmp_path / f"scene{i}.png")
        rows.append(json.dumps({"image": f"scene{i}.png", "question": "what colour is the circle?", "category": "colour"}))
    vlm = tmp_path / "vlm.jsonl"
    vlm.write_text("\n".join(rows) + "\n")
    home = zoo_home()
    # the zoo's folders read as plain checkpoint directories: a user's target, AR drafter and Dream-style dLM
    out = tmp_path / "run"
    assert main(["eval", "--suite", "code", "--data", str(code), "--model", str(home / "code-target"), "--drafter",
                 str(home / "code-drafter"), "--dlm", str(home / "code-deer"), "--device-map", "auto",
                 "--max-new-tokens", "8", "--out", str(out), "--no-progress", "--no-plots"]) == 0
    res = json.loads((out / "results.json").read_text())["suites"]["code"]
    assert [r["id"] for r in res["records"] if r["method"] == "plain"] == ["t/0", "t/1"]
    assert {"hf-assisted", "dynamic", "deer", "diffuspec"} <= {r["method"] for r in res["summary"]}
    assert all(r["exact"] == 1.0 for r in res["summary"])
    out = tmp_path / "vlm"
    assert main(["eval", "--suite", "vlm", "--data", str(vlm), "--methods", "mmspec-plain,msd-chain",
                 "--max-new-tokens", "8", "--out", str(out), "--no-progress", "--no-plots"]) == 0
    res = json.loads((out / "results.json").read_text())["suites"]["vlm"]
    assert list(res["categories"]) == ["colour"] and all(r["exact"] == 1.0 for r in res["summary"])
    # the own-engine baseline may be asked for by name, and with it the report has its cost model
    assert {"mmspec-plain", "msd-chain"} <= {r["method"] for r in res["summary"]}
    assert {row["method"] for row in res["cost_model"]} >= {"mmspec-plain", "msd-chain"}
    out = tmp_path / "vlm-dirs"  # a checkpoint VLM (saved in float16) with a feature drafter directory
    assert main(["eval", "--suite", "vlm", "--vlm-model", str(home / "vlm-target"), "--vlm-drafter",
                 str(home / "vlm-flash"), "--prompts", "2", "--max-new-tokens", "8", "--out", str(out),
                 "--no-progress", "--no-plots"]) == 0
    res = json.loads((out / "results.json").read_text())["suites"]["vlm"]
    assert "flash" in res["methods"] and all(r["exact"] == 1.0 for r in res["summary"])


def test_bad_requests_are_errors(tmp_path, capsys):
    bad = tmp_path / "q.jsonl"
    bad.write_text(json.dumps({"question_id": 1, "turns": ["hi"]}) + "\n")
    cases = [
        (["--suite", "code", "--methods", "plain,dere"], "belongs to none"),
        (["--suite", "vlm", "--vlm-model", "zoo:code-target"], "needs a LLaVA-class VLM target"),
        (["--suite", "code,vlm", "--data", str(bad)], "exactly one"),
        (["--suite", "chat", "--data", str(bad)], "missing field"),
        (["--suite", "code,vlm", "--methods", "deer"], "suite vlm: none of the methods"),
        (["--suite", "sound"], "unknown suites"),
        (["--suite", "code", "--device", "nowhere"], "is not a device"),
        (["--suite", "image", "--device", "cpu"], "applies to the code / chat / vlm suite(s)"),
        (["--suite", "code", "--model", str(tmp_path), "--device", "cpu"], "takes --device-map"),
    ]
    for argv, message in cases:
        assert main(["eval", *argv, "--out", str(tmp_path / "x"), "--no-progress"]) == 2, argv
        assert message in capsys.readouterr().err, argv


def _rec(item, method, secs, new, fwd, rank, cat="a"):
    return {"item": item, "method": method, "seconds": secs, "new_tokens": new, "category": cat, "rank": rank,
            "exact": True, "target_forwards": fwd, "row_forwards": fwd, "accept_lengths": [1] * fwd if fwd else [],
            "draft_time": 0.1 if fwd else None, "verify_time": 0.3 if fwd else None}


def test_merge_of_process_records():
    """Shard 0 timed items 0-1, shard 1 item 2 (a slower process): the merged speedup is the ratio of summed
    seconds, τ the ratio of summed tokens and forwards; each shard keeps its own figures."""
    shard0 = [_rec(0, "plain", 1.0, 10, None, 0), _rec(0, "spec", 0.5, 10, 5, 0),
              _rec(1, "plain", 1.0, 10, None, 0, "b"), _rec(1, "spec", 0.5, 10, 4, 0, "b")]
    shard1 = [_rec(2, "plain", 3.0, 10, None, 1), _rec(2, "spec", 2.0, 10, 6, 1)]
    merged = merge_shards([shard0, shard1])
    assert [r["item"] for r in merged] == [0, 0, 1, 1, 2, 2]
    spec = next(r for r in summarise(merged, "plain") if r["method"] == "spec")
    assert spec["speedup"] == pytest.approx(5.0 / 3.0) and spec["tau"] == pytest.approx(30 / 15)
    assert spec["prompts"] == 3 and spec["draft_share"] == pytest.approx(0.25)
    suite = summarise_suite(merged, "plain")
    assert [r["speedup"] for r in suite["shards"]["0"] if r["method"] == "spec"] == [pytest.approx(2.0)]
    assert [r["speedup"] for r in suite["shards"]["1"] if r["method"] == "spec"] == [pytest.approx(1.5)]
    assert set(suite["categories"]) == {"a", "b"}
    with pytest.raises(ValueError, match="more than one process"):
        merge_shards([shard0, shard0])


def test_shard_files_gathered_by_the_main_process(tmp_path):
    procs = Processes()  # no launch: a lone process, whose gather is simulated for two ranks
    procs.world = 2
    procs.rank = 1
    assert procs.gather(tmp_path, "code", [_rec(2, "plain", 1.0, 4, None, 1)]) is None
    procs.rank = 0
    shards = procs.gather(tmp_path, "code", [_rec(0, "plain", 1.0, 4, None, 0)])
    assert [[r["item"] for r in s] for s in shards] == [[0], [2]]
    assert sorted(p.name for p in (tmp_path / "shards").iterdir()) == ["code.rank0.json", "code.rank1.json"]


def test_two_process_accelerate_launch_merges(tmp_path):
    args = ["--suite", "code,vlm", "--methods", "chain,deer,msd-chain", "--prompts", "3",
            "--max-new-tokens", "8", "--no-progress", "--no-plots"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    # on a CPU-only machine accelerate's torchrun path is --multi_gpu; the processes then talk over gloo
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "mmspec.eval", *args, "--out", str(tmp_path / "two")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert main(["eval", *args, "--out", str(tmp_path / "one")]) == 0
    two, one = (json.loads((tmp_path / d / "results.json").read_text()) for d in ("two", "one"))
    assert two["environment"]["processes"] == 2
    for suite in ("code", "vlm"):
        recs = two["suites"][suite]["records"]
        assert {r["rank"] for r in recs} == {0, 1}
        assert fixed(recs) == fixed(one["suites"][suite]["records"])
        assert set(two["suites"][suite]["shards"]) == {"0", "1"}
    assert "Per process" in (tmp_path / "two" / "report.md").read_text()


@pytest.mark.slow
def test_image_quality_joins_the_image_suite(tmp_path):
    """The image suite's quality run (its own files under image/) joined to this run's per-class latency."""
    out = tmp_path / "run"
    # mmspec-plain (in every default run) is a latency baseline the quality run has no entry for
    assert main(["eval", "--suite", "image", "--classes", "0", "--methods", "mmspec-plain,spec-chain,lantern-chain",
                 "--per-class", "1", "--image-latency", "1", "--out", str(out), "--no-progress"]) == 0
    suite = json.loads((out / "results.json").read_text())["suites"]["image"]
    assert set(suite["quality_by_method"]) == {"ar", "spec-chain", "lantern-chain"}
    assert suite["quality_by_method"]["lantern-chain"]["max_moved_mass"] <= 0.1 + 1e-6
    assert (out / "image_speed_quality.png").exists() and (out / "image" / "image_bench.json").exists()
    assert "Fréchet distance" in (out / "report.md").read_text()


def _read_answers(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _speed_py(file: Path, base_file: Path, tokenizer) -> tuple[float, list[int]]:
    """Spec-Bench's evaluation/speed.py arithmetic (task 'overall'): the mean over questions of the method's
    Σ new_tokens / Σ wall_time, over the mean of the baseline's, whose tokens are counted from its answer text
    as len(tokenizer(text).input_ids) - 1; mean accepted tokens over every step of every answer."""
    speeds, accepts = [], []
    for d in _read_answers(file):
        c = d["choices"][0]
        speeds.append(sum(c["new_tokens"]) / sum(c["wall_time"]))
        accepts.extend(c["accept_lengths"])
    base = []
    for d in _read_answers(base_file):
        c = d["choices"][0]
        tokens = sum(len(tokenizer(t).input_ids) - 1 for t in c["turns"])
        base.append(tokens / sum(c["wall_time"]))
    return (sum(speeds) / len(speeds)) / (sum(base) / len(base)), accepts


def test_spec_bench_answer_files(run):
    """One answer file per method that Spec-Bench's speed.py reads to the report's figures (speedup within 1%,
    mean accepted tokens = τ) and whose greedy turns equal the baseline's (equal.py)."""
    from transformers import AutoTokenizer

    out, results = run
    assert "vlm" not in {p.name for p in (out / "spec_bench").iterdir()}  # Spec-Bench's files are text answers
    tokenizer = AutoTokenizer.from_pretrained(out / "spec_bench" / "tokenizer")
    for name in ("code", "chat"):
        suite = results["suites"][name]
        assert set(suite["spec_bench"]["files"]) == set(suite["methods"])
        plain = _read_answers(out / "spec_bench" / name / "plain.jsonl")
        questions = {q["question_id"] for q in QUESTIONS} if name == "chat" else None
        for row in suite["summary"]:
            path = out / "spec_bench" / name / f"{row['method']}.jsonl"
            answers = _read_answers(path)
            for d in answers:
                assert set(d) == {"question_id", "category", "answer_id", "model_id", "choices", "tstamp"}
                c = d["choices"][0]
                n = len(c["turns"])
                assert all(len(c[k]) == n for k in ("decoding_steps", "new_tokens", "wall_time"))
                assert all(isinstance(t, str) for t in c["turns"]) and all(w > 0 for w in c["wall_time"])
            if questions is not None:
                assert {str(q) for q in questions} == {d["question_id"] for d in answers}
                assert [len(d["choices"][0]["turns"]) for d in answers] == [2, 1]  # turns grouped per question
            assert [d["choices"][0]["turns"] for d in answers] == [d["choices"][0]["turns"] for d in plain]
            speedup, accepts = _speed_py(path, out / "spec_bench" / name / "plain.jsonl", tokenizer)
            assert speedup == pytest.approx(row["specbench_speedup"], rel=0.01), (name, row["method"])
            assert sum(accepts) / len(accepts) == pytest.approx(row["tau"])


def test_latency_percentiles(run):
    _, results = run
    for name in ("code", "chat", "vlm"):
        suite = results["suites"][name]
        for r in suite["records"]:
            assert 0 < r["ttft"] <= r["seconds"] and (r["tpot"] is None or 0 < r["tpot"] < r["seconds"])
        for row in suite["summary"]:
            assert 0 < row["ttft_p50"] <= row["ttft_p95"] and 0 < row["tpot_p50"] <= row["tpot_p95"]
    assert "| method | TTFT p50 | TTFT p95 | TPOT p50 | TPOT p95 | Spec-Bench speedup |" in (
        run[0] / "report.md").read_text()
