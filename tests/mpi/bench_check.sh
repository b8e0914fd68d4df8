#!/bin/sh
# The ctest mpi.bench: ferry-mpi-bench under mpirun -n 2, briefly, on every device;
# its JSON must hold a row of positive figures for every test, device and size,
# and its --plot chart a ferry, an MPI and a ratio line per test and device.
#   usage: bench_check.sh MPIEXEC BENCH JSON
set -eu
here=$(dirname "$0")
mpiexec=$1 bench=$2 json=$3
svg=${json%.json}.svg
rm -f "$json" "$svg"
sh "$here/run.sh" "$mpiexec" 2 "$bench" all -m 0:4K -i 5 -x 1 -r 1 -W 4 --json "$json" --plot "$svg"
python3 "$here/../json_schema_check.py" "$here/../../docs/JSON.md" "$json"
python3 - "$json" "$svg" <<'PY'
import json, sys
import xml.etree.ElementTree as ET
doc = json.load(open(sys.argv[1]))
assert doc["tool"] == "ferry-mpi-bench" and doc["ranks"] == 2, doc
rows = doc["rows"]
devices = sorted({r["device"] for r in rows})
for test in ("latency", "bw", "bibw", "allreduce"):
    for d in devices:
        sizes = [r["bytes"] for r in rows if r["test"] == test and r["device"] == d]
        least = {"latency": 0, "bw": 0, "bibw": 0, "allreduce": 2}[test]
        want = ([0] if test == "latency" else []) + [1 << k for k in range(least, 13)]
        assert sizes == want, (test, d, sizes)
for r in rows:
    assert r["ferry"] > 0 and r["mpi"] > 0 and r["ratio"] > 0, r
    assert r["unit"] == ("MB/s" if r["test"] in ("bw", "bibw") else "us"), r
    assert r["path"] in ("its memory, to MPI", "mapped, to MPI", "through host memory"), r
ns = "{http://www.w3.org/2000/svg}"
lines = {}
for g in ET.parse(sys.argv[2]).iter(ns + "g"):
    if g.get("class") == "series":
        key = (g.get("data-test"), int(g.get("data-device")), g.get("data-side"))
        lines[key] = len(g.findall(ns + "circle"))
for test in ("latency", "bw", "bibw", "allreduce"):
    for d in devices:
        points = len([r for r in rows if r["test"] == test and r["device"] == d and r["bytes"] > 0])
        for side in ("ferry", "mpi", "ratio"):
            assert lines.get((test, d, side)) == points, (test, d, side, lines.get((test, d, side)), points)
print("mpi.bench: %d rows on %d devices, every one positive; %d lines in the chart" % (len(rows), len(devices), len(lines)))
PY
