"""Load-test a running vLLM server: a sweep of concurrency levels, streamed requests, a report and a plot.

Public entry points: ``run_sweep(target, config) -> dict`` (the report, shape below), ``compare(report,
baseline)`` and ``format_table`` / ``format_comparison`` for people, ``write_plot(report, path)`` for the PNG.

The load generator is asyncio with httpx (the `loadtest` extra): each level runs ``concurrency`` workers that
take requests from a bounded queue until ``requests`` are done or the level's time limit passes. Every request
streams (``/v1/completions``, ``stream: true``), so the time to the first token and the gaps between streamed
chunks are measured on the client, as vLLM's own ``vllm bench serve`` measures them. Token counts are the
server's (``usage`` in the last chunk). While a level runs, a sampler reads the engine's gauges from /metrics.

Report shape (``schema: vllm-kit/loadtest/1``; keys are only ever added):
  {schema, started_at, target: {url, model, preset}, config: {...},
   levels: [{concurrency, requests, ok, errors, error_samples, stopped_by, duration_s, requests_per_s,
             output_tokens_per_s, prompt_tokens_mean, output_tokens_mean,
             ttft_ms / itl_ms / tpot_ms / e2e_ms: {p50, p90, p99, mean, max} (null without data),
             server: {kv_cache_usage_perc / num_requests_running / num_requests_waiting: {max, mean, samples}}}]}
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kit.core.datafiles import load_yaml
from kit.core.errors import KitError
from kit.run.endpoint import LOOPBACK, LOOPBACK_REACHABLE, metric_specs, read_gauges
from kit.run.endpoint import api_key_from as api_key_from  # kit loadtest reads it here

SCHEMA = "vllm-kit/loadtest/1"
PERCENTILES = (50, 90, 99)
Progress = Callable[[str], None]


class LoadTestError(KitError):
    """The load test cannot run as asked (bad target, dataset, missing extra)."""


# ---------------------------------------------------------------- report math (pure; unit-tested)

def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile with linear interpolation between closest ranks (numpy's default method)."""
    return _ranked(sorted(values), q) if values else None


def _ranked(ordered: Sequence[float], q: float) -> float:
    """The q-th percentile of values already sorted, at least one."""
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def distribution_ms(seconds: Sequence[float]) -> dict[str, float] | None:
    if not seconds:
        return None
    ms = [s * 1000 for s in seconds]
    ordered = sorted(ms)
    out = {f"p{q}": round(_ranked(ordered, q), 3) for q in PERCENTILES}
    out["mean"] = round(sum(ms) / len(ms), 3)
    out["max"] = round(max(ms), 3)
    return out


@dataclass
class RequestRecord:
    """What the client saw of one request; times are seconds on the monotonic clock."""

    sent: float
    done: float
    first_token: float | None = None  # arrival of the first chunk that carried text
    chunk_times: list[float] = field(default_factory=list)  # arrival of every chunk that carried text
    prompt_tokens: int | None = None
    output_tokens: int | None = None  # the server's count (usage); None when it sent none
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def ttft(self) -> float | None:
        return None if self.first_token is None else self.first_token - self.sent

    @property
    def time_per_output_token(self) -> float | None:
        # After the first token, as `vllm bench serve` defines TPOT; robust where chunks arrive in bursts.
        if self.first_token is None or not self.output_tokens or self.output_tokens < 2:
            return None
        return (self.done - self.first_token) / (self.output_tokens - 1)

    @property
    def inter_chunk_gaps(self) -> list[float]:
        # A chunk can carry more than one token (the server streams what one engine step produced), so
        # these are inter-token latencies as a client sees them, like `vllm bench serve`'s ITL.
        return [b - a for a, b in zip(self.chunk_times, self.chunk_times[1:], strict=False)]


