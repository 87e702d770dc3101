"""`kit loadtest`: the report math, the JSON shape, the baseline diff, and the generator against a real local server.

The local server is a small OpenAI-style streaming server on 127.0.0.1 with known delays, so what the generator
measures (TTFT, gaps, token counts, failures, the time limit) can be checked against what the server did.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner

from kit.cli.main import cli
from kit.run import loadtest as lt

pytestmark = pytest.mark.unit


# ---------------------------------------------------------------- report math

def test_percentile_interpolates_like_numpy_linear():
    values = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    assert lt.percentile(values, 50) == pytest.approx(55.0)
    assert lt.percentile(values, 90) == pytest.approx(91.0)
    assert lt.percentile(values, 99) == pytest.approx(99.1)
    assert lt.percentile(list(reversed(values)), 0) == 10 and lt.percentile(values, 100) == 100
    assert lt.percentile([7.0], 99) == 7.0
    assert lt.percentile([], 50) is None


def record(sent, first, chunks, done, output_tokens, prompt_tokens=100, error=None):
    return lt.RequestRecord(sent=sent, done=done, first_token=first, chunk_times=list(chunks),
                            prompt_tokens=prompt_tokens, output_tokens=output_tokens, error=error)


def test_level_figures_from_recorded_timings():
    records = [
        record(0.0, 0.5, [0.5, 0.6, 0.8], 1.0, output_tokens=3),
        record(0.2, 1.2, [1.2, 1.3], 2.0, output_tokens=2),
        record(1.0, None, [], 1.5, output_tokens=None, error="HTTP 500: boom"),
    ]
    level = lt.summarize_level(2, records, stopped_by="requests")
    assert level["requests"] == 3 and level["ok"] == 2 and level["errors"] == 1
    assert level["error_samples"] == ["HTTP 500: boom"]
    assert level["duration_s"] == 2.0  # first send to last completion
    assert level["requests_per_s"] == 1.0  # two that succeeded in 2 s; the failure counts as an error only
    assert level["output_tokens_per_s"] == 2.5  # the server's 3 + 2 tokens in 2 s
    assert level["ttft_ms"]["p50"] == pytest.approx(750.0)  # 500 ms and 1000 ms
    assert level["ttft_ms"]["max"] == pytest.approx(1000.0)
    # gaps 100, 200 (first request) and 100 ms (second): p50 100, mean 133.333
    assert level["itl_ms"]["p50"] == pytest.approx(100.0) and level["itl_ms"]["mean"] == pytest.approx(133.333, abs=1e-3)
    # TPOT: (done - first token) / (tokens - 1): 500 ms / 2 and 800 ms / 1
    assert level["tpot_ms"]["p50"] == pytest.approx(525.0) and level["tpot_ms"]["max"] == pytest.approx(800.0)
    assert level["e2e_ms"]["p99"] == pytest.approx(1792.0)  # 1000 and 1800 ms: 1000 + 0.99 * 800
    assert level["prompt_tokens_mean"] == 100 and level["output_tokens_mean"] == 2.5


def test_a_level_with_only_failures_has_no_latency_and_no_rate_of_success():
    level = lt.summarize_level(1, [record(0, None, [], 1, None, error="x")], stopped_by="time_limit")
    assert level["ttft_ms"] is None and level["itl_ms"] is None and level["ok"] == 0
    assert level["requests_per_s"] == 0 and level["stopped_by"] == "time_limit"


def test_gauges_are_read_from_prometheus_text_and_combined_over_engines():
    text = """# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny-llama"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="tiny-llama"} 0.5
