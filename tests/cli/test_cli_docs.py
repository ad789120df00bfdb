"""The documentation stays true: the generated configuration reference is current, the
README keeps its quick start, every command documents itself, and links resolve."""

import os
import re

import pytest

from pytorchrl import cli
from pytorchrl.config.docgen import configuration_reference

from cli_helpers import REPO

DOCS = os.path.join(REPO, "docs")

#: The README's quick start: users copy these lines; they must not change by accident.
QUICK_START = [
    'python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 -e . && '
    'pytorchrl train examples/configs/ppo_cartpole.yaml',
    'python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 -e ".[test]" && python -m pytest -q -n 2',
]


def test_configuration_reference_is_generated_from_the_schema():
    with open(os.path.join(DOCS, "configuration.md")) as f:
        committed = f.read()
    assert committed == configuration_reference(), \
        "docs/configuration.md is stale: run  python -m pytorchrl.config.docgen > docs/configuration.md"


def test_keys_markdown_prints_the_reference(capsys):
    assert cli.main(["keys", "--markdown"]) == 0
    assert capsys.readouterr().out == configuration_reference()


def test_reference_covers_every_key_and_preset():
    from pytorchrl.config.schema import SECTIONS
    from pytorchrl.scheme.presets import PRESETS
    text = configuration_reference()
    for section, keys in SECTIONS.items():
        assert f"## {section}\n" in text
        for key in keys:
            assert f"| `{key}` |" in text, (section, key)
    for name in PRESETS:
        assert f"| `{name}` |" in text
    assert "### algorithm `name: PPO`" in text and "### storage `name: GAEBuffer`" in text


def test_readme_keeps_its_quick_start():
    with open(os.path.join(REPO, "README.md")) as f:
        readme = f.read()
    for command in QUICK_START:
        assert f"```bash\n{command}\n```" in readme


def github_anchors(text):
    """The anchors GitHub gives the headings of a Markdown ``text``: lower case, punctuation
    but hyphens and underscores dropped, spaces as hyphens; a repeated one gets ``-1``, ``-2``."""
    anchors, seen = set(), {}
    for heading in re.findall(r"^#+ (.+)$", re.sub(r"^```.*?^```", "", text, flags=re.S | re.M), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def test_docs_pages_exist_and_links_resolve():
    """Every relative link of the README and docs/ reaches a file, and its #anchor a heading
    of that file (benchmarks/RESULTS.md's among them)."""
    pages = ["README.md", "schemes.md", "workflows.md", "agents.md", "configuration.md", "hot-swapping.md",
             "pbt.md", "cluster.md", "benchmarks.md", "spaces.md", "tracking.md"]
    for page in pages:
        assert os.path.isfile(os.path.join(DOCS, page)), page
    for path in [os.path.join(REPO, "README.md")] + [os.path.join(DOCS, p) for p in pages]:
        with open(path) as f:
            text = f.read()
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", text):
            if target.startswith("http"):
                continue
            linked = os.path.normpath(os.path.join(os.path.dirname(path), target)) if target else path
            assert os.path.exists(linked), f"{path}: broken link {target}"
            if anchor:
                with open(linked) as f:
                    assert anchor in github_anchors(f.read()), f"{path}: no heading #{anchor} in {target or 'itself'}"


COMMANDS = {
    "train": ["CONF", "KEY=VALUE", "--run-dir", "--dry-run", "--progress", "metrics.csv", "tensorboard/",
              "hot_swaps.csv", "pytorchrl set", "exit status"],
    "pbt": ["CONF", "KEY=VALUE", "--population", "--run-dir", "--dry-run", "--progress", "population.csv",
            "hot_swaps.csv", "pytorchrl resume", "exit status"],
    "resume": ["RUN_DIR", "KEY=VALUE", "learner.target_steps", "--progress", "exit status"],
    "evaluate": ["RUN_DIR", "--episodes", "--video", "--video-episodes", "--seed", "--model", ".mp4",
                 "imageio-ffmpeg", "exit status"],
    "plot": ["RUN_DIR", "--output", "--metric", "--label", "--band", "--size", "--dpi", "--title", "exit status"],
    "set": ["RUN_DIR", "KEY=VALUE", "--timeout", "storage.gae_lambda", "exit status"],
    "presets": ["NAME"],
    "keys": ["--markdown"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_help_of_every_command_is_complete(command, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for text in COMMANDS[command]:
        assert text in out, (command, text)


def test_top_level_help_lists_every_command(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert command in out
