"""`kit ps`, `kit logs`, `kit status`: a running stack, read from its directory (`--out DIR`) via docker compose."""

from __future__ import annotations

import subprocess
from pathlib import Path

import click

from kit.cli.common import PathOption, emit_json, problem_json, standard_options
from kit.core.errors import KitError

OUT_HELP = "The stack's directory (the --out given to `kit up` or `kit render`)."


def out_option(func):
    return click.option("--out", "out_dir", type=PathOption(folder=True), default=Path("."),
                        show_default=True, help=OUT_HELP)(func)


@click.command()
@out_option
@standard_options
def ps(out_dir: Path, as_json: bool) -> None:
    """List a stack's containers: kit ps --out DIR."""
    from kit.cli.output import table
    from kit.run import ops

    rows = ops.ps(out_dir)
    if as_json:
        emit_json([{k: v for k, v in r.items() if k != "publishers"} for r in rows])
        return
    if not rows:
        click.echo(f"no containers for the stack in {out_dir}", err=True)
        return
    table(("project", "service", "container", "state", "health", "ports"),
          [(r["project"], r["service"], r["container"], r["state"], r["health"] or "", r["ports"]) for r in rows])


@click.command()
@click.argument("services", nargs=-1, metavar="[SERVICE]...")
@out_option
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until Ctrl-C.")
@click.option("--tail", type=click.IntRange(min=0), default=None, metavar="N", help="Only the last N lines per container.")
@click.option("-t", "--timestamps", is_flag=True, help="Prefix each line with its time.")
@standard_options
def logs(services: tuple[str, ...], out_dir: Path, follow: bool, tail: int | None, timestamps: bool,
         as_json: bool) -> None:
    """Print a stack's logs: kit logs [-f] [SERVICE] --out DIR."""
    from kit.run import ops

    if follow and as_json:
        raise click.UsageError("--follow streams; --json prints one object: pick one")
    projects = ops.find_projects(out_dir)
    if follow:
        # Streams straight to the terminal until the user stops it (Ctrl-C ends compose as well).
        argvs = [ops.logs_argv(p, services=services, follow=True, tail=tail, timestamps=timestamps) for p in projects]
        children = [subprocess.Popen(argv, cwd=p.files[0].parent, env=ops.inspection_env(p.files))
                    for argv, p in zip(argvs, projects, strict=True)]
        try:
            codes = [child.wait() for child in children]
        except KeyboardInterrupt:
            for child in children:
                child.terminate()
            codes = [0]
        raise SystemExit(max(codes))
    lines: list[str] = []
    for project in projects:
        argv = ops.logs_argv(project, services=services, follow=False, tail=tail, timestamps=timestamps)
        text = ops.run_compose(project, *argv[argv.index("logs"):])
        lines += text.splitlines()
    if as_json:
        emit_json({"out": str(out_dir), "projects": [p.name for p in projects], "services": list(services),
                   "lines": lines})
        return
    for line in lines:
        click.echo(line)


@click.command()
@out_option
@standard_options
def status(out_dir: Path, as_json: bool) -> None:
    """Ask a running stack how it is: health, model, KV cache usage, requests running and waiting.

    With a folder the kit rendered, first what the folder is: the preset, overrides, add-ons and target its
    vllm-kit.yaml records, whether the preset changed since, and files edited since the kit wrote them."""
    from kit.deploy.record import describe, edited_files, read_record
    from kit.run import ops

    record = read_record(out_dir) if out_dir.is_dir() else None
    rows = describe(record, out_dir) if record is not None else []
    if record is not None:
        edited = edited_files(out_dir)
        rows.append(("edited", ", ".join(edited) if edited else "none (every file as the kit wrote it)"))
    if record is not None and record.target == "k8s":  # nothing of it runs on this host
        if as_json:
            emit_json({"out": str(out_dir), "deployment": dict(rows)})
        else:
            from kit.cli.output import key_values

            key_values([*rows, ("running", "nothing here: a Kubernetes deployment (kubectl apply -k k8s/)")])
        return
    try:
        data = ops.status(out_dir)
    except KitError:
        if rows and not as_json:  # what the folder is, even when asking the stack fails (compose refuses a bad .env)
            from kit.cli.output import key_values

            key_values(rows)
        raise
    if record is not None:
        data["deployment"] = dict(rows)
    healthy = data["health"] == "ok"
    if as_json:
        import shlex

        problems = None if healthy else [problem_json(None, f"{data['url']}/health: {data['health']}",
                                                      f"see `kit logs --out {shlex.quote(str(out_dir))}`")]
        emit_json(data, ok=healthy, problems=problems)
    else:
        from kit.cli.output import key_values

        kv = data["kv_cache_usage_perc"]
        key_values([
            *rows,
            # The record's compose project, when that is what runs, is named once (the row above).
            *(() if ("compose project", data["project"]) in rows else (("project", data["project"] or "(none running)"),)),
            ("container", f"{data['container'] or '-'} ({data['state'] or 'absent'}, health {data['container_health'] or '-'})"),
            ("url", data["url"]),
            ("health", data["health"]),
            ("model", ", ".join(data["models"]) or f"- (/v1/models: {data['models_http'] or 'no answer'})"),
            ("KV cache", "-" if kv is None else f"{kv * 100:.1f} % used"),
            ("requests", f"{_count(data['requests_running'])} running, {_count(data['requests_waiting'])} waiting"),
        ])
    if not healthy:
        raise SystemExit(1)


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"
