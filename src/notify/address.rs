//! Where a webhook may not go unless a policy lists it: loopback, link-local, private (RFC 1918, IPv6 unique local), carrier-grade NAT, cluster-internal names, and never the hub's own API server; names are checked again when they resolve, so a DNS answer cannot turn a message inward.

use std::net::{IpAddr, SocketAddr};

use url::{Host, Url};

use crate::policy::source::{internal_ip, internal_name};

/// Why an address is inside the cluster or a private network, or None.
pub(crate) fn inside_ip(ip: IpAddr) -> Option<&'static str> {
    if let Some(why) = internal_ip(ip) {
        return Some(why);
    }
    match ip {
        IpAddr::V4(v4) if v4.is_private() => Some("a private address (RFC 1918)"),
        IpAddr::V4(v4) if v4.octets()[0] == 100 && v4.octets()[1] & 0xc0 == 64 => Some(
            "a carrier-grade NAT address (100.64.0.0/10, where a cloud metadata service may answer)",
        ),
        IpAddr::V4(v4) if v4.is_broadcast() || v4.is_multicast() => {
            Some("a broadcast or multicast address")
        }
        IpAddr::V4(_) => None,
        IpAddr::V6(v6) => {
            let s = v6.segments();
            if let Some(v4) = v6.to_ipv4_mapped() {
                inside_ip(IpAddr::V4(v4))
            } else if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                // NAT64: the IPv4 address it stands for decides.
                let [a, b] = s[6].to_be_bytes();
                let [c, d] = s[7].to_be_bytes();
                inside_ip(IpAddr::from([a, b, c, d]))
            } else if s[0] & 0xfe00 == 0xfc00 {
                Some("a unique local address (fc00::/7)")
            } else if v6.is_multicast() {
                Some("a multicast address")
            } else {
                None
            }
        }
    }
}

/// Why a host name leads inside the cluster, or None: `localhost`, metadata names, names
/// without a dot (a Pod's search domains complete them), `*.svc`, `*.svc.*`, `*.local`
/// (`cluster.local`) and `kubernetes.default`.
pub(crate) fn inside_name(name: &str) -> Option<&'static str> {
    if let Some(why) = internal_name(name) {
        return Some(why);
    }
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if !name.contains('.') {
        Some("a name without a domain (the cluster's search domains complete it)")
    } else if name.ends_with(".svc")
        || name.contains(".svc.")
        || name.ends_with(".local")
        || name == "kubernetes.default"
    {
        Some("a cluster-internal name (a Service)")
    } else {
        None
    }
}

/// The internal addresses a policy lets a hub namespace's Alerts send to: networks (CIDRs) and
/// host names. An entry that is neither is ignored (the schema refuses it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Allowed {
    nets: Vec<(IpAddr, u8)>,
    hosts: Vec<String>,
    any: bool,
}

impl Allowed {
    /// Every address and name (`--notify-internal-addresses`).
    pub(crate) fn any() -> Self {
        Self {
            any: true,
            ..Self::default()
        }
    }

    /// The allowance from `alertInternalAddresses` entries.
    pub(crate) fn parse(entries: &[String]) -> Self {
        let mut allowed = Self::default();
        for entry in entries {
            match entry.split_once('/') {
                Some((ip, bits)) => {
                    let (Ok(ip), Ok(bits)) = (ip.parse::<IpAddr>(), bits.parse::<u8>()) else {
                        continue;
                    };
                    if bits <= if ip.is_ipv4() { 32 } else { 128 } {
                        allowed.nets.push((ip, bits));
                    }
                }
                None => allowed
                    .hosts
                    .push(entry.trim_end_matches('.').to_ascii_lowercase()),
            }
        }
        allowed
    }

    /// True when `ip` lies in a listed network.
    pub(crate) fn holds_ip(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.any
            || self.nets.iter().any(|&(net, bits)| match (net, ip) {
                (IpAddr::V4(n), IpAddr::V4(a)) => {
                    let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
                    u32::from(n) & mask == u32::from(a) & mask
                }
                (IpAddr::V6(n), IpAddr::V6(a)) => {
                    let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
                    u128::from(n) & mask == u128::from(a) & mask
                }
                _ => false,
            })
    }