vllm:num_requests_running{engine="0",model_name="tiny-llama"} 3.0
vllm:num_requests_running{engine="1",model_name="tiny-llama"} 2.0
vllm:num_requests_waiting{engine="0",model_name="tiny-llama"} 1.0
vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 9.0
vllm:request_success_total{engine="0",finished_reason="length"} 4.0
"""
    assert lt.read_gauges(text) == {"kv_cache_usage_perc": 0.5, "num_requests_running": 5.0,
                                    "num_requests_waiting": 1.0}
    assert lt.gauge_summary([0.1, 0.3]) == {"max": 0.3, "mean": 0.2, "samples": 2}
    assert lt.gauge_summary([]) == {"max": None, "mean": None, "samples": 0}


def test_stream_events_give_first_token_chunks_and_the_servers_token_counts():
    rec = lt.RequestRecord(sent=0.0, done=0.0)
    lt._take_event(rec, ": keep-alive", 0.1)
    lt._take_event(rec, 'data: {"choices": [{"index": 0, "text": ""}]}', 0.2)  # no text yet: not a token
    lt._take_event(rec, 'data: {"choices": [{"index": 0, "text": "Hel"}]}', 0.3)
    lt._take_event(rec, 'data: {"choices": [{"index": 0, "text": "lo"}]}', 0.45)
    lt._take_event(rec, 'data: {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}}', 0.5)
    lt._take_event(rec, "data: [DONE]", 0.5)
    assert rec.ok and rec.ttft == 0.3 and rec.chunk_times == [0.3, 0.45]
    assert rec.inter_chunk_gaps == pytest.approx([0.15])
    assert (rec.prompt_tokens, rec.output_tokens) == (7, 2)
    lt._take_event(rec, 'data: {"error": {"message": "out of memory"}}', 0.6)
    assert not rec.ok and "out of memory" in rec.error


# ---------------------------------------------------------------- JSON shape and baseline

LEVEL_KEYS = {"concurrency", "requests", "ok", "errors", "error_samples", "stopped_by", "duration_s", "requests_per_s",
              "output_tokens_per_s", "prompt_tokens_mean", "output_tokens_mean", "ttft_ms", "itl_ms", "tpot_ms", "e2e_ms",
              "server"}


def check_report_shape(report: dict) -> None:
    """The documented shape (kit/run/loadtest.py docstring); the integration test uses it too."""
    assert report["schema"] == lt.SCHEMA
    assert set(report) == {"schema", "started_at", "target", "config", "levels"}
    assert set(report["target"]) == {"url", "model", "preset"}
    assert {"concurrency", "requests_per_level", "level_timeout_s", "max_tokens"} <= set(report["config"])
    assert [lv["concurrency"] for lv in report["levels"]] == report["config"]["concurrency"]
    for level in report["levels"]:
        assert set(level) == LEVEL_KEYS
        for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms"):
            assert level[key] is None or set(level[key]) == {"p50", "p90", "p99", "mean", "max"}
        assert set(level["server"]) == {"kv_cache_usage_perc", "num_requests_running", "num_requests_waiting"}
    json.dumps(report)  # JSON all the way down


def fake_report(levels):
    return {"schema": lt.SCHEMA, "started_at": "2026-12-01T00:00:00+00:00",
            "target": {"url": "http://127.0.0.1:1", "model": "m", "preset": "cpu"},
            "config": {"concurrency": [lv["concurrency"] for lv in levels]}, "levels": levels}


def test_baseline_diff_per_level_and_direction():
    old = fake_report([{"concurrency": 1, "requests_per_s": 2.0, "output_tokens_per_s": 100.0, "errors": 0,
                        "ttft_ms": {"p50": 50.0, "p99": 80.0}, "itl_ms": {"p50": 10.0, "p99": 20.0}},
                       {"concurrency": 8, "requests_per_s": 5.0}])
    new = fake_report([{"concurrency": 1, "requests_per_s": 3.0, "output_tokens_per_s": 100.0, "errors": 1,
                        "ttft_ms": {"p50": 40.0, "p99": 100.0}, "itl_ms": None},
                       {"concurrency": 2, "requests_per_s": 4.0}])
    rows = {row["figure"]: row for row in lt.compare(new, old)}
    assert {row["concurrency"] for row in lt.compare(new, old)} == {1}  # only levels both runs have
    assert rows["requests/s"]["delta"] == 1.0 and rows["requests/s"]["delta_pct"] == 50.0
    assert rows["requests/s"]["improved"] is True
    assert rows["TTFT p50 ms"]["delta"] == -10.0 and rows["TTFT p50 ms"]["improved"] is True  # lower is better
    assert rows["TTFT p99 ms"]["improved"] is False
    assert rows["output tok/s"]["delta"] == 0 and rows["output tok/s"]["improved"] is None
    assert rows["errors"]["improved"] is False and rows["errors"]["delta_pct"] is None  # from zero: no percent
    assert rows["ITL p50 ms"]["now"] is None and rows["ITL p50 ms"]["delta"] is None
    text = lt.format_comparison(lt.compare(new, old))
    assert "+50.0%" in text and "better" in text and "worse" in text


def test_baseline_that_is_not_a_report_is_one_clear_error(tmp_path):
    bad = tmp_path / "old.json"
    bad.write_text('{"levels": []}')
    with pytest.raises(lt.LoadTestError, match=r"old.json: schema: expected a `kit loadtest` report"):
        lt.load_report(bad)
    bad.write_text("{nope")
    with pytest.raises(lt.LoadTestError, match=r"old.json: not JSON"):
        lt.load_report(bad)


def test_dataset_lines_are_checked_with_file_and_line(tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "hi", "max_tokens": 4}\n\n{"prompt": "there"}\n')
    assert lt.load_dataset(data, 9) == [lt.Prompt("hi", 4), lt.Prompt("there", 9)]
    data.write_text('{"prompt": "hi", "max_tokens": 0}\n')
    with pytest.raises(lt.LoadTestError, match=r"prompts.jsonl:1: max_tokens: expected a positive integer"):
        lt.load_dataset(data, 9)
    data.write_text('{"text": "hi"}\n')
    with pytest.raises(lt.LoadTestError, match=r"prompts.jsonl:1: prompt:"):
        lt.load_dataset(data, 9)


def test_synthetic_prompts_are_distinct_and_sized():
    prompts = lt.synthetic_prompts(5, 32, 16)
    assert len({p.text for p in prompts}) == 5
    assert all(len(p.text.split()) == 32 and p.max_tokens == 16 for p in prompts)


def test_only_loopback_unless_an_explicit_url(tmp_path):
    assert lt.preset_base_url(tmp_path / "p.yaml", "0.0.0.0", 8000) == "http://127.0.0.1:8000"
    with pytest.raises(lt.LoadTestError, match=r"p.yaml: runtime.bind_address: the stack publishes on 10.1.2.3"):
        lt.preset_base_url(tmp_path / "p.yaml", "10.1.2.3", 8000)
    assert lt.explicit_base_url("http://10.1.2.3:8000/v1/") == "http://10.1.2.3:8000"
    with pytest.raises(lt.LoadTestError, match=r"--url"):
        lt.explicit_base_url("10.1.2.3:8000")


def test_api_key_comes_from_the_stacks_env_file_first(tmp_path):
    (tmp_path / ".env").write_text("# comment\nHF_TOKEN=x\nVLLM_API_KEY='from-file'\n")
    assert lt.api_key_from(tmp_path, {"VLLM_API_KEY": "from-env"}) == "from-file"
    assert lt.api_key_from(None, {"VLLM_API_KEY": "from-env"}) == "from-env"
    assert lt.api_key_from(tmp_path / "none", {}) is None


# ---------------------------------------------------------------- the generator against a real local server

class StreamingServer(BaseHTTPRequestHandler):
    """Streams `max_tokens` chunks, FIRST_DELAY before the first and GAP between; prompts with "fail" get a 500."""

    FIRST_DELAY, GAP, KEY = 0.05, 0.02, "secret"
    protocol_version = "HTTP/1.1"
    running = 0
    lock = threading.Lock()

    def log_message(self, *args):  # quiet
        pass

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/metrics":
            with self.lock:
                running = type(self).running
            text = (f'vllm:kv_cache_usage_perc{{engine="0"}} {running / 10}\n'
                    f'vllm:num_requests_running{{engine="0"}} {running}\nvllm:num_requests_waiting{{engine="0"}} 0\n')
            self._send(200, text.encode(), "text/plain")
        elif self.path == "/v1/models":
            self._send(200, json.dumps({"data": [{"id": "fake-model"}]}).encode())
        else:
            self._send(404, b"{}")

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.headers.get("Authorization") != f"Bearer {self.KEY}":
            return self._send(401, b'{"error": "unauthorized"}')
        if "fail" in body["prompt"]:
            return self._send(500, b'{"error": "boom"}')
        assert body["stream"] is True and body["ignore_eos"] is True
        with self.lock:
            type(self).running += 1
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            time.sleep(self.FIRST_DELAY)
            for i in range(body["max_tokens"]):
                if i:
                    time.sleep(self.GAP)
                self._chunk(f'data: {json.dumps({"choices": [{"index": 0, "text": f"t{i}"}]})}\n\n')
            usage = {"prompt_tokens": len(body["prompt"].split()), "completion_tokens": body["max_tokens"]}
            self._chunk(f'data: {json.dumps({"choices": [], "usage": usage})}\n\ndata: [DONE]\n\n')
            self.wfile.write(b"0\r\n\r\n")
        finally:
            with self.lock:
                type(self).running -= 1

    def _chunk(self, text: str) -> None:
        data = text.encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), StreamingServer)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def sweep(url, prompts, concurrency=(1, 2), requests=4, level_timeout=30.0, key="secret"):
    config = lt.SweepConfig(concurrency=tuple(concurrency), requests_per_level=requests, level_timeout_s=level_timeout,
                            prompts=tuple(prompts))
    return lt.run_sweep(lt.Target(url, "fake-model", key, "test"), config)


def test_sweep_measures_what_the_server_did(server):
    report = sweep(server, lt.synthetic_prompts(8, 5, 4))
    check_report_shape(report)
    for level in report["levels"]:
        assert level["ok"] == 4 and level["errors"] == 0 and level["stopped_by"] == "requests"
        assert level["output_tokens_mean"] == 4 and level["prompt_tokens_mean"] == 5
        # The server waited 50 ms before the first chunk and 20 ms between chunks.
        assert 50 <= level["ttft_ms"]["p50"] < 1000
        assert 15 <= level["itl_ms"]["p50"] < 500
        assert 15 <= level["tpot_ms"]["p50"] < 500
        assert level["e2e_ms"]["p50"] >= 50 + 3 * 20 - 5
        assert level["output_tokens_per_s"] == pytest.approx(16 / level["duration_s"], rel=0.01)
    one, two = report["levels"]
    assert two["duration_s"] < one["duration_s"]  # two at a time finish the same work sooner
    assert one["server"]["num_requests_running"]["samples"] >= 1
    assert two["server"]["num_requests_running"]["max"] <= 2


def test_failures_and_a_missing_key_are_counted_not_raised(server):
    prompts = [lt.Prompt("fine", 2), lt.Prompt("please fail", 2)]
    level = sweep(server, prompts, concurrency=(1,), requests=4)["levels"][0]
    assert (level["ok"], level["errors"]) == (2, 2)
    assert level["error_samples"] == ['HTTP 500: {"error": "boom"}']
    level = sweep(server, prompts, concurrency=(1,), requests=2, key=None)["levels"][0]
    assert level["errors"] == 2 and level["error_samples"][0].startswith("HTTP 401")


def test_the_level_time_limit_stops_the_level(server):
    # Each request takes about 0.05 + 99 * 0.02 = 2 s; a 1 s limit cancels the first one in flight.
    started = time.monotonic()
    level = sweep(server, [lt.Prompt("slow", 100)], concurrency=(1,), requests=5, level_timeout=1.0)["levels"][0]
    assert time.monotonic() - started < 5
    assert level["stopped_by"] == "time_limit"
    assert level["requests"] == 1 and level["errors"] == 1
    assert level["error_samples"] == ["cancelled at the level's time limit"]


def test_cli_writes_report_and_plot_and_compares_with_a_baseline(server, tmp_path, monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", "secret")
    runner = CliRunner()
    first = tmp_path / "before.json"
    args = ["loadtest", "--url", server, "--concurrency", "1,2", "--requests", "2", "--max-tokens", "3",
            "--prompt-words", "4"]
    result = runner.invoke(cli, [*args, "--report", str(first)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads(first.read_text())
    check_report_shape(report)
    assert report["target"]["model"] == "fake-model"  # asked the server, since no preset named it
    assert (tmp_path / "before.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "TTFT p50" in result.stdout
    second = runner.invoke(cli, [*args, "--report", str(tmp_path / "after.json"), "--baseline", str(first), "--no-plot"],
                           catch_exceptions=False)
    assert second.exit_code == 0, second.output
    assert f"against {first}:" in second.stdout and "output tok/s" in second.stdout
    assert not (tmp_path / "after.png").exists()
    as_json = runner.invoke(cli, [*args, "--report", str(tmp_path / "j.json"), "--baseline", str(first), "--no-plot",
                                  "--json"], catch_exceptions=False)
    envelope = json.loads(as_json.stdout)
    assert envelope["ok"] is True and envelope["command"] == "loadtest" and envelope["problems"] == []
    printed = envelope["data"]
    assert {row["concurrency"] for row in printed.pop("comparison")} == {1, 2}
    assert printed == json.loads((tmp_path / "j.json").read_text())


def test_cli_refuses_a_preset_stack_not_on_loopback(tmp_path):
    result = CliRunner().invoke(cli, ["loadtest", "preset=cpu", "runtime.bind_address=192.0.2.7", "--no-plot",
                                      "--report", str(tmp_path / "r.json")])
    assert result.exit_code == 1
    assert "runtime.bind_address: the stack publishes on 192.0.2.7" in result.output
    assert not (tmp_path / "r.json").exists()
