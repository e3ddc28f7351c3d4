"""Checks that a `tierflow report` page rendered: its DOM (chromium --dump-dom) holds the
plots with data in them, and its screenshot (chromium --screenshot, PNG) shows them.

Usage: check_report_render.py DOM.html SHOT.png
Exit 0 when every check passes, 1 with the failed checks on standard output, 77 when the
Python Imaging Library is missing (scripts/setup-test.sh installs python3-pil).
"""
import sys
from html.parser import HTMLParser

# Colours the page uses (tools/export/report_sections.cpp): weight, compute, link rate.
WEIGHT = (0x4E, 0x79, 0xA7)
COMPUTE = (0x4C, 0x6A, 0x92)
WAIT_TRANSFER = (0xD6, 0x27, 0x28)
RATE = (0x2F, 0x6F, 0x9F)


class Dom(HTMLParser):
    """The parts of the page the checks look at."""

    def __init__(self):
        super().__init__()
        self.title = ""
        self.in_title = False
        self.svgs = []  # per <svg>: its class and the data paths inside it
        self.depth = 0  # inside an <svg>
        self.errors = 0  # elements of class "error"
        self.wait_rows = 0
        self.in_waits = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "title" and self.depth == 0:
            self.in_title = True
        if tag == "svg":
            self.depth += 1
            if self.depth == 1:
                self.svgs.append({"class": a.get("class", ""), "paths": [], "rects": 0})
        elif self.depth > 0 and tag == "path":
            d = a.get("d", "")
            # Data paths: a move then horizontal steps, with no class (axes and marks have one).
            if "class" not in a and d.startswith("M") and "H" in d:
                self.svgs[-1]["paths"].append((d, a.get("fill", ""), a.get("stroke", "")))
        elif self.depth > 0 and tag == "rect":
            self.svgs[-1]["rects"] += 1
        if "error" in a.get("class", "").split():
            self.errors += 1
        if tag == "table" and "waits" in a.get("class", "").split():
            self.in_waits = True
        if tag == "tr" and self.in_waits:
            self.wait_rows += 1

    def handle_endtag(self, tag):
        if tag == "svg":
            self.depth -= 1
        if tag == "title":
            self.in_title = False
        if tag == "table":
            self.in_waits = False

    def handle_data(self, data):
        if self.in_title:
            self.title += data


def hex_color(c):
    return "#%02x%02x%02x" % c


def check_dom(path, fails):
    dom = Dom()
    with open(path, encoding="utf-8", errors="replace") as f:
        dom.feed(f.read())
    if not dom.title.startswith("tierflow report"):
        fails.append("DOM: title is %r, not the report's" % dom.title)
    plots = [s for s in dom.svgs if "plot" in s["class"].split()]
    activity = [s for s in plots if "activity" in s["class"].split()]
    charts = [s for s in plots if "activity" not in s["class"].split()]
    if len(activity) != 1 or activity[0]["rects"] < 2:
        fails.append("DOM: no activity strip with bars")
    if len(charts) < 2:
        fails.append("DOM: %d plots over time, expected memory and link plots" % len(charts))
    for i, s in enumerate(charts):
        if not s["paths"]:
            fails.append("DOM: plot %d has no data path" % i)
    fills = {p[1] for s in charts for p in s["paths"]}
    if hex_color(WEIGHT) not in fills:
        fails.append("DOM: no area of weights (%s) in the memory plots" % hex_color(WEIGHT))
    strokes = {p[2] for s in charts for p in s["paths"]}
    if hex_color(RATE) not in strokes:
        fails.append("DOM: no link rate line (%s)" % hex_color(RATE))
    if dom.errors:
        fails.append("DOM: the page shows an error box")
    if dom.wait_rows < 2:  # the header row and at least one wait
        fails.append("DOM: the exposed-wait table is empty")


def near(p, c, tol=12):
    return all(abs(p[i] - c[i]) <= tol for i in range(3))


def check_png(path, fails):
    try:
        from PIL import Image
    except ImportError:
        print("skipped: the Python Imaging Library is missing (apt-get install python3-pil)")
        sys.exit(77)
    img = Image.open(path).convert("RGB")
    w, h = img.size
    pixels = list(img.getdata())
    white = sum(1 for p in pixels if min(p) >= 245)
    if white > 0.95 * len(pixels):
        fails.append("PNG: %.1f%% of the screenshot is white" % (100.0 * white / len(pixels)))
    colors = len(set(pixels))
    if colors < 50:
        fails.append("PNG: only %d distinct colours" % colors)
    for name, c, least in (("weights", WEIGHT, 5000), ("compute or waits", None, 500),
                           ("link rate", RATE, 200)):
        if c is None:
            n = sum(1 for p in pixels if near(p, COMPUTE) or near(p, WAIT_TRANSFER))
        else:
            n = sum(1 for p in pixels if near(p, c))
        if n < least:
            fails.append("PNG: %d pixels of %s, expected at least %d" % (n, name, least))
    print("screenshot %dx%d: %d colours, %.1f%% white" % (w, h, colors, 100.0 * white / len(pixels)))


def main():
    fails = []
    check_dom(sys.argv[1], fails)
    check_png(sys.argv[2], fails)
    for f in fails:
        print("FAIL " + f)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
