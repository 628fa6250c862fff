//! Tests of source Secrets: which keys are used, each refusal's words, and that their content never shows.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, Mutex},
};

use super::*;

const PASSWORD: &str = "s3cret-pa55word";

fn secret(pairs: &[(&str, &str)]) -> SecretData {
    SecretData::of(pairs)
}

const CERT: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n";

#[test]
fn each_kind_of_secret_is_read_by_its_keys() {
    let basic =
        Material::parse(&secret(&[("username", "u"), ("password", PASSWORD)]), false).unwrap();
    assert_eq!(
        basic.auth,
        Some(Auth::Basic {
            username: "u".into(),
            password: PASSWORD.into()
        })
    );
    assert_eq!(basic.version, "7");
    let token = Material::parse(&secret(&[("token", "tok-en-1234\n")]), false).unwrap();
    assert_eq!(token.auth, Some(Auth::Bearer("tok-en-1234".into())));
    let tls = Material::parse(
        &secret(&[("ca.crt", CERT), ("tls.crt", CERT), ("tls.key", KEY)]),
        true,
    )
    .unwrap();
    assert!(tls.auth.is_none() && tls.ca.is_some() && tls.identity.is_some());
    let docker = Material::parse(
        &secret(&[(
            ".dockerconfigjson",
            r#"{"auths":{"r.example.com":{"auth":"dTpw"}}}"#,
        )]),
        true,
    )
    .unwrap();
    assert!(docker.docker_config.is_some());
    let shown = format!("{basic:?} {token:?} {docker:?}");
    assert!(
        !shown.contains(PASSWORD) && !shown.contains("tok-en") && !shown.contains("dTpw"),
        "{shown}"
    );
}

