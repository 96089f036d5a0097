//! The connect-time half of the address policy (invariant 6).
//!
//! The check runs on the addresses a host name actually resolves to, inside the resolver the
//! HTTP client connects with, so a name that resolves (or re-resolves, DNS rebinding) to a
//! forbidden address is refused at connect time. IP-literal URLs never reach a resolver and
//! are checked before the request by `hookstream_egress::validate_endpoint_url`. Which
//! addresses are forbidden is `hookstream_egress::policy`'s business.

use std::net::SocketAddr;
use std::sync::Arc;

pub use hookstream_egress::{is_forbidden, AddressPolicy};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Refused because the destination address is not public.
#[derive(Debug, Clone, thiserror::Error)]
#[error("destination {host} resolves only to forbidden addresses ({addrs})")]
pub struct SsrfBlocked {
    pub host: String,
    /// Each refused address and the range that refused it.
    pub addrs: String,
}

/// A resolver for the HTTP client that drops forbidden addresses and fails when none is left.
#[derive(Debug, Clone)]
pub struct GuardedResolver {
    policy: Arc<AddressPolicy>,
}

impl GuardedResolver {
    pub fn new(policy: Arc<AddressPolicy>) -> Self {
        Self { policy }
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        Box::pin(async move {
            let host = name.as_str().to_string();
            let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if resolved.is_empty() {
                // Nothing was refused: a transient DNS answer, not a policy decision.
                let e = std::io::Error::new(std::io::ErrorKind::NotFound, "no address found");
                return Err(Box::new(e) as Box<dyn std::error::Error + Send + Sync>);
            }
            let mut ok = Vec::new();
            let mut refused = Vec::new();
            for addr in resolved {
                match policy.check(addr.ip()) {
                    Ok(()) => ok.push(addr),
                    Err(why) => refused.push(format!("{} in {why}", addr.ip())),
                }
            }
            if ok.is_empty() {
                let addrs = refused.join(", ");
                return Err(Box::new(SsrfBlocked { host, addrs }) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(ok.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// The policy moved to `hookstream-egress`; these are the addresses callers of the old
    /// `ssrf` module relied on, through the re-exports.
    #[test]
    fn refuses_every_non_public_range() {
        for s in [
            "127.0.0.1",
            "127.1.2.3",
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.100.100.200",
            "0.0.0.0",
            "0.1.2.3",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fc00::1",
            "fd00:ec2::254",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a00:1",
            "2002:7f00:1::",
            "::127.0.0.1",
            "2001:db8::1",
            "ff02::1",
        ] {
            assert!(is_forbidden(ip(s)), "{s} must be refused");
        }
    }

    #[test]
    fn permits_public_addresses() {
        for s in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:1.1.1.1",
            "64:ff9b::101:101",
        ] {
            assert!(!is_forbidden(ip(s)), "{s} is public");
        }
    }

    #[test]
    fn allow_list_is_the_only_way_around() {
        let policy = AddressPolicy::new(vec!["127.0.0.0/8".parse().unwrap()]);
        assert!(policy.permits(ip("127.0.0.1")));
        assert!(
            policy.permits(ip("::ffff:127.0.0.1")),
            "mapped form follows the v4 allow-list"
        );
        assert!(!policy.permits(ip("10.0.0.1")));
        assert!(!policy.permits(ip("::1")));
        assert!(!AddressPolicy::default().permits(ip("127.0.0.1")));
    }
}
