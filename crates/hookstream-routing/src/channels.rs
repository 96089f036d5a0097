//! Channels, Svix's second routing dimension beside event types.
//!
//! The rule (Svix's channels documentation, written out in docs/api.md):
//!
//! | endpoint channels | message channels | delivered |
//! | --- | --- | --- |
//! | none | none or any | yes (an endpoint without channels receives every message) |
//! | some | none | no |
//! | some | some | only when they share at least one |
//!
//! Names are 1 to 128 characters of letters, digits, `-`, `_`, `.` and `:`, compared exactly.

/// At most this many channels on a message or an endpoint.
pub const MAX_CHANNELS: usize = 10;
/// At most this many tags on a message.
pub const MAX_TAGS: usize = 5;
/// The longest channel or tag name.
pub const MAX_NAME_LEN: usize = 128;

/// Whether an endpoint listening on `endpoint` gets a message sent to `message`.
pub fn deliverable(endpoint: &[String], message: &[String]) -> bool {
    endpoint.is_empty() || message.iter().any(|c| endpoint.contains(c))
}

/// Checks a list of channel names: the message names the first bad one.
pub fn check_channels<S: AsRef<str>>(names: &[S]) -> Result<Vec<String>, String> {
    check_names(names, MAX_CHANNELS, "channel", |c| {
        c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':')
    })
}

/// Checks a list of tags (Svix's pattern: letters, digits, `-_./\#`).
pub fn check_tags<S: AsRef<str>>(names: &[S]) -> Result<Vec<String>, String> {
    check_names(names, MAX_TAGS, "tag", |c| {
        c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | '\\' | '#')
    })
}

fn check_names<S: AsRef<str>>(
    names: &[S],
    max: usize,
    what: &str,
    allowed: impl Fn(char) -> bool,
) -> Result<Vec<String>, String> {
    if names.len() > max {
        return Err(format!(
            "at most {max} {what}s (limit {what}s_max), got {}",
            names.len()
        ));
    }
    let mut out: Vec<String> = Vec::with_capacity(names.len());
    for n in names {
        let n = n.as_ref();
        if n.is_empty() || n.len() > MAX_NAME_LEN || !n.chars().all(&allowed) {
            return Err(format!(
                "invalid {what} {:?}: 1 to {MAX_NAME_LEN} letters, digits or {}",
                n.chars().take(MAX_NAME_LEN).collect::<String>(),
                if what == "tag" { "-_./\\#" } else { "-_.:" }
            ));
        }
        if !out.iter().any(|o| o == n) {
            out.push(n.to_string());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_rule_of_svix_channels() {
        assert!(deliverable(&[], &[]));
        assert!(deliverable(&[], &v(&["a"])));
        assert!(!deliverable(&v(&["a"]), &[]));
        assert!(deliverable(&v(&["a"]), &v(&["a"])));
        assert!(!deliverable(&v(&["a"]), &v(&["b"])));
        assert!(deliverable(&v(&["a", "b"]), &v(&["c", "b"])));
    }

    #[test]
    fn names_are_checked_and_deduplicated() {
        assert_eq!(check_channels(&["a", "b:c", "a"]).unwrap(), v(&["a", "b:c"]));
        assert!(check_channels(&["a b"]).unwrap_err().contains("invalid channel"));
        assert!(check_channels(&[""]).is_err());
        assert!(check_channels(&["x".repeat(129)]).is_err());
        let many: Vec<String> = (0..11).map(|i| i.to_string()).collect();
        assert!(check_channels(&many).unwrap_err().contains("at most 10"));
        assert_eq!(check_tags(&["user/1", "#x"]).unwrap(), v(&["user/1", "#x"]));
        assert!(check_tags(&["a:b"]).is_err());
    }
}
