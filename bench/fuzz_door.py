"""Fuzz the rendered front door (issue 35): generated hostile requests through HAProxy to a recording backend.

The cpu preset's door/haproxy.cfg (and cpu-embed's, whose routes differ) runs in the door's stand-in image, in
front of a backend that logs every request it receives (tests/integration/hostile_door.py). Requests are raw bytes:
methods, paths with percent-encodings, dots, double slashes and absolute forms, Host values and duplicates,
Authorization variants, oversize, chunked and contradictory bodies, header tricks. Asserts that nothing outside the
allowed routes (exact path and method), the allowed Hosts, the key, the body rules reaches the backend, and that
the fixed set's controls do reach it. Prints cases, passed, reached (by the backend), and the first failures.
Exit 1 on any failure.

Needs a Docker engine, the local base image and the haproxy .debs (scripts/setup-host.sh).
Run: python bench/fuzz_door.py [--cases N] [--seed S]   (make fuzz)
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=600, help="generated requests per preset")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: printed, from the clock)")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else int(time.time())

    from kit.core.docker_engine import docker_client
    from kit.core.errors import KitError
    from kit.deploy.door import door_routes
    from kit.deploy.pipeline import prepare
    from tests.integration import hostile_door as hd
    from tests.integration.conftest import BASE_IMAGE, door_standin_image

    try:
        client = docker_client()
        client.images.get(BASE_IMAGE)
    except KitError as exc:
        print(f"fuzz_door: no Docker engine ({exc.message}); run scripts/setup-host.sh", file=sys.stderr)
        return 1
    except Exception:  # noqa: BLE001 - the docker SDK's ImageNotFound
        print(f"fuzz_door: base image {BASE_IMAGE} is missing; run scripts/setup-host.sh", file=sys.stderr)
        return 1
    image = door_standin_image(client)
    rng = random.Random(seed)  # noqa: S311 - reproducible test inputs, not secrets
    totals = {"cases": 0, "passed": 0, "reached": 0}
    failures: list[str] = []
    start = time.monotonic()
    for preset in ("cpu", "cpu-embed"):
        prepared = prepare(preset, ["runtime.port=8000"])  # the Host values the cases send name port 8000
        config = prepared.files["door/haproxy.cfg"]
        line = next(x for x in config.splitlines() if "acl served_host" in x)
        hosts = [v.strip('"').lower() for v in line.split(" -m str ", 1)[1].split()]
        routes = door_routes(prepared.preset)
        inference = next(r.path for r in routes if "POST" in r.methods)
        cases = hd.fixed_cases(inference) + [hd.generated_case(rng, i, routes) for i in range(args.cases)]
        with hd.door_bench(client, image, config, prefix=f"door-fuzz-{os.getpid()}") as bench:
            result = hd.run_cases(bench, cases, routes, hosts)
        for name in totals:
            totals[name] += int(result[name])  # type: ignore[call-overload]
        failures += [f"{preset}: {f}" for f in result["failures"]]  # type: ignore[union-attr]
    print(f"seed               {seed}")
    print(f"cases              {totals['cases']}")
    print(f"passed             {totals['passed']}")
    print(f"reached backend    {totals['reached']} (each checked: allowed route, Host, key, body)")
    print(f"failures           {len(failures)}")
    print(f"took               {time.monotonic() - start:.1f} s")
    for line in failures[:10]:
        print(line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
