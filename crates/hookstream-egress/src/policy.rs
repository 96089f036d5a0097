//! Which IP addresses a delivery may connect to.
//!
//! A delivery may reach only globally reachable unicast addresses, unless an operator
//! allow-lists a CIDR. The forbidden ranges are two tables, one per family, that list the
//! entries of the IANA IPv4 and IPv6 Special-Purpose Address Registries (with their RFC) plus
//! what the addressing architecture reserves outside them (multicast, IPv4 class E, IPv6
//! site-local, IPv6 space outside `2000::/3` global unicast). An address is judged by the most
//! specific entry that contains it.
//!
//! Every registry entry is refused, including the few the registry marks globally reachable
//! (PCP, TURN and DNS-SD anycast, AMT, AS112, ORCHIDv2, drone DETs): none is where a tenant's
//! webhook receiver lives, and a table that refuses whole blocks is easier to audit. The
//! exceptions are the IPv6 forms that carry an IPv4 address, which are judged by that address
//! against the IPv4 table:
//!
//! - `::ffff:0:0/96` IPv4-mapped and `::ffff:0:0:0/96` IPv4-translated: the last 32 bits;
//! - `64:ff9b::/96` NAT64 well-known prefix: the last 32 bits;
//! - `2002::/16` 6to4: bits 16..48;
//! - `2001::/32` Teredo: the server (bits 32..64) and the client (bitwise NOT of bits
//!   96..128); refused when either is forbidden.
//!
//! `64:ff9b:1::/48` (local-use NAT64) is refused whole: its translator is on a local network
//! and the IPv4 address may sit at any of RFC 6052's offsets.
//!
//! The allow-list is the only way around the tables. An IPv4-mapped address (`::ffff:a.b.c.d`)
//! follows the IPv4 allow-list, since connecting to it reaches the IPv4 host; the other
//! embedding forms do not (they go through a translator or a tunnel).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// One entry of a special-purpose table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpecialRange {
    pub net: IpNet,
    /// The range and what it is, e.g. `127.0.0.0/8 (loopback)`; used in error messages.
    pub label: &'static str,
    /// Where the range is defined.
    pub rfc: &'static str,
    pub rule: Rule,
}

/// What an address inside a [`SpecialRange`] means for the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Never a delivery destination.
    Refuse,
    /// An IPv6 form of an IPv4 address: judged by the IPv4 address(es) it carries.
    Embeds(Embedding),
}

/// Where an IPv6 address carries an IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Embedding {
    /// Bits 96..128 (IPv4-mapped, IPv4-translated, NAT64 `64:ff9b::/96`).
    Last32,
    /// Bits 16..48 (6to4).
    SixToFour,
    /// Server at bits 32..64, client as the bitwise NOT of bits 96..128.
    Teredo,
}

impl Embedding {
    /// The IPv4 addresses `ip` carries (one, or two for Teredo).
    fn extract(self, ip: Ipv6Addr) -> [Option<Ipv4Addr>; 2] {
        let bits = ip.to_bits();
        // Truncating casts pick the 32 bits wanted after the shift.
        let at = |shift: u32| Ipv4Addr::from_bits((bits >> shift) as u32);
        match self {
            Embedding::Last32 => [Some(at(0)), None],
            Embedding::SixToFour => [Some(at(80)), None],
            Embedding::Teredo => [Some(at(64)), Some(Ipv4Addr::from_bits(!(bits as u32)))],
        }
    }
}

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8, label: &'static str, rfc: &'static str) -> SpecialRange {
    SpecialRange {
        net: IpNet::V4(Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), len)),
        label,
        rfc,
        rule: Rule::Refuse,
    }
}

const fn v6(seg: [u16; 8], len: u8, label: &'static str, rfc: &'static str, rule: Rule) -> SpecialRange {
    let [a, b, c, d, e, f, g, h] = seg;
    SpecialRange {
        net: IpNet::V6(Ipv6Net::new_assert(Ipv6Addr::new(a, b, c, d, e, f, g, h), len)),
        label,
        rfc,
        rule,
    }
}

