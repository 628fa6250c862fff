//! End-to-end tests of the lab's Git server and the operator's Git fetcher against it: the real git CLI pushes and clones over smart HTTP (basic auth, bearer token) and SSH (the lab's key, strict known_hosts); the fetcher resolves and fetches a chart over both, verifies an SSH-signed commit and refuses an unsigned one; a push is announced as a signed Gitea webhook.

mod common;

use std::{
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::TcpListener,
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use common::{
    fixtures::unique,
    git::{GitServer, gitea_signature, ssh_signing_key},
    lab::Lab,
    repo::example_chart,
};
use serde_json::{Value, json};

/// A directory with the example chart at charts/web and a values file per member.
fn chart_tree(dir: &Path, replicas: u32) {
    let _ = std::fs::remove_dir_all(dir.join("charts/web"));
    std::fs::create_dir_all(dir.join("charts")).unwrap();
    let out = Command::new("cp")
        .arg("-r")
        .arg(example_chart())
        .arg(dir.join("charts/web"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::create_dir_all(dir.join("values")).unwrap();
    std::fs::write(
        dir.join("values/member-1.yaml"),
        format!("replicaCount: {replicas}\n"),
    )
    .unwrap();
}

/// A fetch request of charts/web and values/member-1.yaml at `commit`, into `out`.
fn fetch_request(url: &str, auth: Value, commit: &str, out: &Path) -> Value {
    json!({
        "protocol": 1, "op": "fetch", "url": url, "ref": {"branch": "main"}, "auth": auth,
        "commit": commit, "out": out, "timeoutSeconds": 60,
        "paths": [{"path": "charts/web", "kind": "dir"}, {"path": "values/member-1.yaml", "kind": "file"}],
    })
}

/// The bytes of the files under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let meta = entry.metadata().unwrap();
        total += if meta.is_dir() {
            bytes_under(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}

#[test]
#[ignore = "needs the lab: run tests/run.sh"]
fn the_git_cli_pushes_over_http_and_clones_over_ssh_and_http() {
    let lab = Lab::get();
    let server = GitServer::get(&lab);
    let repo = server.create_repo(&unique("team/cli"));
    let tree = tempfile::tempdir().unwrap();
    chart_tree(tree.path(), 1);

    let commit = repo.push_dir(tree.path(), "main", "the web chart");

    assert_eq!(repo.tip("main"), commit);
    let home = tempfile::tempdir().unwrap();
    let ssh = format!(
        "ssh -i {} -o IdentitiesOnly=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile={}",
        server.ssh_key.display(),
        server.known_hosts.display()
    );
    for (url, header) in [
        (repo.ssh_url.clone(), String::new()),
        (
            repo.http_url.clone(),
            format!("Authorization: Bearer {}", server.token),
        ),
    ] {
        let clone = home.path().join(unique("clone"));
        let out = Command::new("git")
            .args(["clone", "-q", &url])
            .arg(&clone)
            .env("HOME", home.path())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_SSH_COMMAND", &ssh)
            .env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", "http.extraHeader")
            .env(
                "GIT_CONFIG_VALUE_0",
                if header.is_empty() {
                    "X-Lab: 1"
                } else {
                    &header
                },
            )
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "clone {url}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let values = std::fs::read_to_string(clone.join("values/member-1.yaml")).unwrap();
        assert_eq!(values, "replicaCount: 1\n", "{url}");
    }
    let anonymous = Command::new("git")
        .args(["ls-remote", &repo.http_url])
        .env("HOME", home.path())
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .unwrap();
    assert!(
        !anonymous.status.success(),
        "the server answers without credentials"
    );
}

#[test]
#[ignore = "needs the lab: run tests/run.sh"]
fn the_fetcher_resolves_and_fetches_a_chart_over_http_and_ssh() {
    let lab = Lab::get();
    let server = GitServer::get(&lab);
    let repo = server.create_repo(&unique("team/fetch"));
    let tree = tempfile::tempdir().unwrap();
    chart_tree(tree.path(), 1);
    repo.push_dir(tree.path(), "main", "one");
    chart_tree(tree.path(), 2);
    let commit = repo.push_dir(tree.path(), "main", "two");
    repo.tag(&commit, "v1.2.0");
    let http_auth = json!({"username": server.username, "password": server.password});
    let ssh_auth = json!({"sshPrivateKey": server.ssh_private_key(), "knownHosts": server.known_hosts_lines()});

    for (url, auth) in [
        (&repo.http_url, http_auth.clone()),
        (&repo.http_url, json!({"bearerToken": server.token})),
        (&repo.ssh_url, ssh_auth.clone()),
    ] {
        let started = Instant::now();
        let resolved = server.fetch(&json!({
            "protocol": 1, "op": "resolve", "url": url, "ref": {"semver": ">=1.0.0 <2.0.0"}, "auth": auth,
        }));
        let resolve_time = started.elapsed();
        assert_eq!(resolved["ok"]["commit"], json!(commit), "{url}: {resolved}");
        assert_eq!(resolved["ok"]["ref"], json!("refs/tags/v1.2.0"));
        let out = tempfile::tempdir().unwrap();
        let started = Instant::now();

        let (fetched, stats) =
            server.fetch_with_stats(&fetch_request(url, auth.clone(), &commit, out.path()));

        let fetch_time = started.elapsed();
        assert_eq!(fetched["ok"]["commit"], json!(commit), "{url}: {fetched}");
        let values = std::fs::read_to_string(out.path().join("values/member-1.yaml")).unwrap();
        assert_eq!(values, "replicaCount: 2\n");
        assert!(out.path().join("charts/web/Chart.yaml").is_file());
        let text = fetched.to_string() + &resolved.to_string();
        for secret in [&server.password, &server.token] {
            assert!(
                !text.contains(secret.as_str()),
                "an answer holds a credential: {text}"
            );
        }
        println!(
            "figure: {url}: resolve {} ms, fetch {} ms, {} bytes written; {stats}",
            resolve_time.as_millis(),
            fetch_time.as_millis(),
            bytes_under(out.path())
        );
    }
    let wrong = server.fetch(&json!({
        "protocol": 1, "op": "resolve", "url": repo.http_url, "ref": {"branch": "main"},
        "auth": {"username": server.username, "password": "not-the-password"},
    }));
    assert_eq!(wrong["error"]["kind"], json!("auth"), "{wrong}");
    assert!(!wrong.to_string().contains("not-the-password"), "{wrong}");
}

#[test]
#[ignore = "needs the lab: run tests/run.sh"]
fn the_fetcher_verifies_an_ssh_signed_commit_and_refuses_an_unsigned_one() {
    let lab = Lab::get();
    let server = GitServer::get(&lab);
    let repo = server.create_repo(&unique("team/signed"));
    let (_keys, key, public) = ssh_signing_key();
    let tree = tempfile::tempdir().unwrap();
    chart_tree(tree.path(), 1);
    let signed = repo.push_dir_signed(tree.path(), "main", "signed", &key);
    let unsigned = repo.push_dir(tree.path(), "main", "unsigned");
    let auth = json!({"username": server.username, "password": server.password});

    let out = tempfile::tempdir().unwrap();
    let mut request = fetch_request(&repo.http_url, auth, &signed, out.path());
    request["verify"] = json!({"sshKeys": [public]});
    let verified = server.fetch(&request);

    assert!(
        verified["ok"]["signedBy"]
            .as_str()
            .is_some_and(|s| s.starts_with("SHA256:")),
        "{verified}"
    );

    let out = tempfile::tempdir().unwrap();
    request["out"] = json!(out.path());
    request["commit"] = json!(unsigned);
    let refused = server.fetch(&request);

    assert_eq!(refused["refused"]["code"], json!("unsigned"), "{refused}");
    assert_eq!(bytes_under(out.path()), 0, "an unsigned commit was written");
}

#[test]
#[ignore = "needs the lab: run tests/run.sh"]
fn a_push_is_announced_as_a_signed_gitea_webhook() {
    let lab = Lab::get();
    let server = GitServer::get(&lab);
    let repo = server.create_repo(&unique("team/hooked"));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    repo.set_webhook(
        &format!("http://{}/hooks/gitea", listener.local_addr().unwrap()),
        "hook-secret",
    );
    let tree = tempfile::tempdir().unwrap();
    chart_tree(tree.path(), 1);

    let commit = repo.push_dir(tree.path(), "main", "hooked");

    let (stream, _) = listener.accept().unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut reader = BufReader::new(stream);
    let (mut length, mut signature) = (0usize, String::new());
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end().to_owned();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':').unwrap_or((&line, ""));
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().unwrap(),
            "x-gitea-signature" => signature = value.trim().to_owned(),
            _ => {}
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    reader
        .get_mut()
        .write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
        .unwrap();
    assert_eq!(
        signature,
        gitea_signature(b"hook-secret", &body),
        "the signature is Gitea's"
    );
    let event: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(event["ref"], json!("refs/heads/main"));
    assert_eq!(event["after"], json!(commit));
    assert_eq!(event["repository"]["clone_url"], json!(repo.http_url));
    assert_eq!(event["repository"]["ssh_url"], json!(repo.ssh_url));
}
