#!/usr/bin/env python3
"""Checks a Grafana dashboard of the chart and lists the metrics its queries use.

Usage: dashboard.py DASHBOARD.json [--metrics-out FILE] [--json]

Checks (each failure is one line on stderr; exit status 1 if there was any, 2 when the file
cannot be read or the arguments are wrong):

- a `datasource` template variable (type `datasource`, query `prometheus`) exists, and every
  panel (rows excepted: they plot nothing), every target and every query variable uses the
  data source `{"type": "prometheus", "uid": "${datasource}"}`;
- every panel and row has a title and an integer id, unique across the dashboard (panels
  inside collapsed rows included); every panel has a description;
- every panel that plots numbers (timeseries, stat, gauge, bargauge, barchart, histogram,
  heatmap, piechart, state-timeline, status-history, trend, xychart, table) sets
  `fieldConfig.defaults.unit`;
- every gridPos lies within the 24 columns and no two overlap (top-level panels and rows
  together; the panels of each collapsed row among themselves);
- every target has an `expr` that parses as PromQL (a subset: selectors, functions,
  aggregations, binary operators with on/ignoring/group_left/group_right, ranges,
  subqueries, offset and @), refIds are unique within a panel;
- no expression selects, groups or matches on `job` (job names differ between compose and
  Kubernetes), and every histogram_quantile aggregates its buckets `by (le, ...)` first.

Then it prints the metrics the targets' `expr` use (and the `label_values(...)` queries of
query variables), one line each, sorted: the metric name and the label names the dashboard
relies on, e.g. `kafka_consumergroup_lag consumergroup partition role topic`. With
`--metrics-out FILE` the list is written to FILE instead and a summary is printed; `--json`
writes `{"metrics": {NAME: {"labels": [...], "target_labels": [...]}}}` instead of text.

Metric names: identifiers in selector position matching `(hookstream|kafka)_[a-z0-9_]+`
(other series such as Prometheus' `up` are not listed). A `_bucket` suffix is always stripped
(histogram buckets); `_sum` and `_count` only when the same base name is also used with
`_bucket` in the dashboard (so a plain gauge or counter that happens to end in `_count` is not
renamed). `_total` is kept: the services export counters with it.

Labels, a best-effort heuristic that never claims a label the query does not itself require
of that metric:
- every label the selector's braces match with `=` (a non-empty value, `{role="retry"}`) or
  `=~` (the dashboard filters on it, e.g. `consumergroup=~"$consumergroup"`) is listed for that
  metric; `!=`, `!~` and `=""` are not, since they also match series without the label;
- the labels of `by (...)` of the aggregation directly around the selector (the innermost
  one: in `count by (a) (count by (a, b) (m))` that is `by (a, b)`) are listed, but only when
  that aggregation's argument contains exactly one selector (in `sum by (service) (x * on(
  instance) group_left(service) y)` the label could come from either side, so none is
  claimed) and no function between them makes or drops labels (label_replace, label_join,
  absent, absent_over_time, vector, scalar, info);
- `without (...)`, `on (...)`, `ignoring (...)` and `group_left/right (...)` labels are never
  claimed;
- `le` is only ever attributed to `_bucket` selectors (anything else is reported as a
  problem, since only buckets carry it);
- `instance` and `job` are target labels Prometheus adds at scrape time, not labels the
  services export: the text output leaves them out, the JSON lists them as `target_labels`.
"""

