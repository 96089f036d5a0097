#!/usr/bin/env python3
"""Fails when a doc names code that is no longer there: every backquoted repository path
(`services/dispatcher/src/retry.rs`, `crates/hookstream-kafka`, or a path inside a crate such
as `examples/inbox_bench.rs`), file name (`isolation.rs`) and Rust module path
(`hookstream_kafka::consumer`, checked down to its first module) in the docs given must exist
in the tree git tracks. Paths git ignores (reports under `loadtest/out/`) and the names of
outside tools are not checked. Usage: doc_names.py ROOT DOC...  (`make test` runs it over
README.md, ARCHITECTURE.md, CONTRIBUTING.md and docs/.)"""
import re, os, sys, subprocess

# Outside tools the docs name by file (Kafka's scripts).
EXTERNAL = re.compile(r"^kafka-[\w-]+\.sh$")
root = sys.argv[1]
docs = sys.argv[2:]


def ignored(path):
    return subprocess.run(["git", "-C", root, "check-ignore", "-q", path]).returncode == 0

files = subprocess.run(['git','-C',root,'ls-files'],capture_output=True,text=True).stdout.split('\n')
fileset = set(files)
dirs = set()
for f in files:
    parts = f.split('/')
    for i in range(1,len(parts)):
        dirs.add('/'.join(parts[:i]))
basenames = {}
for f in files:
    basenames.setdefault(os.path.basename(f), []).append(f)
crate_dirs = {}
for f in files:
    if f.endswith('Cargo.toml') and f != 'Cargo.toml':
        d = os.path.dirname(f)
        txt = open(os.path.join(root,f)).read()
        m = re.search(r'(?m)^name = "([^"]+)"', txt)
        if m: crate_dirs[m.group(1).replace('-','_')] = d
bad = []
for doc in docs:
    text = open(os.path.join(root, doc)).read()
    for n, line in enumerate(text.split('\n'), 1):
        for tok in re.findall(r'`([^`\s]+)`', line):
            tok = tok.rstrip('.,;:')
            if re.fullmatch(r'[\w./-]+/[\w./-]*', tok) and not tok.startswith(('http','/','../','~')) and '/' in tok and re.match(r'^(crates|services|loadtest|scripts|docs|helm|deploy|config|proto|fuzz|examples|migrations)\b', tok):
                t = tok.rstrip('/')
                if t not in fileset and t not in dirs and not any(x.endswith('/' + t) for x in fileset | dirs) and not ignored(t):
                    bad.append((doc, n, tok, 'no such path'))
            elif re.fullmatch(r'[\w-]+\.(rs|sql|sh|toml|md|py|js|yaml)', tok):
                if tok not in basenames and tok not in fileset and not EXTERNAL.match(tok):
                    bad.append((doc, n, tok, 'no file of that name'))
            elif re.fullmatch(r'hookstream_\w+(::\w+)+', tok) or re.fullmatch(r'(dispatcher|outbox_relay|api|loadtest)::\w+(::\w+)*', tok):
                parts = tok.split('::')
                d = crate_dirs.get(parts[0])
                if d is None:
                    bad.append((doc,n,tok,'no such crate')); continue
                # the first module segment must be a module file (or an item of lib.rs)
                seg = parts[1]
                cands = [f'{d}/src/{seg}.rs', f'{d}/src/{seg}/mod.rs']
                if not any(c in fileset for c in cands):
                    # an item in lib.rs?
                    lib = open(os.path.join(root,d,'src','lib.rs')).read() if f'{d}/src/lib.rs' in fileset else ''
                    if not re.search(r'\b(fn|struct|enum|trait|const|static|type|mod|macro_rules!)\s+' + re.escape(seg) + r'\b', lib) and not re.search(r'pub use [^;]*\b'+re.escape(seg)+r'\b', lib):
                        bad.append((doc,n,tok,'no such module or item'))
for b in bad: print('%s:%d: `%s`: %s' % b)
print(len(bad), 'stale names', file=sys.stderr)
sys.exit(1 if bad else 0)
