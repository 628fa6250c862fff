//! A registry token service as distribution's token authentication expects one: it exchanges one user's basic auth for a signed JWT (ES256, its certificate in the `x5c` header), and mints tokens a test hands out as registry tokens.

use std::{
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use base64::Engine as _;
use ring::{
    rand::SystemRandom,
    signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair},
};
use tokio::io::AsyncWriteExt as _;
use tokio_util::sync::CancellationToken;

use super::{
    hostile::{accept_until, read_head, tls_acceptor},
    repo::{PrivateCa, sh},
};

/// The issuer and the service its tokens name, as the registry's configuration must.
pub const ISSUER: &str = "lab-tokens";
/// The service (audience) of its tokens.
pub const SERVICE: &str = "charts";

/// The token service: HTTPS on 127.0.0.1 with a certificate of a [`PrivateCa`].
#[allow(dead_code)] // used by some test crates only
pub struct TokenService {
    /// `https://127.0.0.1:PORT/token`, the realm the registry names.
    pub realm: String,
    signer: Arc<Signer>,
    /// Tokens issued for basic auth so far.
    issued: Arc<AtomicU64>,
    dir: tempfile::TempDir,
    stop: CancellationToken,
}

/// The key tokens are signed with and its self-signed certificate.
struct Signer {
    key: EcdsaKeyPair,
    /// The certificate, DER, base64 (standard, as `x5c` holds it).
    x5c: String,
}

impl Signer {
    /// A JWT granting each repository its actions (`access`) to `subject` for five minutes.
    fn token(&self, subject: &str, access: &[(String, Vec<String>)]) -> String {
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let header = serde_json::json!({"typ": "JWT", "alg": "ES256", "x5c": [self.x5c]});
        let claims = serde_json::json!({
            "iss": ISSUER, "sub": subject, "aud": SERVICE,
            "exp": now + 300, "nbf": now - 10, "iat": now, "jti": format!("{now}-{subject}"),
            "access": access
                .iter()
                .map(|(name, actions)| serde_json::json!({"type": "repository", "name": name, "actions": actions}))
                .collect::<Vec<_>>(),
        });
        let signed = format!(
            "{}.{}",
            url.encode(header.to_string()),
            url.encode(claims.to_string())
        );
        let signature = self
            .key
            .sign(&SystemRandom::new(), signed.as_bytes())
            .expect("ECDSA signs");
        format!("{signed}.{}", url.encode(signature.as_ref()))
    }
}

#[allow(dead_code)] // used by some test crates only
impl TokenService {
    /// Serves tokens to basic auth `user` and `password` only, for whatever repository scope
    /// is asked, with a certificate `ca` issues.
    pub fn serve(ca: &PrivateCa, user: &str, password: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        sh(&format!(
            "cd {d} && openssl ecparam -name prime256v1 -genkey -noout -out sec1.key 2>/dev/null \
             && openssl pkcs8 -topk8 -nocrypt -in sec1.key -outform DER -out key.p8 \
             && openssl req -x509 -new -key sec1.key -subj /CN={ISSUER} -days 1 -out issuer.crt 2>/dev/null \
             && openssl x509 -in issuer.crt -outform DER -out issuer.der",
            d = dir.path().display()
        ));
        let p8 = std::fs::read(dir.path().join("key.p8")).unwrap();
        let key =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &p8, &SystemRandom::new())
                .expect("openssl wrote a PKCS#8 P-256 key");
        let der = std::fs::read(dir.path().join("issuer.der")).unwrap();
        let signer = Arc::new(Signer {
            key,
            x5c: base64::engine::general_purpose::STANDARD.encode(der),
        });
        let acceptor = tls_acceptor(ca);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let realm = format!("https://{}/token", listener.local_addr().unwrap());
        let expected = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        );
        let (issued, stop) = (Arc::new(AtomicU64::new(0)), CancellationToken::new());
        let (signing, counted, subject) = (signer.clone(), issued.clone(), user.to_owned());
        accept_until(listener, stop.clone(), move |stream| {
            let (signer, counted, acceptor) = (signing.clone(), counted.clone(), acceptor.clone());
            let (expected, subject) = (expected.clone(), subject.clone());
            async move {
                let Ok(Ok(mut stream)) =
                    tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await
                else {
                    return;
                };
                let Some(request) = read_head(&mut stream).await else {
                    return;
                };
                let answer = match request.header("authorization") == Some(expected.as_str()) {
                    true => {
                        counted.fetch_add(1, Ordering::Relaxed);
                        let token = signer.token(&subject, &scopes(&request.line));
                        let body = serde_json::json!({
                            "token": token, "access_token": token, "expires_in": 300,
                        })
                        .to_string();
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        )
                    }
                    false => "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into(),
                };
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.shutdown().await;
            }
        });
        Self {
            realm,
            signer,
            issued,
            dir,
            stop,
        }
    }

    /// The certificate its tokens are signed under: the registry's `rootcertbundle`.
    pub fn issuer_cert(&self) -> PathBuf {
        self.dir.path().join("issuer.crt")
    }

    /// A token granting pull of `repository` (`charts/NAME`), for a Secret's `token` key.
    pub fn pull_token(&self, repository: &str) -> String {
        self.signer
            .token("robot", &[(repository.to_owned(), vec!["pull".into()])])
    }

    /// Tokens issued for basic auth so far.
    pub fn issued(&self) -> u64 {
        self.issued.load(Ordering::Relaxed)
    }
}

impl Drop for TokenService {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The repository scopes a token request asks for (`scope=repository:NAME:ACTIONS`), each as
/// the repository and its actions.
fn scopes(line: &str) -> Vec<(String, Vec<String>)> {
    let target = line.split(' ').nth(1).unwrap_or("");
    let query = target.split_once('?').map_or("", |(_, q)| q);
    url::form_urlencoded::parse(query.as_bytes())
        .filter(|(k, _)| k == "scope")
        .filter_map(|(_, scope)| {
            let mut parts = scope.splitn(3, ':');
            match (parts.next(), parts.next(), parts.next()) {
                (Some("repository"), Some(name), Some(actions)) => Some((
                    name.to_owned(),
                    actions.split(',').map(str::to_owned).collect(),
                )),
                _ => None,
            }
        })
        .collect()
}
