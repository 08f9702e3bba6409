"""The command layer (`elmo_hf/cli`): every command is registered by a real import, states the one exit-status rule,
and maps the library's two error classes to it."""

import argparse
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import elmo_hf
import elmo_hf_cli
from elmo_hf import cli
from elmo_hf.errors import ElmoInputError, ElmoRunError

ROOT = Path(__file__).resolve().parents[1]


def test_every_command_module_is_registered_with_its_summary():
    assert sorted(cli.COMMANDS) == [
        "convert", "convert-manylangs", "embed", "export", "export-onnx", "merge-shards", "perplexity", "pretrain"
    ]
    assert list(cli.COMMANDS) == list(elmo_hf_cli.COMMANDS)
    for name, module in cli.COMMANDS.items():
        assert module.__name__ == f"elmo_hf.cli.{name.replace('-', '_')}"
        assert elmo_hf_cli.COMMANDS[name] and callable(module.add_arguments) and callable(module.run)
        assert cli.build_parser(name).description == elmo_hf_cli.COMMANDS[name]


def test_help_and_version_import_neither_torch_nor_transformers():
    """`elmo-hf --help` and `elmo-hf --version` answer at once (the console script is `elmo_hf_cli:main`): nothing
    of the library, torch or transformers is imported for them."""
    program = (
        "import sys, elmo_hf_cli\n"
        "assert elmo_hf_cli.main(['--help']) == 0 and elmo_hf_cli.main(['--version']) == 0\n"
        "print(sorted(name for name in sys.modules if name.split('.')[0] in ('torch', 'transformers', 'elmo_hf')))"
    )
    run = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True)
    assert run.stdout.splitlines()[-1] == "[]"
    assert "elmo-hf COMMAND" in run.stdout and f"elmo-hf {elmo_hf.__version__}" in run.stdout
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"elmo-hf": "elmo_hf_cli:main"}


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


COMPUTING = [name for name in cli.COMMANDS if name != "merge-shards"]  # merge-shards copies stored arrays only


def required_arguments(parser: argparse.ArgumentParser) -> list[str]:
    """A placeholder value for each argument the parser requires (positional or required option)."""
    arguments = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or not (action.required or not action.option_strings):
            continue
        arguments += [*action.option_strings[:1], "placeholder"]
    return arguments


def test_every_command_that_computes_takes_threads():
    """Issue 24 goal 2: `--threads` is one option, on every command that computes."""
    definitions = set()
    for name in cli.COMMANDS:
        options = {action.dest: action for action in cli.build_parser(name)._actions}
        assert ("threads" in options) == (name in COMPUTING), name
        if name in COMPUTING:
            definitions.add((options["threads"].help, options["threads"].metavar, options["threads"].type))
    assert len(definitions) == 1


@pytest.mark.parametrize("name", COMPUTING)
def test_threads_reaches_torch_before_the_command_runs(name, monkeypatch):
    import torch

    seen = []
    monkeypatch.setattr(cli.COMMANDS[name], "run", lambda args, parser: seen.append(torch.get_num_threads()) or 0)
    threads = torch.get_num_threads()
    wanted = 3 if threads != 3 else 2
    try:
        assert cli.main([name, *required_arguments(cli.build_parser(name)), "--threads", str(wanted)]) == 0
    finally:
        torch.set_num_threads(threads)
    assert seen == [wanted]


@pytest.mark.parametrize("name", COMPUTING)
@pytest.mark.parametrize("value", ["0", "-1"])
def test_threads_not_positive_is_one_error_line_and_exit_status_2(name, value, monkeypatch, capsys):
    monkeypatch.setattr(cli.COMMANDS[name], "run", lambda args, parser: pytest.fail("ran with bad --threads"))
    assert cli.main([name, *required_arguments(cli.build_parser(name)), "--threads", value]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"error: --threads {value}: must be a positive integer.\n" and not captured.out


@pytest.mark.parametrize("name", COMPUTING)
@pytest.mark.parametrize("value", ["100000", "99999999999999999999"])
def test_threads_above_four_per_cpu_is_one_error_line_before_torch_is_touched(name, value, monkeypatch, capsys):
    """Far more threads than CPUs ended in a traceback (no thread could start, or torch's count overflowed)."""
    import torch

    monkeypatch.setattr(cli.COMMANDS[name], "run", lambda args, parser: pytest.fail("ran with bad --threads"))
    monkeypatch.setattr(torch, "set_num_threads", lambda threads: pytest.fail("torch got bad --threads"))
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert cli.main([name, *required_arguments(cli.build_parser(name)), "--threads", value]) == 2
    captured = capsys.readouterr()
    assert captured.err == (
        f"error: --threads {value}: at most 8 on this machine (4 x its 2 CPUs); give fewer, or leave out --threads "
        "for torch's choice.\n"
    ) and not captured.out


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_every_option_has_help_and_help_shows_its_default(name):
    """Issue 26 item 5: `elmo-hf NAME --help` explains every argument; an option with a default shows it, and one
    that takes a value without a default says what happens when it is not given."""
    parser = cli.build_parser(name)
    shown = " ".join(parser.format_help().split())
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        assert action.help, f"{name} {action.option_strings or action.dest}: no help"
        if all(action.default is not value for value in (None, False)) and action.nargs != 0:
            assert f"(default: {action.default})" in shown, f"{name} {action.option_strings}: default hidden"
        elif action.option_strings and action.nargs != 0 and not action.required:
            assert "default" in action.help or action.help.endswith("(required)"), \
                f"{name} {action.option_strings}: says not what happens without it"
