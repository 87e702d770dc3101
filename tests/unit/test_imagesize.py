"""`kit image-size`'s breakdown, on tar streams laid out like `docker export` of an image."""

from __future__ import annotations

import io
import json
import tarfile

import pytest
from click.testing import CliRunner

from kit.cli.main import cli
from kit.image.imagesize import NO_DIST, breakdown_from_tar, format_breakdown

pytestmark = pytest.mark.unit

SITE = "opt/venv/lib/python3.12/site-packages"


def _tar(files: dict[str, bytes], links: tuple[str, ...] = ()) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for path in links:  # links and folders carry no bytes of their own
            info = tarfile.TarInfo(path)
            info.type, info.linkname = tarfile.SYMTYPE, "elsewhere"
            tar.addfile(info)
    buffer.seek(0)
    return buffer


def _image() -> io.BytesIO:
    record_torch = "torch/__init__.py,sha256=x,10\ntorch/lib/libtorch_cuda.so,,\ntorch-2.14.0.dist-info/RECORD,,\n"
    record_six = "six.py,,\n../../../bin/six-tool,,\nsix-1.17.0.dist-info/RECORD,,\n"
    return _tar({
        f"{SITE}/torch/__init__.py": b"x" * 10,
        f"{SITE}/torch/lib/libtorch_cuda.so": b"c" * 5000,
        f"{SITE}/torch-2.14.0.dist-info/RECORD": record_torch.encode(),
        f"{SITE}/six.py": b"s" * 300,
        f"{SITE}/six-1.17.0.dist-info/RECORD": record_six.encode(),
        "opt/venv/bin/six-tool": b"t" * 7,  # a script RECORD names with ../
        f"{SITE}/stray.py": b"q" * 40,  # no RECORD lists it
        "usr/lib/libc.so.6": b"l" * 2000,
    }, links=("usr/lib/libc.so",))


def test_distributions_from_records_largest_first():
    result = breakdown_from_tar(_image(), "img")
    by_name = {d["name"]: d for d in result.distributions}
    assert [d["name"] for d in result.distributions][:2] == ["torch", NO_DIST]
    record_torch_size = len("torch/__init__.py,sha256=x,10\ntorch/lib/libtorch_cuda.so,,\ntorch-2.14.0.dist-info/RECORD,,\n")
    assert by_name["torch"] == {"name": "torch", "version": "2.14.0", "bytes": 5010 + record_torch_size, "files": 3}
    assert by_name["six"]["files"] == 3 and by_name["six"]["version"] == "1.17.0"  # six.py, the script, RECORD
    assert by_name[NO_DIST] == {"name": NO_DIST, "version": "", "bytes": 2040, "files": 2}  # stray.py, libc


def test_byte_code_belongs_to_its_sources_distribution_listed_or_not():
    # pip --no-compile, then compileall (the kit's images), and uv: RECORD lists no byte-code; pip's own compile does.
    record = "torch/__init__.py,,\ntorch/nn.py,,\ntorch/__pycache__/nn.cpython-311.pyc,,\ntorch-2.14.0.dist-info/RECORD,,\n"
    result = breakdown_from_tar(_tar({
        f"{SITE}/torch/__init__.py": b"i",
        f"{SITE}/torch/__pycache__/__init__.cpython-311.pyc": b"p" * 100,  # unlisted
        f"{SITE}/torch/nn.py": b"n",
        f"{SITE}/torch/__pycache__/nn.cpython-311.pyc": b"q" * 200,  # listed
        f"{SITE}/torch/__pycache__/gone.cpython-311.pyc": b"g" * 7,  # its source is not in the image
        f"{SITE}/torch-2.14.0.dist-info/RECORD": record.encode(),
    }), "img")
    by_name = {d["name"]: d for d in result.distributions}
    assert by_name["torch"]["files"] == 5 and by_name["torch"]["bytes"] == 302 + len(record)
    assert by_name[NO_DIST] == {"name": NO_DIST, "version": "", "bytes": 7, "files": 1}


def test_directories_and_total():
    result = breakdown_from_tar(_image(), "img")
    assert result.files == 8  # regular files only: the symlink carries no bytes
    assert sum(d["bytes"] for d in result.directories) == result.total
    assert [d["path"] for d in result.directories] == ["/opt", "/usr"]
    assert result.directories[1]["bytes"] == 2000


def test_text_output_lists_each_table():
    result = breakdown_from_tar(_image(), "img")
    result.layers = [{"size": 224_000_000, "created_by": "base"}, {"size": 0, "created_by": "ENV A=1"},
                     {"size": 7_200, "created_by": "RUN pip install"}]
    text = format_breakdown(result, limit=2)
    assert "224.00 MB  base" in text and "ENV A=1" not in text  # empty layers are left out
    assert "torch 2.14.0" in text and "six" not in text  # limit 2 per table


def test_missing_image_is_one_clear_error():
    result = CliRunner().invoke(cli, ["image-size", "vllm-kit/no-such-image:never", "--json"])
    envelope = json.loads(result.output)
    assert result.exit_code == 1 and envelope["ok"] is False and envelope["command"] == "image-size"