// Short names that keep the tables one entry a line.
const REFUSE: Rule = Rule::Refuse;
const LAST32: Rule = Rule::Embeds(Embedding::Last32);
const SIX_TO_FOUR: Rule = Rule::Embeds(Embedding::SixToFour);
const TEREDO: Rule = Rule::Embeds(Embedding::Teredo);

/// The forbidden IPv4 ranges: the IANA IPv4 Special-Purpose Address Registry, multicast and
/// the reserved class E (which includes the limited broadcast address).
#[rustfmt::skip]
pub static IPV4_SPECIAL: &[SpecialRange] = &[
    v4(0, 0, 0, 0, 8, "0.0.0.0/8 (this network)", "RFC 791"),
    v4(0, 0, 0, 0, 32, "0.0.0.0/32 (this host on this network)", "RFC 1122"),
    v4(10, 0, 0, 0, 8, "10.0.0.0/8 (private-use)", "RFC 1918"),
    v4(100, 64, 0, 0, 10, "100.64.0.0/10 (shared address space, carrier-grade nat)", "RFC 6598"),
    v4(127, 0, 0, 0, 8, "127.0.0.0/8 (loopback)", "RFC 1122"),
    v4(169, 254, 0, 0, 16, "169.254.0.0/16 (link-local, cloud metadata)", "RFC 3927"),
    v4(172, 16, 0, 0, 12, "172.16.0.0/12 (private-use)", "RFC 1918"),
    v4(192, 0, 0, 0, 24, "192.0.0.0/24 (ietf protocol assignments)", "RFC 6890"),
    v4(192, 0, 0, 0, 29, "192.0.0.0/29 (ipv4 service continuity prefix)", "RFC 7335"),
    v4(192, 0, 0, 8, 32, "192.0.0.8/32 (ipv4 dummy address)", "RFC 7600"),
    v4(192, 0, 0, 9, 32, "192.0.0.9/32 (port control protocol anycast)", "RFC 7723"),
    v4(192, 0, 0, 10, 32, "192.0.0.10/32 (turn anycast)", "RFC 8155"),
    v4(192, 0, 0, 170, 32, "192.0.0.170/32 (nat64/dns64 discovery)", "RFC 8880"),
    v4(192, 0, 0, 171, 32, "192.0.0.171/32 (nat64/dns64 discovery)", "RFC 8880"),
    v4(192, 0, 2, 0, 24, "192.0.2.0/24 (documentation, test-net-1)", "RFC 5737"),
    v4(192, 31, 196, 0, 24, "192.31.196.0/24 (as112-v4)", "RFC 7535"),
    v4(192, 52, 193, 0, 24, "192.52.193.0/24 (amt)", "RFC 7450"),
    v4(192, 88, 99, 0, 24, "192.88.99.0/24 (deprecated 6to4 relay anycast)", "RFC 7526"),
    v4(192, 88, 99, 2, 32, "192.88.99.2/32 (6a44 relay anycast)", "RFC 6751"),
    v4(192, 168, 0, 0, 16, "192.168.0.0/16 (private-use)", "RFC 1918"),
    v4(192, 175, 48, 0, 24, "192.175.48.0/24 (direct delegation as112 service)", "RFC 7534"),
    v4(198, 18, 0, 0, 15, "198.18.0.0/15 (benchmarking)", "RFC 2544"),
    v4(198, 51, 100, 0, 24, "198.51.100.0/24 (documentation, test-net-2)", "RFC 5737"),
    v4(203, 0, 113, 0, 24, "203.0.113.0/24 (documentation, test-net-3)", "RFC 5737"),
    v4(224, 0, 0, 0, 4, "224.0.0.0/4 (multicast)", "RFC 5771"),
    v4(240, 0, 0, 0, 4, "240.0.0.0/4 (reserved)", "RFC 1112"),
    v4(255, 255, 255, 255, 32, "255.255.255.255/32 (limited broadcast)", "RFC 919, RFC 8190"),
];

