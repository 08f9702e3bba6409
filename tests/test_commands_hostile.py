"""`elmo-hf perplexity`, `merge-shards` and `pretrain` as a hostile user tries them: shard names embed never writes,
shards that are not embed's, a batch size beyond any integer, a `--json` name too long for its folder or already
there, a vocabulary file that cannot be used, options too large for the text. Each is one `error:` line (exit 2) with
nothing written and the inputs intact, or the correct result."""

import json
import math
import os
import shutil
from pathlib import Path

import h5py
import pytest
import torch
from conftest import TINY_PRETRAINING, tiny_config

from elmo_hf import ElmoForPreTraining, ElmoModel, ElmoTokenizer
from elmo_hf.cli import main
from elmo_hf.corpus import data as data_module
from elmo_hf.corpus import perplexity as perplexity_module
from elmo_hf.corpus.data import CorpusError, ElmoWordVocabulary
from elmo_hf.corpus.embed import EmbedError, merge_shards

LINES = ["the cat sat", "a dog barked", "", "birds fly", "ok"]

pytestmark = pytest.mark.usefixtures("one_thread")


def one_error_line(err: str) -> str:
    """The single `error:` line of a command's standard error (and no traceback)."""
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in folder.iterdir()}


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    """A folder holding `out.hdf5.shard-0-of-2` and `out.hdf5.shard-1-of-2` of a two-process embed run."""
    root = tmp_path_factory.mktemp("shards")
    torch.manual_seed(0)
    ElmoModel(tiny_config()).eval().save_pretrained(root / "model")
    ElmoTokenizer().save_pretrained(root / "model")
    source = root / "in.txt"
    source.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    folder = root / "shards"
    folder.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WORLD_SIZE", "2")
        for rank in range(2):
            patch.setenv("RANK", str(rank))
            arguments = [source, folder / "out.hdf5", "--model", root / "model", "--no-progress"]
            assert main(["embed", *map(str, arguments)]) == 0
    return folder


@pytest.fixture
def run_folder(shards, tmp_path) -> Path:
    """A fresh copy of the shards, for one test to damage."""
    return Path(shutil.copytree(shards, tmp_path / "run"))


@pytest.mark.parametrize("count", ["0", "00002", "\u00b2", "\u0662"])
def test_merge_shards_refuses_a_count_embed_never_writes(run_folder, count, capsys):
    """`OUTPUT.shard-0-of-0` ended in a TypeError traceback, a superscript ² in a ValueError one; `-of-00002` and an
    Arabic-Indic ٢ were read as 2, then `shard-0-of-2` was reported missing beside the file the user sees."""
    for path in run_folder.iterdir():
        path.unlink()
    stray = run_folder / f"out.hdf5.shard-0-of-{count}"
    stray.write_bytes(b"stray")
    assert main(["merge-shards", str(run_folder / "out.hdf5")]) == 2
    error = one_error_line(capsys.readouterr().err)
    assert f"expected the shards of one run, out.hdf5.shard-R-of-N for R = 0..N-1; found {stray.name}." in error
    assert snapshot(run_folder) == {stray.name: b"stray"}


def test_merge_shards_names_a_few_missing_shards_of_a_huge_count(run_folder, capsys):
    """A stray `OUTPUT.shard-0-of-99999999999` listed every rank's path in memory (MemoryError, or the machine's
    memory exhausted first); the library's `world_size` alike."""
    before = snapshot(run_folder)
    with pytest.raises(EmbedError, match=r"missing shards: out.hdf5.shard-0-of-10+, .*-9-of-10+ and more; "):
        merge_shards(run_folder / "out.hdf5", world_size=10**15)
    for path in run_folder.iterdir():
        path.rename(path.with_name(path.name.replace("-of-2", "-of-99999999999")))
    assert main(["merge-shards", str(run_folder / "out.hdf5")]) == 2
    error = one_error_line(capsys.readouterr().err)
    shown = ", ".join(f"out.hdf5.shard-{rank}-of-99999999999" for rank in range(2, 12))
    assert f"error: missing shards: {shown} and more; finish those processes' runs (--resume) first." == error
    assert sorted(snapshot(run_folder).values()) == sorted(before.values())


