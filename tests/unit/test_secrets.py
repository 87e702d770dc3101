"""Secrets stay in .env / Secrets: secret flags and token-shaped values are refused, never echoed; credentials
in index URLs are masked in every log, error and build script; an exposed port without a key is a warning;
CLUSTER.md says who can reach which port."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kit.cli.main import cli
from kit.config.flags import check_engine
from kit.config.presetload import load_preset
from kit.core.datafiles import DATA_DIR
from kit.core.errors import BuildError, KitError, PresetError, Problem
from kit.core.secretrules import redact, secret_flag_env
from kit.deploy.checks import check_preset
from kit.deploy.pipeline import prepare
from kit.image import wheelhouse
from kit.image.build import BuildRequest

# Made-up credentials of each documented shape (none is real).
TOKENS = {
    "huggingface": "hf_" + "Zq8" * 12,
    "openai": "sk-proj-" + "Ab3_" * 8,
    "github": "ghp_" + "x7Y" * 12,
    "github_pat": "github_pat_" + "11AB_cd" * 6,
}
PASSWORD = "Pa55w0rdXYZ"
URL_WITH_PASSWORD = f"https://builder:{PASSWORD}@index.example.internal/simple"


def validate(*overrides: str):
    return CliRunner().invoke(cli, ["validate", "preset=cpu", *overrides])


# ---------------------------------------------------------------------------------------------- flags


@pytest.mark.unit
def test_the_secret_flag_rule_finds_exactly_the_secret_flags_in_every_snapshot():
    """The rule in kit/data/secrets.yaml, applied to every flag of every snapshot: api_key and hf_token only
    (tokenizer, allow_credentials, ssl_keyfile and the *_tokens numbers are not secrets)."""
    for path in sorted((DATA_DIR / "flags").glob("vllm-*.json")):
        flags = json.loads(path.read_text())["flags"]
        secret = {name for name, spec in flags.items() if secret_flag_env(name, spec["type"]) is not None}
        assert secret == {"api_key", "hf_token"}, path.name


@pytest.mark.unit
@pytest.mark.parametrize("flag, env", [("api_key", "VLLM_API_KEY"), ("hf_token", "HF_TOKEN")])
@pytest.mark.parametrize("version", ["0.16.0", "0.26.0", "0.32.0", "0.33.0"])
def test_secret_flags_are_refused_with_their_place(flag, env, version):
    found = [p for p in check_engine({flag: "s3cr3t-value-1234"}, version) if p.severity == "error"]
    assert len(found) == 1
    assert found[0].field == f"engine.{flag}" and "secret" in found[0].message
    assert env in found[0].hint and ".env" in found[0].hint
    assert "s3cr3t-value-1234" not in f"{found[0].message} {found[0].hint}"


@pytest.mark.unit
def test_a_future_token_flag_is_a_secret_by_its_name():
    assert secret_flag_env("registry_password", "str") == ""
    assert secret_flag_env("github_token", "str") == ""
    assert secret_flag_env("max_num_batched_tokens", "int") is None
    assert secret_flag_env("allow_credentials", "bool") is None


@pytest.mark.unit
@pytest.mark.parametrize("key, close", [("max_num_batched_token", "max_num_batched_tokens")])
def test_a_typo_of_a_flag_whose_name_looks_like_a_secrets_is_an_unknown_flag(key, close):
    """`max_num_batched_token` ends like a token flag, but it is a typo of a flag that carries none: refused as not a
    flag, naming the one meant (it was "carries a secret", which sent the user looking for a secret). The value is
    quoted by neither message; a name close to no ordinary flag stays a secret."""
    [problem] = check_engine({key: "4096-not-echoed"}, "0.33.0")
    assert problem.field == f"engine.{key}" and "is not a `vllm serve` flag" in problem.message
    assert close in problem.hint and "4096-not-echoed" not in f"{problem.message} {problem.hint}"
    [secret] = check_engine({"registry_password": "x"}, "0.33.0")
    assert "carries a secret" in secret.message


@pytest.mark.unit
def test_cli_refuses_secret_flags_without_echoing_them():
    result = validate("engine.api_key=mykey-abc-123", "engine.hf_token=anothervalue-456")
    assert result.exit_code == 1
    assert "engine.api_key" in result.output and "VLLM_API_KEY" in result.output
    assert "engine.hf_token" in result.output and "HF_TOKEN" in result.output
    assert "mykey-abc-123" not in result.output and "anothervalue-456" not in result.output


# ---------------------------------------------------------------------------------------------- values


@pytest.mark.unit
@pytest.mark.parametrize("kind", sorted(TOKENS))
@pytest.mark.parametrize("field", ["runtime.env.HF_ENDPOINT", "model.served_model_name", "engine.tokenizer",
                                   "model.revision", "image.repository"])
def test_token_values_are_refused_anywhere_and_never_echoed(kind, field):
    token = TOKENS[kind]
    result = validate(f"{field}={token}")
    assert result.exit_code == 1
    assert f"override {field}: holds a" in result.output
    assert ".env" in result.output
    assert token not in result.output and token[4:] not in result.output


@pytest.mark.unit
@pytest.mark.parametrize("field", ["image.pip_index_url", "runtime.env.HF_ENDPOINT", "runtime.env.PIP_EXTRA_INDEX_URL"])
def test_a_password_in_a_url_is_refused_and_never_echoed(field):
    result = validate(f"{field}={URL_WITH_PASSWORD}")
    assert result.exit_code == 1
    assert f"{field}: holds a password in a URL" in result.output
    assert PASSWORD not in result.output


@pytest.mark.unit
def test_a_token_in_a_preset_file_is_refused_with_the_file_and_field(tmp_path):
    preset = tmp_path / "mine.yaml"
    text = (prepare_text := (load_preset("cpu")[1]).read_text())
    preset.write_text(prepare_text.replace("runtime:", f"runtime:\n  env:\n    MY_MIRROR: \"{TOKENS['huggingface']}\"", 1))
    assert text != preset.read_text()
    with pytest.raises(PresetError) as err:
        load_preset(str(preset))
    lines = err.value.lines()
    assert any("runtime.env.MY_MIRROR: holds a huggingface token" in line for line in lines)
    assert TOKENS["huggingface"] not in " ".join(lines)


@pytest.mark.unit
@pytest.mark.parametrize("override", [
    "image.pip_index_url=https://index.example.internal/simple",
    "runtime.unsafe_env.HF_ENDPOINT=https://hf-mirror.example.internal",
    "model.served_model_name=task-sk-1",
    "runtime.hf_cache_volume=hf_cache_for_the_big_models",
])
def test_ordinary_values_that_resemble_tokens_pass(override):
    assert validate(override).exit_code == 0


# ---------------------------------------------------------------------------------------------- masking


@pytest.mark.unit
def test_redact_masks_url_credentials_and_tokens_and_leaves_the_rest():
    assert redact(f"see {URL_WITH_PASSWORD} now") == "see https://builder:****@index.example.internal/simple now"
    assert redact("https://TOKENONLY@host/x") == "https://****@host/x"
    assert redact(f"token {TOKENS['github']}.") == "token ****."
    plain = "https://index.example.internal/simple hf-cache sk-1"
    assert redact(plain) == plain


@pytest.mark.unit
def test_every_error_line_is_masked():
    problem = Problem("x.yaml: image.pip_index_url", f"cannot reach {URL_WITH_PASSWORD}", f"try {TOKENS['openai']}")
    assert PASSWORD not in str(problem) and TOKENS["openai"] not in str(problem)
    assert PASSWORD not in KitError(f"pip failed at {URL_WITH_PASSWORD}").lines()[0]


@pytest.mark.unit
def test_the_index_goes_to_pip_as_environment_with_the_callers_credentials():
    url = "https://index.example.internal/simple"
    assert wheelhouse.index_env(url, {}) == {"PIP_INDEX_URL": url}
    assert wheelhouse.index_env(url, {"PIP_INDEX_URL": URL_WITH_PASSWORD}) == {"PIP_INDEX_URL": URL_WITH_PASSWORD}
    # Credentials for another index are not sent to this one.
    other = "https://u:p@elsewhere.example/simple"
    assert wheelhouse.index_env(url, {"PIP_INDEX_URL": other}) == {"PIP_INDEX_URL": url}
    assert wheelhouse.index_env(None, {"PIP_INDEX_URL": other}) == {}


@pytest.mark.unit
def test_pip_runs_without_the_credential_in_its_log_or_error(tmp_path):
    """The real pip, told to use an index with a password on a closed loopback port: it fails, and neither the
    `$` line, pip's own output in the log, nor the error carries the password."""
    log = tmp_path / "wheelhouse.log"
    index = f"http://builder:{PASSWORD}@127.0.0.1:9/simple"
    with pytest.raises(KitError) as err:
        wheelhouse._run_pip(["download", "--no-deps", "--retries", "0", "--timeout", "1", "-d", str(tmp_path / "d"),
                             "kit-no-such-package==1.0"], log, env={"PIP_INDEX_URL": index})
    text = log.read_text()
    assert "127.0.0.1:9" in text  # the index is named, masked
    assert PASSWORD not in text
    assert PASSWORD not in " ".join(err.value.lines())