    /// True when `name` is a listed host.
    pub(crate) fn holds_name(&self, name: &str) -> bool {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        self.any || self.hosts.contains(&name)
    }
}

/// Where the hub's own API server answers (its host and port as the operator reaches it, and
/// the in-cluster Service's): never a webhook, whatever a policy lists.
#[derive(Clone, Debug, Default)]
pub(crate) struct HubApi(Vec<(Host<String>, u16)>);

impl HubApi {
    /// The addresses of `urls` (the hub's server URL) and of the in-cluster Service, when the
    /// operator runs in a Pod (`KUBERNETES_SERVICE_HOST`, `KUBERNETES_SERVICE_PORT`).
    pub(crate) fn of(urls: &[Url]) -> Self {
        let mut all: Vec<(Host<String>, u16)> = urls
            .iter()
            .filter_map(|u| Some((u.host()?.to_owned(), u.port_or_known_default()?)))
            .collect();
        let service = std::env::var("KUBERNETES_SERVICE_HOST").ok().zip(
            std::env::var("KUBERNETES_SERVICE_PORT")
                .ok()
                .and_then(|p| p.parse().ok()),
        );
        if let Some((host, port)) = service
            && let Ok(url) = Url::parse(&format!("https://{host}:{port}/"))
            && let Some(host) = url.host()
        {
            all.push((host.to_owned(), port));
        }
        Self(all)
    }

    fn holds(&self, url: &Url) -> bool {
        let (Some(host), Some(port)) = (url.host(), url.port_or_known_default()) else {
            return false;
        };
        self.0
            .iter()
            .any(|(h, p)| *p == port && *h == host.to_owned())
    }
}

/// Why a webhook URL is refused, or None: the hub's API server always; otherwise a host inside
/// the cluster or a private network that `allowed` does not list. Names are checked again when
/// they resolve ([`outside`]).
pub(crate) fn refused(url: &Url, allowed: &Allowed, hub: &HubApi) -> Option<String> {
    if hub.holds(url) {
        return Some("leads to the hub's own API server, which no webhook may".into());
    }
    let why = match url.host()? {
        Host::Ipv4(ip) => inside_ip(IpAddr::V4(ip)).filter(|_| !allowed.holds_ip(ip.into())),
        Host::Ipv6(ip) => inside_ip(IpAddr::V6(ip)).filter(|_| !allowed.holds_ip(ip.into())),
        Host::Domain(name) => inside_name(name).filter(|_| !allowed.holds_name(name)),
    }?;
    Some(format!(
        "leads inside the cluster ({why}); a platform admin lists it in alertInternalAddresses of a TenancyPolicy governing the namespace to allow it"
    ))
}

/// The addresses `name` resolved to that a webhook may go to: those outside, or listed; an
/// error naming the first refused one when none is left.
pub(crate) fn outside(
    name: &str,
    resolved: Vec<SocketAddr>,
    allowed: &Allowed,
) -> Result<Vec<SocketAddr>, String> {
    let (kept, dropped): (Vec<SocketAddr>, Vec<SocketAddr>) = resolved
        .into_iter()
        .partition(|a| inside_ip(a.ip()).is_none() || allowed.holds_ip(a.ip()));
    match (kept.is_empty(), dropped.first()) {
        (true, Some(first)) => Err(format!(
            "{name} resolves to {} ({}); refused: a platform admin lists it in alertInternalAddresses to allow it",
            first.ip(),
            inside_ip(first.ip()).unwrap_or_default()
        )),
        _ => Ok(kept),
    }
}

/// Resolves names as the system does and keeps the addresses [`outside`] keeps: the HTTP
/// client's resolver for webhooks of one allowance.
pub(crate) struct WebhookResolver(pub(crate) Allowed);

