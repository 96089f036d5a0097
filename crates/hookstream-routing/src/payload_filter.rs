//! Payload filters: a JSON document an endpoint carries, matched against each event's payload
//! (an extension of Svix's API, as Convoy and Hookdeck Outpost have them).
//!
//! A filter is a JSON object. Each key names a field of the payload and says what it must
//! hold; every key must hold (an implicit `$and`):
//!
//! - a plain value (string, number, boolean, null) means equality: `{"type": "card"}`. Numbers
//!   compare by value (`1e2` equals `100`). Against an array field, it means "contains":
//!   `{"tags": "vip"}` matches `{"tags": ["new", "vip"]}`;
//! - a plain array means "contains every one": `{"tags": ["a", "b"]}`;
//! - an object of fields means a nested match: `{"customer": {"tier": "gold"}}`;
//! - an object of operators applies them to the field: `{"amount": {"$gte": 100, "$lt": 500}}`.
//!
//! Operators: `$eq`, `$neq`, `$gt`, `$gte`, `$lt`, `$lte` (numbers with numbers, strings with
//! strings: ISO-8601 times compare as text), `$in`, `$nin` (an array of values; against an
//! array field, any shared element), `$startsWith`, `$endsWith` (strings), `$exist` (true:
//! present, false: absent), and `$and`, `$or` (arrays of filters), `$not` (a filter). They
//! may stand at the top too: `{"$or": [{"a": 1}, {"b": 2}]}`. A missing field fails every
//! test but `$neq`, `$nin`, `$exist: false` and `$not` of one that fails.
//!
//! Filters are bounded ([`MAX_FILTER_BYTES`], [`MAX_FILTER_NODES`], [`MAX_FILTER_DEPTH`]), so
//! matching costs at most a few hundred steps per endpoint whatever the payload; a payload is
//! parsed once per event however many endpoints filter it. A malformed filter is refused with
//! the JSON pointer of the bad part.

use std::cmp::Ordering;
use std::fmt;

use serde_json::{Map, Value};

/// The largest filter, in bytes of its JSON text.
pub const MAX_FILTER_BYTES: usize = 8 * 1024;
/// At most this many operators and fields in one filter.
pub const MAX_FILTER_NODES: usize = 256;
/// At most this deep (fields and operators nested in each other).
pub const MAX_FILTER_DEPTH: usize = 16;

/// A filter refused: where (a JSON pointer into the filter) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError {
    pub pointer: String,
    pub reason: String,
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pointer.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "at {}: {}", self.pointer, self.reason)
        }
    }
}

impl std::error::Error for FilterError {}

/// A compiled payload filter.
#[derive(Debug, Clone, PartialEq)]
pub struct PayloadFilter {
    root: Node,
    /// The filter as given (its JSON value), for storing and showing back.
    source: Value,
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    All(Vec<Node>),
    Any(Vec<Node>),
    Not(Box<Node>),
    /// Descend into an object's field and test it.
    Field(String, Box<Node>),
    Eq(Value),
    Neq(Value),
    Cmp(Ordering, bool, Value),
    In(Vec<Value>),
    Nin(Vec<Value>),
    StartsWith(String),
    EndsWith(String),
    Exist(bool),
    /// A plain array: the field is an array holding a match for each.
    ContainsAll(Vec<Node>),
}

struct Parser {
    nodes: usize,
}

impl PayloadFilter {
    /// Parses a filter from its JSON text.
    pub fn parse(text: &str) -> Result<Self, FilterError> {
        if text.len() > MAX_FILTER_BYTES {
            return Err(top(format!(
                "a filter is at most {MAX_FILTER_BYTES} bytes (limit payload_filter_bytes), this one is {}",
                text.len()
            )));
        }
        let value: Value = serde_json::from_str(text).map_err(|e| top(format!("not JSON: {e}")))?;
        Self::from_value(value)
    }

    /// Compiles a filter from a JSON value (which must be an object).
    pub fn from_value(value: Value) -> Result<Self, FilterError> {
        let size = serde_json::to_string(&value)
            .map(|s| s.len())
            .unwrap_or(usize::MAX);
        if size > MAX_FILTER_BYTES {
            return Err(top(format!(
                "a filter is at most {MAX_FILTER_BYTES} bytes (limit payload_filter_bytes), this one is {size}"
            )));
        }
        let Value::Object(map) = &value else {
            return Err(top("a filter must be a JSON object".into()));
        };
        let mut parser = Parser { nodes: 0 };
        let root = parser.object(map, "", 1)?;
        Ok(Self { root, source: value })
    }

