"""`kit loadtest`: a concurrency sweep against a running stack; a table, a JSON report, a PNG plot."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from kit.cli.common import PathOption, emit_json, preset_arguments, split_args, standard_options, status


def _concurrency_levels(ctx: click.Context, param: click.Parameter, value: str) -> tuple[int, ...]:  # noqa: ARG001
    try:
        levels = tuple(int(part) for part in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected a comma-separated list of positive integers, e.g. 1,2,4") from None
    if not levels or min(levels) < 1 or max(levels) > 1024:
        raise click.BadParameter(f"{value!r}: every level must be between 1 and 1024")
    return levels


@click.command()
@preset_arguments
@click.option("--url", help="Load-test this server instead of the preset's stack on 127.0.0.1 (http://HOST:PORT).")
@click.option("--port", type=int, help="The stack's port on 127.0.0.1 (default: the preset's runtime.port).")
@click.option("--model", "model_name", help="Model name to request (default: the preset's served name, or the "
              "server's first model with --url).")
@click.option("--out", "stack_dir", type=PathOption(folder=True),
              help="The stack's directory (from `kit up --out`): its .env gives VLLM_API_KEY. Else $VLLM_API_KEY.")
@click.option("--concurrency", default="1,2,4,8", show_default=True, callback=_concurrency_levels,
              help="Concurrency levels to sweep, comma-separated.")
@click.option("--requests", "requests_per_level", type=click.IntRange(1, 100_000), default=16, show_default=True,
              help="Requests per level.")
@click.option("--level-timeout", type=click.FloatRange(1, 86_400), default=300, show_default=True,
              help="Seconds a level may run; requests still in flight then count as failed.")
@click.option("--prompt-words", type=click.IntRange(1, 100_000), default=128, show_default=True,
              help="Length of the synthetic prompts in words (the report gives the server's token count).")
@click.option("--max-tokens", type=click.IntRange(1, 100_000), default=64, show_default=True,
              help="Output tokens per request (vLLM's ignore_eos makes every request produce them all).")
@click.option("--dataset", type=PathOption(folder=False, exists=True),
              help='Prompts from a JSONL file instead: {"prompt": "...", "max_tokens": N} a line.')
@click.option("--report", "report_path", type=PathOption(folder=False),
              default=Path("loadtest.json"), show_default=True, help="Where to write the JSON report.")
@click.option("--plot", "plot_path", type=PathOption(folder=False),
              help="Where to write the PNG plot (default: the report's name with .png).")
@click.option("--no-plot", is_flag=True, help="Write no plot (matplotlib not needed).")
@click.option("--baseline", type=PathOption(folder=False, exists=True),
              help="An earlier report: print the change of each figure per concurrency level.")
@standard_options
def loadtest(args: tuple[str, ...], preset_option: str | None, url: str | None, port: int | None,
             model_name: str | None, stack_dir: Path | None, concurrency: tuple[int, ...], requests_per_level: int,
             level_timeout: float, prompt_words: int, max_tokens: int, dataset: Path | None, report_path: Path,
             plot_path: Path | None, no_plot: bool, baseline: Path | None, as_json: bool) -> None:
    """Load-test a running stack: kit loadtest preset=NAME [--concurrency 1,2,4] [--baseline OLD.json]."""
    from kit.run import loadtest as lt

    ctx = click.get_current_context()
    if no_plot and plot_path is not None:
        raise click.UsageError("--plot names the plot --no-plot would not write: give one")
    if dataset is not None and ctx.get_parameter_source("prompt_words") == click.core.ParameterSource.COMMANDLINE:
        raise click.UsageError("--prompt-words sizes the synthetic prompts; --dataset brings its own: give one")
    lt.require_extra()
    if not no_plot:
        lt.require_plot_extra()
    ref, overrides, _ = split_args(args, preset_option)
    if url and port:
        raise click.UsageError("--port is the preset's stack's port on 127.0.0.1; --url names the server itself: "
                               "give one")
    if ref is None and stack_dir is not None and not url:  # the folder says which deployment it is
        from kit.deploy.record import read_record, recorded_ref_path

        recorded = read_record(stack_dir) if stack_dir.is_dir() else None
        if recorded is not None:
            from kit.deploy.record import merge_overrides

            ref, overrides = recorded_ref_path(recorded, stack_dir), list(merge_overrides(recorded.overrides, overrides))
    baseline_report = lt.load_report(baseline) if baseline else None  # a bad baseline fails before any traffic
    api_key = lt.api_key_from(stack_dir, dict(os.environ))
    if url:
        base_url, preset_name = lt.explicit_base_url(url), ref
        model = model_name or (_served_name(ref, overrides) if ref else lt.served_model(base_url, api_key))
    elif ref:
        from kit.deploy.pipeline import prepare

        prepared = prepare(ref, overrides + ([f"runtime.port={port}"] if port else []))
        rt = prepared.preset.runtime
        base_url, preset_name = lt.preset_base_url(prepared.path, rt.bind_address, rt.port), prepared.name
        model = model_name or prepared.deployment.serve.served_model_name
    else:
        raise click.UsageError("no target: pass preset=NAME (its stack on 127.0.0.1), --out DIR of a rendered "
                               "deployment, or --url")
    prompts = (lt.load_dataset(dataset, max_tokens) if dataset
               else lt.synthetic_prompts(requests_per_level * len(concurrency), prompt_words, max_tokens))
    config = lt.SweepConfig(concurrency=concurrency, requests_per_level=requests_per_level,
                            level_timeout_s=level_timeout, prompts=tuple(prompts),
                            prompt_source=str(dataset) if dataset else f"synthetic, {prompt_words} words")
    target = lt.Target(base_url=base_url, model=model, api_key=api_key, preset=preset_name)
    status(f"load-testing {model} at {base_url}: concurrency {','.join(map(str, concurrency))}, "
           f"{requests_per_level} requests a level")
    report = lt.run_sweep(target, config, progress=status)

    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    status(f"report: {report_path}")
    if not no_plot:
        status(f"plot: {lt.write_plot(report, plot_path or report_path.with_suffix('.png'), baseline_report)}")
    comparison = lt.compare(report, baseline_report) if baseline_report is not None else None
    failed = sum(level["errors"] for level in report["levels"])
    samples = sorted({s for level in report["levels"] for s in level["error_samples"]})
    failure = f"{failed} requests failed: {samples[0]}" if failed else None
    if as_json:
        # The envelope's data is the report (the file on disk); with --baseline the comparison rides along.
        data = report if comparison is None else {**report, "comparison": comparison}
        problems = [{"file": None, "field": None, "message": failure, "hint": None}] if failure else None
        emit_json(data, ok=not failure, problems=problems)
    else:
        from kit.cli.output import table

        table(lt.TABLE_HEADER, lt.table_rows(report), right=lt.TABLE_HEADER)
        click.echo(lt.TABLE_NOTE)
        if comparison is not None:
            click.echo(f"\nagainst {baseline}:")
            if comparison:
                table(lt.COMPARISON_HEADER, lt.comparison_rows(comparison), right=lt.COMPARISON_HEADER[2:6])
            else:
                click.echo(lt.format_comparison(comparison))
    if failure:
        if not as_json:
            click.secho(failure, fg="red", err=True)
        raise SystemExit(1)


def _served_name(ref: str, overrides: list[str]) -> str:
    from kit.deploy.pipeline import prepare

    return prepare(ref, overrides).deployment.serve.served_model_name
