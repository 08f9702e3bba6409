"""Pushing to the Hub, offline: convert.py --push-to-hub and a fine-tuned head's push_to_hub, against a local fake Hub.

The pushes run in one child process whose environment points `huggingface_hub` at the fake server (`HF_ENDPOINT` is
read once, at import, and this process has already imported it in offline mode), with a throwaway `HF_HOME` and
token, so no test can reach the real Hub or use the developer's credentials.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import httpx2
import pytest
from conftest import FIXTURES
from fake_hub import FakeHub
from huggingface_hub import ModelCard
from huggingface_hub.errors import HfHubHTTPError

from elmo_hf.cli.convert import main

ROOT = Path(__file__).resolve().parents[1]
OPTIONS = FIXTURES / "allennlp" / "options.json"
WEIGHTS = FIXTURES / "allennlp" / "lm_weights.hdf5"
FIXTURE_ARGS = ["--options", str(OPTIONS), "--weights", str(WEIGHTS)]
# repository -> the convert.py options that push it
CONVERT_PUSHES = {
    "me/elmo": [],
    "me/elmo-private": ["--private"],
    "me/elmo-branch": ["--revision", "dev"],
    "me/elmo-pr": ["--create-pr"],
}
HEAD_REPO = "me/elmo-ner"

PUSH_SCRIPT = """
import json, sys
import torch
from elmo_hf.cli.convert import main
from elmo_hf import ElmoConfig, ElmoForTokenClassification, ElmoTokenizer
from transformers import AutoModelForTokenClassification, AutoTokenizer

pushes, head_repo = json.loads(sys.argv[1]), sys.argv[2]
for argv in pushes:
    if main(argv) != 0:
        sys.exit(f"convert.py {argv} failed")

# A tiny token-classification head after one training step, pushed with transformers' push_to_hub.
torch.manual_seed(0)
labels = ["O", "B-PER", "I-PER"]
config = ElmoConfig(char_embedding_dim=4, filters=[[1, 4], [2, 8]], num_highway_layers=1, projection_dim=8,
                    lstm_dim=16, num_layers=2, freeze_bilm=False, id2label=dict(enumerate(labels)),
                    label2id={label: i for i, label in enumerate(labels)})
model, tokenizer = ElmoForTokenClassification(config), ElmoTokenizer()
batch = tokenizer([["Ada", "Lovelace", "wrote", "."]], is_split_into_words=True, return_tensors="pt")
loss = model(**batch, labels=torch.tensor([[1, 2, 0, 0]])).loss
loss.backward()
torch.optim.SGD(model.parameters(), lr=0.1).step()
model.eval()
model.push_to_hub(head_repo, tags=["ner"])
tokenizer.push_to_hub(head_repo)

# What was pushed loads back from the Hub and computes the same logits.
loaded = AutoModelForTokenClassification.from_pretrained(head_repo).eval()
loaded_tokenizer = AutoTokenizer.from_pretrained(head_repo)
with torch.no_grad():
    expected = model(**batch).logits
    actual = loaded(**loaded_tokenizer([["Ada", "Lovelace", "wrote", "."]], is_split_into_words=True,
                                       return_tensors="pt")).logits