/// The forbidden (and IPv4-embedding) IPv6 ranges: the IANA IPv6 Special-Purpose Address
/// Registry, the architecture's reserved forms, and everything outside `2000::/3`, the only
/// block allocated for global unicast.
#[rustfmt::skip]
pub static IPV6_SPECIAL: &[SpecialRange] = &[
    v6([0; 8], 128, "::/128 (unspecified)", "RFC 4291", REFUSE),
    v6([0, 0, 0, 0, 0, 0, 0, 1], 128, "::1/128 (loopback)", "RFC 4291", REFUSE),
    v6([0; 8], 96, "::/96 (ipv4-compatible, deprecated)", "RFC 4291", REFUSE),
    v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96, "::ffff:0:0/96 (ipv4-mapped)", "RFC 4291", LAST32),
    v6([0, 0, 0, 0, 0xffff, 0, 0, 0], 96, "::ffff:0:0:0/96 (ipv4-translated)", "RFC 2765", LAST32),
    v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96, "64:ff9b::/96 (nat64 well-known prefix)", "RFC 6052", LAST32),
    v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48, "64:ff9b:1::/48 (local-use nat64)", "RFC 8215", REFUSE),
    v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64, "100::/64 (discard-only)", "RFC 6666", REFUSE),
    v6([0x100, 0, 0, 1, 0, 0, 0, 0], 64, "100:0:0:1::/64 (dummy prefix)", "RFC 9780", REFUSE),
    v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23, "2001::/23 (ietf protocol assignments)", "RFC 2928", REFUSE),
    v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, "2001::/32 (teredo)", "RFC 4380", TEREDO),
    v6([0x2001, 1, 0, 0, 0, 0, 0, 1], 128, "2001:1::1/128 (pcp anycast)", "RFC 7723", REFUSE),
    v6([0x2001, 1, 0, 0, 0, 0, 0, 2], 128, "2001:1::2/128 (turn anycast)", "RFC 8155", REFUSE),
    v6([0x2001, 1, 0, 0, 0, 0, 0, 3], 128, "2001:1::3/128 (dns-sd srp anycast)", "RFC 9665", REFUSE),
    v6([0x2001, 2, 0, 0, 0, 0, 0, 0], 48, "2001:2::/48 (benchmarking)", "RFC 5180", REFUSE),
    v6([0x2001, 3, 0, 0, 0, 0, 0, 0], 32, "2001:3::/32 (amt)", "RFC 7450", REFUSE),
    v6([0x2001, 4, 0x112, 0, 0, 0, 0, 0], 48, "2001:4:112::/48 (as112-v6)", "RFC 7535", REFUSE),
    v6([0x2001, 0x10, 0, 0, 0, 0, 0, 0], 28, "2001:10::/28 (deprecated orchid)", "RFC 4843", REFUSE),
    v6([0x2001, 0x20, 0, 0, 0, 0, 0, 0], 28, "2001:20::/28 (orchidv2)", "RFC 7343", REFUSE),
    v6([0x2001, 0x30, 0, 0, 0, 0, 0, 0], 28, "2001:30::/28 (drone remote id dets)", "RFC 9374", REFUSE),
    v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32, "2001:db8::/32 (documentation)", "RFC 3849", REFUSE),
    v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16, "2002::/16 (6to4)", "RFC 3056", SIX_TO_FOUR),
    v6([0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0], 48, "2620:4f:8000::/48 (direct delegation as112 service)", "RFC 7534", REFUSE),
    v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, "3fff::/20 (documentation)", "RFC 9637", REFUSE),
    v6([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16, "5f00::/16 (segment routing sids)", "RFC 9602", REFUSE),
    v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, "fc00::/7 (unique-local)", "RFC 4193", REFUSE),
    v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, "fe80::/10 (link-local)", "RFC 4291", REFUSE),
    v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, "fec0::/10 (site-local, deprecated)", "RFC 3879", REFUSE),
    v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, "ff00::/8 (multicast)", "RFC 4291", REFUSE),
    v6([0; 8], 3, "::/3 (not global unicast)", "RFC 4291", REFUSE),
    v6([0x4000, 0, 0, 0, 0, 0, 0, 0], 2, "4000::/2 (not global unicast)", "RFC 4291", REFUSE),
    v6([0x8000, 0, 0, 0, 0, 0, 0, 0], 1, "8000::/1 (not global unicast)", "RFC 4291", REFUSE),
];

