"""kit/image/buildkit.py: the context as BuildKit reads it, and the trace messages it sends back.

The messages are encoded here from control.proto's field numbers (moby/buildkit api/services/control/control.proto:
StatusResponse{vertexes=1, statuses=2, logs=3}, Vertex{digest=1, inputs=2, name=3, cached=4, started=5, completed=6,
error=7}, VertexLog{vertex=1, timestamp=2, stream=3, msg=4}, Timestamp{seconds=1, nanos=2}), independently of the
decoder under test. The integration tests read real ones (tests/integration/test_slim_gpu_image.py).
"""

from __future__ import annotations

import base64
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from kit.image.build import BuildRequest
from kit.image.buildkit import Trace, context_stream, wheelhouse_key


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def field(number: int, value: int | bytes | str) -> bytes:
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    data = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(data)) + data


def timestamp(seconds: float) -> bytes:
    return field(1, int(seconds)) + field(2, int(round((seconds % 1) * 1e9)))


def vertex(digest: str, name: str = "", *, cached: bool = False, started: float | None = None,
           completed: float | None = None, error: str = "") -> bytes:
    data = field(1, digest) + field(2, "sha256:input")
    if name:
        data += field(3, name)
    if cached:
        data += field(4, 1)
    if started is not None:
        data += field(5, timestamp(started))
    if completed is not None:
        data += field(6, timestamp(completed))
    if error:
        data += field(7, error)
    return field(1, data)


def log(digest: str, text: str) -> bytes:
    return field(3, field(1, digest) + field(2, timestamp(5.0)) + field(3, 1) + field(4, text))


def aux(*parts: bytes) -> str:
    return base64.b64encode(b"".join(parts)).decode()


def test_a_vertex_is_named_started_once_and_timed():
    trace = Trace()
    started, lines = trace.read(aux(vertex("sha256:a", "[venv 1/2] RUN pip install", started=100.25)))
    assert [v.name for v in started] == ["[venv 1/2] RUN pip install"] and lines == []
    # BuildKit resends a vertex with its end: it is the same step, not a new one
    started, _ = trace.read(aux(vertex("sha256:a", "[venv 1/2] RUN pip install", started=100.25, completed=160.75)))
    assert started == []
    (step,) = trace.steps()
    assert step.completed - step.started == pytest.approx(60.5)
    assert not step.cached and trace.failed() is None


def test_output_lines_belong_to_their_step_and_blank_lines_are_dropped():
    trace = Trace()
    trace.read(aux(vertex("sha256:b", "[runtime 2/2] RUN apt-get", started=1.0)))
    _, lines = trace.read(aux(log("sha256:b", "Processing a.whl\n\nProcessing b.whl\n")))
    assert [(v.name, line) for v, line in lines] == [("[runtime 2/2] RUN apt-get", "Processing a.whl"),
                                                      ("[runtime 2/2] RUN apt-get", "Processing b.whl")]


def test_steps_are_the_dockerfiles_in_start_order_with_cache_hits_and_the_failure():
    trace = Trace()
    trace.read(aux(vertex("sha256:i", "[internal] load remote build context", started=0.0, completed=30.0),
                   vertex("sha256:2", "[kit-aot 1/1] RUN flashinfer_aot.py", started=50.0, error="exit code: 1"),
                   vertex("sha256:1", "[runtime 1/3] FROM base", cached=True, started=40.0, completed=40.0),
                   vertex("sha256:x", "exporting to image", started=90.0)))
    assert [v.name for v in trace.steps()] == ["[runtime 1/3] FROM base", "[kit-aot 1/1] RUN flashinfer_aot.py"]
    assert trace.steps()[0].cached
    assert trace.failed().name == "[kit-aot 1/1] RUN flashinfer_aot.py"


def test_the_context_is_a_tar_whose_first_header_stands_alone(tmp_path):
    """BuildKit tells a tar from a Dockerfile by the body's first header alone: it must be a plain one, whatever the
    names inside (a wheel's can pass 100 characters, which needs GNU's long-name header) or the files' times."""
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    (tmp_path / "wheels").mkdir()
    long_name = "charset_normalizer-3.5.3-cp311-cp311-manylinux1_x86_64.manylinux_2_28_x86_64.manylinux_2_5_x86_64.whl"
    (tmp_path / "wheels" / long_name).write_bytes(b"w" * 70_000)
    os.utime(tmp_path / "Dockerfile", (1.5, 1.5))  # a fractional time would start a pax archive with a pax header
    body = b"".join(context_stream(tmp_path))
    first = tarfile.TarInfo.frombuf(body[:512], "utf-8", "surrogateescape")
    assert first.type in (tarfile.REGTYPE, tarfile.DIRTYPE) and first.name == "Dockerfile"
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {"Dockerfile", "wheels", f"wheels/{long_name}"}
        assert tar.extractfile(members[f"wheels/{long_name}"]).read() == b"w" * 70_000
        assert all(m.uid == 0 and m.gid == 0 for m in members.values())