def test_merge_shards_names_the_rank_to_rerun_for_a_shard_not_written_by_embed(run_folder, capsys):
    """An HDF5 file of another program in a shard's place was refused with embed's advice, `use --overwrite to
    replace it`, which merge-shards' --overwrite (about OUTPUT) does not do."""
    shard = run_folder / "out.hdf5.shard-1-of-2"
    shard.unlink()
    with h5py.File(shard, "w") as file:
        file["data"] = [1, 2, 3]
    before = snapshot(run_folder)
    assert main(["merge-shards", str(run_folder / "out.hdf5"), "--overwrite"]) == 2
    error = one_error_line(capsys.readouterr().err)
    assert f"shard {shard} was not written by elmo-hf embed (no elmo_hf_settings)" in error
    assert "delete it and rerun rank 1 (RANK=1 WORLD_SIZE=2 elmo-hf embed ... --resume)" in error
    assert "--overwrite" not in error.replace("--resume", "")
    assert snapshot(run_folder) == before


@pytest.mark.parametrize("content", [b"", b"vectors\n"])
def test_merge_shards_refuses_a_shard_that_is_not_hdf5(run_folder, content, capsys):
    """An empty or text file in a shard's place was said to be `cut short` only."""
    shard = run_folder / "out.hdf5.shard-0-of-2"
    shard.write_bytes(content)
    before = snapshot(run_folder)
    assert main(["merge-shards", str(run_folder / "out.hdf5")]) == 2
    error = one_error_line(capsys.readouterr().err)
    assert f"shard {shard} cannot be read" in error
    assert "it is cut short or not a shard; delete it and rerun rank 0" in error
    assert snapshot(run_folder) == before


@pytest.fixture(scope="module")
def pretraining_folder(tmp_path_factory) -> Path:
    """An untrained tiny `ElmoForPreTraining` saved with its vocabulary, and a text beside it."""
    root = tmp_path_factory.mktemp("pretraining")
    vocabulary = ElmoWordVocabulary(["</S>", "<S>", "<UNK>", "the", "cat", "sat", "on", "mat"])
    torch.manual_seed(0)
    ElmoForPreTraining(tiny_config(word_vocab_size=len(vocabulary), initializer_range=0.5)).save_pretrained(
        root / "model"
    )
    vocabulary.save(root / "model")
    (root / "text.txt").write_text("the cat sat\non the mat\n\nthe dog\n", encoding="utf-8")
    return root / "model"


def perplexity(*argv) -> int:
    return main(["perplexity", *map(str, argv)])


def test_perplexity_takes_a_batch_size_above_the_largest_integer(pretraining_folder, tmp_path):
    """`--batch-size 2**70` (all at once, as a user might ask) ended in a ValueError traceback from DataLoader."""
    text = pretraining_folder.parent / "text.txt"
    results = []
    for batch_size in (2, 2**70):
        output = tmp_path / f"{batch_size}.json"
        arguments = ["--model", pretraining_folder, "--text", text, "--batch-size", batch_size, "--json", output]
        assert perplexity(*arguments) == 0
        results.append(json.loads(output.read_text()))
    assert results[0]["predictions"] == results[1]["predictions"] == 8 + 3  # words and sentence ends
    assert math.isclose(results[0]["loss"], results[1]["loss"], rel_tol=1e-6)


