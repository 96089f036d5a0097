//! Which addresses a delivery may connect to (invariant 6).
//!
//! The check runs on the addresses a host name actually resolves to, inside the resolver the
//! HTTP client connects with, so a name that resolves (or re-resolves, DNS rebinding) to a
//! private address is refused at connect time. IP-literal URLs never reach a resolver and are
//! checked before the request, in whatever notation the URL parser accepted
//! (`0x7f.1`, `2130706433`, `[::ffff:127.0.0.1]` all parse to the address they mean).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Refused because the destination address is not public.
#[derive(Debug, Clone, thiserror::Error)]
#[error("destination {host} resolves only to forbidden addresses ({addrs})")]
pub struct SsrfBlocked {
    pub host: String,
    pub addrs: String,
}

/// The allow-list; everything not public and not allow-listed is refused.
#[derive(Debug, Clone, Default)]
pub struct AddressPolicy {
    allow: Vec<IpNet>,
}

impl AddressPolicy {
    pub fn new(allow: Vec<IpNet>) -> Self {
        Self { allow }
    }

    pub fn permits(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.allow.iter().any(|net| net.contains(&ip)) || !is_forbidden(ip)
    }
}

/// IPv4-mapped IPv6 (`::ffff:a.b.c.d`) is the IPv4 address it carries.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// Private, loopback, link-local (cloud metadata), CGNAT, unique-local, multicast, reserved
/// and documentation ranges, and IPv6 forms that embed an IPv4 address we would refuse.
pub fn is_forbidden(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => forbidden_v6(v6),
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_unspecified()
        || a == 0                                   // 0.0.0.0/8 "this network"
        || ip.is_loopback()                         // 127.0.0.0/8
        || ip.is_private()                          // 10/8, 172.16/12, 192.168/16
        || ip.is_link_local()                       // 169.254/16, incl. 169.254.169.254 metadata
        || (a == 100 && (64..128).contains(&b))     // 100.64/10 CGNAT (and 100.100.100.200 metadata)
        || (a == 192 && b == 0 && c == 0)           // 192.0.0/24 IETF protocol assignments
        || (a == 192 && b == 0 && c == 2)           // TEST-NET-1
        || (a == 198 && (b & 0xfe) == 18)           // 198.18/15 benchmarking
        || (a == 198 && b == 51 && c == 100)        // TEST-NET-2
        || (a == 203 && b == 0 && c == 113)         // TEST-NET-3
        || ip.is_multicast()                        // 224/4
        || a >= 240 // 240/4 reserved, broadcast
}

fn forbidden_v6(ip: Ipv6Addr) -> bool {
    let seg = ip.segments();
    let embedded_v4 = |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    ip.is_unspecified()
        || ip.is_loopback()
        || (seg[0] & 0xfe00) == 0xfc00              // fc00::/7 unique local (incl. fd00:ec2::254)
        || (seg[0] & 0xffc0) == 0xfe80              // fe80::/10 link local
        || (seg[0] & 0xffc0) == 0xfec0              // fec0::/10 site local (deprecated)
        || (seg[0] & 0xff00) == 0xff00              // multicast
        || (seg[0] == 0x2001 && seg[1] == 0x0db8)   // documentation
        || (seg[0] == 0x2001 && seg[1] == 0)        // Teredo tunnels to anywhere
        || (seg[0..6] == [0, 0, 0, 0, 0, 0])        // ::a.b.c.d, IPv4-compatible (deprecated)
        || (seg[0] == 0x0064 && seg[1] == 0xff9b && forbidden_v4(embedded_v4(seg[6], seg[7]))) // NAT64
        || (seg[0] == 0x2002 && forbidden_v4(embedded_v4(seg[1], seg[2]))) // 6to4
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
            let (ok, refused): (Vec<SocketAddr>, Vec<SocketAddr>) =
                resolved.into_iter().partition(|a| policy.permits(a.ip()));
            if ok.is_empty() {
                let addrs = refused
                    .iter()
                    .map(|a| a.ip().to_string())
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(Box::new(SsrfBlocked { host, addrs }) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(ok.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

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