def summarize_level(concurrency: int, records: Sequence[RequestRecord], *, stopped_by: str,
                    samples: dict[str, list[float]] | None = None) -> dict[str, Any]:
    """One level of the report from what the client recorded and the server gauges sampled meanwhile."""
    ok = [r for r in records if r.ok]
    errors = [r for r in records if not r.ok]
    if records:
        duration = max(r.done for r in records) - min(r.sent for r in records)
    else:
        duration = 0.0
    output_tokens = sum(r.output_tokens or 0 for r in ok)

    def rate(n: float) -> float | None:
        return round(n / duration, 3) if duration > 0 else None

    prompt_counts = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    output_counts = [r.output_tokens for r in ok if r.output_tokens is not None]
    return {
        "concurrency": concurrency,
        "requests": len(records),
        "ok": len(ok),
        "errors": len(errors),
        "error_samples": sorted({r.error for r in errors if r.error is not None})[:3],
        "stopped_by": stopped_by,
        "duration_s": round(duration, 3),
        "requests_per_s": rate(len(ok)),
        "output_tokens_per_s": rate(output_tokens),
        "prompt_tokens_mean": round(sum(prompt_counts) / len(prompt_counts), 1) if prompt_counts else None,
        "output_tokens_mean": round(sum(output_counts) / len(output_counts), 1) if output_counts else None,
        "ttft_ms": distribution_ms([r.ttft for r in ok if r.ttft is not None]),
        "itl_ms": distribution_ms([gap for r in ok for gap in r.inter_chunk_gaps]),
        "tpot_ms": distribution_ms([r.time_per_output_token for r in ok if r.time_per_output_token is not None]),
        "e2e_ms": distribution_ms([r.done - r.sent for r in ok]),
        "server": {name: gauge_summary(values) for name, values in (samples or {}).items()},
    }


def gauge_summary(values: Sequence[float]) -> dict[str, float | int | None]:
    if not values:
        return {"max": None, "mean": None, "samples": 0}
    return {"max": round(max(values), 4), "mean": round(sum(values) / len(values), 4), "samples": len(values)}


# ---------------------------------------------------------------- where to send it

def preset_base_url(preset_path: Path, bind_address: str, port: int) -> str:
    """The stack's published port on 127.0.0.1; any other address needs an explicit --url."""
    if bind_address not in LOOPBACK_REACHABLE:
        raise LoadTestError(f"{preset_path}: runtime.bind_address: the stack publishes on {bind_address}, and kit "
                            f"loadtest sends traffic to {LOOPBACK} only",
                            hint="pass --url http://HOST:PORT to load-test another address on purpose")
    return f"http://{LOOPBACK}:{port}"


def explicit_base_url(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise LoadTestError(f"--url {url}: expected http://HOST:PORT (the server's root, without /v1)")
    return url.rstrip("/").removesuffix("/v1")


def served_model(base_url: str, api_key: str | None) -> str:
    """The first model the server lists (for --url without a preset)."""
    require_extra()
    import httpx

    try:
        response = httpx.get(f"{base_url}/v1/models", headers={"Authorization": f"Bearer {api_key}"} if api_key else {},
                             timeout=10, trust_env=False)
    except httpx.HTTPError as exc:
        raise LoadTestError(f"{base_url}/v1/models: no answer ({type(exc).__name__})",
                            hint="is the stack up? `kit up` starts it") from None
    if response.status_code != 200:
        raise LoadTestError(f"{base_url}/v1/models: HTTP {response.status_code}",
                            hint="401 means the API key is missing: pass --out DIR (its .env) or set VLLM_API_KEY")
    models = [m.get("id") for m in response.json().get("data") or [] if m.get("id")]
    if not models:
        raise LoadTestError(f"{base_url}/v1/models: the server lists no model")
    return models[0]


# ---------------------------------------------------------------- prompts

@dataclass(frozen=True)
class Prompt:
    text: str
    max_tokens: int


def synthetic_prompts(count: int, prompt_words: int, max_tokens: int) -> list[Prompt]:
    """Distinct prompts of about ``prompt_words`` words (the server reports the exact token count)."""
    words = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches "
             "and pack my box with five dozen liquor jugs").split()
    prompts = []
    for i in range(count):
        # A distinct head per request keeps prefix caching from turning the test into a cache benchmark.
        body = [words[(i * 7 + j) % len(words)] for j in range(max(prompt_words - 1, 0))]
        prompts.append(Prompt(" ".join([f"request-{i}:", *body]), max_tokens))
    return prompts


