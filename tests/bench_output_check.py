#!/usr/bin/env python3
"""The outputs of `ferry bench` and `ferry info --json`, read back: the JSON against
its schema (docs/JSON.md, through json_schema_check.py) and its numbers, the CSV
against the JSON, and the SVG as XML: its panels, lines, points and legend.

usage: bench_output_check.py PATH/TO/ferry [--keep DIR] [-- extra bench arguments]

Runs `ferry bench --quick --sizes 4K,64K --repeat 3 --json --csv --plot` on every
device present (FERRY_BACKENDS narrows them, as for any ferry program) and checks
what it wrote. Exit 0 when every check holds, 1 otherwise (each failure printed),
77 (skipped) when the ferry program is missing.
"""
import csv
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import json_schema_check  # noqa: E402

DOC = os.path.join(HERE, "..", "docs", "JSON.md")
DEVICE_PATHS = [
    "h2d",
    "d2h",
    "h2d-pinned",
    "d2h-pinned",
    "host-ptr",
    "zero-copy",
    "d2d",
    "async",
    "async-pinned",
    "both",
    "both-pinned",
    "elapsed",
    "alloc",
]
PAIR_PATHS = ["peer", "cross"]
LATENCY = {"alloc", "host-ptr", "zero-copy", "async", "async-pinned"}
SYNC_ONLY = {"host-ptr", "zero-copy"}
BYTES_FACTOR = {"host-ptr": 2, "zero-copy": 2, "both": 2, "both-pinned": 2}
# Rows of ferry's queues: a raw figure only where the driver has such calls (OpenCL, CUDA).
QUEUE_PATHS = {"async", "async-pinned", "both", "both-pinned", "elapsed"}
# A write_async sample queues at most this many bytes (at least one submission).
ASYNC_QUEUED_MAX = 64 << 20
SVG = "{http://www.w3.org/2000/svg}"

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
    return cond


def close(a, b, rel=2e-3):
    return a == b or abs(a - b) <= rel * max(abs(a), abs(b))


def check_figure(fig, unit, size, path, where):
    keys = ["median", "p25", "p75", "min", "max", "time_us", "ops_per_sample"]
    if not check(isinstance(fig, dict) and all(k in fig for k in keys), f"{where}: figure lacks keys: {fig}"):
        return
    v = [fig[k] for k in ("min", "p25", "median", "p75", "max")]
    check(all(isinstance(x, (int, float)) and x > 0 and math.isfinite(x) for x in v), f"{where}: figures {v}")
    check(all(v[i] <= v[i + 1] * (1 + 1e-5) for i in range(4)), f"{where}: min <= p25 <= median <= p75 <= max: {v}")
    t = fig["time_us"]
    check(isinstance(fig["ops_per_sample"], int) and fig["ops_per_sample"] >= 1, f"{where}: ops_per_sample")
    if unit == "us":
        check(close(fig["median"], t["median"], 1e-4), f"{where}: median {fig['median']} us vs time {t['median']}")
    else:
        moved = size * BYTES_FACTOR.get(path, 1)
        want = moved / t["median"] / 1e3  # bytes per microsecond / 1e3 = GB/s
        check(close(fig["median"], want, 1e-4), f"{where}: {fig['median']} GB/s but {moved} B in {t['median']} us")
        # The slowest sample is the bandwidth's minimum.
        check(close(fig["min"], moved / t["max"] / 1e3, 1e-4), f"{where}: min GB/s is not from the slowest time")