import json
import re
import sys

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
NUMERIC_PANELS = {
    "timeseries", "stat", "gauge", "bargauge", "barchart", "histogram", "heatmap", "piechart",
    "state-timeline", "status-history", "trend", "xychart", "table",
}
METRIC_RE = re.compile(r"(?:hookstream|kafka)_[a-z0-9_]+")
TARGET_LABELS = {"instance", "job"}
AGG_OPS = {
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "limitk", "limit_ratio",
}
AGG_WITH_PARAM = {"count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
LABEL_CHANGING_FUNCS = {
    "label_replace", "label_join", "absent", "absent_over_time", "vector", "scalar", "info",
}
BINARY_PREC = {
    "or": 1, "and": 2, "unless": 2,
    "==": 3, "!=": 3, "<=": 3, "<": 3, ">=": 3, ">": 3,
    "+": 4, "-": 4,
    "*": 5, "/": 5, "%": 5, "atan2": 5,
    "^": 6,
}


class PromQLError(Exception):
    pass


# --- tokenizer ---------------------------------------------------------------------------------

TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+|\#[^\n]*)
  | (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<range>\[[^\]]*\])
  | (?P<var>\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*|\[\[[^\]]*\]\])
  | (?P<dur>(?:\d+(?:ms|[smhdwy]))+(?![A-Za-z0-9_]))
  | (?P<num>0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[Ii]nf|NaN)
  | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>==|!=|=~|!~|>=|<=|[-+*/%^<>=(){},@])
    """,
    re.VERBOSE,
)


def tokenize(text):
    tokens, pos = [], 0
    while pos < len(text):
        m = TOKEN_RE.match(text, pos)
        if not m:
            raise PromQLError(f"unexpected character {text[pos]!r} at offset {pos}")
        kind = m.lastgroup
        if kind != "ws":
            tokens.append((kind, m.group(), pos))
        pos = m.end()
    tokens.append(("eof", "", pos))
    return tokens


# --- parser ------------------------------------------------------------------------------------
# Nodes are dicts with a "node" key: selector, agg, call, binary, unary, paren, postfix, leaf.


class Parser:
    def __init__(self, text):
        self.toks = tokenize(text)
        self.i = 0

    def peek(self, k=0):
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self):
        t = self.toks[self.i]
        self.i = min(self.i + 1, len(self.toks) - 1)
        return t

    def expect(self, value):
        t = self.next()
        if t[1] != value:
            raise PromQLError(f"expected {value!r} at offset {t[2]}, found {t[1] or 'end'!r}")
        return t

    def parse(self):
        node = self.expr(0)
        if self.peek()[0] != "eof":
            t = self.peek()
            raise PromQLError(f"unexpected {t[1]!r} at offset {t[2]}")
        return node

    def binop(self):
        kind, val, _ = self.peek()
        if kind == "op" and val in BINARY_PREC:
            return val
        if kind == "ident" and val.lower() in ("and", "or", "unless", "atan2"):
            return val.lower()
        return None

    def expr(self, min_prec):
        lhs = self.unary()
        while True:
            op = self.binop()
            if op is None or BINARY_PREC[op] < min_prec:
                return lhs
            self.next()
            matching = {}
            if self.peek()[1] == "bool":
                self.next()
            if self.peek()[1] in ("on", "ignoring"):
                kw = self.next()[1]
                matching[kw] = self.label_list()
            if self.peek()[1] in ("group_left", "group_right"):
                kw = self.next()[1]
                matching[kw] = self.label_list() if self.peek()[1] == "(" else []
            prec = BINARY_PREC[op]
            rhs = self.expr(prec if op == "^" else prec + 1)
            lhs = {"node": "binary", "op": op, "lhs": lhs, "rhs": rhs, "matching": matching}

    def unary(self):
        if self.peek()[1] in ("-", "+"):
            self.next()
            return {"node": "unary", "expr": self.unary()}
        return self.postfix(self.primary())

    def postfix(self, node):
        while True:
            kind, val, pos = self.peek()
            if kind == "range":
                self.next()
                node = {"node": "postfix", "expr": node, "range": val}
            elif kind == "ident" and val == "offset":
                self.next()
                if self.peek()[1] == "-":
                    self.next()
                if self.peek()[0] not in ("dur", "num", "var"):
                    raise PromQLError(f"expected a duration after offset at offset {pos}")
                self.next()
            elif val == "@":
                self.next()
                if self.peek()[1] in ("start", "end"):
                    self.next()
                    self.expect("(")
                    self.expect(")")
                elif self.peek()[0] in ("num", "var"):
                    self.next()
                else:
                    raise PromQLError(f"expected a timestamp after @ at offset {pos}")
            else:
                return node

    def label_list(self):
        self.expect("(")
        labels = []
        while self.peek()[1] != ")":
            kind, val, pos = self.next()
            if kind not in ("ident", "str"):
                raise PromQLError(f"expected a label name at offset {pos}, found {val!r}")
            labels.append(val.strip("\"'`") if kind == "str" else val)
            if self.peek()[1] == ",":
                self.next()
            elif self.peek()[1] != ")":
                t = self.peek()
                raise PromQLError(f"expected ',' or ')' at offset {t[2]}, found {t[1]!r}")
        self.expect(")")
        return labels

    def matchers(self):
        self.expect("{")
        out = []
        while self.peek()[1] != "}":
            kind, label, pos = self.next()
            if kind == "str":  # {"metric.name"} (UTF-8 name form)
                out.append(("__name__", "=", label.strip("\"'`")))
            else:
                if kind != "ident":
                    raise PromQLError(f"expected a label name at offset {pos}, found {label!r}")
                op = self.next()
                if op[1] not in ("=", "!=", "=~", "!~"):
                    raise PromQLError(f"expected a matcher operator at offset {op[2]}, found {op[1]!r}")
                value = self.next()
                if value[0] != "str":
                    raise PromQLError(f"expected a quoted label value at offset {value[2]}")
                out.append((label, op[1], value[1][1:-1]))
            if self.peek()[1] == ",":
                self.next()
            elif self.peek()[1] != "}":
                t = self.peek()
                raise PromQLError(f"expected ',' or '}}' at offset {t[2]}, found {t[1]!r}")
        self.expect("}")
        return out

    def args(self):
        self.expect("(")
        out = []
        while self.peek()[1] != ")":
            out.append(self.expr(0))
            if self.peek()[1] == ",":
                self.next()
            elif self.peek()[1] != ")":
                t = self.peek()
                raise PromQLError(f"expected ',' or ')' at offset {t[2]}, found {t[1] or 'end'!r}")
        self.expect(")")
        return out

    def grouping(self):
        kw = self.next()[1]
        return kw, self.label_list()

    def primary(self):
        kind, val, pos = self.peek()
        if kind in ("num", "dur", "str", "var"):
            self.next()
            return {"node": "leaf", "kind": kind, "value": val}
        if val == "(":
            self.next()
            inner = self.expr(0)
            self.expect(")")
            return {"node": "paren", "expr": inner}
        if val == "{":
            m = self.matchers()
            name = next((v for (l, o, v) in m if l == "__name__" and o == "="), None)
            return {"node": "selector", "name": name, "matchers": m, "pos": pos}
        if kind == "ident":
            nxt = self.peek(1)[1]
            if val.lower() in AGG_OPS and nxt in ("(", "by", "without"):
                self.next()
                grouping = None
                if self.peek()[1] in ("by", "without"):
                    grouping = self.grouping()
                args = self.args()
                if self.peek()[1] in ("by", "without"):
                    if grouping:
                        raise PromQLError(f"two grouping clauses on {val} at offset {pos}")
                    grouping = self.grouping()
                op = val.lower()
                want = 2 if op in AGG_WITH_PARAM else 1
                if len(args) != want:
                    raise PromQLError(f"{op} takes {want} argument(s), got {len(args)} at offset {pos}")
                return {"node": "agg", "op": op, "grouping": grouping,
                        "param": args[0] if want == 2 else None, "expr": args[-1], "pos": pos}
            if nxt == "(":
                self.next()
                return {"node": "call", "func": val, "args": self.args(), "pos": pos}
            self.next()
            m = self.matchers() if self.peek()[1] == "{" else []
            return {"node": "selector", "name": val, "matchers": m, "pos": pos}
        raise PromQLError(f"unexpected {val or 'end of expression'!r} at offset {pos}")


def parse_promql(text):
    return Parser(text).parse()


def children(node):
    n = node["node"]
    if n == "agg":
        return [c for c in (node["param"], node["expr"]) if c is not None]
    if n == "call":
        return node["args"]
    if n == "binary":
        return [node["lhs"], node["rhs"]]
    if n in ("unary", "paren", "postfix"):
        return [node["expr"]]
    return []


def selectors(node):
    if node["node"] == "selector":
        return [node]
    return [s for c in children(node) for s in selectors(c)]


def walk(node):
    yield node
    for c in children(node):
        yield from walk(c)


def label_uses(node, agg=None, blocked=False):
    """(selector, labels it is claimed to carry) for every selector under node."""
    n = node["node"]
    if n == "selector":
        labels = {l for (l, op, v) in node["matchers"]
                  if l != "__name__" and (op == "=~" or (op == "=" and v != ""))}
        if agg is not None and not blocked and agg["grouping"] and agg["grouping"][0] == "by" \
                and len(selectors(agg["expr"])) == 1:
            labels |= set(agg["grouping"][1])
        return [(node, labels)]
    out = []
    if n == "agg":
        if node["param"] is not None:
            out += label_uses(node["param"], None, False)
        out += label_uses(node["expr"], node, False)
        return out
    if n == "call" and node["func"] in LABEL_CHANGING_FUNCS:
        blocked = True
    for c in children(node):
        out += label_uses(c, agg, blocked)
    return out


def lint_expr(tree):
    """Problems an expression has whatever its metrics (job, histogram_quantile)."""
    problems = []
    for node in walk(tree):
        if node["node"] == "selector" and any(l == "job" for (l, _, _) in node["matchers"]):
            problems.append("selects on the `job` label (job names differ between deployments)")
        if node["node"] == "agg" and node["grouping"] and "job" in node["grouping"][1]:
            problems.append(f"groups {node['grouping'][0]} (job) (job names differ between deployments)")
        if node["node"] == "binary" and any("job" in v for v in node["matching"].values()):
            problems.append("matches on the `job` label (job names differ between deployments)")
        if node["node"] == "call" and node["func"] == "histogram_quantile":
            arg = node["args"][1] if len(node["args"]) == 2 else None
            while arg is not None and arg["node"] == "paren":
                arg = arg["expr"]
            if not (arg and arg["node"] == "agg" and arg["grouping"]
                    and arg["grouping"][0] == "by" and "le" in arg["grouping"][1]):
                problems.append("histogram_quantile over buckets not aggregated `by (le, ...)` first")
    return problems


# --- dashboard checks --------------------------------------------------------------------------


class Checker:
    def __init__(self):
        self.problems = []
        # raw metric name -> set of labels
        self.uses = {}

    def fail(self, where, msg):
        self.problems.append(f"{where}: {msg}")

    def record(self, name, labels):
        self.uses.setdefault(name, set()).update(labels)

    def check_expr(self, where, expr):
        try:
            tree = parse_promql(expr)
        except PromQLError as e:
            self.fail(where, f"expr does not parse: {e}: {expr}")
            return
        for p in lint_expr(tree):
            self.fail(where, p)
        found = set()
        for sel, labels in label_uses(tree):
            name = sel["name"]
            if not name or not METRIC_RE.fullmatch(name):
                continue
            found.add(name)
            if "le" in labels and not name.endswith("_bucket"):
                self.fail(where, f"uses label `le` on {name}, which only histogram buckets carry")
                labels = labels - {"le"}
            self.record(name, labels)
        # Cross-check: every hookstream_/kafka_ identifier outside strings must be a selector.
        stripped = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
        # Label lists (by, without, on, ignoring, group_left/right) and matchers name labels,
        # which may start like a metric (`hookstream_service`).
        stripped = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1()", stripped)
        stripped = re.sub(r"\{[^}]*\}", "{}", stripped)
        for ident in re.findall(r"(?<![A-Za-z0-9_:])(?:hookstream|kafka)_[a-z0-9_]+", stripped):
            if ident not in found:
                self.fail(where, f"{ident} appears in the expression but not as a metric selector")

    def check_panel(self, p, where):
        if not isinstance(p.get("title"), str) or not p["title"].strip():
            self.fail(where, "no title")
        if p.get("datasource") != DATASOURCE:
            self.fail(where, f"datasource is {json.dumps(p.get('datasource'))}, want {json.dumps(DATASOURCE)}")
        if not isinstance(p.get("description"), str) or not p["description"].strip():
            self.fail(where, "no description")
        if p.get("type") in NUMERIC_PANELS:
            unit = ((p.get("fieldConfig") or {}).get("defaults") or {}).get("unit")
            if not isinstance(unit, str) or not unit.strip():
                self.fail(where, "plots numbers but sets no fieldConfig.defaults.unit")
        targets = p.get("targets")
        if p.get("type") in NUMERIC_PANELS and not targets:
            self.fail(where, "no targets")
        refids = set()
        for j, t in enumerate(targets or []):
            tw = f"{where} target {t.get('refId', j)}"
            if t.get("refId") in refids:
                self.fail(tw, "duplicate refId")
            refids.add(t.get("refId"))
            if t.get("datasource") != DATASOURCE:
                self.fail(tw, f"datasource is {json.dumps(t.get('datasource'))}, want {json.dumps(DATASOURCE)}")
            expr = t.get("expr")
            if not isinstance(expr, str) or not expr.strip():
                self.fail(tw, "no expr")
                continue
            self.check_expr(tw, expr)

    def check_variables(self, dash):
        variables = (dash.get("templating") or {}).get("list") or []
        ds = [v for v in variables if v.get("name") == "datasource"]
        if not ds or ds[0].get("type") != "datasource" or ds[0].get("query") != "prometheus":
            self.fail("templating", "needs a variable `datasource` of type datasource with query `prometheus`")
        for v in variables:
            if v.get("type") != "query":
                continue
            where = f"variable {v.get('name')!r}"
            if v.get("datasource") != DATASOURCE:
                self.fail(where, f"datasource is {json.dumps(v.get('datasource'))}, want {json.dumps(DATASOURCE)}")
            q = v.get("query")
            if isinstance(q, dict):
                q = q.get("query")
            if not isinstance(q, str):
                self.fail(where, "query is not a string")
                continue
            m = re.fullmatch(r"\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*", q, re.S)
            if m:
                self.check_expr(where, m.group(1))
                try:
                    for sel in selectors(parse_promql(m.group(1))):
                        if sel["name"] and METRIC_RE.fullmatch(sel["name"]):
                            self.record(sel["name"], {m.group(2)})
                except PromQLError:
                    pass
            elif re.fullmatch(r"\s*label_values\(\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*", q) \
                    or re.fullmatch(r"\s*(label_names|metrics)\(.*\)\s*", q, re.S):
                pass
            else:
                qr = re.fullmatch(r"\s*query_result\((.*)\)\s*", q, re.S)
                self.check_expr(where, qr.group(1) if qr else q)

    def check_layout(self, panels, where):
        boxes = []
        for p in panels:
            gp = p.get("gridPos")
            name = f"panel {p.get('id')} ({p.get('title')!r})"
            if not isinstance(gp, dict) or not all(isinstance(gp.get(k), int) for k in "hwxy"):
                self.fail(name, "no complete gridPos")
                continue
            if gp["x"] < 0 or gp["y"] < 0 or gp["w"] <= 0 or gp["h"] <= 0 or gp["x"] + gp["w"] > 24:
                self.fail(name, f"gridPos {gp} is outside the 24-column grid")
            for other, ogp in boxes:
                if gp["x"] < ogp["x"] + ogp["w"] and ogp["x"] < gp["x"] + gp["w"] \
                        and gp["y"] < ogp["y"] + ogp["h"] and ogp["y"] < gp["y"] + gp["h"]:
                    self.fail(name, f"overlaps {other}{where}")
            boxes.append((name, gp))

    def check(self, dash):
        if not isinstance(dash, dict):
            self.fail("dashboard", "is not a JSON object")
            return
        for key in ("uid", "title"):
            if not isinstance(dash.get(key), str) or not dash[key]:
                self.fail("dashboard", f"no {key}")
        self.check_variables(dash)
        top = dash.get("panels") or []
        ids = {}
        for p in top + [c for r in top if r.get("type") == "row" for c in r.get("panels") or []]:
            pid = p.get("id")
            where = f"panel {pid} ({p.get('title')!r})"
            if not isinstance(pid, int) or isinstance(pid, bool):
                self.fail(where, "id is not an integer")
            elif pid in ids:
                self.fail(where, f"id {pid} is also used by {ids[pid]!r}")
            else:
                ids[pid] = p.get("title")
            if p.get("type") == "row":
                if not isinstance(p.get("title"), str) or not p["title"].strip():
                    self.fail(where, "row without a title")
            else:
                self.check_panel(p, where)
        self.check_layout(top, "")
        for r in top:
            if r.get("type") == "row" and r.get("collapsed"):
                self.check_layout(r.get("panels") or [], f" (inside collapsed row {r.get('title')!r})")
            elif r.get("type") == "row" and r.get("panels"):
                self.fail(f"row {r.get('id')} ({r.get('title')!r})",
                          "is expanded but holds panels (Grafana keeps those only for collapsed rows)")

    def metrics(self):
        """Normalised name -> (exported labels, target labels)."""
        buckets = {n[: -len("_bucket")] for n in self.uses if n.endswith("_bucket")}
        out = {}
        for name, labels in self.uses.items():
            base = name
            if name.endswith("_bucket"):
                base = name[: -len("_bucket")]
            else:
                for suffix in ("_sum", "_count"):
                    if name.endswith(suffix) and name[: -len(suffix)] in buckets:
                        base = name[: -len(suffix)]
            out.setdefault(base, set()).update(labels)
        return {n: (sorted(l - TARGET_LABELS), sorted(l & TARGET_LABELS)) for n, l in sorted(out.items())}


def main(argv):
    args, out_path, as_json = [], None, False
    it = iter(argv)
    for a in it:
        if a == "--metrics-out":
            out_path = next(it, None)
            if out_path is None:
                print("dashboard.py: --metrics-out needs a file", file=sys.stderr)
                return 2
        elif a == "--json":
            as_json = True
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            args.append(a)
    if len(args) != 1:
        print("usage: dashboard.py DASHBOARD.json [--metrics-out FILE] [--json]", file=sys.stderr)
        return 2
    path = args[0]
    try:
        with open(path, encoding="utf-8") as f:
            dash = json.load(f)
    except (OSError, ValueError) as e:
        print(f"dashboard.py: cannot load {path}: {e}", file=sys.stderr)
        return 2

    checker = Checker()
    checker.check(dash)
    if checker.problems:
        for p in checker.problems:
            print(f"  FAIL {path}: {p}", file=sys.stderr)
        print(f"dashboard.py: {len(checker.problems)} problem(s) in {path}", file=sys.stderr)
        return 1

    metrics = checker.metrics()
    if as_json:
        text = json.dumps({"metrics": {n: {"labels": l, "target_labels": t} for n, (l, t) in metrics.items()}},
                          indent=2) + "\n"
    else:
        text = "".join(" ".join([n] + l) + "\n" for n, (l, _) in metrics.items())
    if out_path:
        with open(out_path, "w", encoding="utf-8") as f:
            f.write(text)
        panels = sum(1 for p in dash.get("panels") or [] if p.get("type") != "row")
        print(f"{path}: OK ({panels} panels, {len(metrics)} metrics written to {out_path})")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