def test_perplexity_refuses_a_json_name_too_long_for_its_folder_before_computing(
    pretraining_folder, tmp_path, monkeypatch, capsys
):
    """A `--json` name of 250 bytes (its staging file, 260) failed with exit 1 only after the whole corpus was scored,
    leaving the folders made for it."""
    monkeypatch.setattr(perplexity_module, "model_perplexity", lambda *args: pytest.fail("computed"))
    text = pretraining_folder.parent / "text.txt"
    output = tmp_path / "new" / ("r" * 245 + ".json")
    assert perplexity("--model", pretraining_folder, "--text", text, "--json", output) == 2
    error = one_error_line(capsys.readouterr().err)
    assert f"--json {output} cannot be written: its name is too long (260 bytes" in error and "shorter name" in error
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"", "is empty"),
        (b"\xef\xbb\xbf", "is empty"),  # a byte-order mark alone
        ("</S>\n<S>\n<UNK>\nthe\ncat\nsat\nthe\nmat\n".encode(), "lists 'the' twice; keep one line per word"),
        ("the\n</S>\n<S>\n<UNK>\ncat\nsat\non\nmat\n".encode(), "must start with </S>, <S>, <UNK>"),
        (b"</S>\n<S>\n<UNK>\n\xff\n", "bytes at 15 are not UTF-8"),
    ],
)
def test_perplexity_names_the_vocabulary_file_that_cannot_be_used(pretraining_folder, tmp_path, content, problem,
                                                                   capsys):
    """An empty vocabulary file, one listing a word twice or without the special words first was refused without its
    path: the user could not tell whether --vocab or the model's own vocab.txt was meant."""
    vocabulary = tmp_path / "my vocab.txt"
    vocabulary.write_bytes(content)
    text = pretraining_folder.parent / "text.txt"
    assert perplexity("--model", pretraining_folder, "--text", text, "--vocab", vocabulary) == 2
    error = one_error_line(capsys.readouterr().err)
    assert error.startswith(f"error: vocabulary file {vocabulary}") and problem in error, error


def test_an_unreadable_vocabulary_file_is_named(tmp_path, monkeypatch):
    """A vocabulary file that cannot be read ended in a bare PermissionError (a traceback in a command)."""
    vocabulary = tmp_path / "vocab.txt"
    vocabulary.write_text("</S>\n<S>\n<UNK>\n", encoding="utf-8")

    def unreadable(path: Path, *args, **kwargs) -> str:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(Path, "read_text", unreadable)
    with pytest.raises(CorpusError, match=f"vocabulary file {vocabulary} cannot be read \\(Permission denied\\)"):
        ElmoWordVocabulary.load(tmp_path)


def test_perplexity_replaces_an_existing_json_file_only_with_overwrite(pretraining_folder, tmp_path, monkeypatch,
                                                                      capsys):
    """An existing `--json` file was replaced without a word; it is refused, before any scoring, unless --overwrite
    (as `embed` and `merge-shards` refuse an existing OUTPUT)."""
    text = pretraining_folder.parent / "text.txt"
    output = tmp_path / "result.json"
    output.write_text("the user's results", encoding="utf-8")
    with monkeypatch.context() as patch:
        patch.setattr(perplexity_module, "model_perplexity", lambda *args: pytest.fail("computed"))
        assert perplexity("--model", pretraining_folder, "--text", text, "--json", output) == 2
    error = one_error_line(capsys.readouterr().err)
    assert error == f"error: --json {output} exists; pass --overwrite to replace it, or give a new path."
    assert output.read_text(encoding="utf-8") == "the user's results"
    assert perplexity("--model", pretraining_folder, "--text", text, "--json", output, "--overwrite") == 0
    assert json.loads(output.read_text())["predictions"] == 8 + 3


def pretrain(*argv) -> int:
    return main(["pretrain", *map(str, [*argv, *TINY_PRETRAINING, "--no-progress"])])


