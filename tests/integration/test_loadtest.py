"""`kit loadtest` against the shared CPU stack: a tiny sweep, every request answered, report and plot written.

Figures are printed (run with -s to see the table), not asserted: they depend on the host.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.unit.test_loadtest import check_report_shape


def test_loadtest_sweep_against_the_cpu_stack(cpu_stack, tmp_path):
    report_path = tmp_path / "cpu-loadtest.json"
    argv = [sys.executable, "-m", "kit.cli.main", "loadtest", "preset=cpu", f"runtime.port={cpu_stack.port}",
            "--out", str(cpu_stack.out_dir),  # its .env holds the stack's VLLM_API_KEY
            "--concurrency", "1,2", "--requests", "6", "--max-tokens", "48", "--prompt-words", "32",
            "--level-timeout", "60", "--report", str(report_path)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    print(result.stdout)
    print(result.stderr[-3000:], file=sys.stderr)
    assert result.returncode == 0, result.stderr[-2000:]

    report = json.loads(report_path.read_text())
    check_report_shape(report)
    assert report["target"] == {"url": f"http://127.0.0.1:{cpu_stack.port}", "model": "tiny-llama", "preset": "cpu"}
    for level in report["levels"]:
        assert (level["requests"], level["ok"], level["errors"]) == (6, 6, 0), level["error_samples"]
        assert level["stopped_by"] == "requests"
        assert level["output_tokens_mean"] == 48  # ignore_eos: the server produced every token asked for
        assert level["prompt_tokens_mean"] >= 32
        assert level["ttft_ms"] is not None and level["itl_ms"] is not None
        assert level["output_tokens_per_s"] > 0
        # Each gauge was found by name in the live /metrics (a sample is only kept when the name matched).
        assert all(gauge["samples"] >= 1 for gauge in level["server"].values()), level["server"]
        assert 0 <= level["server"]["kv_cache_usage_perc"]["max"] <= 1  # a fraction, not a percentage
        assert level["server"]["num_requests_running"]["max"] <= level["concurrency"]
    png = report_path.with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"report {report_path}, plot {png}")
