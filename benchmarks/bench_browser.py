"""The dashboard's default What-if run as a user waits for it: in a real browser.

Starts ``streamlit run app.py`` on a free port (a fresh server per repeat, so every run starts
from an empty cache), opens the What-if page in Debian's chromium through the playwright package
(never ``playwright install``), clicks *Run simulation* and times, from the click, until the
first KPI card shows and until the first plotly chart is drawn. Also prints how long the page
took to open. Browser, server and simulation share this machine's cores.

    python benchmarks/bench_browser.py [--repeats 3] [--out benchmarks/results/browser.json]

Needs the app extra (streamlit, plotly), the ``playwright`` package and ``chromium`` on PATH.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_MS = 120_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _server(root: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port", str(port),
         "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
        cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(root)})
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"streamlit did not start in {root}")
        time.sleep(0.2)


def one_session(browser, root: Path) -> dict[str, float]:
    from playwright.sync_api import expect

    port = _free_port()
    proc = _server(root, port)
    try:
        page = browser.new_page(viewport={"width": 1500, "height": 1900})
        page.set_default_timeout(TIMEOUT_MS)
        t0 = time.perf_counter()
        page.goto(f"http://127.0.0.1:{port}/")
        run = page.get_by_role("button", name="Run simulation")
        expect(run).to_be_enabled(timeout=TIMEOUT_MS)
        expect(page.get_by_text("blocks", exact=False).first).to_be_visible(timeout=TIMEOUT_MS)
        opened = time.perf_counter() - t0
        time.sleep(1.0)                                  # let the page settle before the click
        t1 = time.perf_counter()
        run.click()
        expect(page.get_by_test_id("stMetric").filter(has_text="TTFT p99 (ms)")).to_be_visible(timeout=TIMEOUT_MS)
        cards = time.perf_counter() - t1
        expect(page.locator(".js-plotly-plot").first).to_be_visible(timeout=TIMEOUT_MS)
        charts = time.perf_counter() - t1
        page.close()
        return {"open_s": opened, "cards_s": cards, "charts_s": charts}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--root", type=Path, default=ROOT, help="checkout whose app.py to serve (default: this one)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "browser.json")
    args = ap.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise SystemExit("needs the playwright package (pip install playwright; never `playwright install`)") from None
    if chromium is None:
        raise SystemExit("needs chromium on PATH (Debian: apt-get install -y chromium)")
    runs = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True,
                                    args=["--headless", "--no-sandbox", "--disable-gpu",
                                          "--disable-background-networking"])
        for _ in range(args.repeats):
            load = os.getloadavg()[0]
            runs.append({**one_session(browser, args.root.resolve()), "load1": load})
        browser.close()
    med = {k: statistics.median(r[k] for r in runs) for k in ("open_s", "cards_s", "charts_s")}
    print(f"{'what':58s} {'median s':>9s}  runs")
    labels = {"open_s": "open What-if (page ready)", "cards_s": "Run simulation -> KPI cards shown",
              "charts_s": "Run simulation -> first chart drawn"}
    for key, label in labels.items():
        print(f"{label:58s} {med[key]:9.3f}  " + " ".join(f"{r[key]:.3f}" for r in runs))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"root": str(args.root), "cpu_count": os.cpu_count(), "runs": runs,
                                    "median": med}, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
