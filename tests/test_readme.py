"""README.md run as a reader runs it: the first command as a paste runs it (from a terminal whose input already holds
the lines pasted after it: it must end by itself and leave those lines unread, so that the next command runs), every
bash block top to bottom in one fresh folder, and the `## Use` section's Python."""

import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Setting up the environment is what the test's own environment already did (and would need the network).
SETUP = ("python3 -m venv", ". .venv/bin/activate", "pip install")
# The only commands of README's bash blocks that the block test leaves out, each for the reason given.
NOT_RUN = {
    **{step: "the environment setup (see SETUP)" for step in SETUP},
    "python -m pytest": "the test suite itself, which runs this test",
    "curl ": "a download",
    "elmo_2x": "the released AllenNLP checkpoints' files, which only the downloads above them fetch",
    "zhs.model": "an ELMoForManyLangs model that the reader downloads and unpacks by hand",
    "--push-to-hub": "an upload to the Hub",
}


def first_block() -> tuple[str, list[str]]:
    """README's first bash block: its first command and the lines after it."""
    block = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.DOTALL).group(1)
    lines = block.splitlines()
    first = next(index for index, line in enumerate(lines) if line.strip() and not line.startswith("#"))
    return lines[first], lines[first + 1 :]


def test_first_command_ends_and_leaves_the_pasted_lines_for_the_next_command(tmp_path):
    command, following = first_block()
    steps = [step for step in command.split(" && ") if not step.startswith(SETUP)]
    assert any("examples/embed.py" in step for step in steps), command
    assert any(line.strip() == "python -m pytest -q" for line in following)
    for folder in ("conversion", "examples", "tests"):  # the checkout, with the command's outputs in tmp_path
        (tmp_path / folder).symlink_to(ROOT / folder)

    terminal, terminal_input = pty.openpty()
    pasted = "".join(line + "\n" for line in following)
    os.write(terminal, pasted.encode())
    result = subprocess.run(
        ["bash", "-c", " && ".join(steps)],
        stdin=terminal_input,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": str(ROOT),
        },
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert "words x 384 dims" in result.stdout

    # Everything pasted after the command is still waiting in the terminal, for the shell to run next.
    os.set_blocking(terminal_input, False)
    unread = b""
    while select.select([terminal_input], [], [], 0.5)[0]:
        unread += os.read(terminal_input, 4096)
    assert unread.decode().replace("\r", "") == pasted


def bash_commands() -> tuple[list[str], set[str]]:
    """README's bash blocks as commands, in order (continued lines joined; `&&` steps of NOT_RUN dropped), and the
    NOT_RUN patterns that left something out."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands, used = [], set()
    for block in re.findall(r"```bash\n(.*?)```", readme, re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            steps = []
            for step in line.split(" && "):
                skipped = [pattern for pattern in NOT_RUN if pattern in step]
                used.update(skipped)
                steps += [] if skipped else [step]
            commands += [" && ".join(steps)] if steps else []
    return commands, used


def test_bash_blocks_run_top_to_bottom_in_a_fresh_folder(tmp_path):
    """Every README bash block, in order, in one empty folder beside the checkout's `conversion/`, `examples/` and
    `tests/`, offline: each command must succeed. Left out, by NOT_RUN: the environment setup and the test run
    (tested above and by the suite itself) and what needs the network: the downloads of the released AllenNLP
    checkpoints and their conversion (the whole "Convert a released checkpoint" block), an ELMoForManyLangs model
    downloaded by hand, and the Hub push (the whole "The Hub and model cards" block)."""
    commands, used = bash_commands()
    assert used == set(NOT_RUN), f"patterns that leave nothing out: {set(NOT_RUN) - used}"
    assert any(command.startswith("elmo-hf pretrain") for command in commands), commands
    for folder in ("conversion", "examples", "tests"):
        (tmp_path / folder).symlink_to(ROOT / folder)
    environment = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
    }
    for command in commands:
        result = subprocess.run(["bash", "-c", command], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                cwd=tmp_path, env=environment, timeout=600)
        assert result.returncode == 0, f"{command}\n{result.stderr[-3000:]}"


def test_use_section_code_runs_as_written(converted, tmp_path, monkeypatch):
    """The `## Use` section's Python blocks (loading, the scalar mixes), on the converted fixture as `elmo-demo`."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Use", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert len(blocks) == 2 and "ElmoScalarMix.top_layer" in blocks[1]
    (tmp_path / "elmo-demo").symlink_to(converted["allennlp"])
    monkeypatch.chdir(tmp_path)
    namespace = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)
    assert namespace["features"].shape == namespace["outputs"].last_hidden_state.shape
