"""End to end in a real browser: ``streamlit run app.py`` on a free port, driven by Debian's
chromium through the playwright package (never ``playwright install``).

Clicks through a What-if run (KPIs appear), a baseline comparison, a load sweep (its CSV download
has one row per rate), a capacity plan (its worksheet CSV has one row per forecast cell), the
hardware page, and a broken upload (an error naming the field); Stop cancels a long run. Screenshots of every
page go to ``$LLMPLAN_ARTIFACTS`` (default ``build/screenshots/``).
"""
from __future__ import annotations

import csv
import io
import itertools
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytest.importorskip("streamlit", reason="the app extra (streamlit, plotly) is not installed")
pytest.importorskip("playwright", reason="the playwright package is not installed (pip install playwright)")
if CHROMIUM is None:
    pytest.skip("no chromium on PATH (Debian: apt-get install -y chromium; .ci/run does this as root)",
                allow_module_level=True)
from playwright.sync_api import expect, sync_playwright  # noqa: E402

ARTIFACTS = Path(os.environ.get("LLMPLAN_ARTIFACTS", ROOT / "build" / "screenshots"))
TIMEOUT_MS = 90_000
expect.set_options(timeout=TIMEOUT_MS)   # the 2-core CI machine is slow to start a session


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    port = _free_port()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log = open(ARTIFACTS / "streamlit.log", "w")  # noqa: SIM115 - closed after the server stops, below
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port", str(port),
         "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"streamlit did not start on port {port} (see {ARTIFACTS / 'streamlit.log'})")
        time.sleep(0.3)
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


@pytest.fixture(scope="module")
def browser():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        yield b
        b.close()


