"""The command layer (`elmo_hf/cli`): every command is registered by a real import, states the one exit-status rule,
and maps the library's two error classes to it."""

import argparse

import pytest

import elmo_hf
from elmo_hf import cli
from elmo_hf.errors import ElmoInputError, ElmoRunError


def test_every_command_module_is_registered_with_its_summary():
    assert sorted(cli.COMMANDS) == [
        "convert", "convert-manylangs", "embed", "export", "export-onnx", "merge-shards", "perplexity", "pretrain"
    ]
    for name, module in cli.COMMANDS.items():
        assert module.__name__ == f"elmo_hf.cli.{name.replace('-', '_')}"
        assert module.SUMMARY and callable(module.add_arguments) and callable(module.run)


def test_help_lists_the_commands_and_the_exit_status_rule(capsys):
    assert cli.main(["--help"]) == 0
    shown = capsys.readouterr().out
    assert all(name in shown for name in cli.COMMANDS)
    assert "2 input or options unusable" in shown and "1 a failure while running" in shown


def test_version(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"elmo-hf {elmo_hf.__version__}"


def test_unknown_command_is_exit_status_2(capsys):
    assert cli.main(["embedd"]) == 2
    assert "error: unknown command 'embedd'" in capsys.readouterr().err


@pytest.mark.parametrize(("error", "status"), [(ElmoInputError("bad --thing"), 2), (ElmoRunError("disk full"), 1)])
def test_library_errors_become_one_error_line_and_the_rule_s_exit_status(monkeypatch, capsys, error, status):
    def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        raise error

    monkeypatch.setattr(cli.COMMANDS["perplexity"], "run", run)
    assert cli.main(["perplexity", "--model", "m", "--text", "t"]) == status
    assert capsys.readouterr().err == f"error: {error}\n"


def test_an_interrupt_is_exit_status_130(monkeypatch, capsys):
    def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.COMMANDS["perplexity"], "run", run)
    assert cli.main(["perplexity", "--model", "m", "--text", "t"]) == 130
    assert "interrupted" in capsys.readouterr().err


def test_every_command_has_a_typed_library_function_at_the_package_level():
    """What the commands run is importable as Python (`elmo_hf.embed_corpus(...)`), without argparse."""
    import inspect

    for name in elmo_hf.LIBRARY_FUNCTIONS:
        function = getattr(elmo_hf, name)
        assert callable(function) and function.__name__ == name
        assert "argparse" not in inspect.getsource(inspect.getmodule(function))