def test_two_streams_of_one_folder_are_the_same_bytes(tmp_path):
    for name in ("b.txt", "a.txt", "Dockerfile"):
        (tmp_path / name).write_text(name)
    assert b"".join(context_stream(tmp_path)) == b"".join(context_stream(tmp_path))


def test_the_build_script_asks_for_the_same_builder(tmp_path):
    buildkit = BuildRequest(context_dir=tmp_path, tags=["t:1"], builder="buildkit")
    classic = BuildRequest(context_dir=tmp_path, tags=["t:1"])
    assert "\nDOCKER_BUILDKIT=1 docker build --pull=false -t t:1" in buildkit.script()
    assert "\nDOCKER_BUILDKIT=0 docker build --rm --force-rm --pull=false -t t:1" in classic.script()


def test_the_wheelhouse_stream_puts_the_files_under_its_folder(tmp_path):
    """The import makes an image whose files lie under /wheels, where the slim Dockerfile's mount reads them."""
    (tmp_path / "a-1.0-py3-none-any.whl").write_bytes(b"a" * 1000)
    (tmp_path / "requirements.lock.txt").write_text("a==1.0\n")
    with tarfile.open(fileobj=io.BytesIO(b"".join(context_stream(tmp_path, prefix="wheels")))) as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == ["wheels", "wheels/a-1.0-py3-none-any.whl", "wheels/requirements.lock.txt"]
        assert members[0].isdir() and tar.extractfile(members[1]).read() == b"a" * 1000


def test_the_wheelhouse_key_changes_with_what_pip_would_read(tmp_path):
    """Same files: same image, reused. A wheel written again (new time), grown, renamed or added, or a lock whose
    text changed even at the same time and size: another image, so a build never installs a stale wheel."""
    wheel = tmp_path / "a-1.0-py3-none-any.whl"
    lock = tmp_path / "requirements.lock.txt"
    wheel.write_bytes(b"a" * 1000)
    lock.write_text("a==1.0\n")
    os.utime(wheel, ns=(10**18, 10**18))
    os.utime(lock, ns=(10**18, 10**18))
    first = wheelhouse_key(tmp_path)
    assert wheelhouse_key(tmp_path) == first and len(first) == 16
    seen = {first}
    os.utime(wheel, ns=(10**18, 10**18 + 1))
    seen.add(wheelhouse_key(tmp_path))
    wheel.write_bytes(b"a" * 1001)
    seen.add(wheelhouse_key(tmp_path))
    lock.write_text("a==1.1\n")
    os.utime(lock, ns=(10**18, 10**18))
    seen.add(wheelhouse_key(tmp_path))
    (tmp_path / "b-2.0-py3-none-any.whl").write_bytes(b"b")
    seen.add(wheelhouse_key(tmp_path))
    assert len(seen) == 5


def test_the_build_script_names_the_wheelhouse_image(tmp_path):
    request = BuildRequest(context_dir=tmp_path, tags=["t:1"], builder="buildkit",
                           extra_args={"KIT_WHEELHOUSE": "vllm-kit/wheelhouse:0123456789abcdef"})
    script = request.script()
    assert "--build-arg KIT_WHEELHOUSE=vllm-kit/wheelhouse:0123456789abcdef" in script
    assert "# KIT_WHEELHOUSE is the wheelhouse as a local image" in script


def test_the_probe_and_the_gpu_harness_import_without_the_docker_package():
    """The lent GPU machine has no docker package: `kit probe` and bench/gpu_calibration.py run there, and they
    import kit/image/build.py (through kit.run) and so this module. The Engine's client is imported where it is used."""
    blocker = ("import sys\n"
               "class NoDocker:\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               "        if name == 'docker' or name.startswith('docker.'):\n"
               "            raise ImportError('no docker package on this machine')\n"
               "sys.meta_path.insert(0, NoDocker())\n"
               "sys.path.insert(0, 'bench')\n"
               "import kit.run.probe, kit.image.build, gpu_calibration\n")
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", blocker], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
