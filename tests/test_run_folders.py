"""No run overwrites another: every command that writes a folder (``mmspec image``, ``bench``, ``demo``, like
``mmspec eval``) writes it whole at the end, moves an earlier run aside to ``NAME.prev-<timestamp>`` and says so,
leaves nothing half-written when it fails, and refuses a file or a foreign non-empty folder before any work.
``mmspec image`` reports its wall time besides the decoding seconds, and measures the output TV only when asked.

The heavy parts (pipelines, suites, zoo families) are replaced by stand-ins: these tests are about the folders."""

import json
import time
from types import SimpleNamespace

import pytest
import torch

import mmspec.cli as cli
import mmspec.demo as demo
from mmspec.cli import main


class FakeImageGen:
    """What ``mmspec image`` uses of an image pipeline; ``fail`` raises in the middle of the run."""

    def __init__(self, fail=False):
        self.layout = SimpleNamespace(num_classes=4)
        self.fail, self.calls = fail, []

    def generate(self, chunk, seed=0, **kw):
        self.calls.append(kw)
        if self.fail:
            raise RuntimeError("died while decoding")
        measured = kw.get("measure_output_tv", False)
        time.sleep(0.03)  # 0.02 s decoding (+ 0.01 s measuring)
        stats = SimpleNamespace(new_tokens=8, target_forwards=2, row_forwards=4, moved_mass=[0.1],
                                output_tv=[0.05] if measured else [], output_tv_skipped=0,
                                output_tv_time=0.01 if measured else 0.0)
        return SimpleNamespace(images=torch.zeros(len(chunk), 3, 8, 8), seconds=0.02, stats=stats,
                               config={"method": "lantern++", "lam": 10.0, "class_ids": chunk, "seed": seed})


def _image(monkeypatch, out, *extra, fail=False):
    gen = FakeImageGen(fail)
    monkeypatch.setattr(cli, "pipeline", lambda *a, **k: gen)
    return main(["image", "--classes", "0,1", "--batch", "1", "--out", str(out), *extra]), gen


def _bench_report():
    return {"results": [{"method": "plain", "tau": None, "speedup": 1.0, "exact": 1.0, "seconds": 0.1}],
            "config": {"prompts": "random"}, "load": None}


def _fake_bench(monkeypatch, fail=False):
    def run_bench(**kw):
        if fail:
            raise RuntimeError("died while timing")
        return _bench_report()

    def write_report(report, out_dir):  # the JSON / Markdown writer, without the full report a real bench makes
        js, md = out_dir / "bench.json", out_dir / "bench.md"
        js.write_text(json.dumps(report))
        md.write_text("# bench")
        return js, md
    monkeypatch.setattr(cli, "run_bench", run_bench)
    monkeypatch.setattr(cli, "write_report", write_report)


def _fake_demo(monkeypatch, tmp_path, fail=False):
    home = tmp_path / "zoo"
    monkeypatch.setattr(demo, "zoo_home", lambda: home)
    for name in ("code-target", "code-drafter", *demo.family_names("vlm"), *demo.family_names("image")):
        (home / name).mkdir(parents=True, exist_ok=True)
        (home / name / "zoo.json").write_text("{}")
    monkeypatch.setattr(demo, "zoo_files_usable", lambda *a: True)
    monkeypatch.setattr(demo, "load_average", lambda: None)
    monkeypatch.setattr(demo, "load_check", lambda start: {"warning": None, "busy": False})

    def family(name):
        def run(out, console, n, m, **kw):
            if fail and name == "image":
                raise RuntimeError("died in the image family")
            (out / f"{name}.json").write_text(json.dumps({"results": []}))
            return {"results": []}
        return run

    for name in ("code", "vlm", "image"):
        monkeypatch.setattr(demo, f"{name}_demo", family(name))


def _run(command, monkeypatch, tmp_path, out, fail=False):
    if command == "image":
        return _image(monkeypatch, out, fail=fail)[0]
    if command == "bench":
        _fake_bench(monkeypatch, fail)
        return main(["bench", "--out", str(out)])
    _fake_demo(monkeypatch, tmp_path, fail)
    return main(["demo", "--out", str(out)])