#[test]
fn a_secret_without_a_usable_key_says_which_key_and_never_its_content() {
    for (pairs, oci, says) in [
        (
            vec![("foo", PASSWORD)],
            false,
            "holds none of the keys username and password, token, .dockerconfigjson, ca.crt, tls.crt and tls.key",
        ),
        (
            vec![("username", "u")],
            false,
            "has key username but no key password",
        ),
        (
            vec![("password", PASSWORD)],
            false,
            "has key password but no key username",
        ),
        (
            vec![("username", ""), ("password", PASSWORD)],
            false,
            "its key username is empty",
        ),
        (
            vec![("username", "u"), ("password", PASSWORD), ("token", "t")],
            false,
            "holds both username/password and token",
        ),
        (
            vec![("tls.crt", CERT)],
            false,
            "has key tls.crt but no key tls.key",
        ),
        (
            vec![("tls.key", KEY)],
            false,
            "has key tls.key but no key tls.crt",
        ),
        (
            vec![("ca.crt", PASSWORD)],
            false,
            "its key ca.crt holds no PEM -----BEGIN CERTIFICATE-----",
        ),
        (
            vec![(".dockerconfigjson", PASSWORD)],
            true,
            "its key .dockerconfigjson is not JSON",
        ),
        (
            vec![(".dockerconfigjson", "{}")],
            true,
            "has no \"auths\" object",
        ),
        (
            vec![(".dockerconfigjson", r#"{"auths":{}}"#)],
            false,
            "serves OCI registries only",
        ),
    ] {
        let why = Material::parse(&secret(&pairs), oci).unwrap_err();
        assert!(why.contains(says), "{pairs:?}: {why}");
        assert!(!why.contains(PASSWORD), "{why}");
    }
}

#[test]
fn a_registry_login_file_is_made_for_the_registry_host_alone() {
    let basic = Auth::Basic {
        username: "robot".into(),
        password: PASSWORD.into(),
    };
    let config: serde_json::Value =
        serde_json::from_slice(&registry_config(Some(&basic), "127.0.0.1:5000")).unwrap();
    let auth = config["auths"]["127.0.0.1:5000"]["auth"].as_str().unwrap();
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(auth)
            .unwrap(),
        format!("robot:{PASSWORD}").as_bytes()
    );
    assert_eq!(config["auths"].as_object().unwrap().len(), 1);
    assert_eq!(registry_config(None, "r"), br#"{"auths":{}}"#);
}

#[test]
fn what_a_tool_says_is_masked_of_every_piece_of_the_secret() {
    let basic =
        Material::parse(&secret(&[("username", "u"), ("password", PASSWORD)]), true).unwrap();
    assert_eq!(
        basic.mask(&format!("login u:{PASSWORD} failed")),
        "login u:*** failed"
    );
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("u:{PASSWORD}"));
    let docker = Material::parse(
        &secret(&[(
            ".dockerconfigjson",
            &format!(r#"{{"auths":{{"r":{{"auth":"{encoded}"}}}}}}"#),
        )]),
        true,
    )
    .unwrap();
    let masked = docker.mask(&format!("{encoded} {PASSWORD}"));
    assert_eq!(masked, "*** ***");
}

/// Secrets by namespace and name, with labels; counts the reads of data.
#[derive(Default)]
struct Map {
    secrets: HashMap<(String, String), (BTreeMap<String, String>, SecretData)>,
    reads: Mutex<Vec<String>>,
}

impl ReadSecret for Map {
    fn read<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<SecretData>, String>> {
        self.reads
            .lock()
            .unwrap()
            .push(format!("{namespace}/{name}"));
        let found = self
            .secrets
            .get(&(namespace.into(), name.into()))
            .map(|(_, d)| d.clone());
        Box::pin(async move { Ok(found) })
    }

    fn labels<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<BTreeMap<String, String>>, String>> {
        let found = self
            .secrets
            .get(&(namespace.into(), name.into()))
            .map(|(l, _)| l.clone());
        Box::pin(async move { Ok(found) })
    }
}

fn secrets(map: Map) -> (SourceSecrets, Arc<Map>) {
    let map = Arc::new(map);
    (
        SourceSecrets {
            reader: map.clone(),
            operator_namespace: "tenancy-hub".into(),
        },
        map,
    )
}

fn platform(name: &str) -> Credentials {
    Credentials::Platform {
        secret: name.into(),
        policy: "team-a".into(),
        prefix: "oci://registry.example.com/team-a".into(),
    }
}

#[tokio::test]
async fn a_platform_secret_is_read_from_the_operators_namespace_and_a_missing_one_says_what_to_do()
{
    let mut map = Map::default();
    map.secrets.insert(
        ("tenancy-hub".into(), "pull".into()),
        (
            BTreeMap::new(),
            secret(&[("username", "u"), ("password", PASSWORD)]),
        ),
    );
    map.secrets.insert(
        ("tenancy-hub".into(), "empty".into()),
        (BTreeMap::new(), secret(&[("other", PASSWORD)])),
    );
    let (secrets, map) = secrets(map);
    let material = secrets
        .material(&platform("pull"), true)
        .await
        .unwrap()
        .unwrap();
    assert!(material.auth.is_some());
    assert_eq!(*map.reads.lock().unwrap(), ["tenancy-hub/pull"]);
    assert_eq!(secrets.material(&Credentials::None, true).await, Ok(None));

    let missing = secrets.material(&platform("gone"), true).await.unwrap_err();
    assert_eq!(
        missing,
        format!(
            "Secret tenancy-hub/gone, named for source oci://registry.example.com/team-a by TenancyPolicy team-a, does not exist: create it in the operator's namespace with the keys the source needs ({KEYS})"
        )
    );
    let empty = secrets
        .material(&platform("empty"), true)
        .await
        .unwrap_err();
    assert!(
        empty.starts_with("Secret tenancy-hub/empty, named for source oci://registry.example.com/team-a by TenancyPolicy team-a, holds none of the keys"),
        "{empty}"
    );
}

#[tokio::test]
async fn a_tenant_secret_allowed_only_by_labels_is_refused_alike_absent_or_unlabelled_and_its_data_never_read()
 {
    let wanted = BTreeMap::from([("registry".to_owned(), "team-a".to_owned())]);
    let mut map = Map::default();
    let data = secret(&[("username", "u"), ("password", PASSWORD)]);
    map.secrets.insert(
        ("team-a".into(), "unlabelled".into()),
        (BTreeMap::new(), data.clone()),
    );
    map.secrets
        .insert(("team-a".into(), "labelled".into()), (wanted.clone(), data));
    let (secrets, map) = secrets(map);
    let tenant = |name: &str| Credentials::Tenant {
        namespace: "team-a".into(),
        secret: name.into(),
        policy: "team-a".into(),
        prefix: "oci://registry.example.com/team-a".into(),
        labels: vec![wanted.clone()],
    };
    let absent = secrets.material(&tenant("absent"), true).await.unwrap_err();
    let unlabelled = secrets
        .material(&tenant("unlabelled"), true)
        .await
        .unwrap_err();
    assert_eq!(
        absent.replace("absent", "X"),
        unlabelled.replace("unlabelled", "X")
    );
    assert!(
        absent.contains("no tenantSecrets rule allows it"),
        "{absent}"
    );
    assert!(map.reads.lock().unwrap().is_empty(), "no data read");
    assert!(
        secrets
            .material(&tenant("labelled"), true)
            .await
            .unwrap()
            .is_some()
    );
    assert_eq!(*map.reads.lock().unwrap(), ["team-a/labelled"]);
}

#[test]
fn each_failure_of_a_source_says_what_to_do_naming_the_secret_and_the_policy() {
    let with = platform("pull");
    let cases = [
        (
            "https://r/index.yaml answered 401 Unauthorized",
            "the source refused the credentials of Secret tenancy-hub/pull (TenancyPolicy team-a, source oci://registry.example.com/team-a): check its keys username and password",
        ),
        (
            "https://r/index.yaml answered 403 Forbidden",
            "the credentials of Secret tenancy-hub/pull (TenancyPolicy team-a, source oci://registry.example.com/team-a) lack access to this chart",
        ),
        (
            "invalid peer certificate: UnknownIssuer",
            "its certificate is signed by a CA the hub does not trust: add that CA as ca.crt to Secret tenancy-hub/pull (TenancyPolicy team-a",
        ),
        (
            "x509: certificate signed by unknown authority",
            "its certificate is signed by a CA the hub does not trust: add that CA as ca.crt to Secret tenancy-hub/pull",
        ),
        (
            "invalid peer certificate: Expired",
            "its certificate has expired or is not valid yet",
        ),
        (
            "x509: certificate has expired or is not yet valid",
            "its certificate has expired or is not valid yet",
        ),
    ];
    for (failure, says) in cases {
        let hint = hint(failure, &with, "tenancy-hub").unwrap();
        assert!(hint.starts_with(says), "{failure}: {hint}");
    }
    let anonymous = hint(
        "answered 401 Unauthorized",
        &Credentials::None,
        "tenancy-hub",
    )
    .unwrap();
    assert!(
        anonymous.starts_with(
            "the source asks for credentials and none were given: a platform admin names a Secret"
        ),
        "{anonymous}"
    );
    let no_ca = hint("UnknownIssuer", &Credentials::None, "tenancy-hub").unwrap();
    assert!(
        no_ca.contains("names a Secret holding it as ca.crt"),
        "{no_ca}"
    );
    assert_eq!(hint("connection refused", &with, "tenancy-hub"), None);
    assert_eq!(
        hint(
            "https://127.0.0.1:34013/index.yaml answered 404 Not Found",
            &with,
            "tenancy-hub"
        ),
        None,
        "a port is no status"
    );
}
