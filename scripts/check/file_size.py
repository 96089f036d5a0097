#!/usr/bin/env python3
"""Source files stay under 800 lines, or say why at their top. A Rust file's length here is
its lines before its unit tests (`#[cfg(test)]`), which Rust keeps beside the code they test.
A longer file must say, in a `//! Longer than 800 lines: …` line within its first 40 lines,
why it is one file. Usage: file_size.py ROOT"""
import subprocess
import sys

LIMIT = 800
root = sys.argv[1]
files = subprocess.run(["git", "-C", root, "ls-files", "*.rs"], capture_output=True, text=True).stdout.split()
bad = []
for f in files:
    lines = open(f"{root}/{f}").read().split("\n")
    code = next((i for i, l in enumerate(lines) if l.startswith("#[cfg(test)]")), len(lines))
    if code <= LIMIT:
        continue
    if not any(l.startswith("//! Longer than 800 lines:") for l in lines[:40]):
        bad.append(f"{f}: {code} lines (before its unit tests) and no `//! Longer than 800 lines: <why>` at its top")
for b in bad:
    print(b)
print(f"{len(bad)} files over {LIMIT} lines without a reason", file=sys.stderr)
sys.exit(1 if bad else 0)