    /// The filter as given.
    pub fn source(&self) -> &Value {
        &self.source
    }

    /// Whether `payload` passes.
    pub fn matches(&self, payload: &Value) -> bool {
        eval(&self.root, Some(payload))
    }
}

fn top(reason: String) -> FilterError {
    FilterError {
        pointer: String::new(),
        reason,
    }
}

/// A JSON pointer segment (RFC 6901 escaping).
fn join(pointer: &str, key: &str) -> String {
    format!("{pointer}/{}", key.replace('~', "~0").replace('/', "~1"))
}

impl Parser {
    fn count(&mut self, pointer: &str, depth: usize) -> Result<(), FilterError> {
        self.nodes += 1;
        if self.nodes > MAX_FILTER_NODES {
            return Err(FilterError {
                pointer: pointer.into(),
                reason: format!("a filter has at most {MAX_FILTER_NODES} fields and operators (limit payload_filter_nodes)"),
            });
        }
        if depth > MAX_FILTER_DEPTH {
            return Err(FilterError {
                pointer: pointer.into(),
                reason: format!(
                    "a filter nests at most {MAX_FILTER_DEPTH} levels (limit payload_filter_depth)"
                ),
            });
        }
        Ok(())
    }

    /// An object: operators on the current value and fields below it, all of which must hold.
    fn object(&mut self, map: &Map<String, Value>, pointer: &str, depth: usize) -> Result<Node, FilterError> {
        let mut all = Vec::with_capacity(map.len());
        for (key, value) in map {
            let here = join(pointer, key);
            self.count(&here, depth)?;
            let node = if let Some(op) = key.strip_prefix('$') {
                self.operator(op, value, &here, depth)?
            } else {
                Node::Field(key.clone(), Box::new(self.value(value, &here, depth + 1)?))
            };
            all.push(node);
        }
        Ok(if all.len() == 1 {
            all.pop().expect("one")
        } else {
            Node::All(all)
        })
    }

    /// What a field's value must be.
    fn value(&mut self, value: &Value, pointer: &str, depth: usize) -> Result<Node, FilterError> {
        match value {
            Value::Object(map) => {
                if map.is_empty() {
                    return Err(FilterError {
                        pointer: pointer.into(),
                        reason: "an empty object matches nothing useful: use {\"$exist\": true}".into(),
                    });
                }
                self.object(map, pointer, depth)
            }
            Value::Array(items) => {
                let mut each = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let here = join(pointer, &i.to_string());
                    self.count(&here, depth)?;
                    each.push(self.value(item, &here, depth + 1)?);
                }
                Ok(Node::ContainsAll(each))
            }
            scalar => Ok(Node::Eq(scalar.clone())),
        }
    }

    fn operator(
        &mut self,
        op: &str,
        value: &Value,
        pointer: &str,
        depth: usize,
    ) -> Result<Node, FilterError> {
        let bad = |reason: &str| FilterError {
            pointer: pointer.into(),
            reason: reason.into(),
        };
        let list = |value: &Value| -> Result<Vec<Value>, FilterError> {
            match value {
                Value::Array(items) if items.iter().all(|v| !v.is_object() && !v.is_array()) => {
                    Ok(items.clone())
                }
                _ => Err(bad("must be an array of plain values")),
            }
        };
        let filters = |this: &mut Self, value: &Value| -> Result<Vec<Node>, FilterError> {
            let Value::Array(items) = value else {
                return Err(bad("must be an array of filters"));
            };
            if items.is_empty() {
                return Err(bad("must not be empty"));
            }
            items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    let here = join(pointer, &i.to_string());
                    this.count(&here, depth + 1)?;
                    match item {
                        Value::Object(map) if !map.is_empty() => this.object(map, &here, depth + 2),
                        _ => Err(FilterError {
                            pointer: here,
                            reason: "must be a non-empty object".into(),
                        }),
                    }
                })
                .collect()
        };
        let ordered = |value: &Value| -> Result<Value, FilterError> {
            match value {
                Value::Number(_) | Value::String(_) => Ok(value.clone()),
                _ => Err(bad("must be a number or a string")),
            }
        };
        let text = |value: &Value| -> Result<String, FilterError> {
            match value {
                Value::String(s) => Ok(s.clone()),
                _ => Err(bad("must be a string")),
            }
        };
        Ok(match op {
            "eq" => Node::Eq(value.clone()),
            "neq" => Node::Neq(value.clone()),
            "gt" => Node::Cmp(Ordering::Greater, false, ordered(value)?),
            "gte" => Node::Cmp(Ordering::Greater, true, ordered(value)?),
            "lt" => Node::Cmp(Ordering::Less, false, ordered(value)?),
            "lte" => Node::Cmp(Ordering::Less, true, ordered(value)?),
            "in" => Node::In(list(value)?),
            "nin" => Node::Nin(list(value)?),
            "startsWith" => Node::StartsWith(text(value)?),
            "endsWith" => Node::EndsWith(text(value)?),
            "exist" => match value {
                Value::Bool(b) => Node::Exist(*b),
                _ => return Err(bad("must be true or false")),
            },
            "and" => Node::All(filters(self, value)?),
            "or" => Node::Any(filters(self, value)?),
            "not" => match value {
                Value::Object(map) if !map.is_empty() => Node::Not(Box::new(self.object(map, pointer, depth + 1)?)),
                _ => return Err(bad("must be a non-empty object")),
            },
            other => {
                return Err(bad(&format!(
                    "unknown operator ${other}: use $eq, $neq, $gt, $gte, $lt, $lte, $in, $nin, $startsWith, $endsWith, $exist, $and, $or or $not"
                )))
            }
        })
    }
}