/// Why an address is forbidden.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forbidden {
    /// The range the address is in, or, for an IPv6 form of an IPv4 address, the range of
    /// the IPv4 address it carries.
    pub range: &'static SpecialRange,
    /// The IPv6 prefix that carries the IPv4 address, when that is how it was judged.
    pub via: Option<&'static SpecialRange>,
}

impl fmt::Display for Forbidden {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.range.label)?;
        if let Some(via) = self.via {
            write!(f, " embedded in {}", via.label)?;
        }
        Ok(())
    }
}

/// The most specific entry of `table` that contains `ip`.
fn most_specific(table: &'static [SpecialRange], ip: IpAddr) -> Option<&'static SpecialRange> {
    table
        .iter()
        .filter(|r| r.net.contains(&ip))
        .max_by_key(|r| r.net.prefix_len())
}

fn why_forbidden_v4(ip: Ipv4Addr) -> Option<&'static SpecialRange> {
    most_specific(IPV4_SPECIAL, IpAddr::V4(ip))
}

fn why_forbidden_v6(ip: Ipv6Addr) -> Option<Forbidden> {
    let range = most_specific(IPV6_SPECIAL, IpAddr::V6(ip))?;
    match range.rule {
        Rule::Refuse => Some(Forbidden { range, via: None }),
        Rule::Embeds(embedding) => embedding
            .extract(ip)
            .into_iter()
            .flatten()
            .find_map(why_forbidden_v4)
            .map(|inner| Forbidden {
                range: inner,
                via: Some(range),
            }),
    }
}

/// Why `ip` is forbidden by the built-in tables (the allow-list aside), or `None` when it is
/// a globally reachable unicast address.
pub fn why_forbidden(ip: IpAddr) -> Option<Forbidden> {
    match ip {
        IpAddr::V4(v4) => why_forbidden_v4(v4).map(|range| Forbidden { range, via: None }),
        IpAddr::V6(v6) => why_forbidden_v6(v6),
    }
}

/// Whether the built-in tables refuse `ip` (the allow-list aside).
pub fn is_forbidden(ip: IpAddr) -> bool {
    why_forbidden(ip).is_some()
}

/// The label of the range that makes `ip` forbidden, e.g. `"127.0.0.0/8 (loopback)"`; for an
/// IPv6 form of an IPv4 address, the IPv4 address's range.
pub fn forbidden_range(ip: IpAddr) -> Option<&'static str> {
    why_forbidden(ip).map(|f| f.range.label)
}

/// The address policy: the built-in tables, and the operator's allow-list, the only way
/// around them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddressPolicy {
    /// CIDRs a delivery may reach even though the tables forbid them (an in-cluster receiver,
    /// a test on loopback). Empty by default.
    allow: Vec<IpNet>,
}

impl AddressPolicy {
    pub fn new(allow: Vec<IpNet>) -> Self {
        Self { allow }
    }

    /// The allow-listed CIDRs.
    pub fn allow(&self) -> &[IpNet] {
        &self.allow
    }

    /// Whether a delivery may connect to `ip`.
    pub fn permits(&self, ip: IpAddr) -> bool {
        self.check(ip).is_ok()
    }

    /// `Ok` when a delivery may connect to `ip`, otherwise why not.
    pub fn check(&self, ip: IpAddr) -> Result<(), Forbidden> {
        if self.is_allow_listed(ip) {
            return Ok(());
        }
        why_forbidden(ip).map_or(Ok(()), Err)
    }