def load_dataset(path: Path, default_max_tokens: int) -> list[Prompt]:
    """JSONL, one object a line: {"prompt": "...", "max_tokens": N (optional)}."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise LoadTestError(f"{path}: cannot read the dataset ({exc.strerror})") from None
    prompts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise LoadTestError(f"{path}:{number}: not JSON ({exc.msg})") from None
        if not isinstance(item, dict) or not isinstance(item.get("prompt"), str) or not item["prompt"]:
            raise LoadTestError(f"{path}:{number}: prompt: expected a non-empty string")
        max_tokens = item.get("max_tokens", default_max_tokens)
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
            raise LoadTestError(f"{path}:{number}: max_tokens: expected a positive integer")
        prompts.append(Prompt(item["prompt"], max_tokens))
    if not prompts:
        raise LoadTestError(f"{path}: the dataset has no prompts")
    return prompts


# ---------------------------------------------------------------- the load generator

@dataclass(frozen=True)
class Target:
    base_url: str  # http://127.0.0.1:PORT
    model: str
    api_key: str | None = None
    preset: str | None = None


@dataclass(frozen=True)
class SweepConfig:
    concurrency: tuple[int, ...]
    requests_per_level: int
    level_timeout_s: float
    prompts: tuple[Prompt, ...]
    request_timeout_s: float = 300.0
    prompt_source: str = "synthetic"

    def as_dict(self) -> dict[str, Any]:
        return {"concurrency": list(self.concurrency), "requests_per_level": self.requests_per_level,
                "level_timeout_s": self.level_timeout_s, "request_timeout_s": self.request_timeout_s,
                "prompt_source": self.prompt_source, "prompts": len(self.prompts),
                "max_tokens": sorted({p.max_tokens for p in self.prompts})}


def require_extra() -> None:
    """httpx is the `loadtest` extra; fail in one line before anything is sent."""
    import importlib.util

    if importlib.util.find_spec("httpx") is None:
        raise LoadTestError("kit loadtest needs httpx, which is not installed: pip install 'vllm-kit[loadtest]' "
                            "(from a checkout: pip install '.[loadtest]'; with pipx: pipx inject vllm-kit httpx matplotlib)")


def _headers(target: Target) -> dict[str, str]:
    return {"Authorization": f"Bearer {target.api_key}"} if target.api_key else {}


async def _one_request(client, target: Target, prompt: Prompt, timeout: float) -> RequestRecord:  # noqa: ANN001
    body = {"model": target.model, "prompt": prompt.text, "max_tokens": prompt.max_tokens, "stream": True,
            **load_yaml("loadtest.yaml")["request_extras"]}
    record = RequestRecord(sent=time.monotonic(), done=0.0)
    try:
        async with client.stream("POST", f"{target.base_url}/v1/completions", json=body, headers=_headers(target),
                                 timeout=timeout) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode("utf-8", errors="replace")
                record.error = f"HTTP {response.status_code}: {text[:160]}"
            else:
                async for line in response.aiter_lines():
                    _take_event(record, line, time.monotonic())
                if record.error is None and record.first_token is None:
                    record.error = "the stream ended without text"
    except Exception as exc:  # noqa: BLE001 - httpx errors, timeouts: a failed request, not a failed run
        record.error = f"{type(exc).__name__}: {str(exc)[:160]}"
    record.done = time.monotonic()
    return record


def _take_event(record: RequestRecord, line: str, now: float) -> None:
    """One line of the server-sent event stream."""
    if not line.startswith("data:"):
        return
    data = line[5:].strip()
    if data == "[DONE]":
        return
    try:
        event = json.loads(data)
    except json.JSONDecodeError:
        record.error = f"unreadable stream event: {data[:80]}"
        return
    if "error" in event:
        record.error = f"server error: {str(event['error'])[:160]}"
        return
    if any(choice.get("text") for choice in event.get("choices") or []):
        if record.first_token is None:
            record.first_token = now
        record.chunk_times.append(now)
    usage = event.get("usage")
    if usage:
        record.prompt_tokens = usage.get("prompt_tokens")
        record.output_tokens = usage.get("completion_tokens")


async def _sample_metrics(client, target: Target, samples: dict[str, list[float]], stop: asyncio.Event,  # noqa: ANN001
                          interval: float) -> None:
    specs = metric_specs()
    while not stop.is_set():
        try:
            response = await client.get(f"{target.base_url}/metrics", headers=_headers(target), timeout=5)
            if response.status_code == 200:
                for key, value in read_gauges(response.text, specs).items():
                    samples[key].append(value)
        except Exception:  # noqa: BLE001, S110 - a missed sample is not worth failing the level for
            pass
        try:
            await asyncio.wait_for(stop.wait(), interval)
        except asyncio.TimeoutError:
            pass


async def _run_level(client, target: Target, config: SweepConfig, concurrency: int, level_index: int,  # noqa: ANN001
                     progress: Progress | None) -> dict[str, Any]:
    queue: asyncio.Queue[Prompt] = asyncio.Queue()
    offset = level_index * config.requests_per_level
    for i in range(config.requests_per_level):
        queue.put_nowait(config.prompts[(offset + i) % len(config.prompts)])
    records: list[RequestRecord] = []
    samples: dict[str, list[float]] = {key: [] for key in metric_specs()}
    stop = asyncio.Event()
    interval = float(load_yaml("loadtest.yaml")["metrics_interval_s"])

    async def worker() -> None:
        while True:
            try:
                prompt = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            sent = time.monotonic()
            try:
                records.append(await _one_request(client, target, prompt, config.request_timeout_s))
            except asyncio.CancelledError:
                # The level's time limit: the request in flight counts as failed, not as never sent.
                records.append(RequestRecord(sent=sent, done=time.monotonic(), error="cancelled at the level's time limit"))
                raise

    async def report_progress(started: float) -> None:
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), 2.0)
            except asyncio.TimeoutError:
                pass
            if progress:
                failed = sum(1 for r in records if not r.ok)
                progress(f"  concurrency {concurrency}: {len(records)}/{config.requests_per_level} requests, "
                         f"{failed} failed, {time.monotonic() - started:.0f} s")

    started = time.monotonic()
    sampler = asyncio.create_task(_sample_metrics(client, target, samples, stop, interval))
    reporter = asyncio.create_task(report_progress(started))
    workers = [asyncio.create_task(worker()) for _ in range(concurrency)]
    done, pending = await asyncio.wait(workers, timeout=config.level_timeout_s)
    stopped_by = "requests"
    if pending:
        stopped_by = "time_limit"
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    stop.set()
    await asyncio.gather(sampler, reporter)
    return summarize_level(concurrency, records, stopped_by=stopped_by, samples=samples)


async def _sweep(target: Target, config: SweepConfig, progress: Progress | None) -> list[dict[str, Any]]:
    import httpx

    limits = httpx.Limits(max_connections=max(config.concurrency) + 2, max_keepalive_connections=max(config.concurrency) + 2)
    levels = []
    async with httpx.AsyncClient(limits=limits, trust_env=False) as client:
        for index, concurrency in enumerate(config.concurrency):
            if progress:
                progress(f"level {index + 1}/{len(config.concurrency)}: concurrency {concurrency}, "
                         f"{config.requests_per_level} requests, at most {config.level_timeout_s:.0f} s")
            level = await _run_level(client, target, config, concurrency, index, progress)
            if progress:
                progress(f"  done: {level['ok']} ok, {level['errors']} failed in {level['duration_s']:.1f} s, "
                         f"{level['output_tokens_per_s']} output tokens/s")
            levels.append(level)
    return levels


def run_sweep(target: Target, config: SweepConfig, progress: Progress | None = None) -> dict[str, Any]:
    require_extra()
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    levels = asyncio.run(_sweep(target, config, progress))
    return {"schema": SCHEMA, "started_at": started_at,
            "target": {"url": target.base_url, "model": target.model, "preset": target.preset},
            "config": config.as_dict(), "levels": levels}


# ---------------------------------------------------------------- reading reports back, comparing

# The figures a tuning change is judged by, with which direction is better.
COMPARED: tuple[tuple[str, str, str], ...] = (
    ("requests/s", "requests_per_s", "higher"),
    ("output tok/s", "output_tokens_per_s", "higher"),
    ("TTFT p50 ms", "ttft_ms.p50", "lower"),
    ("TTFT p99 ms", "ttft_ms.p99", "lower"),
    ("ITL p50 ms", "itl_ms.p50", "lower"),
    ("ITL p99 ms", "itl_ms.p99", "lower"),
    ("TPOT p50 ms", "tpot_ms.p50", "lower"),
    ("errors", "errors", "lower"),
)


def _get(level: dict[str, Any], dotted: str) -> float | None:
    value: Any = level
    for part in dotted.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def load_report(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise LoadTestError(f"{path}: cannot read the baseline ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise LoadTestError(f"{path}: not JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("levels"), list):
        raise LoadTestError(f"{path}: schema: expected a `kit loadtest` report ({SCHEMA})")
    return data


def compare(report: dict[str, Any], baseline: dict[str, Any]) -> list[dict[str, Any]]:
    """Per concurrency level present in both reports: each compared figure, then, now, delta and delta %."""
    before = {level["concurrency"]: level for level in baseline["levels"]}
    rows = []
    for level in report["levels"]:
        old = before.get(level["concurrency"])
        if old is None:
            continue
        for label, key, better in COMPARED:
            was, now = _get(old, key), _get(level, key)
            delta: float | None = None
            pct: float | None = None
            if was is not None and now is not None:
                delta = round(now - was, 3)
                pct = None if was == 0 else round(100 * delta / was, 1)
            improved = None if not delta else (delta > 0) == (better == "higher")
            rows.append({"concurrency": level["concurrency"], "figure": label, "key": key, "baseline": was,
                         "now": now, "delta": delta, "delta_pct": pct, "improved": improved})
    return rows


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


TABLE_HEADER = ("conc", "ok", "err", "req/s", "out tok/s", "TTFT p50", "p90", "p99", "ITL p50", "p90", "p99",
                "TPOT p50", "KV max", "run max", "wait max")
TABLE_NOTE = "(latencies in ms; KV = vllm:kv_cache_usage_perc; run/wait = requests running/waiting)"
COMPARISON_HEADER = ("conc", "figure", "baseline", "now", "delta", "delta %", "")


def table_rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
    """One row of TABLE_HEADER's cells per concurrency level."""
    rows: list[tuple[str, ...]] = []
    for lv in report["levels"]:
        ttft, itl, server = lv["ttft_ms"] or {}, lv["itl_ms"] or {}, lv.get("server", {})
        kv = (server.get("kv_cache_usage_perc") or {}).get("max")
        rows.append((str(lv["concurrency"]), str(lv["ok"]), str(lv["errors"]), _fmt(lv["requests_per_s"], 2),
                     _fmt(lv["output_tokens_per_s"]), _fmt(ttft.get("p50")), _fmt(ttft.get("p90")),
                     _fmt(ttft.get("p99")), _fmt(itl.get("p50")), _fmt(itl.get("p90")), _fmt(itl.get("p99")),
                     _fmt((lv.get("tpot_ms") or {}).get("p50")),
                     "-" if kv is None else f"{100 * kv:.2f}%",
                     _fmt((server.get("num_requests_running") or {}).get("max"), 0),
                     _fmt((server.get("num_requests_waiting") or {}).get("max"), 0)))
    return rows