assert torch.equal(actual, expected), (actual, expected)
assert loaded.config.id2label[1] == "B-PER"
"""


def hub_environment(hub: FakeHub, home: Path) -> dict[str, str]:
    """This environment pointed at `hub`, online, with a throwaway Hugging Face home and token."""
    env = {name: value for name, value in os.environ.items() if not name.startswith(("HF_", "HUGGING"))}
    env.pop("TRANSFORMERS_OFFLINE", None)
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(home), HF_TOKEN="hf_fake_token", HF_HUB_DISABLE_TELEMETRY="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
    return env


@pytest.fixture(scope="module")
def pushed(tmp_path_factory) -> tuple[FakeHub, dict[str, Path], str]:
    """Runs every push once; returns the fake Hub, each repository's local folder, and the child's output."""
    root = tmp_path_factory.mktemp("push")
    folders = {repo_id: root / repo_id.split("/")[1] for repo_id in CONVERT_PUSHES}
    pushes = [[*FIXTURE_ARGS, "--output", str(folders[repo_id]), "--push-to-hub", repo_id, *options]
              for repo_id, options in CONVERT_PUSHES.items()]
    with FakeHub() as hub:
        completed = subprocess.run(
            [sys.executable, "-c", PUSH_SCRIPT, json.dumps(pushes), HEAD_REPO],
            cwd=root, env=hub_environment(hub, root / "hf_home"), capture_output=True, text=True, timeout=300,
            check=False,
        )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return hub, folders, completed.stdout


def folder_files(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in folder.iterdir()}


def test_convert_pushes_the_whole_folder(pushed):
    hub, folders, output = pushed
    files = folder_files(folders["me/elmo"])
    assert {"config.json", "model.safetensors", "tokenizer_config.json", "README.md", "configuration_elmo.py",
            "modeling_elmo.py", "tokenization_elmo.py"} <= set(files)
    assert hub.repos["me/elmo"].files["main"] == files
    [commit] = [commit for commit in hub.commits if commit.repo_id == "me/elmo"]
    assert commit.revision == "main" and commit.files == sorted(files)
    assert commit.summary == "Add ELMo converted with elmo-hf from elmo"
    assert hub.repos["me/elmo"].private is False
    assert f"pushed {folders['me/elmo']} -> {hub.url}/me/elmo/commit/{commit.oid}" in output


def test_pushed_card_names_the_repository(pushed):
    hub, _, _ = pushed
    card = ModelCard(hub.file("me/elmo", "README.md").decode())
    assert card.data.library_name == "transformers" and card.data.license == "apache-2.0"
    assert 'from_pretrained("me/elmo", trust_remote_code=True)' in card.text


def test_private(pushed):
    hub, folders, _ = pushed
    assert hub.repos["me/elmo-private"].private is True
    assert hub.repos["me/elmo-private"].files["main"] == folder_files(folders["me/elmo-private"])


def test_revision_creates_the_branch_and_leaves_main_alone(pushed):
    hub, folders, _ = pushed
    repo = hub.repos["me/elmo-branch"]
    assert repo.files["main"] == {}
    assert repo.files["dev"] == folder_files(folders["me/elmo-branch"])
    assert [commit.revision for commit in hub.commits if commit.repo_id == "me/elmo-branch"] == ["dev"]


def test_create_pr_commits_to_a_pull_request(pushed):
    hub, folders, output = pushed
    repo = hub.repos["me/elmo-pr"]
    assert [pull_request["title"] for pull_request in repo.pull_requests] == [
        "Add ELMo converted with elmo-hf from elmo-pr"
    ]
    assert repo.files["main"] == {}
    assert repo.files["refs/pr/1"] == folder_files(folders["me/elmo-pr"])
    assert [commit.revision for commit in hub.commits if commit.repo_id == "me/elmo-pr"] == ["refs/pr/1"]
    assert f"-> {hub.url}/me/elmo-pr/discussions/1" in output


def test_fine_tuned_head_and_tokenizer_push_to_hub(pushed):
    hub, _, _ = pushed
    files = hub.repos[HEAD_REPO].files["main"]
    assert {"config.json", "model.safetensors", "tokenizer_config.json", "README.md", "configuration_elmo.py",
            "modeling_elmo.py", "tokenization_elmo.py"} <= set(files)
    config = json.loads(files["config.json"])
    assert config["architectures"] == ["ElmoForTokenClassification"]
    assert config["auto_map"]["AutoModelForTokenClassification"] == "modeling_elmo.ElmoForTokenClassification"
    assert [commit.summary for commit in hub.commits if commit.repo_id == HEAD_REPO] == [
        "Upload ElmoForTokenClassification", "Upload tokenizer"
    ]
    card = ModelCard(files["README.md"].decode())
    assert card.data.library_name == "transformers" and "ner" in card.data.tags


def bad_push(tmp_path, capsys, *options: str) -> str:
    """Runs convert.py with `options`, expects an argument error, checks that nothing was written; returns stderr."""
    output = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        main([*FIXTURE_ARGS, "--output", str(output), *options])
    assert exit_info.value.code == 2
    assert not output.exists() and list(tmp_path.iterdir()) == []
    return capsys.readouterr().err


@pytest.mark.parametrize("repo_id", ["me/elmo small", "me/elmo/v1", "me/-elmo-", "me/elmo..x"])
def test_malformed_repo_id(tmp_path, capsys, repo_id):
    assert f"--push-to-hub {repo_id!r} is not a valid repository id" in bad_push(tmp_path, capsys, "--push-to-hub",
                                                                                   repo_id, "--token", "hf_x")


def test_repo_id_needs_a_namespace(tmp_path, capsys):
    error = bad_push(tmp_path, capsys, "--push-to-hub", "elmo", "--token", "hf_x")
    assert "--push-to-hub 'elmo' needs its namespace, as in 'your-name/elmo'" in error


def test_create_pr_with_a_branch(tmp_path, capsys):
    error = bad_push(tmp_path, capsys, "--push-to-hub", "me/elmo", "--token", "hf_x", "--create-pr",
                     "--revision", "dev")
    assert "--create-pr opens a pull request against 'main'; it cannot go with --revision 'dev'" in error


def test_create_pr_against_main_is_allowed(tmp_path, monkeypatch):
    pushes = []

    def push_to_hub(folder, *args, **kwargs):
        pushes.append((folder, args, kwargs))
        return SimpleNamespace(pr_url="pull request", commit_url="commit")

    monkeypatch.setattr("elmo_hf.cli.convert.push_to_hub", push_to_hub)
    assert main([*FIXTURE_ARGS, "--output", str(tmp_path / "out"), "--push-to-hub", "me/elmo", "--token", "hf_x",
                 "--create-pr", "--revision", "main"]) == 0
    push = {"token": "hf_x", "private": None, "revision": "main", "create_pr": True, "timeout": 60.0, "retries": 5}
    assert pushes == [(tmp_path / "out", ("me/elmo",), push)]


def test_push_without_a_token(tmp_path, capsys, monkeypatch):
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("huggingface_hub.constants.HF_TOKEN_PATH", str(tmp_path / "no-token"))
    error = bad_push(tmp_path, capsys, "--push-to-hub", "me/elmo")
    assert "run `hf auth login`, set HF_TOKEN or pass --token" in error


def test_failed_push_keeps_the_folder(tmp_path, capsys, monkeypatch):
    def push_to_hub(*args, **kwargs):
        response = httpx2.Response(403, request=httpx2.Request("POST", "https://hub.invalid/api/repos/create"))
        raise HfHubHTTPError("403 Forbidden: no write access to me", response=response)

    monkeypatch.setattr("elmo_hf.cli.convert.push_to_hub", push_to_hub)
    output = tmp_path / "out"
    assert main([*FIXTURE_ARGS, "--output", str(output), "--push-to-hub", "me/elmo", "--token", "hf_x"]) == 1
    assert capsys.readouterr().err.startswith(
        f"error: pushing to me/elmo failed (403 Forbidden: no write access to me). The converted folder is complete "
        f"at {output}; push it later with: hf upload me/elmo {output}\n"
    )
    assert (output / "model.safetensors").is_file()


@pytest.mark.parametrize("option", [["--private"], ["--revision", "dev"], ["--create-pr"], ["--token", "hf_x"]])
def test_push_options_need_push_to_hub(tmp_path, capsys, option):
    assert f"{option[0]} needs --push-to-hub" in bad_push(tmp_path, capsys, *option)
