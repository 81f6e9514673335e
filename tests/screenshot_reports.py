"""Screenshot the HTML reports of a finished run with headless Chromium, to look at them as a person would.

Not a pytest test (CI machines have no browser): a script to run by hand after `slipway run`, then open the PNGs.

    apt-get install -y chromium            # Debian's package; or pass --chromium with another Chrome binary
    .venv/bin/slipway run --workdir out     # a finished run (add --tune spec.yaml for the tuning report)
    .venv/bin/python tests/screenshot_reports.py out    # -> out/screenshots/{validate,evaluate,tune}.png

The reports are found through <workdir>/summary.json: its "reports" (each step's .html-named copy, recorded in
the outputs' metadata under report_html), else the steps' outputs (validate's anomalies/report.html, evaluate's
evaluation/report.html, tune's report artifact), else by globbing <workdir>/artifacts. A report whose file has no
.html name (a run from before the copies existed) is copied to one first, since a browser would show its source.

Chromium runs offline-minded (no background networking, no sync, no component updates, a throwaway profile), and
each page is checked for remote references first: the reports must open air-gapped. The window is as tall as the
page is estimated to be (or --height), since Chromium's --screenshot captures the window only.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

STEPS = ("validate", "evaluate", "tune")
# Where each step's report lies: (output name, what follows the output's path: a file in the folder, the copy
# beside the file, or nothing for the extensionless KFP HTML artifact itself).
OUTPUT_REPORTS = {
    "validate": [("anomalies", "/report.html"), ("report", "")],
    "evaluate": [("evaluation", "/report.html"), ("report", "")],
    "tune": [("report", ".html"), ("report", "")],
}
GLOBS = {
    "validate": ["*/validate/anomalies/report.html", "*/validate/report"],
    "evaluate": ["*/evaluate/evaluation/report.html", "*/evaluate/report"],
    "tune": ["*/tune/report.html", "*/tune/report"],
}
REMOTE = ("http://", "https://", "//cdn", "<script", "@import", "xlink:href", "src=")
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_reports(workdir: Path) -> dict[str, Path]:
    """{step: report file} for the steps of the run that wrote one."""
    summary_file = workdir / "summary.json"
    summary = json.loads(summary_file.read_text(encoding="utf-8")) if summary_file.is_file() else {}
    found: dict[str, Path] = {}
    for step, location in (summary.get("reports") or {}).items():
        if step in STEPS and Path(location).is_file():
            found[step] = Path(location)
    for step in STEPS:
        outputs = (summary.get("steps") or {}).get(step, {}).get("outputs") or {}
        for output, suffix in OUTPUT_REPORTS[step]:
            if step in found or output not in outputs:
                continue
            candidate = Path(outputs[output] + suffix)
            if candidate.is_file():
                found[step] = candidate
    for step in STEPS:
        for pattern in GLOBS[step] if step not in found else []:
            matches = sorted((workdir / "artifacts").glob(pattern), key=lambda p: p.stat().st_mtime)
            if matches:  # the newest run's
                found[step] = matches[-1]
                break
    return found


def remote_references(page: str) -> list[str]:
    return [needle for needle in REMOTE if needle in page]


def estimated_height(page: str, width: int) -> int:
    """The page's height in a window `width` wide: text and table rows, plus the charts packed into rows as the
    reports' flex layout does (every chart is an <svg width= height=> element)."""
    height = 200 + 34 * page.count("<tr") + 60 * len(re.findall(r"<h[12]", page)) + 40 * page.count("<p")
    room = width - 64
    blocks = re.findall(r"class=.charts.>(.*?)</div>", page, re.S) or [page]
    for block in blocks:
        row_width, row_height = 0, 0
        for w, h in re.findall(r'<svg class="chart" width="(\d+)" height="(\d+)"', block):
            if row_width and row_width + int(w) > room:
                height += row_height + 14
                row_width, row_height = 0, 0
            row_width += int(w) + 14
            row_height = max(row_height, int(h) + 2)
        height += row_height + 14
    return min(int(math.ceil(height / 100.0)) * 100, 16000)


def screenshot(browser: str, page: Path, png: Path, width: int, height: int) -> None:
    with tempfile.TemporaryDirectory(prefix="slipway-chromium-") as profile:
        command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                   "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
                   f"--user-data-dir={profile}", f"--screenshot={png}", f"--window-size={width},{height}",
                   page.resolve().as_uri()]
        done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    if done.returncode != 0 or not png.is_file():
        raise RuntimeError(f"{browser} exited with {done.returncode}: {done.stderr.strip()[-800:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workdir", type=Path, help="a finished run's folder (holding summary.json)")
    parser.add_argument("--out", type=Path, help="where the PNGs go (default: <workdir>/screenshots)")
    parser.add_argument("--chromium", default="", help="the browser binary (default: the first Chromium on PATH)")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=0, help="window height (default: estimated from the page)")
    args = parser.parse_args(argv)

    browser = args.chromium or next((b for b in BROWSERS if shutil.which(b)), "")
    if not browser:
        print("no Chromium found: apt-get install -y chromium, or pass --chromium", file=sys.stderr)
        return 2
    reports = find_reports(args.workdir)
    if not reports:
        print(f"{args.workdir}: no reports found (no summary.json or artifacts of validate, evaluate, tune)",
              file=sys.stderr)
        return 2
    out = args.out or args.workdir / "screenshots"
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    with tempfile.TemporaryDirectory(prefix="slipway-reports-") as scratch:
        for step, report in reports.items():
            page = report.read_text(encoding="utf-8")
            remote = remote_references(page)
            if remote:
                print(f"{step}: {report} references {', '.join(remote)}: it would not open air-gapped")
                failed += 1
            if report.suffix != ".html":  # a browser shows a file without an .html name as text
                report = Path(shutil.copyfile(report, Path(scratch) / f"{step}.html"))
            png = out / f"{step}.png"
            height = args.height or estimated_height(page, args.width)
            try:
                screenshot(browser, report, png, args.width, height)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(f"{step}: no screenshot of {report}: {exc}", file=sys.stderr)
                failed += 1
                continue
            print(f"{step}: {png} ({args.width}x{height}) of {report}")
    missing = [step for step in STEPS if step not in reports]
    if missing:
        print(f"no report of: {', '.join(missing)} (tune runs only with --tune)")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
