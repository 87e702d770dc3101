"""The session's images are given back: `removed_after` removes what the block built and keeps what was there."""

import io
import os

from tests.integration.conftest import BASE_IMAGE, removed_after


def test_an_image_built_in_the_block_is_removed_and_a_present_one_stays(docker_client):
    ref = f"vllm-kit/cleanup-probe:{os.getpid()}"
    dockerfile = io.BytesIO(f"FROM {BASE_IMAGE}\nLABEL org.vllm-kit.probe={os.getpid()}\n".encode())
    try:
        with removed_after(docker_client, ref), removed_after(docker_client, BASE_IMAGE):
            image, _ = docker_client.images.build(fileobj=dockerfile, tag=ref, rm=True)
            assert ref in image.tags
        assert not docker_client.images.list(name=ref.split(":")[0], filters={"label": "org.vllm-kit.probe"})
        docker_client.images.get(BASE_IMAGE)  # present before the block: still there
    finally:
        if docker_client.images.list(name=ref):
            docker_client.images.remove(ref, force=True)