def comparison_rows(rows: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """One row of COMPARISON_HEADER's cells per figure compared."""
    out: list[tuple[str, ...]] = []
    for row in rows:
        mark = {True: "better", False: "worse", None: ""}[row["improved"]]
        pct = "-" if row["delta_pct"] is None else f"{row['delta_pct']:+.1f}%"
        delta = "-" if row["delta"] is None else f"{row['delta']:+.2f}"
        out.append((str(row["concurrency"]), row["figure"], _fmt(row["baseline"], 2), _fmt(row["now"], 2), delta, pct,
                    mark))
    return out


def format_table(report: dict[str, Any]) -> str:
    rows = [TABLE_HEADER, *table_rows(report)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(TABLE_HEADER))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(lines + [TABLE_NOTE])


def format_comparison(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no concurrency level in common with the baseline"
    lines = [f"{'conc':>4}  {'figure':<13}{'baseline':>10}{'now':>10}{'delta':>10}{'delta %':>9}"]
    for conc, figure, baseline, now, delta, pct, mark in comparison_rows(rows):
        lines.append(f"{conc:>4}  {figure:<13}{baseline:>10}{now:>10}{delta:>10}{pct:>9}{'  ' + mark if mark else ''}")
    return "\n".join(lines)


# ---------------------------------------------------------------- the plot

def require_plot_extra() -> None:
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise LoadTestError("the plot needs matplotlib, which is not installed: pip install 'vllm-kit[loadtest]' "
                            "(or pass --no-plot)")


def write_plot(report: dict[str, Any], path: Path, baseline: dict[str, Any] | None = None) -> Path:
    """Throughput and latency against concurrency; a baseline, when given, is drawn dashed."""
    require_plot_extra()
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on servers, and no GUI toolkit imported
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    runs = [("", "-", report)] + ([("baseline ", "--", baseline)] if baseline else [])
    for prefix, style, run in runs:
        levels = run["levels"]
        x = [lv["concurrency"] for lv in levels]
        series = lambda key, levels=levels: [_get(lv, key) for lv in levels]  # noqa: E731
        left.plot(x, series("output_tokens_per_s"), style, marker="o", color="tab:blue", label=f"{prefix}output tokens/s")
        for key, color, label in (("ttft_ms.p50", "tab:orange", "TTFT p50"), ("ttft_ms.p99", "tab:red", "TTFT p99"),
                                  ("itl_ms.p50", "tab:green", "ITL p50"), ("itl_ms.p99", "tab:olive", "ITL p99")):
            right.plot(x, series(key), style, marker="o", color=color, label=prefix + label)
    # With one output length, requests/s is tokens/s scaled: a second axis would draw the same line twice,
    # so each point is labelled with its requests/s instead.
    for lv in report["levels"]:
        if lv["output_tokens_per_s"] is not None and lv["requests_per_s"] is not None:
            left.annotate(f"{lv['requests_per_s']:.2f} req/s", (lv["concurrency"], lv["output_tokens_per_s"]),
                          textcoords="offset points", xytext=(0, 7), ha="center", fontsize=7)
    left.set(xlabel="concurrency", ylabel="output tokens/s", title="Throughput")
    right.set(xlabel="concurrency", ylabel="ms", title="Latency")
    for axis in (left, right):
        axis.legend(fontsize=8, loc="best", handlelength=3.5)  # long handles so a baseline's dashes show
    ticks = sorted({lv["concurrency"] for lv in report["levels"]})
    for axis in (left, right):
        axis.set_ylim(0, axis.get_ylim()[1] * 1.1)  # room above the top point for its label
        axis.set_xscale("log", base=2)  # sweeps usually double the concurrency: even spacing
        axis.set_xticks(ticks, [str(t) for t in ticks])
        axis.minorticks_off()
        axis.grid(alpha=0.3)
    target = report["target"]
    figure.suptitle(f"kit loadtest: {target.get('preset') or target['url']} ({target['model']})", fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