@pytest.mark.unit
def test_build_args_never_carry_a_credential_and_build_sh_never_shows_one(tmp_path):
    request = BuildRequest(context_dir=tmp_path, tags=["kit-test:x"], extra_args={"PIP_INDEX_URL": URL_WITH_PASSWORD})
    with pytest.raises(BuildError, match="PIP_INDEX_URL: holds a credential") as err:
        request.buildargs()
    assert PASSWORD not in " ".join(err.value.lines())
    clean = BuildRequest(context_dir=tmp_path, tags=["kit-test:x"], base_image="vllm-kit/base:bookworm", offline=True)
    assert "BASE_IMAGE=vllm-kit/base:bookworm" in clean.script()


# ---------------------------------------------------------------------------------------------- exposure


def warnings_for(*overrides: str, preset: str = "cpu", target: str = "compose") -> list[str]:
    name, path, loaded = load_preset(preset, list(overrides))
    return [str(w) for w in check_preset(name, path, loaded, target=target).warnings]


KEYLESS = "runtime.require_api_key=false"


@pytest.mark.unit
@pytest.mark.parametrize("address", ["0.0.0.0", "::", "192.168.1.10"])
def test_a_keyless_stack_published_beyond_loopback_is_a_warning_naming_the_key(address):
    found = [w for w in warnings_for(KEYLESS, f"runtime.bind_address={address}") if "runtime.require_api_key" in w]
    assert len(found) == 1 and "VLLM_API_KEY" in found[0] and address in found[0] and "beyond" in found[0]