@pytest.mark.parametrize(
    "options, message",
    [
        (["--batch-size", 2**70, "--streaming"], "fewer than one optimizer step for each of the 1 processes (1 x "
                                                 f"--batch-size {2**70} x --gradient-accumulation-steps 1)"),
        (["--gradient-accumulation-steps", 2**70, "--streaming"], "fewer than one optimizer step"),
        (["--batch-size", 2**70], f"fewer than one batch for each of the 1 processes (1 x --batch-size {2**70})"),
        (["--softmax", "sampled", "--num-samples", 2**70], f"--num-samples {2**70}: more than the 15 words"),
        (["--min-count", 2**70], f"minimum count {2**70} keeps no word of the corpus (the most frequent is seen 24 "
                                 "times); give a smaller --min-count."),
    ],
)
def test_pretrain_refuses_numbers_too_large_for_the_text(corpus, tmp_path, options, message, capsys):
    """A streamed text shorter than one optimizer step ended in a ValueError traceback from islice (`--batch-size
    2**70`) or was read over and over without a step (`--gradient-accumulation-steps 2**70`), `--num-samples 2**70`
    in a traceback from torch.rand, each leaving a half-made --output; `--min-count 2**70` trained a softmax over the
    special words alone. Unstreamed text was refused already (kept as a check)."""
    output = tmp_path / "out"
    assert pretrain("--train", corpus, "--output", output, "--max-steps", 1, *options) == 2
    assert message in one_error_line(capsys.readouterr().err)
    assert not output.exists()


@pytest.mark.parametrize(
    "option, value", [("--num-layers", 2**70), ("--num-layers", 2**40), ("--filters", f"1:{2**40}")]
)
def test_pretrain_refuses_an_architecture_larger_than_the_machine_before_building_it(corpus, tmp_path, capsys, option,
                                                                                   value):
    """`--num-layers 2**70` built layers until memory ran out, `--lstm-dim 2**70` ended in a torch traceback: the
    parameters are counted from the sizes (`ElmoConfig.bilm_parameter_count`) and a model whose float32 weights and
    gradients alone exceed the machine's memory is refused before anything is built or written. (The tiny options
    that follow set --lstm-dim and --projection-dim; --num-layers and --filters are the test's.)"""
    output = tmp_path / "out"
    arguments = ["--train", corpus, "--output", output, "--max-steps", 1, option, value]
    assert main(["pretrain", *map(str, arguments), "--lstm-dim", "8", "--projection-dim", "4", "--no-progress"]) == 2
    error = one_error_line(capsys.readouterr().err)
    assert "GiB for their float32 weights and gradients alone, more than this machine's" in error
    assert not output.exists()


@pytest.mark.parametrize(
    "cgroup, files",
    [
        ("0::/a/b\n", {"memory.max": "max", "a/memory.max": "3000000", "a/b/memory.max": "max"}),  # v2, parent's limit
        ("4:memory:/a/b\n2:cpu:/c\n", {"memory/memory.limit_in_bytes": "9223372036854771712",
                                        "memory/a/b/memory.limit_in_bytes": "3000000", "cpu/c/memory.max": "7"}),  # v1
        ("0::/gone\n", {"memory.max": "3000000"}),  # a container sees its own group at the root
    ],
)
def test_the_memory_the_commands_count_on_is_the_control_groups_limit(tmp_path, monkeypatch, cgroup, files):
    """A process in a control group with a memory limit (a container, a CI runner) is killed at that limit, whatever
    the machine has: the memory pretrain's and embed's size checks count on is the smallest limit of the process's
    groups and their parents (v1 or v2), or the machine's where none is set."""
    (tmp_path / "cgroup").write_text(cgroup)
    for name, text in files.items():
        (tmp_path / "fs" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "fs" / name).write_text(text + "\n")
    monkeypatch.setattr(data_module, "PROC_CGROUP", tmp_path / "cgroup")
    monkeypatch.setattr(data_module, "CGROUP_ROOT", tmp_path / "fs")
    assert data_module.cgroup_memory_limit() == 3000000
    assert data_module.physical_memory() == 3000000
    assert data_module.device_memory(torch.device("cpu")) == 3000000
    (tmp_path / "cgroup").write_text("0::/\n")
    for path in (tmp_path / "fs").rglob("memory.*"):
        path.write_text("max\n")
    assert data_module.cgroup_memory_limit() is None
    assert data_module.physical_memory() == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
