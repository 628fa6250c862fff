//! Servers that act against the hub's chart fetches: another host a registry redirects to, recording what reaches it; a token service whose answer never ends.

use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncReadExt as _, AsyncWriteExt as _},
    net::{TcpListener, TcpStream},
};
use tokio_rustls::{
    TlsAcceptor,
    rustls::{
        ServerConfig,
        pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _},
    },
};
use tokio_util::sync::CancellationToken;

use super::repo::PrivateCa;

/// The head of one request: its request line and its headers, names in lower case.
#[derive(Clone, Debug)]
pub struct SeenRequest {
    /// `GET /path HTTP/1.1`.
    pub line: String,
    /// Every header, name lower-cased.
    pub headers: Vec<(String, String)>,
}

#[allow(dead_code)] // used by some test crates only
impl SeenRequest {
    /// The value of header `name` (lower case), if sent.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Reads a request's head (up to 64 KiB); `None` when the client sent none.
pub(super) async fn read_head(stream: &mut (impl AsyncRead + Unpin)) -> Option<SeenRequest> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .ok()?
            .ok()?;
        if n == 0 || head.len() > 64 << 10 {
            return None;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head);
    let mut lines = text.split("\r\n");
    let line = lines.next()?.to_owned();
    let headers = lines
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Some(SeenRequest { line, headers })
}

/// Accepts connections on `listener` until `stop`, each answered by `answer` on a task of its
/// own, on a thread and runtime of their own: a test blocking its own runtime (waiting for a
/// helm it started, say) never stops the server from answering that helm.
pub(super) fn accept_until<F, Fut>(
    listener: std::net::TcpListener,
    stop: CancellationToken,
    answer: F,
) where
    F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the test server");
        runtime.block_on(async move {
            let listener = TcpListener::from_std(listener).unwrap();
            loop {
                let accepted = tokio::select! {
                    () = stop.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                if let Ok((stream, _)) = accepted {
                    tokio::spawn(answer(stream));
                }
            }
        });
    });
}

/// Another host (127.0.0.2) serving files from a directory over plain HTTP, as the storage a
/// registry redirects its blobs to would, and recording every request that reaches it.
#[allow(dead_code)] // used by some test crates only
pub struct Stranger {
    /// Where it listens.
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<SeenRequest>>>,
    root: Arc<Mutex<Option<PathBuf>>>,
    stop: CancellationToken,
}

#[allow(dead_code)] // used by some test crates only
impl Stranger {
    /// Listens on a free port of 127.0.0.2, answering 404 until [`Stranger::serve_files`].
    pub fn serve() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.2:0")
            .expect("127.0.0.2 is a loopback address of this machine");
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<SeenRequest>>> = Arc::default();
        let stop = CancellationToken::new();
        let root: Arc<Mutex<Option<PathBuf>>> = Arc::default();
        let (files, record) = (root.clone(), seen.clone());
        accept_until(listener, stop.clone(), move |mut stream| {
            let (root, record) = (files.lock().unwrap().clone(), record.clone());
            async move {
                let Some(request) = read_head(&mut stream).await else {
                    return;
                };
                record.lock().unwrap().push(request.clone());
                let mut parts = request.line.split(' ');
                let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
                let path = path.split('?').next().unwrap_or("").trim_start_matches('/');
                let file = root
                    .filter(|_| !path.split('/').any(|p| p == ".."))
                    .and_then(|root| std::fs::read(root.join(path)).ok());
                let head = match &file {
                    Some(body) => format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    ),
                    None => {
                        "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                            .into()
                    }
                };
                let _ = stream.write_all(head.as_bytes()).await;
                if let (Some(body), "GET") = (&file, method) {
                    let _ = stream.write_all(body).await;
                }
                let _ = stream.shutdown().await;
            }
        });
        Self {
            addr,
            seen,
            root,
            stop,
        }
    }

    /// Serves `root`'s files by path (GET and HEAD) from now on.
    pub fn serve_files(&self, root: PathBuf) {
        *self.root.lock().unwrap() = Some(root);
    }

    /// Every request that reached it so far.
    pub fn seen(&self) -> Vec<SeenRequest> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Stranger {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A token service (HTTPS on 127.0.0.1, with a certificate of a [`PrivateCa`]) whose every
/// answer is a token that never ends: it writes until the client stops reading, 1 GiB or 60 s,
/// whichever comes first.
#[allow(dead_code)] // used by some test crates only
pub struct EndlessTokens {
    /// Where it listens.
    pub addr: SocketAddr,
    sent: Arc<AtomicU64>,
    asked: Arc<AtomicU64>,
    stop: CancellationToken,
}

#[allow(dead_code)] // used by some test crates only
impl EndlessTokens {
    /// Listens on a free loopback port, with a certificate `ca` issues.
    pub fn serve(ca: &PrivateCa) -> Self {
        let acceptor = tls_acceptor(ca);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (sent, asked) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let stop = CancellationToken::new();
        let (bytes, requests) = (sent.clone(), asked.clone());
        accept_until(listener, stop.clone(), move |stream| {
            let (bytes, requests, acceptor) = (bytes.clone(), requests.clone(), acceptor.clone());
            async move {
                let Ok(Ok(mut stream)) =
                    tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await
                else {
                    return;
                };
                if read_head(&mut stream).await.is_none() {
                    return;
                }
                requests.fetch_add(1, Ordering::Relaxed);
                let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n{\"token\":\"";
                if stream.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let chunk = vec![b'A'; 64 << 10];
                let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
                let mut written = 0u64;
                while written < 1 << 30 && tokio::time::Instant::now() < deadline {
                    let Ok(Ok(())) =
                        tokio::time::timeout(Duration::from_secs(5), stream.write_all(&chunk))
                            .await
                    else {
                        return;
                    };
                    written += chunk.len() as u64;
                    bytes.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                }
            }
        });
        Self {
            addr,
            sent,
            asked,
            stop,
        }
    }

    /// The realm a registry names in its challenge.
    pub fn realm(&self) -> String {
        format!("https://{}/token", self.addr)
    }

    /// Bytes of token written so far, over every request.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Requests for a token so far.
    pub fn asked(&self) -> u64 {
        self.asked.load(Ordering::Relaxed)
    }
}

impl Drop for EndlessTokens {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A TLS acceptor with a server certificate for 127.0.0.1 that `ca` issues.
pub(super) fn tls_acceptor(ca: &PrivateCa) -> TlsAcceptor {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = ca.issue(dir.path());
    let chain = CertificateDer::pem_file_iter(&cert)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(&key).unwrap();
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    TlsAcceptor::from(Arc::new(config))
}
