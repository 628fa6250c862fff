//! HTTP fetches of chart sources for the chart cache: redirects followed one hop at a time under the scope, names resolved without the hub's own addresses, answers bounded in size.
//!
//! The HTTP client follows no redirect itself: its policy cannot know the `chartSources`
//! prefix a fetch must stay under (its scope), so [`Fetcher::get`] follows each `Location` only
//! when it lies under the scope ([`source::follow`]), [`MAX_REDIRECTS`] in a row at most, and
//! refuses the rest without requesting them. Names are resolved by [`PublicResolver`], which
//! drops loopback, link-local and unspecified addresses, unless the scope's own host is such a
//! host (a policy listed it, as the lab's loopback repositories are). With a proxy
//! (`HTTPS_PROXY`), the proxy resolves the names and this check does not apply.
//!
//! A source with credentials gets a client of its own (its CA bundle added to the roots, its
//! client certificate), built once per Secret resource version, and its basic auth or bearer
//! token on each request to its own scheme, host and port only: never to another origin, a
//! redirect included.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use reqwest::Url;

use crate::{
    charts::credentials::{Auth, Material},
    metrics::Metrics,
    policy::access::Credentials,
    policy::source::{self, SourceUrl, redact},
};

/// How long connecting to a repository may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a repository may stay silent in the middle of an answer.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one fetch may take in all.
const FETCH_TIMEOUT: Duration = Duration::from_secs(300);
/// Redirects followed in a row, each under the scope.
pub(crate) const MAX_REDIRECTS: usize = 5;

/// Why a fetch failed. URLs in it carry no credentials; nothing of what was answered shows.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The HTTP client could not be built.
    #[error("building the HTTP client of the chart cache: {0}")]
    Client(#[source] reqwest::Error),
    /// A source's CA bundle or client certificate cannot be used.
    #[error("{what} of {secret} cannot be used: {}", causes(source))]
    Tls {
        what: &'static str,
        secret: String,
        #[source]
        source: reqwest::Error,
    },
    /// The request failed: connection, TLS, timeout, a name resolving only to refused addresses.
    #[error("fetching {url}: {}", causes(source))]
    Request {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// A redirect that is not followed.
    #[error(
        "{url} redirects to {reason}; refused: redirects are followed only under the chartSources prefix that allows the repository, {MAX_REDIRECTS} at most"
    )]
    Redirect { url: String, reason: String },
    /// The server answered with an error status.
    #[error("{url} answered {status}")]
    Status {
        url: String,
        status: reqwest::StatusCode,
    },
    /// The answer was larger than allowed.
    #[error("{url} is larger than {limit} MiB; refused")]
    TooLarge { url: String, limit: u64 },
    /// The sink refused a chunk (the cache could not write it).
    #[error("keeping what {url} answered: {source}")]
    Sink {
        url: String,
        #[source]
        source: std::io::Error,
    },
}

/// An error and its causes, one after the other (reqwest shows only the outermost).
fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    text
}

/// Resolves names as the system does and drops the addresses that lead back into the hub
/// (loopback, link-local where cloud metadata answers, unspecified), so a repository's name
/// (its DNS answer, which a tenant may control) cannot turn a fetch onto the hub itself.
/// Literal addresses never reach a resolver: admission checks them.
pub(crate) struct PublicResolver;