MARKER = {"image": "stats.json", "bench": "bench.json", "demo": "load.json"}


@pytest.mark.parametrize("command", ["image", "bench", "demo"])
def test_a_second_run_moves_the_first_aside_and_says_so(command, monkeypatch, tmp_path, capsys):
    out = tmp_path / "run"
    assert _run(command, monkeypatch, tmp_path, out) == 0
    (out / MARKER[command]).write_text('"first run"')  # tell the first run's files apart
    capsys.readouterr()
    assert _run(command, monkeypatch, tmp_path, out) == 0
    moved = [p for p in tmp_path.iterdir() if p.name.startswith("run.prev-")]
    assert len(moved) == 1 and (moved[0] / MARKER[command]).read_text() == '"first run"'
    assert (out / MARKER[command]).read_text() != '"first run"'
    err = capsys.readouterr().err
    assert f"mmspec {command}: the earlier run in {out} was moved to {moved[0]}" in err
    assert not list(tmp_path.glob(".run.partial*"))


@pytest.mark.parametrize("command", ["image", "bench", "demo"])
def test_a_failed_run_leaves_the_earlier_run_and_no_half_folder(command, monkeypatch, tmp_path):
    out = tmp_path / "run"
    assert _run(command, monkeypatch, tmp_path, out) == 0
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(RuntimeError, match="died"):
        _run(command, monkeypatch, tmp_path, out, fail=True)
    assert sorted(p.name for p in out.iterdir()) == before
    assert not list(tmp_path.glob(".run.partial*")) and not list(tmp_path.glob("run.prev-*"))
    # and into a new folder: nothing at all is left
    with pytest.raises(RuntimeError, match="died"):
        _run(command, monkeypatch, tmp_path, tmp_path / "fresh", fail=True)
    assert not (tmp_path / "fresh").exists() and not list(tmp_path.glob(".fresh.partial*"))


@pytest.mark.parametrize("command", ["image", "bench", "demo"])
def test_a_file_or_a_foreign_folder_is_refused_before_any_work(command, monkeypatch, tmp_path, capsys):
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "todo.txt").write_text("mine")
    a_file = tmp_path / "a.txt"
    a_file.write_text("mine too")
    for out, what in ((mine, "holds no mmspec run"), (a_file, "is a file")):
        assert _run(command, monkeypatch, tmp_path, out) == 2
        assert what in capsys.readouterr().err
    assert (mine / "todo.txt").read_text() == "mine" and a_file.read_text() == "mine too"
    assert sorted(p.name for p in mine.iterdir()) == ["todo.txt"]


def test_image_records_where_its_files_end_up(monkeypatch, tmp_path):
    out = tmp_path / "pics"
    assert _image(monkeypatch, out)[0] == 0
    stats = json.loads((out / "stats.json").read_text())
    assert stats["grid"] == str(out / "grid.png") and (out / "grid.png").exists()  # not the staging folder


def test_image_reports_wall_time_and_measures_the_output_tv_only_when_asked(monkeypatch, tmp_path, capsys):
    out = tmp_path / "pics"
    rc, gen = _image(monkeypatch, out)
    assert rc == 0 and all("measure_output_tv" not in kw for kw in gen.calls)  # off by default
    stats = json.loads((out / "stats.json").read_text())
    assert stats["seconds"] == pytest.approx(0.04)  # decoding: two batches of 0.02 s
    assert stats["wall_seconds"] >= stats["seconds"] and {"seconds", "wall_seconds"} <= set(stats["timing"])
    assert stats["output_tv_measured"] == 0 and "output_tv_seconds" not in stats
    line = capsys.readouterr().out
    assert "decoding 0.04 s" in line and "s wall" in line
    rc, gen = _image(monkeypatch, out, "--measure-tv")
    assert rc == 0 and all(kw.get("measure_output_tv") for kw in gen.calls)
    stats = json.loads((out / "stats.json").read_text())
    assert stats["output_tv_measured"] == 2 and stats["output_tv_seconds"] == pytest.approx(0.02)
    assert stats["seconds"] == pytest.approx(0.04) and stats["wall_seconds"] >= 0.06 and "output_tv_seconds" in stats["timing"]
    assert "measuring the output TV" in capsys.readouterr().out