impl reqwest::dns::Resolve for WebhookResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let (name, allowed) = (name.as_str().to_owned(), self.0.clone());
        Box::pin(async move {
            let all: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            let kept = outside(&name, all, &allowed)?;
            Ok(Box::new(kept.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> Url {
        text.parse().unwrap()
    }

    #[test]
    fn private_cgnat_unique_local_and_internal_addresses_are_inside() {
        for ip in [
            "10.0.0.1",
            "172.16.0.1",
            "172.31.255.254",
            "192.168.1.1",
            "100.64.0.1",
            "100.100.100.200",
            "100.127.255.255",
            "127.0.0.1",
            "169.254.169.254",
            "0.0.0.0",
            "255.255.255.255",
            "fc00::1",
            "fd12:3456::1",
            "::1",
            "fe80::1",
            "::ffff:10.1.2.3",
            "64:ff9b::a01:203",
        ] {
            assert!(inside_ip(ip.parse().unwrap()).is_some(), "{ip}");
        }
        for ip in [
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.1",
            "172.32.0.1",
            "2001:db8::1",
            "64:ff9b::808:808",
        ] {
            assert_eq!(inside_ip(ip.parse().unwrap()), None, "{ip}");
        }
    }

    #[test]
    fn cluster_names_are_inside_and_public_names_are_not() {
        for name in [
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local.",
            "alertmanager.monitoring.svc",
            "web.team-b.svc.cluster.local",
            "printer.local",
            "localhost",
            "metadata.google.internal",
            "MY-SERVICE",
        ] {
            assert!(inside_name(name).is_some(), "{name}");
        }
        for name in ["hooks.slack.com", "svc.example.com", "example.org."] {
            assert_eq!(inside_name(name), None, "{name}");
        }
    }

    #[test]
    fn a_policy_listing_a_network_or_host_lets_it_through_and_nothing_else() {
        let allowed = Allowed::parse(&[
            "10.20.0.0/16".into(),
            "fd00:1::/64".into(),
            "127.0.0.1/32".into(),
            "alertmanager.monitoring.svc".into(),
            "not/a/cidr".into(),
        ]);
        let hub = HubApi::default();
        for ok in [
            "http://10.20.3.4/hook",
            "http://[fd00:1::9]/hook",
            "http://127.0.0.1:8080/hook",
            "http://Alertmanager.Monitoring.svc:9093/x",
            "https://hooks.example.com/x",
        ] {
            assert_eq!(refused(&url(ok), &allowed, &hub), None, "{ok}");
        }
        for no in [
            "http://10.21.0.1/hook",
            "http://[fd00:2::1]/hook",
            "http://127.0.0.2/hook",
            "http://100.100.100.200/latest",
            "http://kubernetes.default.svc/api",
            "http://grafana.monitoring.svc/x",
        ] {
            let why = refused(&url(no), &allowed, &hub).expect(no);
            assert!(why.contains("alertInternalAddresses"), "{why}");
        }
        assert!(Allowed::parse(&["0.0.0.0/0".into()]).holds_ip("10.0.0.1".parse().unwrap()));
        assert!(!Allowed::parse(&["10.0.0.0/33".into()]).holds_ip("10.0.0.1".parse().unwrap()));
    }

    #[test]
    fn the_hubs_api_server_is_refused_even_where_its_network_is_allowed() {
        let hub = HubApi::of(&[url("https://127.0.0.1:6443")]);
        let allowed = Allowed::parse(&["127.0.0.0/8".into()]);
        let why = refused(
            &url("https://127.0.0.1:6443/api/v1/secrets"),
            &allowed,
            &hub,
        )
        .unwrap();
        assert!(why.contains("hub's own API server"), "{why}");
        assert_eq!(
            refused(&url("http://127.0.0.1:6444/hook"), &allowed, &hub),
            None
        );
    }

    #[test]
    fn resolved_addresses_inside_are_dropped_unless_listed() {
        let at = |ip: &str| SocketAddr::new(ip.parse().unwrap(), 0);
        let none = Allowed::default();
        let why = outside("rebind.example.com", vec![at("10.0.0.7")], &none).unwrap_err();
        assert!(
            why.contains("rebind.example.com resolves to 10.0.0.7") && why.contains("RFC 1918"),
            "{why}"
        );
        assert_eq!(
            outside(
                "mixed.example.com",
                vec![at("192.168.0.1"), at("8.8.8.8")],
                &none
            ),
            Ok(vec![at("8.8.8.8")])
        );
        let listed = Allowed::parse(&["10.0.0.0/8".into()]);
        assert_eq!(
            outside("hooks.corp.example.com", vec![at("10.0.0.7")], &listed),
            Ok(vec![at("10.0.0.7")])
        );
    }
}