    fn is_allow_listed(&self, ip: IpAddr) -> bool {
        let mapped = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        self.allow
            .iter()
            .any(|net| net.contains(&ip) || mapped.is_some_and(|v4| net.contains(&v4)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn label(s: &str) -> Option<&'static str> {
        forbidden_range(ip(s))
    }

    #[test]
    fn tables_are_consistent() {
        for (table, v4) in [(IPV4_SPECIAL, true), (IPV6_SPECIAL, false)] {
            for r in table {
                let cidr = r.label.split(' ').next().unwrap();
                let net: IpNet = cidr.parse().unwrap();
                assert_eq!(net, r.net, "label {:?} names its range", r.label);
                assert_eq!(net, net.trunc(), "{} has no host bits", r.label);
                assert_eq!(
                    matches!(net, IpNet::V4(_)),
                    v4,
                    "{} is in its family's table",
                    r.label
                );
                assert!(r.label.contains(" ("), "{} says what the range is", r.label);
                assert!(r.rfc.starts_with("RFC "), "{} names its rfc", r.label);
                let duplicates = table.iter().filter(|o| o.net == r.net).count();
                assert_eq!(duplicates, 1, "{} is listed once", r.label);
                if v4 {
                    assert_eq!(r.rule, Rule::Refuse, "ipv4 entries refuse");
                }
            }
        }
    }

    /// Every IPv4 range, with an address inside it and (where the neighbour is public) just
    /// outside it.
    #[test]
    fn every_ipv4_range_is_refused_and_named() {
        #[rustfmt::skip]
        let cases: &[(&str, &str, Option<&str>)] = &[
            ("0.1.2.3", "0.0.0.0/8 (this network)", Some("1.0.0.1")),
            ("0.0.0.0", "0.0.0.0/32 (this host on this network)", None),
            ("10.0.0.1", "10.0.0.0/8 (private-use)", Some("11.0.0.0")),
            ("10.255.255.255", "10.0.0.0/8 (private-use)", Some("9.255.255.255")),
            ("100.64.0.1", "100.64.0.0/10 (shared address space, carrier-grade nat)", Some("100.63.255.255")),
            ("100.100.100.200", "100.64.0.0/10 (shared address space, carrier-grade nat)", None),
            ("100.127.255.255", "100.64.0.0/10 (shared address space, carrier-grade nat)", Some("100.128.0.0")),
            ("127.0.0.1", "127.0.0.0/8 (loopback)", Some("128.0.0.0")),
            ("127.255.255.254", "127.0.0.0/8 (loopback)", Some("126.255.255.255")),
            ("169.254.169.254", "169.254.0.0/16 (link-local, cloud metadata)", Some("169.255.0.1")),
            ("172.16.0.1", "172.16.0.0/12 (private-use)", Some("172.15.255.255")),
            ("172.31.255.255", "172.16.0.0/12 (private-use)", Some("172.32.0.0")),
            ("192.0.0.100", "192.0.0.0/24 (ietf protocol assignments)", Some("192.0.1.1")),
            ("192.0.0.1", "192.0.0.0/29 (ipv4 service continuity prefix)", None),
            ("192.0.0.8", "192.0.0.8/32 (ipv4 dummy address)", None),
            ("192.0.0.9", "192.0.0.9/32 (port control protocol anycast)", None),
            ("192.0.0.10", "192.0.0.10/32 (turn anycast)", None),
            ("192.0.0.170", "192.0.0.170/32 (nat64/dns64 discovery)", None),
            ("192.0.0.171", "192.0.0.171/32 (nat64/dns64 discovery)", None),
            ("192.0.2.1", "192.0.2.0/24 (documentation, test-net-1)", Some("192.0.3.0")),
            ("192.31.196.1", "192.31.196.0/24 (as112-v4)", Some("192.31.197.0")),
            ("192.52.193.1", "192.52.193.0/24 (amt)", Some("192.52.194.0")),
            ("192.88.99.1", "192.88.99.0/24 (deprecated 6to4 relay anycast)", Some("192.88.100.0")),
            ("192.88.99.2", "192.88.99.2/32 (6a44 relay anycast)", None),
            ("192.168.1.1", "192.168.0.0/16 (private-use)", Some("192.169.0.0")),
            ("192.175.48.1", "192.175.48.0/24 (direct delegation as112 service)", Some("192.175.49.0")),
            ("198.18.0.1", "198.18.0.0/15 (benchmarking)", Some("198.17.255.255")),
            ("198.19.255.255", "198.18.0.0/15 (benchmarking)", Some("198.20.0.0")),
            ("198.51.100.1", "198.51.100.0/24 (documentation, test-net-2)", Some("198.51.101.0")),
            ("203.0.113.1", "203.0.113.0/24 (documentation, test-net-3)", Some("203.0.114.0")),
            ("224.0.0.1", "224.0.0.0/4 (multicast)", Some("223.255.255.255")),
            ("239.255.255.250", "224.0.0.0/4 (multicast)", None),
            ("240.0.0.1", "240.0.0.0/4 (reserved)", None),
            ("255.255.255.254", "240.0.0.0/4 (reserved)", None),
            ("255.255.255.255", "255.255.255.255/32 (limited broadcast)", None),
        ];
        for (inside, range, outside) in cases {
            assert_eq!(label(inside), Some(*range), "{inside}");
            if let Some(outside) = outside {
                assert_eq!(label(outside), None, "{outside} is just outside {range}");
            }
        }
        for r in IPV4_SPECIAL {
            assert!(
                cases.iter().any(|(_, range, _)| range == &r.label),
                "{} has a test case",
                r.label
            );
        }
    }

    #[test]
    fn every_ipv6_range_is_refused_and_named() {
        #[rustfmt::skip]
        let cases: &[(&str, &str, Option<&str>)] = &[
            ("::", "::/128 (unspecified)", None),
            ("::1", "::1/128 (loopback)", None),
            ("::2", "::/96 (ipv4-compatible, deprecated)", None),
            ("::127.0.0.1", "::/96 (ipv4-compatible, deprecated)", None),
            ("::8.8.8.8", "::/96 (ipv4-compatible, deprecated)", None),
            ("64:ff9b:1::1", "64:ff9b:1::/48 (local-use nat64)", None),
            ("64:ff9b:1:ffff::808:808", "64:ff9b:1::/48 (local-use nat64)", None),
            ("100::1", "100::/64 (discard-only)", None),
            ("100:0:0:1::1", "100:0:0:1::/64 (dummy prefix)", None),
            ("2001:1::4", "2001::/23 (ietf protocol assignments)", Some("2001:200::1")),
            ("2001:1ff::1", "2001::/23 (ietf protocol assignments)", Some("2001:200::1")),
            ("2001:1::1", "2001:1::1/128 (pcp anycast)", None),
            ("2001:1::2", "2001:1::2/128 (turn anycast)", None),
            ("2001:1::3", "2001:1::3/128 (dns-sd srp anycast)", None),
            ("2001:2::1", "2001:2::/48 (benchmarking)", None),
            ("2001:3::1", "2001:3::/32 (amt)", None),
            ("2001:4:112::1", "2001:4:112::/48 (as112-v6)", None),
            ("2001:10::1", "2001:10::/28 (deprecated orchid)", None),
            ("2001:20::1", "2001:20::/28 (orchidv2)", None),
            ("2001:30::1", "2001:30::/28 (drone remote id dets)", None),
            ("2001:db8::1", "2001:db8::/32 (documentation)", Some("2001:db9::1")),
            ("2620:4f:8000::1", "2620:4f:8000::/48 (direct delegation as112 service)", Some("2620:4f:8001::1")),
            ("3fff::1", "3fff::/20 (documentation)", None),
            ("3fff:fff::1", "3fff::/20 (documentation)", Some("3fff:1000::1")),
            ("5f00::1", "5f00::/16 (segment routing sids)", None),
            ("fc00::1", "fc00::/7 (unique-local)", None),
            ("fd00:ec2::254", "fc00::/7 (unique-local)", None),
            ("fe80::1", "fe80::/10 (link-local)", None),
            ("febf::1", "fe80::/10 (link-local)", None),
            ("fec0::1", "fec0::/10 (site-local, deprecated)", None),
            ("ff02::1", "ff00::/8 (multicast)", None),
            ("ff0e::1", "ff00::/8 (multicast)", None),
            ("1000::1", "::/3 (not global unicast)", Some("2000::1")),
            ("4000::1", "4000::/2 (not global unicast)", Some("3fff:ffff::1")),
            ("8000::1", "8000::/1 (not global unicast)", None),
        ];
        for (inside, range, outside) in cases {
            assert_eq!(label(inside), Some(*range), "{inside}");
            if let Some(outside) = outside {
                assert_eq!(label(outside), None, "{outside} is just outside {range}");
            }
        }
        for r in IPV6_SPECIAL.iter().filter(|r| r.rule == Rule::Refuse) {
            assert!(
                cases.iter().any(|(_, range, _)| range == &r.label),
                "{} has a test case",
                r.label
            );
        }
    }

    #[test]
    fn ipv6_forms_of_ipv4_addresses_are_judged_by_the_ipv4_address() {
        #[rustfmt::skip]
        let cases = [
            ("::ffff:127.0.0.1", "127.0.0.0/8 (loopback)", "::ffff:0:0/96 (ipv4-mapped)"),
            ("::ffff:169.254.169.254", "169.254.0.0/16 (link-local, cloud metadata)", "::ffff:0:0/96 (ipv4-mapped)"),
            ("::ffff:0:10.0.0.1", "10.0.0.0/8 (private-use)", "::ffff:0:0:0/96 (ipv4-translated)"),
            ("::ffff:0:7f00:1", "127.0.0.0/8 (loopback)", "::ffff:0:0:0/96 (ipv4-translated)"),
            ("64:ff9b::a00:1", "10.0.0.0/8 (private-use)", "64:ff9b::/96 (nat64 well-known prefix)"),
            ("64:ff9b::127.0.0.1", "127.0.0.0/8 (loopback)", "64:ff9b::/96 (nat64 well-known prefix)"),
            ("2002:7f00:1::", "127.0.0.0/8 (loopback)", "2002::/16 (6to4)"),
            ("2002:a9fe:a9fe::1", "169.254.0.0/16 (link-local, cloud metadata)", "2002::/16 (6to4)"),
            ("2002:c058:6301::", "192.88.99.0/24 (deprecated 6to4 relay anycast)", "2002::/16 (6to4)"),
            // Teredo: a private server, a public client (NOT of 1.1.1.1 is fefe:fefe)
            ("2001:0:a00:1::fefe:fefe", "10.0.0.0/8 (private-use)", "2001::/32 (teredo)"),
            // Teredo: a public server, the client 127.0.0.1 (NOT is 80ff:fffe)
            ("2001:0:101:101::80ff:fffe", "127.0.0.0/8 (loopback)", "2001::/32 (teredo)"),
            // Teredo: RFC 4380's example, a public server and the client 192.0.2.45
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "192.0.2.0/24 (documentation, test-net-1)", "2001::/32 (teredo)"),
        ];
        for (addr, range, via) in cases {
            let why = why_forbidden(ip(addr)).unwrap_or_else(|| panic!("{addr} must be refused"));
            assert_eq!(why.range.label, range, "{addr}");
            assert_eq!(why.via.map(|v| v.label), Some(via), "{addr}");
            assert_eq!(why.to_string(), format!("{range} embedded in {via}"));
        }
    }

    #[test]
    fn public_addresses_are_permitted() {
        let policy = AddressPolicy::default();
        for s in [
            "1.1.1.1",
            "8.8.8.8",
            "9.9.9.9",
            "172.32.0.1",
            "100.128.0.1",
            "192.0.1.1",
            "223.255.255.255",
            "2606:4700::1111",
            "2a00:1450:4001:80b::200e",
            "::ffff:1.1.1.1",
            "::ffff:0:1.1.1.1",
            "64:ff9b::101:101",
            "64:ff9b::8.8.8.8",
            "2002:0101:0101::1",
            "2002:808:808:1::1",
            // Teredo: server 65.54.227.120, client NOT(bebe:fefe) = 65.65.1.1
            "2001:0:4136:e378:8000:63bf:bebe:fefe",
            "2001:200::1",
        ] {
            assert_eq!(why_forbidden(ip(s)), None, "{s} is public");
            assert!(policy.permits(ip(s)), "{s} is public");
        }
    }

    #[test]
    fn allow_list_is_the_only_way_around() {
        let policy = AddressPolicy::new(vec!["127.0.0.0/8".parse().unwrap(), "fd00::/8".parse().unwrap()]);
        assert!(policy.permits(ip("127.0.0.1")));
        assert!(
            policy.permits(ip("::ffff:127.0.0.1")),
            "mapped form follows the ipv4 allow-list"
        );
        assert!(policy.permits(ip("fd12::1")));
        assert!(!policy.permits(ip("fc00::1")));
        assert!(!policy.permits(ip("10.0.0.1")));
        assert!(!policy.permits(ip("::1")));
        assert!(
            !policy.permits(ip("64:ff9b::127.0.0.1")),
            "a translator is not the ipv4 host: only the mapped form follows the allow-list"
        );
        assert_eq!(
            policy.check(ip("10.0.0.1")).map_err(|f| f.range.label),
            Err("10.0.0.0/8 (private-use)")
        );
        assert!(!AddressPolicy::default().permits(ip("127.0.0.1")));
        assert!(AddressPolicy::new(vec!["0.0.0.0/0".parse().unwrap()]).permits(ip("10.1.2.3")));
    }

    fn v6_from(parts: [u16; 2], prefix: [u16; 6]) -> IpAddr {
        let [a, b, c, d, e, f] = prefix;
        IpAddr::V6(Ipv6Addr::new(a, b, c, d, e, f, parts[0], parts[1]))
    }

    proptest! {
        #[test]
        fn every_ipv6_form_of_an_ipv4_address_is_judged_alike(bits in any::<u32>()) {
            let a = Ipv4Addr::from_bits(bits);
            let [hi, lo] = [(bits >> 16) as u16, bits as u16];
            let expected = is_forbidden(IpAddr::V4(a));
            let forms = [
                IpAddr::V6(a.to_ipv6_mapped()),
                v6_from([hi, lo], [0, 0, 0, 0, 0xffff, 0]),
                v6_from([hi, lo], [0x64, 0xff9b, 0, 0, 0, 0]),
                IpAddr::V6(Ipv6Addr::new(0x2002, hi, lo, 0, 0, 0, 0, 0)),
                IpAddr::V6(Ipv6Addr::new(0x2002, hi, lo, 0xffff, 1, 2, 3, 4)),
            ];
            for form in forms {
                prop_assert_eq!(is_forbidden(form), expected, "{} vs {}", form, a);
                prop_assert_eq!(forbidden_range(form), forbidden_range(IpAddr::V4(a)));
            }
        }

        #[test]
        fn teredo_is_refused_when_server_or_client_is(server in any::<u32>(), client in any::<u32>(), mid in any::<u32>()) {
            let [s, c] = [Ipv4Addr::from_bits(server), Ipv4Addr::from_bits(client)];
            let n = !client;
            let teredo = IpAddr::V6(Ipv6Addr::new(
                0x2001, 0, (server >> 16) as u16, server as u16,
                (mid >> 16) as u16, mid as u16, (n >> 16) as u16, n as u16,
            ));
            let expected = is_forbidden(IpAddr::V4(s)) || is_forbidden(IpAddr::V4(c));
            prop_assert_eq!(is_forbidden(teredo), expected, "{}", teredo);
        }

        #[test]
        fn the_mapped_form_follows_the_ipv4_allow_list(bits in any::<u32>(), len in 0u8..=32) {
            let a = Ipv4Addr::from_bits(bits);
            let net = Ipv4Net::new(a, len).unwrap().trunc();
            let policy = AddressPolicy::new(vec![IpNet::V4(net)]);
            prop_assert!(policy.permits(IpAddr::V4(a)));
            prop_assert!(policy.permits(IpAddr::V6(a.to_ipv6_mapped())));
        }

        #[test]
        fn a_forbidden_answer_names_a_range_that_contains_the_address(bits in any::<u128>()) {
            let v6 = Ipv6Addr::from_bits(bits);
            if let Some(why) = why_forbidden(IpAddr::V6(v6)) {
                let outer = why.via.unwrap_or(why.range);
                prop_assert!(outer.net.contains(&IpAddr::V6(v6)));
            } else {
                // only global unicast, or an embedded public IPv4 address, is permitted
                prop_assert!((bits >> 125) == 1 || most_specific(IPV6_SPECIAL, IpAddr::V6(v6)).is_some());
            }
        }
    }
}
