#!/usr/bin/env python3
"""Renders deploy/prometheus/prometheus.yml for the local stack (`make up`).

The canonical file is docker-compose's: services found by DNS, rules under /etc/prometheus.
Locally the same jobs scrape fixed addresses and the rules are read from the checkout:

    prometheus_config.py CANONICAL RULES_GLOB JOB=HOST:PORT... > local.yml

Each `dns_sd_configs:` block of a job named on the command line becomes
`static_configs: [{targets: [HOST:PORT]}]`, the rule_files entries become RULES_GLOB, and the
prometheus job's own target becomes the local listen address (JOB `prometheus`). Everything
else (intervals, job names, comments) is kept as it is. Stdlib only: a line-based rewrite of
a file this repository owns, checked afterwards with `promtool check config`.
"""
import re
import sys


def render(lines, rules_glob, targets):
    out, job, skipping, in_rules = [], None, False, False
    for line in lines:
        indent = len(line) - len(line.lstrip(" "))
        if skipping:
            if line.strip() and indent > 4:
                continue
            skipping = False
        if in_rules:
            if line.lstrip().startswith("- ") and indent > 0:
                continue
            in_rules = False
        m = re.match(r"\s*- job_name:\s*(\S+)", line)
        if m:
            job = m.group(1)
        if line.startswith("rule_files:"):
            out.append(line)
            out.append(f"  - {rules_glob}\n")
            in_rules = True
            continue
        if re.match(r"    dns_sd_configs:\s*$", line) and job in targets:
            out.append("    static_configs:\n")
            out.append(f'      - targets: ["{targets[job]}"]\n')
            skipping = True
            continue
        if job == "prometheus" and "prometheus" in targets and "targets:" in line:
            line = re.sub(r"\[.*\]", f'["{targets["prometheus"]}"]', line)
        out.append(line)
    missing = set(targets) - {j for j in re.findall(r"job_name:\s*(\S+)", "".join(lines))}
    if missing:
        sys.exit(f"no job named {', '.join(sorted(missing))} in the canonical config")
    return "".join(out)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    canonical, rules_glob = sys.argv[1], sys.argv[2]
    targets = dict(a.split("=", 1) for a in sys.argv[3:])
    with open(canonical) as f:
        sys.stdout.write(render(f.readlines(), rules_glob, targets))


if __name__ == "__main__":
    main()
