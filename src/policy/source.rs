//! Chart source URLs in normal form: compared with `chartSources` prefixes by whole path segments, and hosts that lead back into the hub told apart (pure).
//!
//! Every URL a tenant writes (`repo`, an `oci://` chartName) and every URL a repository answers
//! with (an archive URL in its index, a redirect's `Location`) is brought to one form by the
//! `url` crate (WHATWG parsing, as browsers do) before it is compared: scheme and host
//! lower-cased, a default port dropped, IPv4 written any way (`2130706433`, `0x7f.1`) spelled
//! out, `.` and `..` segments resolved, `%2e` included. What could still mean one thing here and
//! another on a server is refused: credentials, a query or fragment in a repository, an encoded
//! `/` or `\` in a path.

use std::net::{IpAddr, Ipv6Addr};

use url::{Host, Url};

/// Why a chart source URL is refused; the caller names the URL.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refused {
    /// The text does not parse as a URL.
    #[error("is not a URL ({0}): use https://HOST/PATH")]
    NotUrl(String),
    /// Another scheme than http, https (and oci for OCI references).
    #[error("uses scheme {0}://, which is not allowed; use https://")]
    Scheme(String),
    /// `user:password@` in the URL.
    #[error(
        "must not carry credentials (user:password@): they would show in process lists and status"
    )]
    Credentials,
    /// A query or a fragment in a repository URL or a prefix.
    #[error("must not carry a query or fragment (?…, #…): a repository is named by its path alone")]
    Query,
    /// `%2F` or `%5C` in the path.
    #[error(
        "must not carry an encoded '/' or '\\' (%2F, %5C): a server that decodes it could serve another path than the one checked"
    )]
    EncodedSeparator,
    /// Another scheme than https and ssh for a Git repository.
    #[error("uses scheme {0}://, which is not allowed for Git; use https:// or ssh://")]
    GitScheme(String),
    /// A `%` in an OCI reference, which never needs one.
    #[error("must not carry a '%': an OCI reference is plain text")]
    Percent,
}

/// A chart source URL or a `chartSources` prefix in normal form (see the module doc): `http`,
/// `https` or `oci`, with a host, without credentials, query, fragment or trailing `/` (but
/// the root's).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct SourceUrl(String);

impl SourceUrl {
    /// Brings a repository URL, an `oci://` reference or a prefix to normal form.
    pub(crate) fn parse(text: &str) -> Result<Self, Refused> {
        let Some((scheme, rest)) = text.split_once("://") else {
            return Err(Refused::NotUrl("no scheme".into()));
        };
        let oci = scheme.eq_ignore_ascii_case("oci");
        if oci && rest.contains('%') {
            return Err(Refused::Percent);
        }
        // An OCI reference is parsed as the https URL of its registry, so its host is
        // normalised as a web host's is (the url crate leaves the host of `oci:` alone).
        let web = if oci {
            Url::parse(&format!("https://{rest}"))
        } else {
            Url::parse(text)
        }
        .map_err(|e| Refused::NotUrl(e.to_string()))?;
        if web.query().is_some() || web.fragment().is_some() {
            return Err(Refused::Query);
        }
        let normal = Self::of(&web)?;
        Ok(match oci {
            true => Self(format!("oci://{}", &normal.0["https://".len()..])),
            false => normal,
        })
    }

    /// The normal form of a URL the hub is about to fetch, its query and fragment left out
    /// (they name no other place).
    pub(crate) fn of(url: &Url) -> Result<Self, Refused> {
        match url.scheme() {
            "http" | "https" => {}
            other => return Err(Refused::Scheme(other.to_owned())),
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(Refused::Credentials);
        }
        let Some(host) = url.host_str() else {
            return Err(Refused::NotUrl("no host".into()));
        };
        let path = url.path().to_ascii_lowercase();
        if path.contains("%2f") || path.contains("%5c") {
            return Err(Refused::EncodedSeparator);
        }
        let mut normal = url.clone();
        normal.set_query(None);
        normal.set_fragment(None);
        // `/team-e/` and `/team-e` name one repository, one prefix.
        let trimmed = normal.path().trim_end_matches('/').to_owned();
        normal.set_path(if trimmed.is_empty() { "/" } else { &trimmed });
        // `charts.example.com.` is `charts.example.com` to DNS.
        if let Some(bare) = host.strip_suffix('.').filter(|b| !b.is_empty()) {
            normal
                .set_host(Some(bare))
                .map_err(|e| Refused::NotUrl(e.to_string()))?;
        }
        Ok(Self(normal.into()))
    }

