//! Svix's pagination: `limit` (1 to 250, default 50) and `iterator` in; `data`, `iterator`,
//! `prevIterator` and `done` out. Pages are keyset pages over a unique, insert-ordered key (ids
//! are UUIDv7), so concurrent inserts never shift a page boundary: a walk with `iterator`
//! sees no item twice and misses none that existed when it started. `iterator` is the last
//! item's key; `prevIterator` is `-` and the first item's key, and names the page before.

use utoipa::ToSchema;

use crate::error::{ApiError, ApiResult};
use crate::models::ListResponse;

pub const DEFAULT_LIMIT: u32 = 50;
pub const MAX_LIMIT: u32 = 250;

/// A page asked for.
#[derive(Debug, Clone)]
pub struct PageReq {
    pub limit: i64,
    /// The key after which (in the list's order) the page starts.
    pub cursor: Option<String>,
    /// A `prevIterator`: the page before `cursor`, read in the opposite order.
    pub backwards: bool,
}

impl PageReq {
    pub fn new(limit: Option<u32>, iterator: Option<String>) -> ApiResult<Self> {
        let limit = limit.unwrap_or(DEFAULT_LIMIT);
        if limit == 0 {
            return Err(ApiError::field(&["query", "limit"], "limit must be at least 1"));
        }
        let (cursor, backwards) = match iterator.filter(|i| !i.is_empty()) {
            Some(i) => match i.strip_prefix('-') {
                Some(rest) => (Some(rest.to_string()), true),
                None => (Some(i), false),
            },
            None => (None, false),
        };
        Ok(Self {
            limit: i64::from(limit.min(MAX_LIMIT)),
            cursor,
            backwards,
        })
    }

    /// Rows to fetch: one more than the page, to know whether more follow.
    pub fn fetch(&self) -> i64 {
        self.limit + 1
    }

    /// Whether to read in descending key order, for a list whose natural order is `descending`.
    pub fn descending(&self, descending: bool) -> bool {
        descending != self.backwards
    }

    /// The cursor parsed by `parse`, or a 422 naming `iterator`.
    pub fn cursor_as<T>(&self, parse: impl Fn(&str) -> Option<T>) -> ApiResult<Option<T>> {
        match &self.cursor {
            None => Ok(None),
            Some(c) => parse(c)
                .map(Some)
                .ok_or_else(|| ApiError::field(&["query", "iterator"], "not an iterator of this list")),
        }
    }

    /// The page from rows fetched with `fetch()` rows in `descending(..)` order.
    pub fn finish<T: ToSchema>(&self, mut rows: Vec<T>, key: impl Fn(&T) -> String) -> ListResponse<T> {
        let more = rows.len() as i64 > self.limit;
        rows.truncate(self.limit as usize);
        if self.backwards {
            rows.reverse();
        }
        let iterator = rows.last().map(&key).or_else(|| {
            // An empty page: keep the position, so a poller continues from it.
            (!self.backwards).then(|| self.cursor.clone()).flatten()
        });
        let prev_iterator = rows.first().map(|r| format!("-{}", key(r)));
        let done = if self.backwards { rows.is_empty() } else { !more };
        ListResponse {
            data: rows,
            iterator,
            prev_iterator,
            done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_forward_and_back() {
        let req = PageReq::new(Some(2), None).unwrap();
        let page = req.finish(vec![1u32, 2, 3], |n| n.to_string());
        assert_eq!(page.data, [1, 2]);
        assert_eq!(page.iterator.as_deref(), Some("2"));
        assert_eq!(page.prev_iterator.as_deref(), Some("-1"));
        assert!(!page.done);
        let req = PageReq::new(Some(2), Some("-3".into())).unwrap();
        assert!(req.backwards && req.cursor.as_deref() == Some("3"));
        // Rows read backwards from 3: 2, 1 (and no third).
        let page = req.finish(vec![2u32, 1], |n| n.to_string());
        assert_eq!(page.data, [1, 2]);
        let last = PageReq::new(Some(5), Some("3".into()))
            .unwrap()
            .finish(Vec::<u32>::new(), |n| n.to_string());
        assert!(last.done);
        assert_eq!(
            last.iterator.as_deref(),
            Some("3"),
            "an empty page keeps the position"
        );
        assert!(PageReq::new(Some(0), None).is_err());
        assert_eq!(PageReq::new(Some(1000), None).unwrap().limit, 250);
    }
}
