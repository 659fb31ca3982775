"""report.html in a real headless Chromium (Debian's ``chromium``; skipped with the reason where it is absent):
the page loads with no script error, every chart it lists draws (Plotly's SVG), the table sorts, flags shared by
runs appear once with their count, and a screenshot is written beside the report."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.conftest import run_inprocess
from tests.machine import chromium
from tests.test_anchors import cli, mlperf_log

pytestmark = [pytest.mark.slow, pytest.mark.machine("packages")]  # Chromium, from the suite's set-up
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=8000"]


@pytest.fixture(autouse=True, scope="module")
def chromium_here():
    """Looked for once the set-up's packages step has ended (the ``machine`` marker), not when the file is read."""
    if chromium() is None:
        pytest.skip("no chromium here (the suite installs Debian's chromium when it runs as root: tests/machine.py)")


def browse(url: str, *extra: str) -> str:
    proc = subprocess.run([chromium(), *FLAGS, *extra, url], capture_output=True, text=True, timeout=180)
    return proc.stdout


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """Two real CPU runs (bf16 and fp32, the bf16 one repeated so its flags can repeat) and an ingested MLPerf
    log, compared with --anchors."""
    tmp = tmp_path_factory.mktemp("html")
    steps = ["training.max_steps=4", "benchmark.warmup_steps=1", "training.optimizer.warmup_steps=1",
             "logging.wandb.mode=disabled", "platform=cpu"]
    for name, precision in (("bf16_a", "bf16"), ("bf16_b", "bf16"), ("fp32", "fp32")):
        assert run_inprocess(tmp / "results" / name, [*steps, f"training.precision={precision}"]).status == "ok"
    log = tmp / "mlperf_mi355x.log"
    log.write_text(mlperf_log())
    assert cli("ingest", str(log), "--out", str(tmp / "results" / "mlperf"), "--devices", "8", "--model", "llama",
               "--platform", "amd", "--gpu", "mi355x", "--precision", "fp8") == 0
    assert cli("compare", str(tmp / "results"), "--anchors", "--out", str(tmp / "report")) == 0
    return tmp / "report" / "report.html"


def test_the_page_opens_offline_with_one_plotly_beside_it(report):
    """The one thing a tag loads is plotly.js from the file beside the page (written once for every chart), and
    with every host unresolvable the charts still draw."""
    from html.parser import HTMLParser

    class Loads(HTMLParser):
        found: list = []

        def handle_starttag(self, tag, attrs):
            values = dict(attrs)
            if tag == "script" and "src" in values:
                self.found.append(values["src"])
            elif (tag == "link" and "href" in values) or tag == "iframe":
                self.found.append(tag)

    parser = Loads()
    parser.feed(report.read_text())
    assert parser.found == ["plotly.min.js"]
    from plotly.offline import get_plotlyjs

    assert (report.parent / "plotly.min.js").read_text() == get_plotlyjs()  # plotly's own bundle, whole
    assert report.stat().st_size < 1_000_000
    dom = browse(report.as_uri(), "--dump-dom", "--host-resolver-rules=MAP * ~NOTFOUND")
    assert dom.count('class="main-svg"') >= 4


def test_every_chart_draws_with_no_script_error_and_the_table_sorts(report):
    dom = browse(f"{report.as_uri()}#sort=tokens/s/device", "--dump-dom")
    assert 'id="script-errors" hidden' in dom, re.search(r'id="script-errors"[^>]*>([^<]*)', dom).group(1)
    charts = re.findall(r'<section class="chart" data-chart="([^"]+)">(.*?)</section>', dom, re.S)
    assert {"throughput", "loss", "published", "speedups"} <= {name for name, _ in charts}
    assert all("main-svg" in body for _, body in charts)  # Plotly drew an SVG for each
    assert 'data-sorted="4 desc"' in dom  # the tokens/s/device column, descending
    body = dom.split("<tbody>")[1].split("</tbody>")[0]
    rates = [float(v) for v in re.findall(r'<tr><td data-sort="">[^<]*</td>(?:<td[^>]*>[^<]*</td>){3}'
                                            r'<td data-sort="([0-9.e+-]+)">', body)]
    assert len(rates) == 3 and rates == sorted(rates, reverse=True)


def test_a_flag_shared_by_runs_is_shown_once_with_its_count(report):
    """The bf16 group holds two runs; a flag both raise (e.g. not steady, on a 4-step run) is one line."""
    table = report.read_text().split('<table id="groups">')[1].split("</table>")[0]
    row = next(r for r in table.split("<tr>") if "| bf16" in r and "llama_tiny" in r)
    flags = row.split("<td>")[-1].removesuffix("</td></tr>")
    kinds = [line.split(":")[0].split(" (")[0] for line in flags.split("<br>") if line != "-"]
    assert len(kinds) == len(set(kinds))


def test_a_screenshot_is_written(report):
    shot = report.parent / "report.png"
    browse(report.as_uri(), f"--screenshot={shot}", "--window-size=1280,2400")
    assert shot.exists() and shot.read_bytes()[:4] == b"\x89PNG"