def test_click_through_the_dashboard(server, browser):
    page = browser.new_page(viewport={"width": 1500, "height": 1900}, accept_downloads=True)
    page.set_default_timeout(TIMEOUT_MS)
    # What-if: a shared link with fewer requests, then one click shows the KPIs.
    page.goto(f"{server}/?example=chat-h100.yaml&n=1500")
    run = page.get_by_role("button", name="Run simulation")
    expect(run).to_be_enabled()
    expect(page.get_by_text("28,116 blocks", exact=False)).to_be_visible()
    run.click()
    card = page.get_by_test_id("stMetric").filter(has_text="TTFT p99 (ms)")
    expect(card).to_be_visible()
    expect(page.get_by_test_id("stMetric")).to_have_count(11)
    value = card.get_by_test_id("stMetricValue").inner_text()
    assert float(value.replace(",", "")) > 0
    expect(page.locator(".js-plotly-plot").first).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "what-if.png"), full_page=True)
    page.get_by_role("tab", name="Time series").click()
    expect(page.get_by_text("Running batch (requests)").first).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "what-if-time-series.png"), full_page=True)

    # Pin it, double the load, run again: every card shows its delta; the compare tab lists changes.
    page.get_by_role("button", name="Pin as baseline").click()
    expect(page.get_by_role("button", name="Clear baseline")).to_be_enabled()
    rate = page.get_by_role("spinbutton", name="Arrival rate (req/s)")
    rate.fill("16")
    rate.press("Enter")
    expect(page.get_by_text("The knobs changed since this run")).to_be_visible()
    page.get_by_role("button", name="Run simulation").click()
    expect(page.get_by_test_id("stMetricDelta")).to_have_count(11)
    expect(card.get_by_test_id("stMetricDelta")).to_contain_text("+")
    page.get_by_role("tab", name="Compare with baseline").click()
    expect(page.get_by_text("Scenario changes from the baseline")).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "what-if-compare.png"), full_page=True)
    page.get_by_role("tab", name="Stage breakdown").click()
    expect(page.get_by_text("Mean end-to-end time by stage").first).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "what-if-stages.png"), full_page=True)

    # Load curve on the What-if's scenario: the sweep's CSV has one row per rate.
    page.get_by_role("link", name="Load curve").click()
    page.get_by_role("button", name="Run sweep").click()
    expect(page.get_by_text("Max load meeting the SLO (req/s)")).to_be_visible()
    expect(page.locator(".js-plotly-plot").first).to_be_visible()
    with page.expect_download() as dl:
        page.get_by_role("button", name="Download sweep CSV").click()
    rows = list(csv.DictReader(io.StringIO(Path(dl.value.path()).read_text())))
    assert len(rows) == 8 and float(rows[0]["rate_per_s"]) < float(rows[-1]["rate_per_s"])
    page.screenshot(path=str(ARTIFACTS / "load-curve.png"), full_page=True)

    # Capacity plan: a two-row forecast uploaded as CSV; the worksheet download has one row per cell.
    page.get_by_role("link", name="Capacity plan").click()
    expect(page.get_by_role("button", name="Run planner")).to_be_enabled()
    page.locator("input[type=file]").set_input_files({
        "name": "forecast.csv", "mimeType": "text/csv",
        "buffer": b"quarter,region,peak_rps\nFY27Q1,us-east,15\nFY27Q2,us-east,25\n"})
    expect(page.get_by_text("2 forecast rows", exact=False)).to_be_visible()
    requests = page.get_by_role("spinbutton", name="Requests per simulation")
    requests.fill("300")
    requests.press("Enter")
    expect(page.get_by_text("6 searches of 300 requests", exact=False)).to_be_visible()   # the rerun ended
    page.get_by_role("button", name="Run planner").click()
    expect(page.get_by_test_id("stMetric").filter(has_text="GPUs in FY27Q2")).to_be_visible()
    with page.expect_download() as dl:
        page.get_by_role("button", name="Download worksheet CSV").click()
    rows = list(csv.DictReader(io.StringIO(Path(dl.value.path()).read_text())))
    assert [(r["quarter"], r["region"]) for r in rows] == [("FY27Q1", "us-east"), ("FY27Q2", "us-east")]
    assert all(int(float(r["gpus_peak"])) >= 1 and float(r["gpu_hours"]) > 0 for r in rows)
    page.screenshot(path=str(ARTIFACTS / "capacity-plan.png"), full_page=True)

    # Hardware profiles: the table and the step-time chart.
    page.get_by_role("link", name="Hardware profiles").click()
    expect(page.get_by_text("Predicted step time")).to_be_visible()
    expect(page.locator(".js-plotly-plot")).to_have_count(2)          # step times; measured vs fitted
    expect(page.get_by_text("held out (leave one out)", exact=False)).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "hardware.png"), full_page=True)

    # Validation: the newest committed fidelity run, its scatter and tables.
    page.get_by_role("link", name="Validation").click()
    expect(page.get_by_text("Errors per load")).to_be_visible()
    expect(page.locator(".js-plotly-plot")).to_have_count(1)
    expect(page.get_by_test_id("stMetric").filter(has_text="Targets met")).to_be_visible()
    page.screenshot(path=str(ARTIFACTS / "validation.png"), full_page=True)

    # A broken upload: an error naming the field; the page keeps working.
    page.get_by_role("link", name="What-if").click()
    page.get_by_text("Upload YAML").click()
    broken = (ROOT / "examples" / "chat-h100.yaml").read_text().replace("max_num_seqs", "max_num_seq")
    page.locator("input[type=file]").set_input_files(
        {"name": "broken.yaml", "mimeType": "application/x-yaml", "buffer": broken.encode()})
    error = page.get_by_test_id("stAlertContentError")
    expect(error).to_contain_text("scheduler.max_num_seq")
    expect(error).to_contain_text("did you mean 'max_num_seqs'")
    expect(page.get_by_role("button", name="Run simulation")).to_have_count(0)
    page.screenshot(path=str(ARTIFACTS / "bad-upload.png"), full_page=True)
    page.get_by_text("Example", exact=True).click()
    expect(page.get_by_role("button", name="Run simulation")).to_be_enabled()
    expect(page.get_by_test_id("stAlertContentError")).to_have_count(0)
    page.close()


def test_stop_button_cancels_a_long_run(server, browser):
    page = browser.new_page(viewport={"width": 1500, "height": 1200})
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(f"{server}/?example=chat-h100.yaml&n=200000&seed=99")     # about 20 s of simulation
    page.get_by_role("button", name="Run simulation").click()
    expect(page.get_by_test_id("stProgress")).to_be_visible()
    started = time.monotonic()
    page.get_by_role("button", name="Stop").click()
    expect(page.get_by_text("Stopped.", exact=False)).to_be_visible()
    expect(page.get_by_test_id("stProgress")).to_have_count(0)
    assert time.monotonic() - started < 10
    expect(page.get_by_test_id("stMetric")).to_have_count(0)             # nothing half-done is shown
    page.screenshot(path=str(ARTIFACTS / "what-if-stopped.png"))
    page.close()


def _choose(page, label: str, option: str) -> None:
    """Pick ``option`` in the selectbox labelled ``label``."""
    page.get_by_test_id("stSelectbox").filter(has_text=label).click()
    page.get_by_role("option", name=option, exact=True).click()


def _options(page, label: str) -> list[str]:
    box = page.get_by_test_id("stSelectbox").filter(has_text=label)
    box.click()
    options = page.get_by_role("option")
    expect(options.first).to_be_visible()
    names = [o.inner_text().strip() for o in options.all()]
    page.keyboard.press("Escape")
    return names


