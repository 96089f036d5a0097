//! `ssrf`: the address policy on every address form, and endpoint URLs checked the way the
//! delivery engine checks them.
//!
//! Input: a byte choosing how many allow-list entries follow, an IPv4 and an IPv6 address
//! (4 + 16 bytes), the allow-list entries (a kind byte, 16 address bytes, a prefix byte
//! each), then a URL as text.
//!
//! Only [`policy_api`] names the policy's crate, `hookstream-egress` (`AddressPolicy`,
//! `is_forbidden`, `validate_endpoint_url`). The reference ranges below are written out
//! independently of its tables: every address in them must be refused (the tables refuse
//! more: the whole IANA special-purpose registries).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

use crate::input::Input;

/// The policy under test, behind the few calls this target makes.
mod policy_api {
    use std::net::IpAddr;

    use hookstream_egress::{AddressPolicy, UrlError};
    use ipnet::IpNet;

    pub(super) struct Policy(AddressPolicy);

    impl Policy {
        pub(super) fn new(allow: Vec<IpNet>) -> Self {
            Self(AddressPolicy::new(allow))
        }

        pub(super) fn permits(&self, ip: IpAddr) -> bool {
            self.0.permits(ip)
        }

        pub(super) fn inner(&self) -> &AddressPolicy {
            &self.0
        }
    }

    pub(super) fn is_forbidden(ip: IpAddr) -> bool {
        hookstream_egress::is_forbidden(ip)
    }

    /// Why a URL is refused before any connection.
    #[derive(Debug, PartialEq, Eq)]
    pub(super) enum Refused {
        Invalid,
        Forbidden(IpAddr),
    }

    /// The checks endpoint creation and the engine make: `validate_endpoint_url`.
    pub(super) fn check_url(raw: &str, policy: &Policy) -> Result<url::Url, Refused> {
        hookstream_egress::validate_endpoint_url(raw, &policy.0).map_err(|e| match e {
            UrlError::Forbidden { ip, .. } => Refused::Forbidden(ip),
            _ => Refused::Invalid,
        })
    }
}

use policy_api::{check_url, is_forbidden, Policy};

pub fn ssrf(data: &[u8]) {
    let mut input = Input::new(data);
    let entries = input.byte() % 4;
    let v4 = Ipv4Addr::from(input.array::<4>());
    let v6 = Ipv6Addr::from(input.array::<16>());
    let allow: Vec<IpNet> = (0..entries).map(|_| net(&mut input)).collect();
    let raw = String::from_utf8_lossy(input.rest());

    addresses(v4, v6);
    let policy = Policy::new(allow.clone());
    allow_list(&policy, &allow, v4, v6);
    urls(&raw, &policy, &allow);
}

/// `is_forbidden` agrees with the registry of special-purpose ranges, in every form that
/// embeds an IPv4 address.
fn addresses(v4: Ipv4Addr, v6: Ipv6Addr) {
    let forbidden = is_forbidden(IpAddr::V4(v4));
    if in_any(&FORBIDDEN_V4, v4) {
        assert!(forbidden, "{v4} must be refused");
    }
    if reference_v6(v6) {
        assert!(is_forbidden(IpAddr::V6(v6)), "{v6} must be refused");
    }

    let [a, b, c, d] = v4.octets();
    let (hi, lo) = (u16::from_be_bytes([a, b]), u16::from_be_bytes([c, d]));
    let s = v6.segments();
    let mapped = v4.to_ipv6_mapped();
    let nat64 = Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, hi, lo);
    let six_to_four = Ipv6Addr::new(0x2002, hi, lo, s[3], s[4], s[5], s[6], s[7]);
    let compatible = Ipv6Addr::new(0, 0, 0, 0, 0, 0, hi, lo);
    // Teredo: the server and the (bit-inverted) client embed IPv4 addresses; here both are v4.
    let teredo = Ipv6Addr::new(0x2001, 0, hi, lo, s[4], s[5], !hi, !lo);
    assert_eq!(is_forbidden(IpAddr::V6(mapped)), forbidden, "{mapped}");
    assert_eq!(is_forbidden(IpAddr::V6(nat64)), forbidden, "{nat64}");
    assert_eq!(is_forbidden(IpAddr::V6(six_to_four)), forbidden, "{six_to_four}");
    assert!(is_forbidden(IpAddr::V6(compatible)), "{compatible}");
    assert_eq!(is_forbidden(IpAddr::V6(teredo)), forbidden, "{teredo}");
}

/// The allow-list is the only way around the policy; an address is listed as given, and an
/// IPv4-mapped one also as the IPv4 address it carries.
fn allow_list(policy: &Policy, allow: &[IpNet], v4: Ipv4Addr, v6: Ipv6Addr) {
    for ip in [IpAddr::V4(v4), IpAddr::V6(v6), IpAddr::V6(v4.to_ipv6_mapped())] {
        let canonical = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        let listed = allow
            .iter()
            .any(|net| net.contains(&canonical) || net.contains(&ip));
        assert_eq!(
            policy.permits(ip),
            listed || !is_forbidden(ip),
            "{ip} with {allow:?}"
        );
    }
    // The mapped form is never refused where the address itself is permitted.
    if policy.permits(IpAddr::V4(v4)) {
        assert!(policy.permits(IpAddr::V6(v4.to_ipv6_mapped())));
    }
}

