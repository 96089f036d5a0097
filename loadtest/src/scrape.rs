//! The services' Prometheus metrics as the relay scenario reads them: one page fetched over
//! plain HTTP, and the quantiles of a histogram on it.

/// Fetches a Prometheus text page over plain HTTP (the services' admin listener).
pub fn metrics_page(addr: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// Quantiles (bucket upper bounds, in ms) of a Prometheus histogram named `name`.
pub fn histogram_quantiles(page: &str, name: &str) -> Option<(f64, f64, f64, u64)> {
    let prefix = format!("{name}_bucket{{le=\"");
    let mut buckets: Vec<(f64, u64)> = page
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|rest| {
            let (le, count) = rest.split_once("\"} ")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, count.trim().parse().ok()?))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last()?.1;
    if total == 0 {
        return None;
    }
    let q = |q: f64| {
        let rank = (q * total as f64).ceil() as u64;
        buckets
            .iter()
            .find(|(_, c)| *c >= rank)
            .map(|(le, _)| le * 1000.0)
            .unwrap_or(f64::INFINITY)
    };
    Some((q(0.5), q(0.9), q(0.99), total))
}