fn eval(node: &Node, v: Option<&Value>) -> bool {
    match node {
        Node::All(nodes) => nodes.iter().all(|n| eval(n, v)),
        Node::Any(nodes) => nodes.iter().any(|n| eval(n, v)),
        Node::Not(n) => !eval(n, v),
        Node::Field(key, n) => eval(n, v.and_then(|v| v.as_object()).and_then(|o| o.get(key))),
        Node::Eq(want) => v.is_some_and(|v| equal_or_contains(v, want)),
        Node::Neq(want) => !v.is_some_and(|v| equal_or_contains(v, want)),
        Node::Cmp(dir, or_equal, bound) => v.is_some_and(|v| match compare(v, bound) {
            Some(Ordering::Equal) => *or_equal,
            Some(o) => o == *dir,
            None => false,
        }),
        Node::In(set) => v.is_some_and(|v| set.iter().any(|w| equal_or_contains(v, w))),
        Node::Nin(set) => !v.is_some_and(|v| set.iter().any(|w| equal_or_contains(v, w))),
        Node::StartsWith(p) => v
            .and_then(Value::as_str)
            .is_some_and(|s| s.starts_with(p.as_str())),
        Node::EndsWith(p) => v.and_then(Value::as_str).is_some_and(|s| s.ends_with(p.as_str())),
        Node::Exist(want) => v.is_some() == *want,
        Node::ContainsAll(each) => match v {
            Some(Value::Array(items)) => each.iter().all(|n| items.iter().any(|item| eval(n, Some(item)))),
            _ => false,
        },
    }
}

/// Equality, or, for an array field and a plain wanted value, membership.
fn equal_or_contains(v: &Value, want: &Value) -> bool {
    equal(v, want)
        || matches!(v, Value::Array(items) if !want.is_array() && items.iter().any(|i| equal(i, want)))
}

/// Deep equality with numbers compared by value.
fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(_), Value::Number(_)) => compare(a, b) == Some(Ordering::Equal),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| equal(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, a)| y.get(k).is_some_and(|b| equal(a, b)))
        }
        _ => a == b,
    }
}

fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                return Some(x.cmp(&y));
            }
            if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
                return Some(x.cmp(&y));
            }
            x.as_f64()?.partial_cmp(&y.as_f64()?)
        }
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(filter: Value, payload: Value) -> bool {
        PayloadFilter::from_value(filter).unwrap().matches(&payload)
    }

    #[test]
    fn plain_values_nested_objects_and_arrays() {
        let p = json!({"type": "card", "amount": 1e2, "customer": {"tier": "gold", "id": 7},
                       "tags": ["new", "vip"], "flag": null});
        assert!(check(json!({"type": "card"}), p.clone()));
        assert!(!check(json!({"type": "bank"}), p.clone()));
        assert!(check(json!({"amount": 100}), p.clone()));
        assert!(check(json!({"customer": {"tier": "gold"}}), p.clone()));
        assert!(!check(json!({"customer": {"tier": "gold", "id": 8}}), p.clone()));
        assert!(check(json!({"tags": "vip"}), p.clone()));
        assert!(check(json!({"tags": ["vip", "new"]}), p.clone()));
        assert!(!check(json!({"tags": ["vip", "old"]}), p.clone()));
        assert!(check(json!({"flag": null}), p.clone()));
        assert!(!check(json!({"missing": null}), p.clone()));
    }

    #[test]
    fn every_operator() {
        let p = json!({"n": 5, "s": "order.created", "at": "2026-12-04T10:00:00Z", "tags": ["a", "b"]});
        let yes = [
            json!({"n": {"$eq": 5}}),
            json!({"n": {"$neq": 6}}),
            json!({"n": {"$gt": 4, "$gte": 5, "$lt": 6, "$lte": 5}}),
            json!({"n": {"$in": [1, 5]}}),
            json!({"n": {"$nin": [1, 2]}}),
            json!({"s": {"$startsWith": "order.", "$endsWith": "created"}}),
            json!({"at": {"$gte": "2026-12-01", "$lt": "2026-12-05"}}),
            json!({"n": {"$exist": true}, "zz": {"$exist": false}}),
            json!({"$or": [{"n": 1}, {"s": "order.created"}]}),
            json!({"$and": [{"n": 5}, {"tags": "a"}]}),
            json!({"$not": {"n": 6}}),
            json!({"n": {"$not": {"$gt": 10}}}),
            json!({"tags": {"$in": ["b", "z"]}}),
            json!({"zz": {"$neq": 1}}),
            json!({"zz": {"$nin": [1]}}),
        ];
        for f in yes {
            assert!(check(f.clone(), p.clone()), "{f}");
        }
        let no = [
            json!({"n": {"$gt": 5}}),
            json!({"n": {"$lt": "9"}}),
            json!({"n": {"$in": [1, 2]}}),
            json!({"s": {"$startsWith": "user."}}),
            json!({"zz": {"$gt": 1}}),
            json!({"zz": {"$exist": true}}),
            json!({"$or": [{"n": 1}, {"n": 2}]}),
            json!({"$not": {"n": 5}}),
            json!({"tags": {"$nin": ["a"]}}),
        ];
        for f in no {
            assert!(!check(f.clone(), p.clone()), "{f}");
        }
    }

    #[test]
    fn malformed_filters_point_at_their_bad_part() {
        let err = |f: Value| PayloadFilter::from_value(f).unwrap_err();
        assert_eq!(err(json!([1])).pointer, "");
        let e = err(json!({"a": {"b": {"$gt": true}}}));
        assert_eq!(e.pointer, "/a/b/$gt");
        assert!(e.reason.contains("number or a string"));
        let e = err(json!({"a": {"$regex": "x"}}));
        assert_eq!(e.pointer, "/a/$regex");
        assert!(e.reason.contains("unknown operator"));
        assert_eq!(err(json!({"$or": [{"a": 1}, 2]})).pointer, "/$or/1");
        assert_eq!(err(json!({"a/b": {"$in": 1}})).pointer, "/a~1b/$in");
        assert!(err(json!({"a": {}})).reason.contains("empty object"));
        assert!(PayloadFilter::parse("{").unwrap_err().reason.contains("not JSON"));
    }

    #[test]
    fn filters_are_bounded() {
        let mut deep = json!({"$exist": true});
        for _ in 0..20 {
            deep = json!({ "a": deep });
        }
        assert!(PayloadFilter::from_value(deep)
            .unwrap_err()
            .reason
            .contains("nests at most"));
        let wide: Map<String, Value> = (0..300).map(|i| (format!("k{i}"), json!(i))).collect();
        assert!(PayloadFilter::from_value(Value::Object(wide))
            .unwrap_err()
            .reason
            .contains("at most 256"));
        let big = format!("{{\"a\": \"{}\"}}", "x".repeat(MAX_FILTER_BYTES));
        assert!(PayloadFilter::parse(&big)
            .unwrap_err()
            .reason
            .contains("at most 8192 bytes"));
    }
}