impl reqwest::dns::Resolve for PublicResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let name = name.as_str().to_owned();
        Box::pin(async move {
            let all: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            let (kept, dropped): (Vec<SocketAddr>, Vec<SocketAddr>) = all
                .into_iter()
                .partition(|a| source::internal_ip(a.ip()).is_none());
            if let (true, Some(first)) = (kept.is_empty(), dropped.first()) {
                let why = source::internal_ip(first.ip()).unwrap_or_default();
                return Err(format!(
                    "{name} resolves to {} ({why}); refused: name such a repository by its address in a TenancyPolicy's chartSources",
                    first.ip()
                )
                .into());
            }
            Ok(Box::new(kept.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// An HTTP client that follows no redirect, resolving names through `resolver` when given.
fn http_client(resolver: Option<PublicResolver>) -> Result<reqwest::Client, Error> {
    builder(resolver).build().map_err(Error::Client)
}

/// A client builder that follows no redirect, resolving names through `resolver` when given.
fn builder(resolver: Option<PublicResolver>) -> reqwest::ClientBuilder {
    let builder = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .read_timeout(READ_TIMEOUT)
        .timeout(FETCH_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("tenancy-hub/", env!("CARGO_PKG_VERSION")));
    match resolver {
        Some(resolver) => builder.dns_resolver(Arc::new(resolver)),
        None => builder,
    }
}

/// What a fetch of a source with credentials carries: the Secret's content, and the origin
/// (scheme, host and port) of the source, the only one its auth is sent to.
pub(crate) struct Access<'a> {
    /// Whose credentials: the key its client is kept under.
    pub(crate) credentials: &'a Credentials,
    /// The Secret in words, for messages.
    pub(crate) secret: String,
    /// The Secret's content.
    pub(crate) material: &'a Material,
    /// The source's own origin.
    pub(crate) origin: url::Origin,
}

impl Access<'_> {
    /// Adds the auth to a request of `url` when it goes to the source's own origin.
    fn authorize(&self, request: reqwest::RequestBuilder, url: &Url) -> reqwest::RequestBuilder {
        if url.origin() != self.origin {
            return request;
        }
        match &self.material.auth {
            Some(Auth::Basic { username, password }) => {
                request.basic_auth(username, Some(password))
            }
            Some(Auth::Bearer(token)) => request.bearer_auth(token),
            None => request,
        }
    }
}

/// A source's own client, built from one resource version of its Secret.
struct Built {
    version: String,
    client: reqwest::Client,
    /// When a fetch last took it.
    used: std::time::Instant,
}

/// Sources' own clients kept at most: beyond, the least recently used goes (a tenant naming
/// many Secrets of its own cannot grow the hub's connection pools without bound).
pub(crate) const MAX_OWN_CLIENTS: usize = 256;

/// Fetches chart sources over HTTP, counting the bytes.
pub(crate) struct Fetcher {
    /// Resolves names through [`PublicResolver`].
    client: reqwest::Client,
    /// Resolves names as the system does: for scopes whose own host leads back into the hub
    /// (a policy listed `http://localhost:8080/`).
    listed_client: reqwest::Client,
    /// Clients of sources with a CA bundle or client certificate, by whose credentials and
    /// whether names resolve as the system does; one resource version each.
    own: Mutex<HashMap<(Credentials, bool), Built>>,
    metrics: Arc<Metrics>,
}

impl Fetcher {
    /// A fetcher counting into `metrics` (rustls, the system's roots, `SSL_CERT_FILE` honoured).
    pub(crate) fn new(metrics: Arc<Metrics>) -> Result<Self, Error> {
        Ok(Self {
            client: http_client(Some(PublicResolver))?,
            listed_client: http_client(None)?,
            own: Mutex::new(HashMap::new()),
            metrics,
        })
    }

    /// The client for a fetch under `scope` with `access`: the shared one, or the source's own
    /// when its Secret holds a CA bundle or a client certificate (built again when the Secret's
    /// resource version changed).
    fn client(
        &self,
        scope: &SourceUrl,
        access: Option<&Access<'_>>,
    ) -> Result<reqwest::Client, Error> {
        let listed = scope.internal().is_some();
        let shared = match listed {
            true => &self.listed_client,
            false => &self.client,
        };
        let Some(access) =
            access.filter(|a| a.material.ca.is_some() || a.material.identity.is_some())
        else {
            return Ok(shared.clone());
        };
        let key = (access.credentials.clone(), listed);
        let version = &access.material.version;
        let mut own = self.own.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(built) = own.get_mut(&key).filter(|b| &b.version == version) {
            built.used = std::time::Instant::now();
            return Ok(built.client.clone());
        }
        let tls = |what, source| Error::Tls {
            what,
            secret: access.secret.clone(),
            source,
        };
        let mut builder = builder((!listed).then_some(PublicResolver));
        if let Some(ca) = &access.material.ca {
            for cert in reqwest::Certificate::from_pem_bundle(ca).map_err(|e| tls("ca.crt", e))? {
                builder = builder.add_root_certificate(cert);
            }
        }
        if let Some((cert, key)) = &access.material.identity {
            let pem = [cert.as_slice(), b"\n", key.as_slice()].concat();
            let identity =
                reqwest::Identity::from_pem(&pem).map_err(|e| tls("tls.crt and tls.key", e))?;
            builder = builder.identity(identity);
        }
        let client = builder.build().map_err(|e| tls("ca.crt or tls.crt", e))?;
        while own.len() >= MAX_OWN_CLIENTS && !own.contains_key(&key) {
            let oldest = own
                .iter()
                .min_by_key(|(_, b)| b.used)
                .map(|(k, _)| k.clone())
                .expect("not empty");
            own.remove(&oldest);
        }
        own.insert(
            key,
            Built {
                version: version.clone(),
                client: client.clone(),
                used: std::time::Instant::now(),
            },
        );
        Ok(client)
    }

    /// GETs `url`, handing each chunk to `sink`; follows redirects that stay under `scope`
    /// ([`MAX_REDIRECTS`] at most) and refuses the others without requesting them, and answers
    /// over `limit` bytes. With `access`, each request to the source's own origin carries its
    /// auth, and the source's CA bundle and client certificate are used. Counts the bytes as
    /// `kind`. Returns the size.
    pub(crate) async fn get(
        &self,
        url: &Url,
        scope: &SourceUrl,
        access: Option<&Access<'_>>,
        limit: u64,
        kind: &'static str,
        mut sink: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<u64, Error> {
        let client = self.client(scope, access)?;
        let mut at = url.clone();
        let mut redirects = 0;
        let mut response = loop {
            let shown = redact(at.as_str());
            let request = client.get(at.clone());
            let request = match access {
                Some(access) => access.authorize(request, &at),
                None => request,
            };
            let response = request.send().await.map_err(|source| Error::Request {
                url: shown.clone(),
                source: source.without_url(),
            })?;
            let location = response
                .headers()
                .get(reqwest::header::LOCATION)
                .map(|l| String::from_utf8_lossy(l.as_bytes()).into_owned());
            let Some(location) = location.filter(|_| response.status().is_redirection()) else {
                break response;
            };
            redirects += 1;
            let next = match redirects > MAX_REDIRECTS {
                true => Err(format!("more places than {MAX_REDIRECTS} in a row")),
                false => source::follow(&at, &location, scope),
            };
            at = next.map_err(|reason| Error::Redirect { url: shown, reason })?;
        };
        let shown = || redact(at.as_str());
        if !response.status().is_success() {
            return Err(Error::Status {
                url: shown(),
                status: response.status(),
            });
        }
        let too_large = || Error::TooLarge {
            url: shown(),
            limit: limit >> 20,
        };
        if response.content_length().is_some_and(|n| n > limit) {
            return Err(too_large());
        }
        let mut size = 0u64;
        while let Some(chunk) = response.chunk().await.map_err(|source| Error::Request {
            url: shown(),
            source: source.without_url(),
        })? {
            size += chunk.len() as u64;
            self.metrics.chart_fetched(kind, chunk.len() as u64);
            if size > limit {
                return Err(too_large());
            }
            sink(&chunk).map_err(|source| Error::Sink {
                url: shown(),
                source,
            })?;
        }
        Ok(size)
    }
}

/// A loopback HTTP server for the tests of the chart cache: fixed files and redirects,
/// counting the requests of each path.
#[cfg(test)]
pub(crate) mod testing {
    use std::{
        collections::HashMap,
        sync::{Arc, Mutex},
    };

    use axum::http::{HeaderMap, StatusCode, Uri, header::AUTHORIZATION, header::LOCATION};
    use axum::response::IntoResponse;

    /// What a path answers.
    #[derive(Clone)]
    pub(crate) enum Answer {
        /// 200 with this body.
        Body(Vec<u8>),
        /// 302 to this location.
        Redirect(String),
        /// 200 with this body when the request carries this `Authorization`, else 401.
        Guarded(String, Vec<u8>),
    }

    /// A request's path and `Authorization`.
    type Seen = (String, Option<String>);

    /// A running server.
    pub(crate) struct Server {
        /// `http://127.0.0.1:PORT`.
        pub(crate) origin: String,
        hits: Arc<Mutex<HashMap<String, usize>>>,
        /// The `Authorization` of every request, by path, in order.
        auths: Arc<Mutex<Vec<Seen>>>,
    }

    impl Server {
        /// Serves `answers` by path; every other path answers 404.
        pub(crate) async fn serve(answers: Vec<(&str, Answer)>) -> Self {
            let answers = answers.into_iter().map(|(p, a)| (p.to_owned(), a));
            Self::serve_with(|_| answers.collect()).await
        }

        /// Serves what `answers` gives for the server's origin (`http://127.0.0.1:PORT`).
        pub(crate) async fn serve_with(
            answers: impl FnOnce(&str) -> Vec<(String, Answer)>,
        ) -> Self {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let origin = format!("http://{}", listener.local_addr().unwrap());
            let answers: Arc<HashMap<String, Answer>> =
                Arc::new(answers(&origin).into_iter().collect());
            let hits = Arc::new(Mutex::new(HashMap::new()));
            let auths = Arc::new(Mutex::new(Vec::new()));
            let (counted, seen) = (hits.clone(), auths.clone());
            let app = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap| {
                let (answers, hits, auths) = (answers.clone(), counted.clone(), seen.clone());
                async move {
                    let path = uri.path().to_owned();
                    *hits.lock().unwrap().entry(path.clone()).or_insert(0) += 1;
                    let auth = headers
                        .get(AUTHORIZATION)
                        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
                    auths.lock().unwrap().push((path.clone(), auth.clone()));
                    match answers.get(&path) {
                        Some(Answer::Guarded(wanted, body)) if auth.as_ref() == Some(wanted) => {
                            (StatusCode::OK, body.clone()).into_response()
                        }
                        Some(Answer::Guarded(..)) => StatusCode::UNAUTHORIZED.into_response(),
                        Some(Answer::Body(body)) => (StatusCode::OK, body.clone()).into_response(),
                        Some(Answer::Redirect(to)) => {
                            (StatusCode::FOUND, [(LOCATION, to.clone())]).into_response()
                        }
                        None => StatusCode::NOT_FOUND.into_response(),
                    }
                }
            });
            tokio::spawn(async move { axum::serve(listener, app).await });
            Self {
                origin,
                hits,
                auths,
            }
        }

        /// The `Authorization` each request of `path` carried, in order.
        pub(crate) fn auths(&self, path: &str) -> Vec<Option<String>> {
            let auths = self.auths.lock().unwrap();
            auths
                .iter()
                .filter(|(p, _)| p == path)
                .map(|(_, a)| a.clone())
                .collect()
        }

        /// How many requests of `path` it answered.
        pub(crate) fn hits(&self, path: &str) -> usize {
            self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{Answer, Server};
    use super::*;

    fn fetcher() -> Fetcher {
        Fetcher::new(Arc::new(Metrics::new())).unwrap()
    }

    #[test]
    fn sources_own_clients_are_bounded_the_least_recently_used_going_first() {
        let dir = tempfile::tempdir().unwrap();
        let made = std::process::Command::new("openssl")
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
            ])
            .args(["-nodes", "-days", "1", "-subj", "/CN=test CA", "-keyout"])
            .arg(dir.path().join("ca.key"))
            .arg("-out")
            .arg(dir.path().join("ca.crt"))
            .output()
            .expect("openssl runs");
        assert!(made.status.success(), "{made:?}");
        let material = crate::charts::credentials::Material {
            version: "1".into(),
            ca: Some(std::fs::read(dir.path().join("ca.crt")).unwrap()),
            ..Default::default()
        };
        let scope = SourceUrl::parse("https://charts.example.com/").unwrap();
        let fetcher = fetcher();
        let tenant = |i: usize| Credentials::Tenant {
            namespace: "team-a".into(),
            secret: format!("own-{i}"),
            policy: "team-a".into(),
            prefix: scope.to_string(),
            labels: Vec::new(),
        };
        let take = |credentials: &Credentials| {
            let access = Access {
                credentials,
                secret: "a Secret".into(),
                material: &material,
                origin: Url::parse(scope.as_str()).unwrap().origin(),
            };
            fetcher.client(&scope, Some(&access)).unwrap();
        };
        let first = tenant(0);
        take(&first);
        for i in 1..MAX_OWN_CLIENTS + 10 {
            take(&tenant(i));
            // The first stays in use, so it is never the least recently used.
            take(&first);
        }
        let own = fetcher.own.lock().unwrap();
        assert_eq!(own.len(), MAX_OWN_CLIENTS);
        assert!(own.contains_key(&(first, false)), "the one in use is kept");
        assert!(!own.contains_key(&(tenant(1), false)), "the oldest went");
    }

    async fn get(
        fetcher: &Fetcher,
        server: &Server,
        path: &str,
        scope: &str,
    ) -> Result<Vec<u8>, Error> {
        let url = Url::parse(&format!("{}{path}", server.origin)).unwrap();
        let scope = SourceUrl::parse(&format!("{}{scope}", server.origin)).unwrap();
        let mut body = Vec::new();
        fetcher
            .get(&url, &scope, None, 1 << 20, "index", |chunk| {
                body.extend_from_slice(chunk);
                Ok(())
            })
            .await?;
        Ok(body)
    }

    #[tokio::test]
    async fn redirects_under_the_scope_are_followed_and_the_others_never_requested() {
        let redirect = |to: &str| Answer::Redirect(to.to_owned());
        let server = Server::serve(vec![
            ("/team-e/index.yaml", redirect("v2/index.yaml")),
            (
                "/team-e/v2/index.yaml",
                Answer::Body(b"entries: {}".to_vec()),
            ),
            ("/team-e/up", redirect("../team-x/index.yaml")),
            ("/team-e/encoded", redirect("%2e%2e/team-x/index.yaml")),
            (
                "/team-e/away",
                redirect("http://169.254.169.254/latest/meta-data/"),
            ),
            (
                "/team-e/creds",
                redirect("http://u:secret@127.0.0.1/team-e/x"),
            ),
            ("/team-e/loop", redirect("/team-e/loop")),
            ("/team-x/index.yaml", Answer::Body(b"team x".to_vec())),
        ])
        .await;
        let fetcher = fetcher();
        let body = get(&fetcher, &server, "/team-e/index.yaml", "/team-e/").await;
        assert_eq!(body.unwrap(), b"entries: {}");
        for (path, says) in [
            (
                "/team-e/up",
                "/team-x/index.yaml, outside the chartSources prefix",
            ),
            (
                "/team-e/encoded",
                "/team-x/index.yaml, outside the chartSources prefix",
            ),
            (
                "/team-e/away",
                "http://169.254.169.254/latest/meta-data/, outside",
            ),
            ("/team-e/creds", "must not carry credentials"),
            ("/team-e/loop", "more places than 5 in a row"),
        ] {
            let error = get(&fetcher, &server, path, "/team-e/").await.unwrap_err();
            let message = error.to_string();
            assert!(matches!(error, Error::Redirect { .. }), "{message}");
            assert!(message.contains(says), "{path}: {message}");
            assert!(!message.contains("secret"), "{message}");
        }
        assert_eq!(server.hits("/team-x/index.yaml"), 0);
        assert_eq!(server.hits("/team-e/loop"), 1 + MAX_REDIRECTS);
    }

    #[test]
    fn auth_goes_to_the_sources_own_scheme_host_and_port_only() {
        let material = Material {
            auth: Some(Auth::Basic {
                username: "u".into(),
                password: "pw".into(),
            }),
            ..Material::default()
        };
        let source = Url::parse("https://charts.example.com/team-a").unwrap();
        let access = Access {
            credentials: &Credentials::None,
            secret: "Secret tenancy-hub/pull".into(),
            material: &material,
            origin: source.origin(),
        };
        let client = reqwest::Client::new();
        let sent = |url: &str| {
            let url = Url::parse(url).unwrap();
            access
                .authorize(client.get(url.clone()), &url)
                .build()
                .unwrap()
                .headers()
                .get(reqwest::header::AUTHORIZATION)
                .map(|v| v.to_str().unwrap().to_owned())
        };
        assert_eq!(
            sent("https://charts.example.com:443/team-a/web-1.0.0.tgz").as_deref(),
            Some("Basic dTpwdw==")
        );
        for elsewhere in [
            "https://cdn.example.com/team-a/web-1.0.0.tgz",
            "http://charts.example.com/team-a/index.yaml",
            "https://charts.example.com:8443/team-a/index.yaml",
            "https://charts.example.com.evil.io/team-a/index.yaml",
        ] {
            assert_eq!(sent(elsewhere), None, "{elsewhere}");
        }
    }

    #[tokio::test]
    async fn an_answer_over_the_limit_or_an_error_status_says_so_and_nothing_of_the_body() {
        let server = Server::serve(vec![("/big", Answer::Body(vec![b'x'; 4096]))]).await;
        let fetcher = fetcher();
        let url = Url::parse(&format!("{}/big", server.origin)).unwrap();
        let scope = SourceUrl::parse(&server.origin).unwrap();
        let error = fetcher
            .get(&url, &scope, None, 1024, "index", |_| Ok(()))
            .await
            .unwrap_err();
        assert!(matches!(error, Error::TooLarge { .. }), "{error}");
        assert!(error.to_string().ends_with("is larger than 0 MiB; refused"));
        let mut taken = 0;
        fetcher
            .get(&url, &scope, None, 4096, "index", |chunk| {
                taken += chunk.len();
                Ok(())
            })
            .await
            .unwrap();
        assert_eq!(taken, 4096);
        let missing = get(&fetcher, &server, "/nothing", "/").await.unwrap_err();
        assert_eq!(
            missing.to_string(),
            format!("{}/nothing answered 404 Not Found", server.origin)
        );
    }

    #[tokio::test]
    async fn names_that_resolve_to_the_hub_itself_are_refused_unless_the_scope_names_them() {
        use reqwest::dns::Resolve as _;
        let refused = PublicResolver
            .resolve("localhost".parse().unwrap())
            .await
            .err()
            .expect("localhost resolves to loopback only")
            .to_string();
        assert!(refused.starts_with("localhost resolves to "), "{refused}");
        assert!(refused.contains("a loopback address"), "{refused}");

        let server = Server::serve(vec![("/x", Answer::Body(b"x".to_vec()))]).await;
        let port = server.origin.rsplit(':').next().unwrap();
        let by_name = Url::parse(&format!("http://localhost:{port}/x")).unwrap();
        let fetcher = fetcher();
        let error = fetcher
            .client
            .get(by_name.clone())
            .send()
            .await
            .unwrap_err();
        assert!(
            causes(&error).contains("a loopback address"),
            "{}",
            causes(&error)
        );
        let listed = SourceUrl::parse(&format!("http://localhost:{port}/")).unwrap();
        fetcher
            .get(&by_name, &listed, None, 1024, "index", |_| Ok(()))
            .await
            .expect("a scope a policy listed by its loopback name");
    }
}
