"""The router's own small image (replicas behind one endpoint): its wheelhouse and its build.

kit/deploy/router.py renders the router's build context (router/Dockerfile, requirements.txt) and names the image;
this module builds it the way the server's image is built: wheels downloaded on the host, no index in the build.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from kit.core.safepaths import work_folder
from kit.deploy.router import ROUTER_DIR, router_image_ref, router_spec
from kit.image.build import BuildRequest, build_image, wheels_for_lock
from kit.image.wheelhouse import LOCK_NAME, build_wheelhouse

if TYPE_CHECKING:
    from kit.deploy.deployment import Deployment


def router_wheelhouse(d: Deployment, directory: Path, progress: Callable[[str], None] | None = None) -> Path:
    """The router's wheels for the stack's base (its Python, glibc and arch), downloaded on the host."""
    if not (directory / LOCK_NAME).is_file():
        spec = router_spec(d.preset)
        image = replace(d.image, requirements=[spec.requirement], exclude_packages=[], pip_index_url=None)
        build_wheelhouse(replace(d, image=image),
                         directory, progress=progress)
    return directory


def build_router_image(d: Deployment, out_dir: Path, wheelhouse: Path | None,
                       progress: Callable[[str], None] | None = None) -> str:
    """Build the rendered router/ context (offline from ``wheelhouse`` when given); returns the image ref."""
    rendered = out_dir / ROUTER_DIR
    files = {f"{ROUTER_DIR}/{p.name}": p.read_text() for p in rendered.iterdir() if p.is_file()}
    ref = router_image_ref(d, files)
    context = work_folder(out_dir) / "router-context"
    if context.exists():
        shutil.rmtree(context)
    shutil.copytree(rendered, context)
    if wheelhouse is not None:
        (context / "wheels").mkdir()
        for source in [*wheels_for_lock(wheelhouse), wheelhouse / LOCK_NAME]:
            shutil.copy2(source, context / "wheels" / source.name)
    request = BuildRequest(context_dir=context, tags=[ref], offline=wheelhouse is not None,
                           platform=d.image.platform if d.image.platform != "linux/amd64" else None)
    build_image(request, work_folder(out_dir, "router"), progress=progress)
    return ref