@pytest.mark.unit
@pytest.mark.parametrize("address", ["0.0.0.0", "127.0.0.1", "::1"])
def test_the_key_required_by_default_leaves_nothing_to_warn_of(address):
    assert not [w for w in warnings_for(f"runtime.bind_address={address}") if "require_api_key" in w or "bind" in w]


@pytest.mark.unit
@pytest.mark.parametrize("address", ["127.0.0.1", "::1"])
def test_a_keyless_stack_on_loopback_is_still_warned_about(address):
    # A web page in a browser on this host reaches 127.0.0.1 too (issue 35, item 3).
    found = [w for w in warnings_for(KEYLESS, f"runtime.bind_address={address}") if "runtime.require_api_key" in w]
    assert len(found) == 1 and "a web page in a browser here" in found[0] and "beyond" not in found[0]


@pytest.mark.unit
def test_kubernetes_ignores_bind_address_but_warns_of_a_keyless_stack():
    found = warnings_for(KEYLESS, "runtime.bind_address=0.0.0.0", target="k8s")
    assert not [w for w in found if "runtime.bind_address" in w]
    assert [w for w in found if "runtime.require_api_key" in w and "every pod" in w]


@pytest.mark.unit
def test_validate_and_render_print_the_keyless_warning_every_time(tmp_path):
    for args in (["validate"], ["render", "--out", str(tmp_path / "out")], ["render", "--out", str(tmp_path / "out")]):
        result = CliRunner().invoke(cli, [*args, "preset=cpu", KEYLESS, "runtime.bind_address=0.0.0.0"])
        assert result.exit_code == 0, result.output
        assert "runtime.require_api_key: false" in result.output and "VLLM_API_KEY" in result.output


# ---------------------------------------------------------------------------------------------- CLUSTER.md


@pytest.mark.unit
@pytest.mark.parametrize("network", ["host", "bridge"])
def test_cluster_md_says_who_can_reach_which_port(network):
    overrides = ["hardware.nodes=2", f"cluster.network={network}", "cluster.ray_port=6380", "cluster.dashboard_port=8266"]
    if network == "host":
        overrides.append("cluster.head_address=10.0.0.11")
    text = prepare("a100x8", overrides).files["CLUSTER.md"]
    section = text.split("## Who can reach which ports", 1)[1].split("\n## ", 1)[0]
    for port in ("6380", "8266", "10001", "10002-19999", "8000"):
        assert f"| {port}" in section, port
    assert "node manager and object manager" in section and "NCCL" in section and "52365" in section
    assert "any code" in section and "VLLM_API_KEY" in section
    if network == "host":
        assert "nft add rule" in section and "drop" in section
    else:
        assert "private network" in section and "nft" not in section


@pytest.mark.unit
def test_env_example_stays_the_place_for_secrets():
    files = prepare("cpu", []).files
    assert "# VLLM_API_KEY=" in files[".env.example"] and "# HF_TOKEN=" in files[".env.example"]
    for name, text in files.items():
        for token in TOKENS.values():
            assert token not in text, name


@pytest.mark.unit
def test_base_and_base_digest_must_agree():
    a, b = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    result = validate(f"image.base=vllm-kit/base@{a}", f"image.base_digest={b}")
    assert result.exit_code == 1 and "another digest than image.base_digest" in result.output
    assert validate(f"image.base=vllm-kit/base@{a}", f"image.base_digest={a}").exit_code == 0