def test_examples_are_scenarios_and_switching_keeps_their_values(server, browser):
    """The What-if list holds scenarios only (plan files belong to the Capacity plan page), and after a
    view with no scenario (a broken upload) an example comes back with its own values, not the widgets'
    minimums."""
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(server)
    rate = page.get_by_role("spinbutton", name="Arrival rate (req/s)")
    expect(rate).to_have_value("8.00")
    names = _options(page, "Example scenario")
    assert "tiers-h100.yaml" in names and "chat-h100.yaml" in names
    assert not [n for n in names if n.startswith("plan-")], names
    page.get_by_text("Upload YAML").click()
    broken = (ROOT / "examples" / "chat-h100.yaml").read_text().replace("model:", "modle:")
    page.locator("input[type=file]").set_input_files(
        {"name": "broken.yaml", "mimeType": "application/x-yaml", "buffer": broken.encode()})
    expect(page.get_by_test_id("stAlertContentError")).to_contain_text("model = None")
    page.get_by_text("Example", exact=True).click()
    expect(rate).to_have_value("8.00")
    _choose(page, "Example scenario", "tiers-h100.yaml")
    expect(rate).to_have_value("11.00")
    _choose(page, "Example scenario", "chat-h100.yaml")
    expect(rate).to_have_value("8.00")
    expect(page.get_by_role("spinbutton", name="Requests")).to_have_value("20000")
    expect(page.get_by_role("combobox", name="Hardware profile")).to_have_value("h100-sxm")
    expect(page.get_by_text("28,116 blocks", exact=False)).to_be_visible()
    page.close()


def _tick_number(text: str) -> float:
    """A rendered tick label as a number (``1,000``, ``2k``, ``−5``, ``0.5``)."""
    t = text.replace(",", "").replace("\u2212", "-").strip()
    scale = {"k": 1e3, "M": 1e6, "G": 1e9, "m": 1e-3, "\u00b5": 1e-6}.get(t[-1:], 1.0)
    return float(t[:-1] if scale != 1.0 else t) * scale


def _log_axis_labels(page) -> dict[str, list[str]]:
    """Per chart and log axis, its tick labels in axis order (plotly draws them as ``g.<axis>tick``)."""
    return page.evaluate("""() => {
        const out = {};
        document.querySelectorAll('.js-plotly-plot').forEach((plot, i) => {
            const layout = plot._fullLayout;
            for (const name of Object.keys(layout)) {
                const ax = layout[name];
                if (!/^[xy]axis\\d*$/.test(name) || !ax || ax.type !== 'log' || !ax._vals) continue;
                out[`chart ${i} ${name}`] = ax._vals.map(v => v.text.replace(/<[^>]+>/g, ''));
            }
        });
        return out;
    }""")


def test_charts_label_log_axes_in_full_and_tell_profiles_apart(server, browser):
    """Every log axis labels each tick with its value in axis order (not "2, 10k, 5, 2, 1000", where the
    minor ticks read as bare digits), the step-time chart gives each of its profiles its own line style,
    and no KPI card's label is cut off at a laptop's width."""
    page = browser.new_page(viewport={"width": 1280, "height": 1400})
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(f"{server}/?example=chat-h100.yaml&n=1500")
    page.get_by_role("button", name="Run simulation").click()
    expect(page.get_by_test_id("stMetric")).to_have_count(11)
    expect(page.locator(".js-plotly-plot").first).to_be_visible()
    cut = page.evaluate("""() => [...document.querySelectorAll('[data-testid="stMetricLabel"]')]
        .filter(label => [label, ...label.querySelectorAll('*')].some(e => e.scrollWidth > e.clientWidth + 1))
        .map(label => label.innerText)""")
    assert cut == [], f"KPI labels cut off: {cut}"
    labels = _log_axis_labels(page)
    page.get_by_role("link", name="Hardware profiles").click()
    expect(page.locator(".js-plotly-plot")).to_have_count(2)
    page.wait_for_timeout(1000)
    labels.update({f"hardware {k}": v for k, v in _log_axis_labels(page).items()})
    assert len(labels) >= 5, labels       # the CDF's three x axes, the step-time chart's four
    for axis, texts in labels.items():
        values = [_tick_number(t) for t in texts if t]
        assert len(values) >= 2 and all(a < b for a, b in itertools.pairwise(values)), (axis, texts)
    styles = page.evaluate("""() => {
        const plot = [...document.querySelectorAll('.js-plotly-plot')]
            .find(p => ((p._fullLayout.xaxis.title || {}).text || '') === 'requests in the batch');
        return plot._fullData.filter(t => t.showlegend).map(t => [t.name, t.line.color, t.line.dash]);
    }""")
    assert len(styles) > 10, styles
    assert len({(color, dash) for _, color, dash in styles}) == len(styles), styles
    page.screenshot(path=str(ARTIFACTS / "hardware-step-times.png"), full_page=True)
    page.close()
