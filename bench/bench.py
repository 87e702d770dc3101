"""Build, size and start-up figures for the `cpu` preset (and the `rtx4090-awq` slim image when built).

Printed, not asserted: `make bench`. Needs the Docker engine and base image from scripts/setup-host.sh.

  cold build           no-cache build of the cpu image from the wheelhouse, with its steps' seconds
  rebuild              the same after changing only engine flags and the model (must reuse every layer)
  image size           cpu image; rtx4090-awq slim image if present locally; the official image's published size
  time to ready        first start on fresh volumes; restart with the HF-cache and compile-cache volumes kept
  kit smoke            wall time of `kit smoke preset=cpu` with the image already built
  slim build           with --slim-wheelhouse: no-cache BuildKit build of the rtx4090-awq slim image on the base,
                       its steps' seconds (the first, the wheelhouse as an image: imported, or there from an
                       earlier build), then a copy of the preset under another name (labels differ) rebuilt
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import yaml

from kit.core.datafiles import PRESETS_DIR
from kit.deploy.pipeline import prepare
from kit.image.build import step_table
from kit.image.wheelhouse import build_wheelhouse, probe_base_image
from kit.run.stack import Stack, write_smoke_env
from kit.run.workflow import build, image_exists, render_into, start

# Published sizes of the official images, for comparison (vLLM issues #27154, #7609, #13112).
OFFICIAL_GPU_IMAGE = "vllm/vllm-openai: 12 GB and more (compressed pulls ~8 GB; vLLM #27154, #7609, #13112)"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def slim_build(args: argparse.Namespace, tmp: Path, rows: list[tuple[str, str]], tables: list[tuple[str, str]],
               say) -> None:
    """The slim GPU image from a warm wheelhouse (BuildKit), then a renamed copy of its preset: the copy differs in
    labels only, so every costly step comes from the cache."""
    prepared = prepare("rtx4090-awq", base_image=args.base_image)
    python_version, glibc = probe_base_image(args.base_image)
    build_wheelhouse(prepared.deployment, args.slim_wheelhouse, python_version=python_version, glibc=glibc, progress=say)
    out = tmp / "rtx4090-awq"
    render_into(prepared, out)
    say("slim image: cold build (--no-cache, BuildKit)")
    cold = build(prepared, out, wheelhouse=args.slim_wheelhouse, no_cache=True)
    rows.append(("cold build, rtx4090-awq slim image", f"{cold.seconds:.1f} s ({gib(cold.size_bytes)}); "
                 f"{cold.steps[0].instruction.strip('()')} in {cold.steps[0].seconds:.1f} s"))
    tables.append(("cold build, rtx4090-awq slim image: steps", step_table(cold.steps)))
    data = yaml.safe_load((PRESETS_DIR / "rtx4090-awq.yaml").read_text())
    copy = tmp / "my-awq.yaml"
    copy.write_text(yaml.safe_dump(data))
    renamed = prepare(str(copy), base_image=args.base_image)
    out2 = tmp / "my-awq"
    render_into(renamed, out2)
    say("slim image: a renamed copy of the preset")
    warm = build(renamed, out2, wheelhouse=args.slim_wheelhouse)
    rows.append(("rebuild, slim preset renamed",
                 f"{warm.seconds:.1f} s; {warm.cached_steps}/{warm.total_steps} steps from cache"))
    tables.append(("rebuild, slim preset renamed: steps", step_table(warm.steps)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--wheelhouse", type=Path, required=True)
    parser.add_argument("--base-image", default="vllm-kit/base:bookworm")
    parser.add_argument("--slim-wheelhouse", type=Path, help="also build the rtx4090-awq slim image from this wheelhouse")
    args = parser.parse_args()
    rows: list[tuple[str, str]] = []
    tables: list[tuple[str, str]] = []
    say = lambda m: print(f"[bench] {m}", file=sys.stderr, flush=True)  # noqa: E731

    prepared = prepare("cpu", base_image=args.base_image)
    build_wheelhouse(prepared.deployment, args.wheelhouse, progress=say)
    with tempfile.TemporaryDirectory(prefix="kit-bench-") as tmp:
        out = Path(tmp) / "cpu"
        render_into(prepared, out)
        say("cold build (--no-cache)")
        cold = build(prepared, out, wheelhouse=args.wheelhouse, no_cache=True)
        rows.append(("cold build, cpu image", f"{cold.seconds:.1f} s"))
        tables.append(("cold build, cpu image: steps", step_table(cold.steps)))

        changed = prepare("cpu", ["engine.max_num_seqs=4", "engine.max_model_len=512",
                                  "model.served_model_name=bench"], base_image=args.base_image)
        out2 = Path(tmp) / "cpu-changed"
        render_into(changed, out2)
        say("rebuild after changing only flags and the model")
        warm = build(changed, out2, wheelhouse=args.wheelhouse)
        rows.append(("rebuild, flags + model changed",
                     f"{warm.seconds:.1f} s = {warm.seconds / cold.seconds:.3f} x cold; "
                     f"{warm.cached_steps}/{warm.total_steps} steps from cache; same image: {warm.image_id == cold.image_id}"))
        tables.append(("rebuild, flags + model changed: steps", step_table(warm.steps)))
        rows.append(("image size, cpu", gib(cold.size_bytes)))
        slim = prepare("rtx4090-awq", base_image=args.base_image).image_ref
        if image_exists(slim):
            from kit.core.docker_engine import docker_client

            rows.append(("image size, rtx4090-awq slim", gib(docker_client().images.get(slim).attrs["Size"])))
        else:
            rows.append(("image size, rtx4090-awq slim", "not built here (pytest -m slow builds it)"))
        rows.append(("image size, official GPU image", OFFICIAL_GPU_IMAGE))
        if args.slim_wheelhouse:
            slim_build(args, Path(tmp), rows, tables, say)

        port = free_port()
        run = prepare("cpu", [f"runtime.port={port}"], base_image=args.base_image)
        out3 = Path(tmp) / "cpu-run"
        render_into(run, out3)
        write_smoke_env(out3)
        project = "kit-bench-cpu"
        say("first start on fresh volumes")
        stack, first = start(run, out3, project, wheelhouse=args.wheelhouse, progress=None)
        try:
            stack.down(volumes=False)
            say("restart with the volumes kept")
            stack.up()
            again = stack.wait_healthy(run.deployment.runtime.healthcheck_start_period + 120)
        finally:
            Stack(out3, project).down(volumes=True)
        rows.append(("time to ready, first start", f"{first:.1f} s"))
        rows.append(("time to ready, restart (volumes kept)",
                     f"{again:.1f} s = {again / first:.2f} x first (cpu preset runs eager: no compile cache to reuse)"))

        say("kit smoke preset=cpu")
        t0 = time.monotonic()
        result = subprocess.run([sys.executable, "-m", "kit.cli.main", "smoke", "preset=cpu", "--port", str(free_port()),
                                 "--base-image", args.base_image, "--wheelhouse", str(args.wheelhouse),
                                 "--out", str(Path(tmp) / "smoke")], capture_output=True, text=True)
        rows.append(("kit smoke preset=cpu, wall time",
                     f"{time.monotonic() - t0:.1f} s (exit {result.returncode})"))

    width = max(len(name) for name, _ in rows)
    print("vllm-kit benchmarks (figures, not assertions)")
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")
    for name, table in tables:
        print(f"\n{name} (step, seconds, from cache, instruction)\n{table}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
