//! Several runs of a scenario merged into one report: the medians, field by field.

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// Medians of the numbers of several runs' reports, field by field (nested objects too);
/// non-numeric fields come from the first run. The runs themselves are kept under `runs`.
pub fn medians(reports: Vec<serde_json::Value>) -> serde_json::Value {
    fn merge(values: &[&serde_json::Value]) -> serde_json::Value {
        let first = values[0];
        match first {
            serde_json::Value::Number(_) => {
                let nums: Vec<f64> = values.iter().filter_map(|v| v.as_f64()).collect();
                median(nums)
                    .map(serde_json::Value::from)
                    .unwrap_or(serde_json::Value::Null)
            }
            serde_json::Value::Object(map) => {
                let mut out = serde_json::Map::new();
                for (k, v) in map {
                    let same: Vec<&serde_json::Value> = values.iter().filter_map(|r| r.get(k)).collect();
                    out.insert(
                        k.clone(),
                        if same.len() == values.len() {
                            merge(&same)
                        } else {
                            v.clone()
                        },
                    );
                }
                serde_json::Value::Object(out)
            }
            // Lists of the same length (e.g. one entry per relay count) merge entry by entry;
            // lists whose length varies between runs (a ladder that stopped earlier) come
            // from the first run.
            serde_json::Value::Array(items)
                if values
                    .iter()
                    .all(|v| v.as_array().is_some_and(|a| a.len() == items.len())) =>
            {
                let merged = (0..items.len())
                    .map(|i| {
                        let column: Vec<&serde_json::Value> = values.iter().map(|v| &v[i]).collect();
                        merge(&column)
                    })
                    .collect();
                serde_json::Value::Array(merged)
            }
            other => other.clone(),
        }
    }
    let refs: Vec<&serde_json::Value> = reports.iter().collect();
    let mut out = merge(&refs);
    out["median_of_runs"] = serde_json::Value::from(reports.len());
    out["runs"] = serde_json::Value::Array(reports);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_field_by_field() {
        let runs = vec![
            serde_json::json!({"scenario": "max", "delivered": 10, "latency_ms": {"p99": 3.0}}),
            serde_json::json!({"scenario": "max", "delivered": 30, "latency_ms": {"p99": 1.0}}),
            serde_json::json!({"scenario": "max", "delivered": 20, "latency_ms": {"p99": 2.0}}),
        ];
        let m = medians(runs);
        assert_eq!(m["delivered"], 20.0);
        let lists = medians(vec![
            serde_json::json!({"t": [{"n": 1}, {"n": 5}], "ladder": [1]}),
            serde_json::json!({"t": [{"n": 3}, {"n": 4}], "ladder": [2, 3]}),
            serde_json::json!({"t": [{"n": 2}, {"n": 6}], "ladder": [4]}),
        ]);
        assert_eq!(lists["t"][0]["n"], 2.0);
        assert_eq!(lists["t"][1]["n"], 5.0);
        assert_eq!(
            lists["ladder"],
            serde_json::json!([1]),
            "lengths differ: the first run's"
        );
        assert_eq!(m["latency_ms"]["p99"], 2.0);
        assert_eq!(m["scenario"], "max");
        assert_eq!(m["runs"].as_array().map(Vec::len), Some(3));
    }
}
