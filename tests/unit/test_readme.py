"""The README stays short and pasteable, and the guides' links lead somewhere.

What the README's commands do is tested by running them
(``tests/acceptance/test_readme_commands.py``); what the tables of settings, exit
codes, JSON fields, metrics and events say is generated from the code
(``tests/unit/test_reference.py``). This checks what running cannot: length,
the shape of the commands, the width of shown output, and links."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
README = (ROOT / "README.md").read_text()
GUIDES = sorted((ROOT / "docs/guide").glob("*.md"))


# Reports the lead's rename branch moves under docs/load/ (benchmarks.md, quotas.md,
# controls.md from docs/): linked at their new home, absent until that branch is merged.
def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)


def _commands(text: str) -> list[str]:
    """The command part of every line of the ```sh blocks (comments stripped)."""
    lines = []
    for block in _blocks(text, "sh"):
        lines += [re.sub(r"\s+#\s.*$", "", line) for line in block.splitlines() if line.strip()]
    return lines


def test_the_readme_is_short() -> None:
    assert len(README.splitlines()) <= 200


def test_the_first_commands_are_make_demo_and_make_test() -> None:
    first = [line.split()[0:2] for line in _commands(README)[:2]]
    assert first == [["make", "demo"], ["make", "test"]]


@pytest.mark.parametrize("page", [ROOT / "README.md", *GUIDES], ids=lambda p: p.name)
def test_commands_name_the_programs_in_the_venv_and_curl_shows_no_progress(page: Path) -> None:
    for line in _commands(page.read_text()):
        words = re.split(r"[\s|;&()$]+", line)
        for program in ("stint", "worker", "stint-lab"):
            assert program not in words, f"{page.name}: use .venv/bin/{program}: {line}"
        if "curl " in line:
            assert re.search(r"curl -s", line), f"{page.name}: curl without -s: {line}"


def test_no_readme_command_waits_for_ever() -> None:
    for line in _commands(README):
        assert "--follow" not in line, line
        if "/events" in line:
            assert "until=turn_end" in line or "format=json" in line, line


def test_shown_output_fits_an_80_column_terminal() -> None:
    for block in _blocks(README, "text"):
        for line in block.splitlines():
            assert len(line) <= 80, line


def _links(page: Path) -> list[str]:
    text = re.sub(r"^```.*?^```$", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    return re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)


@pytest.mark.parametrize("page", [ROOT / "README.md", *GUIDES], ids=lambda p: p.name)
def test_every_relative_link_leads_to_a_file(page: Path) -> None:
    for link in _links(page):
        if "://" in link:
            continue
        target = (page.parent / link).resolve()
        assert target.exists(), f"{page.name} links to {link}, which does not exist"


def test_the_scripted_harness_inputs_are_documented() -> None:
    guide = (ROOT / "docs/guide/harness.md").read_text()
    for field in ("min_wait_ms", "gate", "ask"):
        assert f"`{field}`" in guide, field
