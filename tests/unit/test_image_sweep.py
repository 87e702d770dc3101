"""The session's image sweep (tests/image_sweep.py) selects what the session made under the kit's names, and never
an image or a tag the engine had before the session. Snapshots here are rows shaped as the engine's
`/images/json?all=1` answers them (the Docker SDK's ``api.images(all=True)``), `<none>:<none>` for no tag included."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.image_sweep import KEPT_REPOSITORIES, leftovers, repository, snapshot


def image_id(name: str) -> str:
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


def row(name: str, parent: str | None = None, tags=(), labels=None) -> dict:
    """One row of `/images/json?all=1` (the fields the sweep reads, and a few it does not)."""
    return {"Containers": -1, "Created": 1796317206, "Id": image_id(name), "Labels": labels,
            "ParentId": image_id(parent) if parent else "", "RepoDigests": [],
            "RepoTags": list(tags) or ["<none>:<none>"], "SharedSize": -1, "Size": 1000, "VirtualSize": 1000}


KIT = {"io.vllm-kit.preset": "cpu", "org.opencontainers.image.source": "vllm-kit"}

# The engine when the session starts: what `make setup` imported, a kept stand-in, a user's own images, a kit image
# and a dangling kit leftover from an earlier run.
BEFORE = [
    row("base", tags=["vllm-kit/base:bookworm"]),
    row("arm64", tags=["vllm-kit/base-arm64:bookworm"]),
    row("haproxy-1", "base"), row("haproxy", "haproxy-1", ["vllm-kit/standin-haproxy:0a9551231518",
                                                          "vllm-kit/standin-haproxy:local"]),
    row("debian", tags=["debian:bookworm"]),
    row("users-app", "debian", ["myapp:dev"]),
    row("old-cpu-1", "base"), row("old-cpu-2", "old-cpu-1"),
    row("old-cpu", "old-cpu-2", ["vllm-kit/cpu:0.32.0"], KIT),
    row("old-leftover", "old-cpu-1", labels=KIT),
]

# The engine when it ends: all of the above (the session re-tagged some), and what the session built.
AFTER = [
    row("base", tags=["vllm-kit/base:bookworm", "127.0.0.1:41234/vllm-kit/authcheck:t77"]),  # a push of the base
    row("arm64", tags=["vllm-kit/base-arm64:bookworm"]),
    row("haproxy-1", "base"), row("haproxy", "haproxy-1", ["vllm-kit/standin-haproxy:0a9551231518",
                                                          "vllm-kit/standin-haproxy:local"]),
    row("debian", tags=["debian:bookworm"]),
    row("users-app", "debian", ["myapp:dev"]),
    row("old-cpu-1", "base"), row("old-cpu-2", "old-cpu-1"),
    row("old-cpu", "old-cpu-2", ["vllm-kit/cpu:0.32.0"], KIT),
    row("old-leftover", "old-cpu-1", ["vllm-kit/pull-policy-test:0.32.0"], KIT),  # only a new tag on an old image
    # The session's locked build: a chain on the base, the final image tagged three ways (one a registry's).
    row("lock-1", "base"), row("lock-2", "lock-1"),
    row("lock", "lock-2", ["vllm-kit/lockcheck:0.32.0", "vllm-kit/lockcheck:a",
                           "127.0.0.1:5000/vllm-kit/lockcheck:0.32.0"], KIT),
    # Its builder stage: untagged, no label, no child, on the base.
    row("builder-1", "base"), row("builder", "builder-1"),
    # A failed build's last good step, on the session's own chain.
    row("failed", "lock-2"),
    # A stand-in built once and kept across sessions.
    row("prom-1", "base"), row("prometheus", "prom-1", ["vllm-kit/standin-prometheus:7bd69521f5eb"]),
    # Someone else's work meanwhile, not under the kit's names: a tagged image and a dangling one off debian.
    row("other", "debian", ["someone/else:1"]), row("other-dangling", "debian"),
    # A kit tag on a new image that a non-kit image was then built on: the parent must stay for its child.
    row("shared", "base", ["vllm-kit/shared-parent:1"]), row("child-of-shared", "shared", ["someone/child:1"]),
]


def sweep():
    return leftovers(snapshot(BEFORE), snapshot(AFTER))


def test_the_sessions_builds_go_and_everything_else_stays():
    result = sweep()
    assert set(result.untag) == {"127.0.0.1:41234/vllm-kit/authcheck:t77", "vllm-kit/lockcheck:0.32.0",
                                 "vllm-kit/lockcheck:a", "127.0.0.1:5000/vllm-kit/lockcheck:0.32.0"}
    assert set(result.delete) == {image_id(n) for n in ("lock-1", "lock-2", "lock", "builder-1", "builder",
                                                         "failed")}
    assert result.kept == {
        "vllm-kit/pull-policy-test:0.32.0": "its image was on the engine before the session",
        "vllm-kit/standin-prometheus:7bd69521f5eb": "kept across sessions",
        "vllm-kit/shared-parent:1": "an image built on it stays",
    }


def test_children_are_removed_before_their_parents():
    order = sweep().delete
    for child, parent in [("lock", "lock-2"), ("lock-2", "lock-1"), ("failed", "lock-2"), ("builder", "builder-1")]:
        assert order.index(image_id(child)) < order.index(image_id(parent))


def test_nothing_the_engine_had_before_is_selected():
    result = sweep()
    before = snapshot(BEFORE)
    assert not set(result.delete) & set(before)
    assert not set(result.untag) & {t for image in before.values() for t in image.tags}
    # The base images and the stand-ins: not one of their tags, nor their IDs.
    for name in ("base", "arm64", "haproxy", "haproxy-1", "prometheus", "prom-1", "old-leftover", "old-cpu"):
        assert image_id(name) not in result.delete


def test_a_session_that_made_nothing_removes_nothing():
    assert not leftovers(snapshot(BEFORE), snapshot(BEFORE))
    assert not leftovers(snapshot(AFTER), snapshot(AFTER))


def test_a_base_image_of_any_name_given_as_kept_stays():
    before = [row("mine", tags=["vllm-kit/hardened:1"])]
    after = [*before, row("built", "mine", ["vllm-kit/cpu:0.32.0"], KIT), row("probe", tags=["vllm-kit/hardened:2"])]
    default = leftovers(snapshot(before), snapshot(after))
    assert default.untag == ["vllm-kit/cpu:0.32.0", "vllm-kit/hardened:2"]
    kept = leftovers(snapshot(before), snapshot(after), KEPT_REPOSITORIES | {"vllm-kit/hardened"})
    assert kept.untag == ["vllm-kit/cpu:0.32.0"] and kept.kept == {"vllm-kit/hardened:2": "kept across sessions"}


@pytest.mark.parametrize(("tag", "repo"), [
    ("vllm-kit/cpu:0.32.0", "vllm-kit/cpu"),
    ("127.0.0.1:5000/vllm-kit/lockcheck:0.32.0-88b4b1cfd7e6", "vllm-kit/lockcheck"),
    ("localhost/vllm-kit/x:1", "vllm-kit/x"),
    ("localhost:5000/team/vllm-kit/x:1", "team/vllm-kit/x"),
    ("vllm-kit/cpu", "vllm-kit/cpu"),
    ("myapp:dev", "myapp"),
])
def test_repository_drops_the_registry_host_and_the_tag(tag, repo):
    assert repository(tag) == repo


TAG_POOL = ["vllm-kit/cpu:0.32.0", "vllm-kit/cpu:0.32.0-33b6da6be405", "vllm-kit/base:bookworm",
            "vllm-kit/standin-haproxy:local", "127.0.0.1:5000/vllm-kit/lockcheck:a", "myapp:dev", "debian:bookworm"]


@st.composite
def sessions(draw):
    """An engine before a session (a forest: every parent exists) and after it: the old images, re-tagged at
    random (tags move, as `docker tag` moves them), and new images on old or new parents."""
    old = draw(st.integers(0, 8))
    new = draw(st.integers(0, 8))
    parents = [draw(st.integers(-1, i - 1)) for i in range(old + new)]
    labelled = [draw(st.booleans()) for _ in range(old + new)]

    def tags_for(count: int) -> list[set[str]]:
        owner = {tag: draw(st.integers(-1, count - 1)) for tag in TAG_POOL}  # a tag names one image or none
        return [{t for t, o in owner.items() if o == i} for i in range(count)]

    def rows(count: int, tags: list[set[str]]) -> list[dict]:
        return [row(f"i{i}", f"i{parents[i]}" if parents[i] >= 0 else None, sorted(tags[i]),
                    KIT if labelled[i] else None) for i in range(count)]

    return rows(old, tags_for(old)), rows(old + new, tags_for(old + new))


@given(sessions())
def test_no_image_or_tag_from_before_the_session_is_ever_selected(session):
    before_rows, after_rows = session
    before, after = snapshot(before_rows), snapshot(after_rows)
    result = leftovers(before, after)
    tags_before = {t for image in before.values() for t in image.tags}
    assert not set(result.delete) & set(before)
    assert not set(result.untag) & tags_before
    for tag in result.untag:
        owner = next(image for image in after.values() if tag in image.tags)
        # a tag comes off an old image only while another stays on it: removing the last would delete the image
        if owner.id in before:
            assert owner.tags - set(result.untag)
        assert repository(tag).startswith("vllm-kit/") and repository(tag) not in KEPT_REPOSITORIES
    for image_id_ in result.delete:  # an image goes only with every image built on it
        assert all(child.id in result.delete for child in after.values() if child.parent == image_id_)
        assert not after[image_id_].tags - set(result.untag)
