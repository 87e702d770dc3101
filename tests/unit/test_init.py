"""Your own presets: `kit init NAME [--from PRESET]`, the lookup order of `preset=NAME` (./presets, the user's config
folder, the shipped ones), `kit presets` saying where each is from, and hints that name a preset `preset=` finds."""

import json
import shlex
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from kit.cli.main import cli
from kit.config.preset_files import find_preset, preset_names
from kit.config.presetload import load_preset
from kit.config.schema import schema_text
from kit.core.datafiles import PRESETS_DIR

pytestmark = pytest.mark.unit


def kit(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project folder of the user's (the working folder), and an empty config folder of theirs."""
    folder = tmp_path / "project"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return folder


def user_presets(tmp_path):
    folder = tmp_path / "config" / "vllm-kit" / "presets"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def build_hint(dockerfile: Path) -> list[str]:
    """The Dockerfile header's `kit build ...` command, as a shell would split it."""
    line = next(line for line in dockerfile.read_text().splitlines() if line.startswith("# Build: `kit build"))
    words = shlex.split(line.split("`")[1])
    assert words[:2] == ["kit", "build"]
    return words


# --- kit init -------------------------------------------------------------------------------------------


def test_init_then_validate_and_render_by_name(project):
    made = kit("init", "mine")
    assert made.exit_code == 0, made.output
    path = project / "presets" / "mine.yaml"
    assert made.stdout.splitlines()[0].endswith(str(path))
    text = path.read_text()
    lines = text.splitlines()
    assert lines[0] == "# yaml-language-server: $schema=schema.json"
    assert text.count("yaml-language-server") == 1
    # The cpu preset's comments come along, and the data is exactly the cpu preset's.
    assert "# A random-weight 2-layer Llama the kit makes on the spot" in text
    assert yaml.safe_load(text) == yaml.safe_load((PRESETS_DIR / "cpu.yaml").read_text())
    # The pointer names a file that is there: this kit's schema.
    assert (project / "presets" / "schema.json").read_text() == schema_text()

    checked = kit("validate", "preset=mine")
    assert checked.exit_code == 0, checked.output
    assert checked.stdout.strip() == f"{path}: ok"
    rendered = kit("render", "preset=mine", "--out", "run")
    assert rendered.exit_code == 0, rendered.output
    assert (project / "run" / "compose.yaml").is_file()
    assert "vllm-kit/mine:" in (project / "run" / "compose.yaml").read_text()  # the new name, not cpu's
    assert build_hint(project / "run" / "Dockerfile") == ["kit", "build"]  # in the folder: its record names mine


def test_init_from_another_preset_and_from_a_file(project, tmp_path):
    assert kit("init", "big", "--from", "rtx4090-awq").exit_code == 0
    assert load_preset("big")[2].hardware.gpu == "rtx4090"
    own = tmp_path / "elsewhere" / "lab.yaml"
    own.parent.mkdir()
    own.write_text("# yaml-language-server: $schema=/some/where/else.json\n# my note\n"
                   + (PRESETS_DIR / "cpu.yaml").read_text().split("\n", 1)[1])
    made = kit("init", "lab2", "--from", str(own))
    assert made.exit_code == 0, made.output
    text = (project / "presets" / "lab2.yaml").read_text()
    assert text.startswith("# yaml-language-server: $schema=schema.json\n") and "/some/where" not in text
    assert "# my note" in text and "from a preset file" in text and str(own) not in text


@pytest.mark.parametrize("name", ["rtx4090-awq", "cpu-embed"])
def test_init_of_a_shipped_name_starts_from_that_preset(project, name):
    """`kit init rtx4090-awq` wrote the cpu preset under the shipped name, so preset=rtx4090-awq in this folder
    rendered a CPU stack. Without --from it is now the shipped preset's copy: the same deployment until edited."""
    shipped = load_preset(name)[2]
    made = kit("init", name, "--json")
    assert made.exit_code == 0, made.output
    data = json.loads(made.stdout)["data"]
    assert data["from"] == str(PRESETS_DIR / f"{name}.yaml") and data["shadows"] == ["shipped"]
    path = project / "presets" / f"{name}.yaml"
    assert find_preset(name) == path
    assert load_preset(name)[2] == shipped
    assert yaml.safe_load(path.read_text()) == yaml.safe_load((PRESETS_DIR / f"{name}.yaml").read_text())
    assert f"started from the {name} preset it shadows" in path.read_text()


def test_init_of_a_users_config_preset_name_starts_from_it(project, tmp_path):
    mine = user_presets(tmp_path) / "lab.yaml"
    mine.write_text((PRESETS_DIR / "rtx4090-awq.yaml").read_text())
    assert kit("init", "lab").exit_code == 0
    assert load_preset("lab")[2].hardware.gpu == "rtx4090"


def test_init_refuses_to_overwrite(project):
    (project / "presets").mkdir()
    (project / "presets" / "mine.yaml").write_text("# my own\n")
    result = kit("init", "mine")
    assert result.exit_code == 1
    first = result.stderr.splitlines()[0]
    assert first == f"{project / 'presets' / 'mine.yaml'}: already exists; kit init never overwrites a preset"
    assert (project / "presets" / "mine.yaml").read_text() == "# my own\n"


@pytest.mark.parametrize("name", ["Mine", "a/b", "../up", "mine.yaml", "mine.yml", "-x", "a..b", "a b", "x" * 65,
                                  "ünï", "mine\n"])
def test_init_refuses_a_name_that_is_not_a_preset_name(project, name):
    result = kit("init", "--", name)  # "--": "-x" is then the NAME, not an option
    assert result.exit_code == 2, result.output
    assert "Invalid value for 'NAME'" in result.stderr
    assert not (project / "presets").exists()


def test_init_refuses_a_source_that_does_not_load(project, tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text((PRESETS_DIR / "cpu.yaml").read_text() + "\nnot_a_section: 1\n")
    result = kit("init", "mine", "--from", str(broken))
    assert result.exit_code == 1 and "not_a_section: unknown field" in result.stderr, result.output
    assert not (project / "presets" / "mine.yaml").exists()
    assert kit("init", "mine", "--from", "no-such-preset").exit_code == 1


def test_init_brings_the_kits_schema_up_to_date_and_leaves_a_foreign_one(project):
    (project / "presets").mkdir()
    schema = project / "presets" / "schema.json"
    old = json.loads(schema_text())
    old["properties"].pop("description", None)  # an older kit's schema
    schema.write_text(json.dumps(old))
    made = kit("init", "one", "--json")
    assert json.loads(made.stdout)["data"]["schema_status"] == "updated"
    assert schema.read_text() == schema_text()
    schema.write_text('{"title": "something of mine"}')
    made = kit("init", "two", "--json")
    data = json.loads(made.stdout)
    assert data["data"]["schema_status"] == "kept" and any("not the kit's preset schema" in w for w in data["warnings"])
    assert schema.read_text() == '{"title": "something of mine"}'


# --- where preset=NAME looks ----------------------------------------------------------------------------


def test_lookup_order_project_then_user_then_shipped(project, tmp_path):
    assert find_preset("cpu").resolve() == (PRESETS_DIR / "cpu.yaml").resolve()
    user = user_presets(tmp_path)
    (user / "cpu.yaml").write_text((PRESETS_DIR / "rtx4090-awq.yaml").read_text())
    assert find_preset("cpu") == user / "cpu.yaml"
    assert load_preset("cpu")[2].hardware.gpu == "rtx4090"
    assert kit("init", "cpu", "--from", "a100x8").exit_code == 0
    assert find_preset("cpu") == project / "presets" / "cpu.yaml"
    assert load_preset("cpu")[2].hardware.gpu == "a100-80gb"
    # A name only the user folder has is found from any working folder.
    (user / "lab.yaml").write_text((PRESETS_DIR / "cpu.yaml").read_text())
    assert find_preset("lab") == user / "lab.yaml"


def test_the_user_folder_defaults_to_dot_config(project, tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/is/ignored")  # the XDG spec: not absolute, not used
    folder = home / ".config" / "vllm-kit" / "presets"
    folder.mkdir(parents=True)
    (folder / "homed.yaml").write_text((PRESETS_DIR / "cpu.yaml").read_text())
    assert find_preset("homed") == folder / "homed.yaml"


def test_an_unknown_name_says_where_it_looked(project, tmp_path):
    with pytest.raises(Exception) as info:
        find_preset("nothere")
    line = info.value.lines()[0]
    assert "unknown preset 'nothere'" in line and "presets/" in line and str(user_presets(tmp_path)) in line


def test_kit_presets_lists_every_origin_and_says_what_shadows_what(project, tmp_path):
    user = user_presets(tmp_path)
    (user / "lab.yaml").write_text((PRESETS_DIR / "cpu.yaml").read_text())
    (user / "cpu.yaml").write_text((PRESETS_DIR / "cpu.yaml").read_text())
    (user / "broken.yaml").write_text("engine: [\n")
    assert kit("init", "cpu").exit_code == 0
    result = kit("presets", "--json")
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.stdout)["data"]}
    assert set(rows) == set(preset_names()) | {"lab", "broken"}
    assert (rows["cpu"]["origin"], rows["cpu"]["shadows"]) == ("project", ["user", "shipped"])
    assert rows["cpu"]["file"] == str(project / "presets" / "cpu.yaml")
    assert (rows["lab"]["origin"], rows["lab"]["shadows"]) == ("user", [])
    assert (rows["a100x8"]["origin"], rows["a100x8"]["shadows"]) == ("shipped", [])
    assert rows["broken"]["error"] and rows["broken"]["model"] is None
    table = kit("presets")
    assert table.exit_code == 0
    assert "project (shadows user, shipped)" in table.stdout
    assert "note: preset=cpu is presets/cpu.yaml (project), not the user or shipped preset of that name" in table.stderr


def test_completion_offers_the_users_presets(project, tmp_path):
    from click.shell_completion import ShellComplete

    (user_presets(tmp_path) / "lab.yaml").write_text((PRESETS_DIR / "cpu.yaml").read_text())
    assert kit("init", "mine").exit_code == 0
    completer = ShellComplete(cli, {}, "kit", "_KIT_COMPLETE")
    offered = [item.value for item in completer.get_completions(["render"], "preset=")]
    assert offered == [f"preset={name}" for name in sorted({*preset_names(), "lab", "mine"})]


# --- hints name a preset that resolves ------------------------------------------------------------------


@pytest.mark.parametrize("where", ["project", "inside", "outside", "shadowing"])
def test_the_dockerfile_hint_for_a_users_preset_works_in_the_folder(project, tmp_path, monkeypatch, where):
    """A preset of the user's (found by name, or given by a path `preset=` may not find from elsewhere): the hint
    is `kit build` in the folder, whose record names the file; a shipped preset's hint names it."""
    if where == "project":
        assert kit("init", "lab").exit_code == 0
        path, ref = project / "presets" / "lab.yaml", "preset=lab"
    else:
        path = {"inside": project / "mine" / "lab.yaml", "outside": tmp_path / "far away" / "lab.yaml",
                "shadowing": project / "mine" / "cpu.yaml"}[where]  # named like a shipped preset, another file
        path.parent.mkdir(parents=True)
        path.write_text((PRESETS_DIR / "rtx4090-awq.yaml").read_text())
        ref = f"preset={path}"
    rendered = kit("render", ref, "--out", "run")
    assert rendered.exit_code == 0, rendered.output
    dockerfile = (project / "run" / "Dockerfile").read_text()
    assert build_hint(project / "run" / "Dockerfile") == ["kit", "build"]
    # What `kit build` does first in the folder, from there: resolve the record's preset and render it. The same
    # file, so nothing changes; and from any other working folder the Dockerfile renders the same (no path in it).
    for cwd in (project / "run", tmp_path):
        monkeypatch.chdir(cwd)
        again = kit("render", "--out", str(project / "run"), "--json")
        assert again.exit_code == 0, again.output
        assert set(json.loads(again.stdout)["data"]["files"].values()) == {"identical"}
    assert (project / "run" / "Dockerfile").read_text() == dockerfile


def test_a_shipped_presets_hint_names_it(project):
    assert kit("render", "preset=rtx4090-awq", "--out", "run").exit_code == 0
    assert build_hint(project / "run" / "Dockerfile") == ["kit", "build", "preset=rtx4090-awq"]


def test_a_hint_on_the_terminal_names_a_preset_by_name_or_path(project, tmp_path):
    """kit push's hint (printed, run from the same folder): the name when it finds the same file, else the path."""
    from kit.config.preset_files import preset_ref_for

    assert preset_ref_for("cpu", PRESETS_DIR / "cpu.yaml") == "cpu"
    assert kit("init", "lab").exit_code == 0
    assert preset_ref_for("lab", project / "presets" / "lab.yaml") == "lab"
    inside, outside = project / "mine" / "cpu.yaml", tmp_path / "far" / "lab.yaml"
    for path in (inside, outside):
        path.parent.mkdir()
        path.write_text((PRESETS_DIR / "cpu.yaml").read_text())
    assert preset_ref_for("cpu", inside) == "mine/cpu.yaml"  # the name finds the shipped cpu, not this file
    assert preset_ref_for("lab", outside) == str(outside)  # the name finds ./presets/lab.yaml
    (project / "here.yml").write_text((PRESETS_DIR / "cpu.yaml").read_text())
    assert preset_ref_for("here", project / "here.yml") == "here.yml"
    for path in (inside, outside, project / "here.yml"):
        assert find_preset(preset_ref_for(path.stem, path)).resolve() == path.resolve()


def test_kit_push_recommends_a_render_that_resolves(project, tmp_path, monkeypatch):
    """`kit push`'s pin line, for a preset file: the path, then the line runs as printed."""
    from kit.image import registry

    path = tmp_path / "mine" / "lab.yaml"
    path.parent.mkdir()
    path.write_text((PRESETS_DIR / "cpu.yaml").read_text())

    def pushed(source, host, repository, tag, progress=None):  # the registry is not what this test is about
        digest = "sha256:" + "a" * 64
        return registry.Pushed(ref=f"{host}/{repository}:{tag}", digest=digest, pinned=f"{host}/{repository}@{digest}",
                               image_id="sha256:" + "b" * 64)

    monkeypatch.setattr(registry, "push_image", pushed)
    result = kit("push", f"preset={path}", "--registry", "127.0.0.1:5000", "--out", "run")
    assert result.exit_code == 0, result.output
    line = next(line for line in result.stdout.splitlines() if line.startswith("pin "))
    words = shlex.split(line.removeprefix("pin").split("  (compose runs")[0])
    words = words[words.index("render"):]  # after the kit as this shell finds it (kit_command)
    assert words[:2] == ["render", f"preset={path}"] and words[-2:] == ["--out", "run"]
    rendered = kit(*words[:-2], "--out", str(project / "pinned"))
    assert rendered.exit_code == 0, rendered.output
    assert "@sha256:" + "a" * 64 in (project / "pinned" / "compose.yaml").read_text()