    /// Brings a Git repository URL (or a Git `sources` prefix) to normal form, as
    /// [`SourceUrl::parse`] does a repository's: `https://` (and `http://`, which admission
    /// takes only under a listed prefix) as a web URL (no credentials),
    /// `ssh://` with its host and path normalised the same way, the user it logs in as kept
    /// (`git@`, letters, digits, `.`, `_`, `-`; no password) and port 22 dropped. Returns the
    /// repository's name, without a trailing `.git` (`…/charts.git` and `…/charts` are one
    /// repository, one prefix), and the URL to fetch, the `.git` kept as written.
    pub(crate) fn git(text: &str) -> Result<(Self, String), Refused> {
        let Some((scheme, rest)) = text.split_once("://") else {
            return Err(Refused::NotUrl("no scheme".into()));
        };
        let fetch = match scheme.to_ascii_lowercase().as_str() {
            "https" | "http" => {
                let web = Url::parse(text).map_err(|e| Refused::NotUrl(e.to_string()))?;
                if web.query().is_some() || web.fragment().is_some() {
                    return Err(Refused::Query);
                }
                Self::of(&web)?.0
            }
            "ssh" => Self::ssh(rest)?,
            other => return Err(Refused::GitScheme(other.to_owned())),
        };
        let name = match fetch.strip_suffix(".git") {
            Some(bare) if !bare.ends_with('/') => bare.to_owned(),
            _ => fetch.clone(),
        };
        Ok((Self(name), fetch))
    }

    /// The normal form of the part of an `ssh://` URL after the scheme.
    fn ssh(rest: &str) -> Result<String, Refused> {
        if rest.contains(['?', '#']) {
            return Err(Refused::Query);
        }
        let raw =
            Url::parse(&format!("ssh://{rest}")).map_err(|e| Refused::NotUrl(e.to_string()))?;
        if raw.password().is_some() {
            return Err(Refused::Credentials);
        }
        let user = raw.username();
        if !user
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return Err(Refused::Credentials);
        }
        let host = raw
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| Refused::NotUrl("no host".into()))?;
        // The host and path are normalised as a web URL's are (case, IPv4 forms, dot segments,
        // `%2e`); the port is the one written, 22 being the default.
        let web = Url::parse(&format!("https://{host}{}", raw.path()))
            .map_err(|e| Refused::NotUrl(e.to_string()))?;
        let normal = Self::of(&web)?;
        let host_path = &normal.0["https://".len()..];
        let (host, path) = host_path.split_at(host_path.find('/').unwrap_or(host_path.len()));
        let user = match user.is_empty() {
            true => String::new(),
            false => format!("{user}@"),
        };
        let port = match raw.port() {
            Some(port) if port != 22 => format!(":{port}"),
            _ => String::new(),
        };
        Ok(format!("ssh://{user}{host}{port}{path}"))
    }

    /// The URL as text.
    pub(crate) fn as_str(&self) -> &str {
        &self.0
    }

    /// The scheme: `http`, `https`, `oci` or (a Git repository's) `ssh`.
    pub(crate) fn scheme(&self) -> &str {
        self.0.split_once("://").map_or("", |(scheme, _)| scheme)
    }

    /// True when `other` lies under this prefix, matching whole path segments:
    /// `https://charts.example.com/team-a/` (or without the slash) holds
    /// `https://charts.example.com/team-a/web` but not `https://charts.example.com/team-a-x/`,
    /// nor `https://charts.example.com.evil.io/`.
    pub(crate) fn holds(&self, other: &SourceUrl) -> bool {
        let base = self.0.trim_end_matches('/');
        other.0.trim_end_matches('/') == base || other.0.starts_with(&format!("{base}/"))
    }

    /// Why the host leads back into the hub (its loopback, its link-local network, a cloud
    /// metadata service), or None.
    pub(crate) fn internal(&self) -> Option<&'static str> {
        let web = match self.scheme() {
            "oci" => Url::parse(&format!("https{}", &self.0["oci".len()..])).ok()?,
            "ssh" => Url::parse(&format!("https{}", &self.0["ssh".len()..])).ok()?,
            _ => Url::parse(&self.0).ok()?,
        };
        internal_host(&web.host()?)
    }
}