def check_result(r, where, repeat):
    w = f"{where} {r.get('path')} {r.get('size')}"
    check(r.get("unit") == ("us" if r.get("path") in LATENCY else "GB/s"), f"{w}: unit {r.get('unit')}")
    if r["status"] == "skipped":
        check(isinstance(r.get("reason"), str) and r["reason"], f"{w}: skipped without a reason")
        check(r["ferry"] is None and r["raw"] is None and r["samples"] is None, f"{w}: skipped, yet figures")
        return
    check(r["status"] == "ok", f"{w}: failed: {r.get('error')}")
    if r["status"] != "ok":
        return
    check(r.get("samples") == repeat, f"{w}: samples {r.get('samples')} != {repeat}")
    check(r.get("verified") is True, f"{w}: bytes not verified")
    check(r.get("error") is None and r.get("raw_error") is None and r.get("reason") is None, f"{w}: error fields set")
    check_figure(r.get("ferry"), r["unit"], r["size"], r["path"], w + " ferry")
    if r["path"] == "async":
        cap = max(1, ASYNC_QUEUED_MAX // r["size"])
        for side in ("ferry", "raw"):
            if r.get(side):
                ops = r[side]["ops_per_sample"]
                check(ops <= cap, f"{w}: {side} queues {ops} x {r['size']} B a sample, over 64 MiB")
        if r.get("raw"):
            check(r["raw"]["ops_per_sample"] == r["ferry"]["ops_per_sample"],
                  f"{w}: ferry and raw submit different numbers a sample")
    if r.get("raw") is None:
        check(r.get("ratio") is None and r.get("raw_other") is None, f"{w}: a ratio without a raw figure")
        return
    check_figure(r["raw"], r["unit"], r["size"], r["path"], w + " raw")
    check(isinstance(r.get("raw_call"), str) and isinstance(r.get("raw_way"), str), f"{w}: raw without call or way")
    ratio = r["raw"]["time_us"]["median"] / r["ferry"]["time_us"]["median"]
    check(close(r.get("ratio") or 0, ratio, 1e-4), f"{w}: ratio {r.get('ratio')} != raw/ferry time {ratio}")
    if r["unit"] == "GB/s":
        check(close(r["ratio"], r["ferry"]["median"] / r["raw"]["median"], 1e-3), f"{w}: ratio is not GB/s / GB/s")
    other = r.get("raw_other")
    if other is not None:
        check_figure(other["figure"], r["unit"], r["size"], r["path"], w + " raw_other")
        check(other["way"] != r["raw_way"], f"{w}: raw and raw_other are the same way {other['way']}")
        # Of two ways, the faster is the baseline.
        check(r["raw"]["time_us"]["median"] <= other["figure"]["time_us"]["median"] * (1 + 1e-9),
              f"{w}: raw ({r['raw_way']}) is slower than raw_other ({other['way']})")


def check_json(data, sizes, repeat):
    check(data.get("tool") == "ferry bench", "json: tool is not 'ferry bench'")
    check(data.get("sizes") == sizes, f"json: sizes {data.get('sizes')} != {sizes}")
    check(data.get("repeat") == repeat, f"json: repeat {data.get('repeat')} != {repeat}")
    check(data.get("quick") is True, "json: quick is not true")
    check(data.get("failures") == 0, f"json: failures = {data.get('failures')}")
    check([p.get("id") for p in data.get("paths", [])] == DEVICE_PATHS + PAIR_PATHS, f"json: paths {data.get('paths')}")
    for p in data.get("paths", []):
        check(p.get("bytes_factor") == BYTES_FACTOR.get(p.get("id"), 1), f"json: path {p.get('id')} bytes_factor")
        check(p.get("unit") == ("us" if p.get("id") in LATENCY else "GB/s"), f"json: path {p.get('id')} unit")
        check(p.get("sync_only") == (p.get("id") in SYNC_ONLY), f"json: path {p.get('id')} sync_only")
        check(p.get("between_devices") == (p.get("id") in PAIR_PATHS), f"json: path {p.get('id')} between_devices")
    devices = data.get("devices", [])
    check(len(devices) >= 1, "json: no devices")
    check(all(not d["debugging"] for d in devices), "json: a debugging device was measured without being asked for")
    for d in devices:
        where = f"json device {d.get('index')}"
        results = d.get("results", [])
        expected = [(p, s) for p in DEVICE_PATHS for s in sizes]
        check([(r.get("path"), r.get("size")) for r in results] == expected, f"{where}: results out of order")
        for r in results:
            check_result(r, where, repeat)
        by_path = {p: [r for r in results if r["path"] == p] for p in DEVICE_PATHS}
        for p in [x for x in DEVICE_PATHS if x not in ("host-ptr", "zero-copy")]:
            check(all(r["status"] == "ok" for r in by_path[p]), f"{where}: {p} not measured at every size")
        zc_ok = all(r["status"] == "ok" for r in by_path["zero-copy"])
        check(zc_ok == bool(d.get("zero_copy")), f"{where}: zero-copy rows do not follow the device's zero_copy")
        if d.get("backend") == "native":
            check(d.get("raw_baseline") is True, f"{where}: native has no raw baseline")
            check(all(r.get("raw") for r in results if r["status"] == "ok" and r["path"] not in QUEUE_PATHS),
                  f"{where}: native row without raw")
        if d.get("backend") == "opencl":
            check(all(r.get("raw") for r in results if r["status"] == "ok" and r["path"] in QUEUE_PATHS),
                  f"{where}: an OpenCL queue row without the raw enqueued calls")
        # Devices whose memory is the host's have a second raw way (issue 16, item 1): the
        # faster of the two is the baseline, and both are in the JSON.
        if d.get("backend") in ("opencl", "vulkan") and d.get("is_cpu"):
            check(len(d.get("raw_ways", [])) == 2, f"{where}: a CPU device with {len(d.get('raw_ways', []))} raw way(s)")
            h2d = [r for r in by_path["h2d"] if r["status"] == "ok"]
            check(all(r.get("raw_other") for r in h2d), f"{where}: h2d rows without the second raw way")
    # Pairs: every ordered pair of the first devices of two backends (cross).
    backends = []
    for d in devices:
        if d["backend"] not in [b for b, _ in backends]:
            backends.append((d["backend"], d["index"]))
    want = {(a, b) for _, a in backends for _, b in backends if a != b}
    got = {(p["from"], p["to"]) for p in data.get("pairs", []) if p["path"] == "cross"}
    check(want <= got, f"json: cross pairs {sorted(got)} lack {sorted(want - got)}")
    for p in data.get("pairs", []):
        where = f"json pair {p['path']} {p['from']}>{p['to']}"
        check([r["size"] for r in p["results"]] == sizes, f"{where}: sizes")
        for r in p["results"]:
            check(r["path"] == p["path"], f"{where}: a result of path {r['path']}")
            check_result(r, where, repeat)


def check_csv(rows, data):
    header = ["device", "backend", "device_name", "path", "size_bytes", "status", "unit", "ferry_median", "ferry_p25",
              "ferry_p75", "ferry_min", "ferry_max", "raw_median", "raw_p25", "raw_p75", "raw_min", "raw_max", "ratio",
              "raw_way", "raw_call", "raw_other_way", "raw_other_median", "samples", "verified", "error"]
    check(rows and rows[0] == header, f"csv: header {rows[0] if rows else None}")
    body = rows[1:]
    flat = [(str(d["index"]), d["backend"], r) for d in data["devices"] for r in d["results"]]
    flat += [(f"{p['from']}>{p['to']}", None, r) for p in data["pairs"] for r in p["results"]]
    check(len(body) == len(flat), f"csv: {len(body)} rows, json {len(flat)} results")
    for line, (device, backend, r) in zip(body, flat):
        row = dict(zip(header, line))
        w = f"csv {row.get('device')} {row.get('path')} {row.get('size_bytes')}"
        check(len(line) == len(header), f"{w}: {len(line)} fields")
        check(row["device"] == device and (backend is None or row["backend"] == backend), f"{w}: device columns")
        check(row["path"] == r["path"] and int(row["size_bytes"]) == r["size"] and row["status"] == r["status"],
              f"{w}: differs from the json")
        if r["status"] == "ok":
            check(close(float(row["ferry_median"]), r["ferry"]["median"], 1e-5), f"{w}: ferry_median")
            if r["raw"]:
                check(close(float(row["raw_median"]), r["raw"]["median"], 1e-5), f"{w}: raw_median")
                check(close(float(row["ratio"]), r["ratio"], 1e-5), f"{w}: ratio")
                check(row["raw_way"] == r["raw_way"], f"{w}: raw_way")
                if r["raw_other"]:
                    check(close(float(row["raw_other_median"]), r["raw_other"]["figure"]["median"], 1e-5),
                          f"{w}: raw_other_median")
            else:
                check(row["raw_median"] == "" and row["ratio"] == "", f"{w}: raw columns without a raw figure")
        else:
            check(row["ferry_median"] == "" and row["error"] != "", f"{w}: not ok, yet figures or no reason")


def points_of(series):
    lines = series.findall(SVG + "polyline")
    if len(lines) != 1:
        return None
    return [tuple(float(v) for v in p.split(",")) for p in lines[0].get("points").split()]


def check_svg(path, data):
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        check(False, f"svg: not well-formed XML: {e}")
        return
    check(root.tag == SVG + "svg", f"svg: root is {root.tag}")
    check(root.get("viewBox") is not None and float(root.get("width")) > 0 and float(root.get("height")) > 0,
          "svg: no size")
    seen = {}
    # Every panel: its plot area, and every line and marker inside it (none drawn off the chart).
    for panel in root.iter(SVG + "g"):
        if panel.get("class") != "panel":
            continue
        area = [r for r in panel.iter(SVG + "rect") if r.get("class") == "plot-area"]
        if not check(len(area) == 1, f"svg: a {panel.get('data-kind')} panel without its plot area"):
            continue
        x0, y0 = float(area[0].get("x")), float(area[0].get("y"))
        x1, y1 = x0 + float(area[0].get("width")), y0 + float(area[0].get("height"))
        for g in panel.iter(SVG + "g"):
            if g.get("class") != "series":
                continue
            target = g.get("data-device") or f"{g.get('data-from')}>{g.get('data-to')}"
            key = (target, g.get("data-path"), g.get("data-side"), g.get("data-panel"))
            check(g.get("data-panel") == panel.get("data-kind"), f"svg: series {key} in a {panel.get('data-kind')} panel")
            pts = points_of(g)
            if not check(pts is not None, f"svg: series {key} without one polyline"):
                continue
            check(key not in seen, f"svg: series {key} twice")
            markers = len(g.findall(SVG + "circle")) + len(g.findall(SVG + "polygon"))
            clipped = len([p for p in g.findall(SVG + "path") if p.get("class") == "clipped"])
            seen[key] = len(pts)
            check(markers + clipped == len(pts), f"svg: {key}: {len(pts)} points, {markers} markers + {clipped} arrows")
            check(all(x0 - 0.5 <= x <= x1 + 0.5 and y0 - 0.5 <= y <= y1 + 0.5 for x, y in pts),
                  f"svg: {key}: a point off the chart: {pts}")
            for c in g.findall(SVG + "circle"):
                cy = float(c.get("cy"))
                check(y0 - 0.5 <= cy <= y1 + 0.5, f"svg: {key}: a marker off the chart at y {cy}")
    panels = [g for g in root.iter(SVG + "g") if g.get("class") == "target"]
    check(len(panels) == len(data["devices"]) + (1 if data["pairs"] else 0), f"svg: {len(panels)} rows of panels")

    def expect(target, p, side, panel, count):
        key = (target, p, side, panel)
        if count == 0:
            check(key not in seen, f"svg: a series {key} with no figures")
        else:
            check(seen.get(key) == count, f"svg: {key}: {seen.get(key)} points, {count} figures")

    for d in data["devices"]:
        t = str(d["index"])
        for p in DEVICE_PATHS:
            ok = [r for r in d["results"] if r["path"] == p and r["status"] == "ok"]
            panel = "time" if p in LATENCY else "bandwidth"
            expect(t, p, "ferry", panel, len(ok))
            expect(t, p, "raw", panel, len([r for r in ok if r["raw"]]))
            expect(t, p, "ratio", "ratio", len([r for r in ok if r["ratio"]]))
    for pr in data["pairs"]:
        t = f"{pr['from']}>{pr['to']}"
        ok = [r for r in pr["results"] if r["status"] == "ok"]
        expect(t, pr["path"], "ferry", "bandwidth", len(ok))
        expect(t, pr["path"], "raw", "bandwidth", len([r for r in ok if r["raw"]]))
        expect(t, pr["path"], "ratio", "ratio", len([r for r in ok if r["ratio"]]))
    # The legend lists every path drawn and every pair, hidden lines included.
    legend = {g.get("data-path") for g in root.iter(SVG + "g") if g.get("class") == "legend-item" and g.get("data-path")}
    drawn = {k[1] for k in seen if k[0].isdigit()}
    check(legend == drawn, f"svg: legend {sorted(legend)} != paths drawn {sorted(drawn)}")
    pairs = {g.get("data-pair") for g in root.iter(SVG + "g") if g.get("class") == "legend-item" and g.get("data-pair")}
    want = {f"{p['path']} {p['from']}>{p['to']}" for p in data["pairs"]}
    check(pairs == want, f"svg: legend pairs {sorted(pairs)} != {sorted(want)}")
    texts = [t.text or "" for t in root.iter(SVG + "text")]
    check(any(t.startswith("transfer size") for t in texts), "svg: no x-axis label")
    check(any("GB/s" in t for t in texts) and any("ferry / raw" in t for t in texts), "svg: no panel titles")


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__)
        return 2
    tool = args[0]
    extra = args[args.index("--") + 1:] if "--" in args else []
    keep = args[args.index("--keep") + 1] if "--keep" in args else None
    if not os.access(tool, os.X_OK):
        print(f"bench_output: skipped: no ferry program at {tool}")
        return 77
    sections = json_schema_check.parse_doc(DOC)
    out = keep or tempfile.mkdtemp(prefix="ferry-bench-output-")
    os.makedirs(out, exist_ok=True)
    j, c, s, i = (os.path.join(out, n) for n in ("bench.json", "bench.csv", "bench.svg", "info.json"))
    sizes, repeat = [4096, 65536], 3
    cmd = [tool, "bench", "--quick", "--sizes", "4K,64K", "--repeat", str(repeat), "--json", j, "--csv", c, "--plot",
           s] + extra
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    check(run.returncode == 0, f"{' '.join(cmd)}: exit {run.returncode}\n{run.stderr}")
    check("ferry/raw" in run.stdout, "no table on stdout")
    check(all(len(line) <= 100 for line in run.stdout.splitlines()), "a line of the tables is wider than 100")
    data = None
    try:
        with open(j) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        check(False, f"json: cannot read it back: {e}")
    if data:
        for p in json_schema_check.check(sections, data, "bench json"):
            check(False, p)
        check_json(data, sizes, repeat)
        try:
            with open(c, newline="") as f:
                check_csv(list(csv.reader(f)), data)
        except OSError as e:
            check(False, f"csv: {e}")
        check_svg(s, data)
        # The JSON on stdout parses and follows the schema too.
        run2 = subprocess.run([tool, "bench", "--sizes", "4K", "--repeat", "1", "--paths", "h2d", "--json", "-"],
                              capture_output=True, text=True, timeout=600)
        try:
            data2 = json.loads(run2.stdout)
            check(len(data2["devices"]) == len(data["devices"]), "--json -: device count differs")
            for p in json_schema_check.check(sections, data2, "bench json -"):
                check(False, p)
        except (ValueError, KeyError) as e:
            check(False, f"--json -: stdout is not the JSON: {e}")
    # ferry info --json FILE, and to stdout: the schema, and the devices the bench saw.
    run3 = subprocess.run([tool, "info", "--json", i], capture_output=True, text=True, timeout=120)
    check(run3.returncode == 0 and run3.stdout == "", f"ferry info --json FILE: exit {run3.returncode}: {run3.stderr}")
    run4 = subprocess.run([tool, "info", "--json"], capture_output=True, text=True, timeout=120)
    try:
        with open(i) as f:
            info = json.load(f)
        for p in json_schema_check.check(sections, info, "info json"):
            check(False, p)
        names = [(d["index"], d["name"]) for d in json.loads(run4.stdout)["devices"]]
        check(names == [(d["index"], d["name"]) for d in info["devices"]], "info --json: stdout and FILE differ")
        check(len(info["settings"]) >= 10, f"info json: {len(info['settings'])} settings")
        if data:
            check([x["name"] for x in data["settings"]] == [x["name"] for x in info["settings"]],
                  "bench and info list different settings")
            measured = {d["index"] for d in data["devices"]}
            listed = {d["index"] for d in info["devices"] if not d["debugging"]}
            check(measured == listed, f"bench measured {sorted(measured)}, info lists {sorted(listed)}")
            check(set(data["left_out"]) == {d["index"] for d in info["devices"] if d["debugging"]},
                  "bench's left_out is not info's debugging devices")
    except (OSError, ValueError, KeyError) as e:
        check(False, f"info json: {e}")
    for f in failures:
        print("FAIL", f)
    devices = len(data["devices"]) if data else 0
    if failures:
        print(f"bench_output: {len(failures)} checks failed (outputs in {out})")
        return 1
    if not keep:
        shutil.rmtree(out, ignore_errors=True)
    print(f"bench_output: JSON (against docs/JSON.md), CSV and SVG of {devices} device(s) read back and checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