/// URL text through the engine's checks: no panic, and what passes is http(s) with a host
/// that is either a permitted IP literal or a name that is not an IP in disguise.
fn urls(raw: &str, policy: &Policy, allow: &[IpNet]) {
    let checked = check_url(raw, policy);
    // Endpoint creation (the store) and delivery (the engine) judge a URL alike.
    assert_eq!(
        hookstream_store::endpoints::validate_url(raw, policy.inner()).is_ok(),
        checked.is_ok(),
        "{raw:?}"
    );
    let Ok(url) = checked else {
        return;
    };
    assert!(matches!(url.scheme(), "http" | "https"));
    match url.host() {
        Some(url::Host::Ipv4(v4)) => assert!(policy.permits(IpAddr::V4(v4))),
        Some(url::Host::Ipv6(v6)) => assert!(policy.permits(IpAddr::V6(v6))),
        Some(url::Host::Domain(name)) => {
            // Every notation of an IP literal (`0x7f.1`, `2130706433`, `127.1`) was
            // normalised to `Host::Ipv4`, so no name is an address the resolver would pass
            // through unchecked.
            assert!(name.parse::<IpAddr>().is_err(), "{raw:?} kept {name:?} as a name");
        }
        None => panic!("check_url let {raw:?} through without a host"),
    }
    // The URL the client is handed parses back to the same destination.
    let again = url::Url::parse(url.as_str()).expect("a serialised url parses");
    assert_eq!(again.host(), url.host(), "{raw:?}");
    assert_eq!(again.port_or_known_default(), url.port_or_known_default());
    assert_eq!(check_url(url.as_str(), policy).ok(), Some(url), "{allow:?}");
}

fn net(input: &mut Input<'_>) -> IpNet {
    let kind = input.byte();
    let bytes = input.array::<16>();
    let prefix = input.byte();
    if kind.is_multiple_of(2) {
        let addr = Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]);
        IpNet::V4(Ipv4Net::new(addr, prefix % 33).expect("prefix at most 32"))
    } else {
        IpNet::V6(Ipv6Net::new(Ipv6Addr::from(bytes), prefix % 129).expect("prefix at most 128"))
    }
}

/// IPv4 ranges that are not public (IANA special-purpose registry, plus multicast and the
/// reserved 240/4), written out independently of the bit tests in the policy.
const FORBIDDEN_V4: [(u32, u8); 14] = [
    (0x0000_0000, 8),  // 0/8 "this network"
    (0x0a00_0000, 8),  // 10/8
    (0x6440_0000, 10), // 100.64/10 CGNAT
    (0x7f00_0000, 8),  // 127/8
    (0xa9fe_0000, 16), // 169.254/16 link local, cloud metadata
    (0xac10_0000, 12), // 172.16/12
    (0xc000_0000, 24), // 192.0.0/24 protocol assignments
    (0xc000_0200, 24), // 192.0.2/24 TEST-NET-1
    (0xc0a8_0000, 16), // 192.168/16
    (0xc612_0000, 15), // 198.18/15 benchmarking
    (0xc633_6400, 24), // 198.51.100/24 TEST-NET-2
    (0xcb00_7100, 24), // 203.0.113/24 TEST-NET-3
    (0xe000_0000, 4),  // 224/4 multicast
    (0xf000_0000, 4),  // 240/4 reserved and broadcast
];

fn in_any(ranges: &[(u32, u8)], ip: Ipv4Addr) -> bool {
    let ip = u32::from(ip);
    ranges
        .iter()
        .any(|&(net, len)| ip & (u32::MAX << (32 - u32::from(len))) == net)
}

fn reference_v6(ip: Ipv6Addr) -> bool {
    let bits = u128::from(ip);
    let within = |net: u128, len: u32| bits & (u128::MAX << (128 - len)) == net;
    let embedded = Ipv4Addr::from(bits as u32);
    let six_to_four = Ipv4Addr::from((bits >> 80) as u32);
    if within(0xffff_0000_0000, 96) {
        return in_any(&FORBIDDEN_V4, embedded); // ::ffff:a.b.c.d, IPv4-mapped
    }
    within(0, 96) // ::/128, ::1 and ::a.b.c.d, IPv4-compatible
        || within(0xfc00 << 112, 7) // unique local
        || within(0xfe80 << 112, 10) // link local
        || within(0xfec0 << 112, 10) // site local
        || within(0xff00 << 112, 8) // multicast
        || within(0x2001_0db8 << 96, 32) // documentation
        || within(0x0064_ff9b_0001 << 80, 48) // local-use NAT64, refused whole
        || (within(0x0064_ff9b << 96, 96) && in_any(&FORBIDDEN_V4, embedded)) // NAT64 /96
        || (within(0x2002 << 112, 16) && in_any(&FORBIDDEN_V4, six_to_four)) // 6to4
}