impl std::fmt::Display for SourceUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a host leads back into the hub, or None: loopback, link-local (where cloud metadata
/// services answer), unspecified addresses, and names such as `localhost` and
/// `metadata.google.internal`. Other names are checked when they are resolved (see the chart
/// cache's resolver).
pub(crate) fn internal_host(host: &Host<&str>) -> Option<&'static str> {
    match host {
        Host::Ipv4(ip) => internal_ip(IpAddr::V4(*ip)),
        Host::Ipv6(ip) => internal_ip(IpAddr::V6(*ip)),
        Host::Domain(name) => internal_name(name),
    }
}

/// Why an address leads back into the hub, or None.
pub(crate) fn internal_ip(ip: IpAddr) -> Option<&'static str> {
    /// AWS's instance metadata service over IPv6.
    const AWS_METADATA: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);
    match ip {
        IpAddr::V4(v4) if v4.is_loopback() => Some("a loopback address"),
        IpAddr::V4(v4) if v4.is_link_local() => {
            Some("a link-local address (where cloud metadata services answer)")
        }
        IpAddr::V4(v4) if v4.octets()[0] == 0 => Some("an unspecified address"),
        IpAddr::V4(_) => None,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => internal_ip(IpAddr::V4(v4)),
            None if v6.is_loopback() => Some("a loopback address"),
            None if v6.is_unspecified() => Some("an unspecified address"),
            None if v6.segments()[0] & 0xffc0 == 0xfe80 => {
                Some("a link-local address (where cloud metadata services answer)")
            }
            None if v6 == AWS_METADATA => Some("a cloud metadata address"),
            None => None,
        },
    }
}

/// Why a host name leads back into the hub, or None.
pub(crate) fn internal_name(name: &str) -> Option<&'static str> {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") {
        Some("a loopback name")
    } else if name == "metadata" || name == "metadata.goog" || name.ends_with(".internal") {
        Some("a cloud metadata name")
    } else {
        None
    }
}

/// Where a repository says to go next, `location` (an archive URL in its index, a redirect's
/// `Location`) taken relative to `base`, checked to lie under `scope`. On refusal, what to
/// say of the location (never more than [`SHOWN`] characters of it).
pub(crate) fn follow(base: &Url, location: &str, scope: &SourceUrl) -> Result<Url, String> {
    let url = base
        .join(location)
        .map_err(|e| format!("{} ({e})", shown(location)))?;
    let normal =
        SourceUrl::of(&url).map_err(|refused| format!("{}: {refused}", shown_url(&url)))?;
    if scope.holds(&normal) {
        Ok(url)
    } else {
        Err(format!(
            "{}, outside the chartSources prefix {scope}",
            shown_url(&url)
        ))
    }
}

/// The most of a URL a repository gave that a message shows.
pub(crate) const SHOWN: usize = 200;

/// A URL a repository gave, for a message: without credentials, query or fragment, cut at
/// [`SHOWN`] characters.
pub(crate) fn shown_url(url: &Url) -> String {
    let mut bare = url.clone();
    let _ = bare.set_username("");
    let _ = bare.set_password(None);
    bare.set_query(None);
    bare.set_fragment(None);
    shown(bare.as_str())
}

/// Text a repository gave, for a message: printable ASCII only, cut at [`SHOWN`] characters.
fn shown(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(SHOWN)
        .map(|c| if c.is_ascii_graphic() { c } else { '?' })
        .collect();
    if text.chars().count() > SHOWN {
        out.push('…');
    }
    out
}

/// Removes the user information (`user:password@`) of every URL in a text, so no message or log
/// line shows credentials.
pub(crate) fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| matches!(c, '/' | '?' | '#' | '"' | '\'') || c.is_whitespace())
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        out.push_str(
            authority
                .rfind('@')
                .map_or(authority, |at| &authority[at + 1..]),
        );
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests;
