//! `event_filter`: endpoint event-type filters (`a.b`, `a.*`, `*`).
//!
//! Input: a first line of `,`-separated patterns, then one event type per line.

use hookstream_store::filter::EventFilter;

use crate::input::Input;

pub fn event_filter(data: &[u8]) {
    let mut input = Input::new(data);
    let patterns_line = input.text_field();
    let types_text = String::from_utf8_lossy(input.rest());
    let patterns: Vec<&str> = patterns_line.split(',').collect();
    let types: Vec<&str> = types_text.split('\n').collect();

    // The filter as a whole: validation may fail, matching must not panic, and a set of
    // patterns matches exactly what one of its patterns matches.
    let whole = EventFilter::new(&patterns);
    let singles: Vec<Option<EventFilter>> = patterns.iter().map(|p| EventFilter::new(&[p]).ok()).collect();
    match &whole {
        Ok(filter) => {
            let kept: Vec<&EventFilter> = singles
                .iter()
                .flatten()
                .filter(|f| !f.patterns().is_empty())
                .collect();
            for t in &types {
                let any = kept.is_empty() || kept.iter().any(|f| f.matches(t));
                assert_eq!(filter.matches(t), any, "{patterns:?} on {t:?}");
            }
        }
        Err(_) => {
            assert!(
                singles.iter().any(Option::is_none),
                "a set fails validation only because one of its patterns does"
            );
        }
    }

    for (pattern, single) in patterns.iter().zip(&singles) {
        let Some(single) = single else {
            continue; // invalid: only required not to panic, which it did not
        };
        let p = pattern.trim();
        if p.is_empty() {
            assert!(single.patterns().is_empty(), "blank patterns are skipped");
            continue;
        }
        assert!(single.matches(p), "an exact pattern matches itself: {p:?}");
        if p == "*" || p.ends_with(".*") {
            continue;
        }
        // `p.*` is valid and matches every type under `p.`, but not `p` itself.
        let wildcard = EventFilter::new(&[format!("{p}.*")])
            .unwrap_or_else(|e| panic!("{p:?} is valid, so {p:?}.* is: {e}"));
        assert!(wildcard.matches(&format!("{p}.x")), "{p}.* matches {p}.x");
        assert!(!wildcard.matches(p), "{p}.* does not match {p}");
        for t in types.iter().filter(|t| !t.is_empty()) {
            assert!(wildcard.matches(&format!("{p}.{t}")), "{p}.* matches {p}.{t}");
        }
    }
}
