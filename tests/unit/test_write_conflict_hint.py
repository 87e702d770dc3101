"""A hand edit of a rendered file is never overwritten without --force; the refusal says what --force would undo.
The walk: after editing the Dockerfile, a re-render that changed only compose.yaml was refused with "keep your edit in
the preset instead, or --force", not saying that the render's own Dockerfile had not changed (so --force would only
undo the edit) nor how to see it."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kit.cli.main import cli

pytestmark = pytest.mark.unit


def render(out, *args):
    return CliRunner().invoke(cli, ["render", "--out", str(out), *args])


def test_the_refusal_says_when_the_edit_is_all_that_differs(tmp_path):
    out = tmp_path / "d"
    assert render(out, "preset=cpu").exit_code == 0
    dockerfile = out / "Dockerfile"
    before = (out / "compose.yaml").read_text()
    edited = dockerfile.read_text() + "# my note\n"
    dockerfile.write_text(edited)
    refused = render(out, "engine.max_num_seqs=4")  # compose.yaml changes; the Dockerfile the render writes does not
    assert refused.exit_code == 1
    assert f"{dockerfile}: changed since the kit wrote it; not overwritten (this render writes it as before: your " \
           "edit is all that differs, and --force would undo it)" in refused.output
    assert f"`kit render --out {out} --diff` shows it" in refused.output
    assert dockerfile.read_text() == edited and (out / "compose.yaml").read_text() == before  # all or nothing


def test_an_edit_the_render_would_also_change_is_said_as_before(tmp_path):
    out = tmp_path / "d"
    assert render(out, "preset=cpu").exit_code == 0
    compose = out / "compose.yaml"
    compose.write_text(compose.read_text().replace('shm_size: "4096m"', 'shm_size: "2048m"'))
    refused = render(out, "engine.max_num_seqs=4")
    assert refused.exit_code == 1
    assert f"{compose}: changed since the kit wrote it (or not written by the kit); not overwritten" in refused.output
    assert "your edit is all that differs" not in refused.output
