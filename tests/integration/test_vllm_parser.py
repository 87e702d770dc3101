"""The kit's copies of vLLM's facts against a real vLLM: the CPU image's (the version the cpu preset pins).

The checked-in flag snapshot must be what that vLLM's own serve parser says, the argv the kit renders must parse
there, and the kit's reader of vLLM's integers (kit/config/vllmint.py) must agree with vLLM's converters. These
were unit tests that skipped when `import vllm` failed on the host, i.e. always in CI; vLLM is a multi-GB install
the unit layer should not need, so they run here, inside the image the suite builds anyway.
"""

from __future__ import annotations

import json

from kit.config import flagsnap
from kit.config.flags import engine_to_argv
from kit.config.vllmint import read_vllm_int
from tests.conftest import REPO
from tests.unit.test_typed_values import READ, REFUSED

# Runs inside the image: flagsnap is standard-library only (tests/unit/test_layout.py), the repository is mounted
# read-only at /kit. The last stdout line is the JSON answer (vLLM may log to stdout before it).
IN_IMAGE = """
import argparse, json, sys
sys.path.insert(0, "/kit")
from kit.config import flagsnap
from vllm.utils import argparse_utils
argv, cases = json.loads(sys.argv[1]), json.loads(sys.argv[2])
snapshot = flagsnap.dumps_snapshot(flagsnap.generate_snapshot())
parser, _ = flagsnap.build_serve_parser()
parsed = vars(parser.parse_args(argv))
read = []
for text, converter in cases:
    try:
        read.append(getattr(argparse_utils, converter, int)(text))
    except (ValueError, TypeError, argparse.ArgumentTypeError):  # vLLM raises the last for a decimal with K
        read.append("refused")
print(json.dumps({"snapshot": snapshot, "parsed": {k: parsed[k] for k in json.loads(sys.argv[3])}, "read": read}))
"""

ENGINE = {"max_model_len": "32k", "enable_prefix_caching": False, "ignore_patterns": ["a", "b"],
          "compilation_config": {"mode": 3}, "headless": True}


def test_snapshot_argv_and_integer_reader_agree_with_the_images_vllm(docker_client, cpu_image):
    version = cpu_image.prepared.deployment.image.vllm_version
    argv = ["some-model", *engine_to_argv(ENGINE, version)]
    cases = [[text, converter] for text, converter, _ in READ] + [list(case) for case in REFUSED]
    keys = ["max_model_len", "enable_prefix_caching", "ignore_patterns", "headless"]
    out = docker_client.containers.run(
        cpu_image.prepared.image_ref,
        [cpu_image.prepared.deployment.serve.python, "-c", IN_IMAGE, json.dumps(argv), json.dumps(cases), json.dumps(keys)],
        entrypoint=[], remove=True, network_disabled=True, volumes={str(REPO): {"bind": "/kit", "mode": "ro"}},
        environment={"PYTHONDONTWRITEBYTECODE": "1"})
    answer = json.loads(out.decode().strip().splitlines()[-1])
    assert answer["snapshot"] == flagsnap.snapshot_path(version).read_text(encoding="utf-8"), (
        f"kit/data/flags/vllm-{version}.json differs from vLLM {version}'s parser: regenerate it")
    assert answer["parsed"] == {"max_model_len": 32000, "enable_prefix_caching": False,
                                "ignore_patterns": ["a", "b"], "headless": True}
    for (text, converter, value), got in zip(READ, answer["read"][:len(READ)], strict=True):
        assert got == value == read_vllm_int(text, converter), (text, converter)
    for (text, converter), got in zip(REFUSED, answer["read"][len(READ):], strict=True):
        assert got == "refused", (text, converter, got)
