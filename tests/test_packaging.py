"""The package as pip installs it: the wheel converts without a checkout, and declares exactly what it imports."""

import ast
import fnmatch
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from conftest import FIXTURES

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
OPTIONS = FIXTURES / "allennlp" / "options.json"
WEIGHTS = FIXTURES / "allennlp" / "lm_weights.hdf5"


def normalized(requirement: str) -> str:
    """The distribution name of a requirement string, normalised as PEP 503 does."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group()).lower()


def imported_distributions(folder: Path, top_level_only: bool, skip: Path | None = None) -> set[str]:
    """The distributions whose modules the Python files under `folder` (but not under `skip`) import (absolute
    imports): all of them, or only those imported when a module is imported (not inside a function, which may import an
    optional extra)."""
    modules = set()
    for path in folder.rglob("*.py"):
        if skip is not None and path.is_relative_to(skip):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        functions = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
        lazy = {id(node) for function in functions for node in ast.walk(function)}
        for node in ast.walk(tree):
            if top_level_only and id(node) in lazy:
                continue
            if isinstance(node, ast.Import):
                modules |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules.add(node.module.split(".")[0])
    modules -= set(sys.stdlib_module_names) | {"elmo_hf", "elmo_hf_cli"}
    distributions = importlib.metadata.packages_distributions()
    return {normalized(distributions[module][0]) for module in modules}


def test_dependencies_are_exactly_what_the_package_imports():
    """What a module imports when it is imported is a dependency; what a function imports is a dependency or in an
    extra other than `test` (it says which extra when missing), and so is what an integration module imports (each
    needs its tool's extra); every dependency is imported somewhere."""
    declared = {normalized(requirement) for requirement in PYPROJECT["project"]["dependencies"]}
    extras = {
        normalized(requirement)
        for extra, requirements in PYPROJECT["project"]["optional-dependencies"].items()
        if extra != "test"
        for requirement in requirements
    }
    integrations = ROOT / "elmo_hf" / "integrations"
    assert imported_distributions(ROOT / "elmo_hf", top_level_only=True, skip=integrations) <= declared
    everything = imported_distributions(ROOT / "elmo_hf", top_level_only=False)
    assert everything <= declared | extras
    assert declared <= everything


def test_build_system_license_and_package_data():
    assert PYPROJECT["build-system"]["requires"] == ["setuptools>=77"]  # the SPDX license string needs 77
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    license_text = (ROOT / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in license_text
    assert "END OF TERMS AND CONDITIONS" in license_text and "APPENDIX: How to apply" in license_text
    assert PYPROJECT["tool"]["setuptools"]["package-data"] == {
        "elmo_hf": ["models/*/*"], "elmo_hf.conversion": ["model_cards/*.md"]}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str], Path]:
    """The wheel built from a copy of the sources and pip-installed, offline, into a folder of its own.

    Returns (the install folder, an environment that has it and not the checkout on the path, the wheel).
    """
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "elmo_hf", source / "elmo_hf", ignore=shutil.ignore_patterns("__pycache__"))
    offline = ["--no-index", "--no-deps", "--no-build-isolation", "--disable-pip-version-check", "-q"]
    subprocess.run([sys.executable, "-m", "pip", "wheel", *offline, "--wheel-dir", str(root / "dist"), str(source)],
                   check=True, capture_output=True, cwd=root)
    [wheel] = (root / "dist").glob("elmo_hf-*.whl")
    target = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", *offline, "--target", str(target), str(wheel)],
                   check=True, capture_output=True, cwd=root)
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    env["PYTHONPATH"] = str(target)
    return target, env, wheel


def test_wheel_contents(installed):
    _, _, wheel = installed
    names = zipfile.ZipFile(wheel).namelist()
    for card in ("small", "medium", "original", "original-5.5B"):
        assert f"elmo_hf/conversion/model_cards/{card}.md" in names
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    for packaged in (ROOT / "elmo_hf" / "models").glob("*/*"):  # the shipped default model, weights included
        assert packaged.relative_to(ROOT).as_posix() in names
    assert "elmo_hf/conversion/convert.py" in names and not any(name.startswith(("tests/", "conversion/"))
                                                              for name in names)


CARD_SCRIPT = """
import elmo_hf
from elmo_hf import ElmoConfig
from elmo_hf.conversion.hub import model_card
print(elmo_hf.__file__)
config = ElmoConfig(lstm_dim=1024, projection_dim=128, num_highway_layers=1)
card = model_card(config, "small", "me/elmo-small", "weights.hdf5")
print(next(line for line in card.splitlines() if line.startswith("# ")))
"""


def test_installed_package_is_used_and_has_its_model_cards(installed, tmp_path):
    target, env, _ = installed
    completed = subprocess.run([sys.executable, "-c", CARD_SCRIPT], cwd=tmp_path, env=env, capture_output=True,
                               text=True, check=True)
    module_file, card_title = completed.stdout.splitlines()[-2:]
    assert Path(module_file).is_relative_to(target) and not Path(module_file).is_relative_to(ROOT)
    assert card_title == "# ELMo small (2x1024_128_2048cnn_1xhighway)"


def test_installed_command_converts_the_fixture(installed, tmp_path):
    target, env, _ = installed
    command = target / "bin" / "elmo-hf"
    completed = subprocess.run(
        [str(command), "convert", "--options", str(OPTIONS), "--weights", str(WEIGHTS), "--output", "elmo"],
        cwd=tmp_path, env=env, capture_output=True, text=True,
    )
    assert completed.returncode == 0, completed.stderr
    assert f"converted {WEIGHTS} -> {tmp_path / 'elmo'}" in completed.stdout
    assert "checked against the float64 reference" in completed.stdout
    assert {"config.json", "model.safetensors", "modeling_elmo.py", "README.md"} <= {
        path.name for path in (tmp_path / "elmo").iterdir()}
    python_module = subprocess.run([sys.executable, "-m", "elmo_hf.cli", "convert", "--help"], cwd=tmp_path, env=env,
                                   capture_output=True, text=True, check=True)
    assert "--push-to-hub REPO_ID" in python_module.stdout


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether .gitignore `patterns` (the anchored folder and file globs this repository uses) ignore `path`."""
    return any(fnmatch.fnmatch(path, pattern.strip("/")) for pattern in patterns if pattern.startswith("/"))


def test_gitignore_covers_what_readme_commands_create():
    readme = (ROOT / "README.md").read_text()
    created = set(re.findall(r"--output(?:-dir)? ([\w.-]+)", readme))
    created |= set(re.findall(r'(?:TrainingArguments|save_model)\("([\w.-]+)"', readme))
    created |= {url.rsplit("/", 1)[1] for url in re.findall(r"curl -LO (\S+)", readme)}
    assert {"out", "elmo-demo", "elmo-tagger", "elmo-brown-pos", "elmo-small", "elmo-original"} <= created
    patterns = [line for line in (ROOT / ".gitignore").read_text().splitlines() if line and not line.startswith("#")]
    assert [name for name in sorted(created) if name != "." and not ignored(name, patterns)] == []
