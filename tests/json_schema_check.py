#!/usr/bin/env python3
"""Checks JSON written by `ferry info --json`, `ferry bench --json` and
`ferry-mpi-bench --json` against
docs/JSON.md, field by field: the tables there are the schema.

usage: json_schema_check.py docs/JSON.md FILE.json [FILE.json ...]

Every object in a file must sit at a place JSON.md describes ("### info: `devices[]`"),
have exactly the fields its table lists (a `*` row allows any key), and each value
must have the listed type. Exit 0 when all hold, 1 otherwise (each problem printed).
Only the standard library: python3 is all CI has.
"""
import json
import re
import sys

TYPES = {"integer", "number", "string", "boolean", "object", "null"}


class Section:
    def __init__(self, docs, places):
        self.docs, self.places = docs, places
        self.fields = {}  # name -> list of alternatives
        self.includes = []  # (doc, place) whose fields are included
        self.any = None  # alternatives for keys not listed (a `*` row)


def parse_type(text):
    """'string or null' -> [('string',), ('null',)]; '"ok" or "failed"' -> [('literal', 'ok'), ...]."""
    alts = []
    for part in re.split(r"\s+or\s+", text.strip()):
        part = part.strip().strip("`")
        if part.startswith('"') and part.endswith('"') and len(part) >= 2:
            alts.append(("literal", part[1:-1]))
        elif part.startswith("array of "):
            alts.append(("array", parse_type(part[len("array of "):])))
        elif part in TYPES:
            alts.append((part,))
        else:
            raise ValueError(f"JSON.md: unknown type '{part}' in '{text}'")
    return alts


def parse_doc(path):
    sections = []
    current = None
    heading = re.compile(r"^###\s+([a-z, ]+):\s+(.*)$")
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            m = heading.match(line)
            if m:
                docs = [d.strip() for d in m.group(1).split(",")]
                where = m.group(2).strip()
                places = ["."] if where == "top level" else re.findall(r"`([^`]+)`", where)
                current = Section(docs, places)
                sections.append(current)
                continue
            if line.startswith("## ") or line.startswith("# "):
                current = None
                continue
            if current is None or not line.startswith("|") or line.startswith("|---"):
                continue
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) < 2 or cells[0] == "field":
                continue
            name, typ = cells[0], cells[1]
            inc = re.match(r"every field of (\w+)'s `([^`]+)`", name)
            if inc:
                current.includes.append((inc.group(1), inc.group(2)))
                continue
            name = name.strip("`")
            if name == "*":
                current.any = parse_type(typ)
            else:
                current.fields[name] = parse_type(typ)
    return sections


def find(sections, doc, place):
    for s in sections:
        if doc in s.docs and place in s.places:
            return s
    return None


def fields_of(sections, section):
    fields = dict(section.fields)
    for doc, place in section.includes:
        inc = find(sections, doc, place)
        if inc is None:
            raise ValueError(f"JSON.md: '{doc}: {place}' is included but not described")
        fields.update(fields_of(sections, inc))
    return fields


def matches(value, alts):
    for alt in alts:
        kind = alt[0]
        if kind == "literal" and isinstance(value, str) and value == alt[1]:
            return True
        if kind == "integer" and isinstance(value, int) and not isinstance(value, bool):
            return True
        if kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        if kind == "string" and isinstance(value, str):
            return True
        if kind == "boolean" and isinstance(value, bool):
            return True
        if kind == "null" and value is None:
            return True
        if kind == "object" and isinstance(value, dict):
            return True
        if kind == "array" and isinstance(value, list) and all(matches(v, alt[1]) for v in value):
            return True
    return False


def describe(alts):
    out = []
    for alt in alts:
        if alt[0] == "literal":
            out.append(f'"{alt[1]}"')
        elif alt[0] == "array":
            out.append("array of " + describe(alt[1]))
        else:
            out.append(alt[0])
    return " or ".join(out)


def check(sections, data, name="output"):
    """Returns the problems found in one parsed JSON document."""
    problems = []
    tool = data.get("tool") if isinstance(data, dict) else None
    doc = {"ferry info": "info", "ferry bench": "bench", "ferry-mpi-bench": "mpi"}.get(tool)
    if doc is None:
        return [f"{name}: 'tool' is {tool!r}, not 'ferry info', 'ferry bench' or 'ferry-mpi-bench'"]
    if data.get("schema_version") != 1:
        problems.append(f"{name}: schema_version is {data.get('schema_version')!r}, JSON.md describes 1")
    seen = set()

    def walk(value, place, where):
        if isinstance(value, dict):
            section = find(sections, doc, place)
            if section is None:
                problems.append(f"{name}: {where}: an object JSON.md does not describe ({doc}: `{place}`)")
                return
            seen.add(place)
            fields = fields_of(sections, section)
            for key, alts in fields.items():
                if key not in value:
                    problems.append(f"{name}: {where}: no field '{key}'")
                elif not matches(value[key], alts):
                    problems.append(f"{name}: {where}.{key} = {value[key]!r:.80} is not {describe(alts)}")
            for key in value:
                if key in fields:
                    continue
                if section.any is None:
                    problems.append(f"{name}: {where}: field '{key}' is not in JSON.md")
                elif not matches(value[key], section.any):
                    problems.append(f"{name}: {where}.{key} = {value[key]!r:.80} is not {describe(section.any)}")
            for key, v in value.items():
                sub = key if place == "." else f"{place}.{key}"
                walk(v, sub, f"{where}.{key}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, place + "[]", f"{where}[{i}]")

    walk(data, ".", "$")
    return problems


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    sections = parse_doc(argv[1])
    problems = []
    for path in argv[2:]:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            problems.append(f"{path}: cannot read it as JSON: {e}")
            continue
        problems += check(sections, data, path)
    for p in problems:
        print("FAIL", p)
    if problems:
        return 1
    print(f"json_schema: {len(argv) - 2} file(s) match docs/JSON.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
