"""`kit image-size` on a real image: a small one built on the local base, with a distribution installed by pip."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from tests.integration.conftest import BASE_IMAGE, removed_after

# A pure-Python "distribution" written by hand (a 3 MB module and its RECORD), in a layer of its own.
DOCKERFILE = f"""FROM {BASE_IMAGE}
RUN mkdir -p /opt/site/bigpkg /opt/site/bigpkg-1.2.3.dist-info \\
    && head -c 3000000 /dev/zero > /opt/site/bigpkg/blob.bin \\
    && printf 'bigpkg/blob.bin,,\\nbigpkg-1.2.3.dist-info/RECORD,,\\n' > /opt/site/bigpkg-1.2.3.dist-info/RECORD
"""


@pytest.fixture(scope="module")
def small_image(docker_client):
    tag = "vllm-kit/test-image-size:latest"
    with removed_after(docker_client, tag):
        docker_client.images.build(fileobj=io.BytesIO(DOCKERFILE.encode()), tag=tag, rm=True, network_mode="none")
        yield tag


def test_image_size_json(small_image, docker_client):
    out = subprocess.run([sys.executable, "-m", "kit.cli.main", "image-size", small_image, "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)["data"]
    dist = next(d for d in data["distributions"] if d["name"] == "bigpkg")
    assert dist["version"] == "1.2.3" and dist["files"] == 2 and 3_000_000 < dist["bytes"] < 3_000_100
    assert data["layers"][-1]["size"] >= 3_000_000 and "bigpkg" in data["layers"][-1]["created_by"]
    opt = next(d for d in data["directories"] if d["path"] == "/opt")
    assert opt["bytes"] == dist["bytes"]
    # The flattened file system and the engine's own size agree to within the tar headers' rounding.
    assert abs(data["total"] - docker_client.images.get(small_image).attrs["Size"]) < 0.1 * data["total"]
