"""What every unit test starts from."""

from __future__ import annotations

import pytest

from kit.deploy.service_env import table


@pytest.fixture(autouse=True)
def _no_site_images(monkeypatch):
    """A render carries a site image its shell names (VLLM_KIT_DOOR_IMAGE) into .env; the integration session sets
    one for its stand-in door, in this process too when the suite runs in one. Unit tests start without it (those
    about it set it themselves)."""
    for name in table().get("images_from_environment") or {}:
        monkeypatch.delenv(name, raising=False)
