//! Event-type filters of an endpoint: `order.created` (exact), `order.*` (every type under
//! `order.`, at any depth), `*` (everything). An endpoint with no filter receives everything.

/// A compiled set of event-type patterns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventFilter {
    patterns: Vec<String>,
}

impl EventFilter {
    /// Validates and compiles patterns; returns a message naming the bad one.
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> Result<Self, String> {
        let mut out = Vec::new();
        for p in patterns {
            let p = p.as_ref().trim();
            if p.is_empty() {
                continue;
            }
            let body = p.strip_suffix(".*").unwrap_or(p);
            let valid = p == "*"
                || (!body.is_empty()
                    && body.split('.').all(|seg| {
                        !seg.is_empty()
                            && seg
                                .chars()
                                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                    }));
            if !valid {
                return Err(format!(
                    "invalid event-type filter {p:?}: use `a.b`, `a.*` or `*`"
                ));
            }
            out.push(p.to_string());
        }
        Ok(Self { patterns: out })
    }

    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    pub fn matches(&self, event_type: &str) -> bool {
        if self.patterns.is_empty() {
            return true;
        }
        self.patterns.iter().any(|p| {
            if p == "*" {
                return true;
            }
            match p.strip_suffix(".*") {
                Some(prefix) => {
                    event_type.len() > prefix.len() + 1
                        && event_type.starts_with(prefix)
                        && event_type.as_bytes()[prefix.len()] == b'.'
                }
                None => p == event_type,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_wildcard_and_everything() {
        let f = EventFilter::new(&["order.*", "user.created"]).unwrap();
        assert!(f.matches("order.created"));
        assert!(f.matches("order.item.added"));
        assert!(!f.matches("order"));
        assert!(!f.matches("orders.created"));
        assert!(f.matches("user.created"));
        assert!(!f.matches("user.deleted"));
        assert!(EventFilter::new(&["*"]).unwrap().matches("anything.at.all"));
        assert!(EventFilter::new::<&str>(&[]).unwrap().matches("x"));
    }

    #[test]
    fn rejects_malformed_patterns() {
        for bad in ["order.", ".x", "a..b", "a.*.b", "a b", "**"] {
            assert!(EventFilter::new(&[bad]).is_err(), "{bad}");
        }
    }
}
