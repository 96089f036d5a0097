//! Loss and duplicates counted by id: what a read-back saw against the ids that were
//! committed. Offsets and record counts cannot tell a duplicate from a missing record (one of
//! each adds up to "nothing lost"); ids can.

use std::collections::HashSet;
use std::hash::Hash;

/// What a read-back found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Records read back.
    pub records: usize,
    /// Distinct ids among them.
    pub distinct: usize,
    /// Committed ids never read back.
    pub lost: usize,
    /// Records beyond one per id (`records - distinct`).
    pub duplicates: usize,
}

/// Counts `seen` (one id per record read back, repeats included) against `committed`.
pub fn tally<I: Eq + Hash>(committed: &HashSet<I>, seen: impl IntoIterator<Item = I>) -> Tally {
    let mut records = 0;
    let mut distinct = HashSet::new();
    for id in seen {
        records += 1;
        distinct.insert(id);
    }
    Tally {
        records,
        distinct: distinct.len(),
        lost: committed.iter().filter(|id| !distinct.contains(*id)).count(),
        duplicates: records - distinct.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duplicate_does_not_hide_a_loss() {
        let committed: HashSet<u32> = (1..=5).collect();
        // 4 is missing and 2 came twice: five records for five rows, as many as the offsets
        // say, yet one row is lost.
        let t = tally(&committed, [1, 2, 2, 3, 5]);
        assert_eq!(
            t.records,
            committed.len(),
            "the record count says nothing was lost"
        );
        assert_eq!(
            t,
            Tally {
                records: 5,
                distinct: 4,
                lost: 1,
                duplicates: 1,
            }
        );
    }

    #[test]
    fn everything_once_is_nothing_lost() {
        let committed: HashSet<&str> = ["a", "b"].into();
        let t = tally(&committed, ["b", "a"]);
        assert_eq!((t.lost, t.duplicates, t.distinct), (0, 0, 2));
        let t = tally(&committed, []);
        assert_eq!((t.records, t.lost), (0, 2));
    }

    #[test]
    fn an_id_never_committed_is_not_a_committed_one_seen() {
        let committed: HashSet<u32> = [1, 2].into();
        let t = tally(&committed, [1, 3]);
        assert_eq!((t.lost, t.distinct, t.duplicates), (1, 2, 0));
    }
}
