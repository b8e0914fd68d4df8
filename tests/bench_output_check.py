#!/usr/bin/env python3
"""The outputs of `ferry bench`, read back: the JSON's shape and numbers, the CSV
against the JSON, and the SVG as XML with one line per path and device.

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

PATHS = ["h2d", "d2h", "h2d-pinned", "d2h-pinned", "host-ptr", "zero-copy", "d2d", "alloc"]
LATENCY = {"alloc"}
SYNC_ONLY = {"host-ptr", "zero-copy"}
BYTES_FACTOR = {"host-ptr": 2, "zero-copy": 2}
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
    check(all(k in t for k in ("median", "p25", "p75", "min", "max")), f"{where}: time_us lacks keys: {t}")
    check(isinstance(fig["ops_per_sample"], int) and fig["ops_per_sample"] >= 1, f"{where}: ops_per_sample")
    if unit == "us":
        check(close(fig["median"], t["median"], 1e-4), f"{where}: median {fig['median']} us vs time {t['median']}")
    else:
        moved = size * BYTES_FACTOR.get(path, 1)
        want = moved / t["median"] / 1e3  # bytes per microsecond / 1e3 = GB/s
        check(close(fig["median"], want, 1e-4), f"{where}: {fig['median']} GB/s but {moved} B in {t['median']} us")
        # The slowest sample is the bandwidth's minimum.
        check(close(fig["min"], moved / t["max"] / 1e3, 1e-4), f"{where}: min GB/s is not from the slowest time")


def check_json(data, sizes, repeat):
    for k in ("tool", "version", "started", "host", "quick", "repeat", "sizes", "seconds", "failures", "units",
              "statistics", "ratio", "paths", "devices"):
        check(k in data, f"json: no top-level key '{k}'")
    check(data.get("tool") == "ferry bench", "json: tool is not 'ferry bench'")
    check(data.get("sizes") == sizes, f"json: sizes {data.get('sizes')} != {sizes}")
    check(data.get("repeat") == repeat, f"json: repeat {data.get('repeat')} != {repeat}")
    check(data.get("quick") is True, "json: quick is not true")
    check(data.get("failures") == 0, f"json: failures = {data.get('failures')}")
    check([p.get("id") for p in data.get("paths", [])] == PATHS, f"json: paths {data.get('paths')}")
    for p in data.get("paths", []):
        check(p.get("bytes_factor") == BYTES_FACTOR.get(p.get("id"), 1), f"json: path {p.get('id')} bytes_factor")
        check(p.get("unit") == ("us" if p.get("id") in LATENCY else "GB/s"), f"json: path {p.get('id')} unit")
        check(p.get("sync_only") == (p.get("id") in SYNC_ONLY), f"json: path {p.get('id')} sync_only")
    devices = data.get("devices", [])
    check(len(devices) >= 1, "json: no devices")
    for d in devices:
        where = f"json device {d.get('index')}"
        for k in ("index", "backend", "name", "total_memory", "max_allocation", "is_cpu", "zero_copy", "host_ptr",
                  "host_ptr_alignment", "size_cap", "raw_baseline", "raw_note", "seconds", "results"):
            check(k in d, f"{where}: no key '{k}'")
        results = d.get("results", [])
        check(len(results) == len(PATHS) * len(sizes), f"{where}: {len(results)} results, expected "
              f"{len(PATHS) * len(sizes)}")
        expected = [(p, s) for p in PATHS for s in sizes]
        check([(r.get("path"), r.get("size")) for r in results] == expected, f"{where}: results out of order")
        for r in results:
            w = f"{where} {r.get('path')} {r.get('size')}"
            check(r.get("status") in ("ok", "failed", "skipped"), f"{w}: status {r.get('status')}")
            check(r.get("unit") == ("us" if r.get("path") in LATENCY else "GB/s"), f"{w}: unit {r.get('unit')}")
            if r["status"] == "skipped":
                check(isinstance(r.get("reason"), str) and r["reason"], f"{w}: skipped without a reason")
                continue
            check(r["status"] == "ok", f"{w}: failed: {r.get('error')}")
            if r["status"] != "ok":
                continue
            check(r.get("samples") == repeat, f"{w}: samples {r.get('samples')} != {repeat}")
            check(r.get("verified") is True, f"{w}: bytes not verified")
            check(r.get("error") is None and r.get("raw_error") is None, f"{w}: error fields set")
            check_figure(r.get("ferry"), r["unit"], r["size"], r["path"], w + " ferry")
            if r.get("raw") is not None:
                check_figure(r["raw"], r["unit"], r["size"], r["path"], w + " raw")
                check(isinstance(r.get("raw_call"), str), f"{w}: raw figure without raw_call")
                ratio = r["raw"]["time_us"]["median"] / r["ferry"]["time_us"]["median"]
                check(close(r.get("ratio") or 0, ratio, 1e-4), f"{w}: ratio {r.get('ratio')} != raw/ferry {ratio}")
                if r["unit"] == "GB/s":
                    check(close(r["ratio"], r["ferry"]["median"] / r["raw"]["median"], 1e-3),
                          f"{w}: ratio is not ferry GB/s / raw GB/s")
            else:
                check(r.get("ratio") is None, f"{w}: a ratio without a raw figure")
        # What every device has: the plain transfers and allocation. Zero-copy exactly where the device says so.
        by_path = {p: [r for r in results if r["path"] == p] for p in PATHS}
        for p in ("h2d", "d2h", "h2d-pinned", "d2h-pinned", "d2d", "alloc"):
            check(all(r["status"] == "ok" for r in by_path[p]), f"{where}: {p} not measured at every size")
        zc_ok = all(r["status"] == "ok" for r in by_path["zero-copy"])
        check(zc_ok == bool(d.get("zero_copy")), f"{where}: zero-copy rows do not follow the device's zero_copy")
        if d.get("backend") == "native":
            check(d.get("raw_baseline") is True, f"{where}: native has no raw baseline")
            check(all(r.get("raw") for r in results if r["status"] == "ok"), f"{where}: native row without raw")


def check_csv(rows, data):
    header = ["device", "backend", "device_name", "path", "size_bytes", "status", "unit", "ferry_median", "ferry_p25",
              "ferry_p75", "ferry_min", "ferry_max", "raw_median", "raw_p25", "raw_p75", "raw_min", "raw_max", "ratio",
              "raw_call", "samples", "verified", "error"]
    check(rows and rows[0] == header, f"csv: header {rows[0] if rows else None}")
    body = rows[1:]
    flat = [(d, r) for d in data["devices"] for r in d["results"]]
    check(len(body) == len(flat), f"csv: {len(body)} rows, json {len(flat)} results")
    for line, (d, r) in zip(body, flat):
        row = dict(zip(header, line))
        w = f"csv {row.get('device')} {row.get('path')} {row.get('size_bytes')}"
        check(len(line) == len(header), f"{w}: {len(line)} fields")
        check(int(row["device"]) == d["index"] and row["backend"] == d["backend"] and row["device_name"] == d["name"],
              f"{w}: device columns differ from the json")
        check(row["path"] == r["path"] and int(row["size_bytes"]) == r["size"] and row["status"] == r["status"],
              f"{w}: differs from the json")
        if r["status"] == "ok":
            check(close(float(row["ferry_median"]), r["ferry"]["median"], 1e-5), f"{w}: ferry_median")
            if r["raw"]:
                check(close(float(row["raw_median"]), r["raw"]["median"], 1e-5), f"{w}: raw_median")
                check(close(float(row["ratio"]), r["ratio"], 1e-5), f"{w}: ratio")
            else:
                check(row["raw_median"] == "" and row["ratio"] == "", f"{w}: raw columns without a raw figure")
        else:
            check(row["ferry_median"] == "" and row["error"] != "", f"{w}: not ok, yet figures or no reason")


def check_svg(path, data):
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        check(False, f"svg: not well-formed XML: {e}")
        return
    check(root.tag == SVG + "svg", f"svg: root is {root.tag}")
    check(root.get("viewBox") is not None and float(root.get("width")) > 0 and float(root.get("height")) > 0,
          "svg: no size")
    series = [g for g in root.iter(SVG + "g") if g.get("class") == "series"]
    seen = {}
    for g in series:
        key = (int(g.get("data-device")), g.get("data-path"), g.get("data-side"))
        seen[key] = seen.get(key, 0) + 1
        lines = g.findall(SVG + "polyline")
        check(len(lines) == 1, f"svg: series {key} has {len(lines)} polylines")
        if lines:
            pts = lines[0].get("points").split()
            seen[key + ("points",)] = len(pts)
            check(all(len(p.split(",")) == 2 for p in pts), f"svg: series {key}: bad points")
    panels = [g for g in root.iter(SVG + "g") if g.get("class") == "panel"]
    check(len(panels) == len(data["devices"]), f"svg: {len(panels)} panels for {len(data['devices'])} devices")
    for d in data["devices"]:
        for p in PATHS:
            ok = [r for r in d["results"] if r["path"] == p and r["status"] == "ok"]
            ferry_key = (d["index"], p, "ferry")
            raw_key = (d["index"], p, "raw")
            if p in LATENCY or not ok:
                check(ferry_key not in seen, f"svg: a series for {ferry_key}, which has no bandwidth")
                continue
            check(seen.get(ferry_key) == 1, f"svg: {seen.get(ferry_key, 0)} ferry series for device {d['index']} {p}")
            check(seen.get(ferry_key + ("points",)) == len(ok), f"svg: {ferry_key}: points != measured sizes")
            raws = [r for r in ok if r.get("raw")]
            if raws and p not in SYNC_ONLY:
                check(seen.get(raw_key) == 1, f"svg: {seen.get(raw_key, 0)} raw series for device {d['index']} {p}")
                check(seen.get(raw_key + ("points",)) == len(raws), f"svg: {raw_key}: points != raw figures")
            else:
                check(raw_key not in seen, f"svg: a raw series for {raw_key}")
    legend = [g.get("data-path") for g in root.iter(SVG + "g") if g.get("class") == "legend-item"]
    plotted = sorted({k[1] for k in seen if len(k) == 3})
    check(sorted(legend) == plotted, f"svg: legend {legend} != plotted paths {plotted}")
    check(any((t.text or "").startswith("transfer size") for t in root.iter(SVG + "text")), "svg: no x-axis label")
    check(any("GB/s" in (t.text or "") for t in root.iter(SVG + "text")), "svg: no y-axis label")


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
    out = keep or tempfile.mkdtemp(prefix="ferry-bench-output-")
    os.makedirs(out, exist_ok=True)
    j, c, s = (os.path.join(out, n) for n in ("bench.json", "bench.csv", "bench.svg"))
    sizes, repeat = [4096, 65536], 3
    cmd = [tool, "bench", "--quick", "--sizes", "4K,64K", "--repeat", str(repeat), "--json", j, "--csv", c, "--plot",
           s] + extra
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    check(run.returncode == 0, f"{' '.join(cmd)}: exit {run.returncode}\n{run.stderr}")
    check("ferry/raw" in run.stdout, "no table on stdout")
    try:
        with open(j) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        check(False, f"json: cannot read it back: {e}")
        data = None
    if data:
        check_json(data, sizes, repeat)
        try:
            with open(c, newline="") as f:
                check_csv(list(csv.reader(f)), data)
        except OSError as e:
            check(False, f"csv: {e}")
        check_svg(s, data)
        # The same run's JSON on stdout parses too.
        run2 = subprocess.run([tool, "bench", "--sizes", "4K", "--repeat", "1", "--json", "-"], capture_output=True,
                              text=True, timeout=600)
        try:
            check(len(json.loads(run2.stdout)["devices"]) == len(data["devices"]), "--json -: device count differs")
        except (ValueError, KeyError) as e:
            check(False, f"--json -: stdout is not the JSON: {e}")
    for f in failures:
        print("FAIL", f)
    devices = len(data["devices"]) if data else 0
    if failures:
        print(f"bench_output: {len(failures)} checks failed (outputs in {out})")
        return 1
    if not keep:
        shutil.rmtree(out, ignore_errors=True)
    print(f"bench_output: JSON, CSV and SVG of {devices} device(s) read back and checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
