#!/usr/bin/env python3
"""Prints, as JSON, the runtime settings of a Dockerfile's final stage.

    dockerfile_spec.py Dockerfile
    {"base": ..., "user": ..., "entrypoint": [...], "cmd": null, "stopsignal": ...,
     "labels": {...}, "env": {...}, "expose": [...], "workdir": null, "copies": [...]}

scripts/check/image.sh builds its FROM-scratch image with these settings and then checks the
committed image against them, so the image it runs cannot drift from the Dockerfile. ARG
defaults are substituted (${NAME} and $NAME); build-time overrides are not applied. Only the
instruction forms the Dockerfile uses are understood; anything else in the final stage that
changes the runtime (CMD in shell form, VOLUME, HEALTHCHECK, ONBUILD, ...) is an error, so
that a change there is noticed rather than ignored.
"""

import json
import re
import shlex
import sys

RUNTIME_IGNORED = {"ARG", "COPY", "LABEL", "ENV", "EXPOSE", "USER", "STOPSIGNAL", "ENTRYPOINT", "CMD", "WORKDIR"}


def logical_lines(text):
    """Instructions with continuations joined; comments and blank lines dropped."""
    out, cur = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not cur and (not line or line.startswith("#")):
            continue
        if cur and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        cur += line
        out.append(cur.strip())
        cur = ""
    if cur.strip():
        out.append(cur.strip())
    return out


def substitute(value, args):
    def repl(m):
        name = m.group(1) or m.group(2)
        return args.get(name, "")

    return re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)", repl, value)


def pairs(rest, args):
    """`k=v k2="v 2"` (LABEL, ENV) as a dict, values substituted."""
    out = {}
    for token in shlex.split(rest):
        key, sep, value = token.partition("=")
        if not sep:
            raise SystemExit(f"dockerfile_spec: only the key=value form is supported, not {rest!r}")
        out[key] = substitute(value, args)
    return out


def main(path):
    lines = logical_lines(open(path, encoding="utf-8").read())
    global_args, stages = {}, []
    for line in lines:
        instr, _, rest = line.partition(" ")
        instr = instr.upper()
        if instr == "FROM":
            stages.append({"from": rest.strip(), "lines": []})
        elif not stages:
            if instr == "ARG":
                name, _, default = rest.strip().partition("=")
                global_args[name] = default.strip('"')
        else:
            stages[-1]["lines"].append((instr, rest.strip()))
    if not stages:
        raise SystemExit("dockerfile_spec: no FROM")
    final = stages[-1]
    base = substitute(final["from"].split()[0], global_args)
    args = dict(global_args)
    spec = {
        "base": base,
        "user": None,
        "entrypoint": None,
        "cmd": None,
        "stopsignal": None,
        "labels": {},
        "env": {},
        "expose": [],
        "workdir": None,
        "copies": [],
    }
    for instr, rest in final["lines"]:
        if instr == "ARG":
            name, _, default = rest.partition("=")
            args[name] = default.strip('"') if default else global_args.get(name, "")
        elif instr == "LABEL":
            spec["labels"].update(pairs(rest, args))
        elif instr == "ENV":
            spec["env"].update(pairs(rest, args))
            args.update(spec["env"])
        elif instr == "EXPOSE":
            spec["expose"] += [substitute(p, args) for p in rest.split()]
        elif instr == "USER":
            spec["user"] = substitute(rest, args)
        elif instr == "STOPSIGNAL":
            spec["stopsignal"] = substitute(rest, args)
        elif instr == "WORKDIR":
            spec["workdir"] = substitute(rest, args)
        elif instr in ("ENTRYPOINT", "CMD"):
            try:
                value = json.loads(rest)
            except ValueError:
                raise SystemExit(f"dockerfile_spec: {instr} must be in exec (JSON) form, not {rest!r}")
            spec[instr.lower()] = value
        elif instr == "COPY":
            spec["copies"].append(rest)
        else:
            raise SystemExit(f"dockerfile_spec: {instr} in the final stage is not understood by image.sh; teach it")
    json.dump(spec, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "Dockerfile")
