"""What every unit test starts from."""

from __future__ import annotations

import pytest

from kit.deploy.service_env import table


@pytest.fixture(autouse=True, scope="module")
def _no_site_images():
    """A render carries a site image its shell names (VLLM_KIT_DOOR_IMAGE) into .env; the integration session sets
    one for its stand-in door, in this process too when the suite runs in one (or an xdist worker runs both). Unit
    tests start without it (those about it set it themselves). Module scope, so the module-scoped fixtures that
    render (tests/unit/test_write_crash.py `sets`) start without it too; restored after the module."""
    with pytest.MonkeyPatch.context() as patch:
        for name in table().get("images_from_environment") or {}:
            patch.delenv(name, raising=False)
        yield
