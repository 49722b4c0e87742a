"""Zoo files are checked on load: flipped bits, truncation, garbage zoo.json, missing files and a missing
config each give one ValueError naming the file and the fix; --micro builds keep off the shipped zoo."""

import json
import shutil

import pytest

from mmspec import zoo
from mmspec.cli import main
from mmspec.zoo import builder
from mmspec.zoo.integrity import status

NAME = "code-drafter"


@pytest.fixture
def home(tmp_path):
    """A private copy of one small zoo model (the shipped one is never touched)."""
    shutil.copytree(zoo.shipped_home() / NAME, tmp_path / NAME)
    return tmp_path


def test_shipped_zoo_records_file_hashes():
    for name in zoo.available():
        path = zoo.shipped_home() / name
        if (path / "zoo.json").exists():
            info = json.loads((path / "zoo.json").read_text())
            assert any(f.endswith(".safetensors") for f in info["files"]), name
            assert status(name, path) == "ok", name


def test_intact_copy_loads(home):
    entry = zoo.load(NAME, home)
    assert entry.model.config.vocab_size > 0


def test_bit_flip_is_named(home):
    weights = home / NAME / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0x10
    weights.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"model\.safetensors differs from its recorded sha256.*"
                                         rf"mmspec zoo build --only {NAME}"):
        zoo.load(NAME, home)
    assert status(NAME, home / NAME).startswith("damaged: model.safetensors")


def test_truncated_weights_are_named(home):
    weights = home / NAME / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(ValueError, match=r"model\.safetensors has 1000 bytes.*truncated"):
        zoo.load(NAME, home)


def test_truncated_weights_without_hashes_still_one_clear_error(home):
    info = json.loads((home / NAME / "zoo.json").read_text())
    del info["files"]
    (home / NAME / "zoo.json").write_text(json.dumps(info))
    weights = home / NAME / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(ValueError, match=rf"cannot be loaded.*mmspec zoo build --only {NAME}"):
        zoo.load(NAME, home)


def test_garbage_zoo_json_is_named(home):
    (home / NAME / "zoo.json").write_text("{not json")
    with pytest.raises(ValueError, match=rf"zoo\.json is not valid JSON.*mmspec zoo build --only {NAME}"):
        zoo.load(NAME, home)


def test_missing_tokenizer_is_named(home):
    (home / NAME / "tokenizer.json").unlink()
    with pytest.raises(ValueError, match=r"tokenizer\.json is missing"):
        zoo.load(NAME, home)


def test_missing_config_refused_not_a_default_model(home):
    (home / NAME / "config.json").unlink()
    info = json.loads((home / NAME / "zoo.json").read_text())
    del info["files"]["config.json"]
    (home / NAME / "zoo.json").write_text(json.dumps(info))
    with pytest.raises(ValueError, match="has no config.json"):
        zoo.load(NAME, home)


def test_checkpoint_dir_without_config_refused(home, tmp_path, capsys):
    from mmspec import pipeline

    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(home / NAME / "model.safetensors", bare / "model.safetensors")
    with pytest.raises(ValueError, match="has no config.json"):
        pipeline(str(bare))
    with pytest.raises(ValueError, match="has no config.json"):
        pipeline("zoo:code-target", drafter=str(bare))
    assert main(["bench", "--model", str(bare), "--draft", "none", "--out", str(tmp_path / "b")]) == 2
    assert main(["eval", "--suite", "code", "--model", str(bare), "--out", str(tmp_path / "e")]) == 2
    err = capsys.readouterr().err
    assert err.count("mmspec: error:") == 2 and err.count("has no config.json") == 2


def test_record_hashes_after_a_deliberate_change(home, capsys):
    (home / NAME / "generation_config.json").write_text("{}")
    assert status(NAME, home / NAME).startswith("damaged")
    assert main(["zoo", "record-hashes", "--home", str(home)]) == 0
    assert status(NAME, home / NAME) == "ok"


def test_micro_build_refuses_the_shipped_zoo(capsys):
    with pytest.raises(ValueError, match="--home DIR"):
        builder.build("code", micro=True, home=zoo.shipped_home(), progress=False)
    assert main(["zoo", "build", "--micro", "--family", "code", "--home", str(zoo.shipped_home())]) == 2
    assert "would overwrite the shipped zoo" in capsys.readouterr().err


def test_zoo_list_shows_damage(home, capsys):
    weights = home / NAME / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1])
    assert main(["zoo", "list", "--home", str(home)]) == 0
    out = capsys.readouterr().out
    assert "damaged" in out and "model.safetensors" in out


def test_demo_says_when_a_model_is_not_the_shipped_one(home):
    from rich.console import Console

    from mmspec.demo import zoo_files_usable

    info = json.loads((home / NAME / "zoo.json").read_text())
    (home / NAME / "zoo.json").write_text(json.dumps({**info, "micro": True}))
    console = Console(record=True, width=200)
    assert zoo_files_usable(home, [NAME], console)
    assert "micro build" in console.export_text()
    weights = home / NAME / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1])
    console = Console(record=True, width=200)
    assert not zoo_files_usable(home, [NAME], console)
    assert f"mmspec zoo build --only {NAME}" in console.export_text()


def test_rebuilt_in_place_differs_from_the_committed_model(tmp_path, capsys):
    import subprocess

    repo = tmp_path / "checkout"
    shutil.copytree(zoo.shipped_home() / NAME, repo / "zoo" / NAME)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "zoo"], check=True)
    assert main(["zoo", "list", "--home", str(repo / "zoo")]) == 0
    assert "committed" not in capsys.readouterr().out
    (repo / "zoo" / NAME / "generation_config.json").write_text("{}")  # a rebuild, hashes recorded again
    assert main(["zoo", "record-hashes", "--home", str(repo / "zoo")]) == 0
    assert main(["zoo", "list", "--home", str(repo / "zoo")]) == 0
    out = capsys.readouterr().out
    assert "committed" in out
