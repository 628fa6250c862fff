//! A member's client acting as an impersonated identity: the same connection and credentials, with Kubernetes' `Impersonate-User` and `Impersonate-Group` headers on every request.
//!
//! Why headers on the member's client and not a client built from the kubeconfig with
//! `impersonate` set: it shares the member client's connections (no TLS handshake per identity)
//! and needs no cache of clients per identity to bound; the API server authorizes each request as
//! the identity either way, after checking that the operator may impersonate it.

use http::{HeaderName, HeaderValue, Request};
use kube::{Client, client::Body};

use crate::api::policy::Impersonation;

/// A client of the same API server as `client` whose every request is made as `who`. Err: a user
/// or group name that cannot travel in an HTTP header (a control character), naming it.
pub(crate) fn acting_as(client: &Client, who: &Impersonation) -> Result<Client, String> {
    let header = |name: &'static str, value: &str| {
        HeaderValue::from_str(value)
            .map(|v| (HeaderName::from_static(name), v))
            .map_err(|_| format!("cannot impersonate {value:?}: not a valid HTTP header value"))
    };
    let headers: Vec<(HeaderName, HeaderValue)> =
        std::iter::once(header("impersonate-user", &who.user))
            .chain(who.groups.iter().map(|g| header("impersonate-group", g)))
            .collect::<Result<_, _>>()?;
    let inner = client.clone();
    let service = tower::service_fn(move |mut request: Request<Body>| {
        let inner = inner.clone();
        for (name, value) in &headers {
            request.headers_mut().append(name.clone(), value.clone());
        }
        async move { inner.send(request).await }
    });
    Ok(Client::new(service, client.default_namespace()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_request_carries_the_identity_and_its_groups() {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, http::Response<Body>>();
        let operator = Client::new(service, "default");
        let who = Impersonation {
            user: "team-a-deployer".into(),
            groups: vec!["team-a".into(), "devs".into()],
            namespace_role: None,
        };
        let tenant = acting_as(&operator, &who).unwrap();
        let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
            kube::Api::namespaced(tenant, "team-a");
        let asked = tokio::spawn(async move { api.get_opt("x").await });
        let (request, send) = handle.next_request().await.unwrap();
        let values = |name: &str| -> Vec<String> {
            request
                .headers()
                .get_all(name)
                .iter()
                .map(|v| v.to_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(values("impersonate-user"), ["team-a-deployer"]);
        assert_eq!(values("impersonate-group"), ["team-a", "devs"]);
        assert_eq!(
            request.uri().path(),
            "/api/v1/namespaces/team-a/configmaps/x"
        );
        let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "reason": "NotFound", "code": 404, "message": "configmaps \"x\" not found"});
        send.send_response(
            http::Response::builder()
                .status(404)
                .body(Body::from(status.to_string().into_bytes()))
                .unwrap(),
        );
        assert!(asked.await.unwrap().unwrap().is_none());
    }

    #[tokio::test]
    async fn a_name_that_cannot_be_a_header_is_refused() {
        let who = Impersonation {
            user: "evil\nImpersonate-Group: system:masters".into(),
            ..Impersonation::default()
        };
        let (service, _) = tower_test::mock::pair::<Request<Body>, http::Response<Body>>();
        let Err(error) = acting_as(&Client::new(service, "default"), &who) else {
            panic!("a header carrying a newline was accepted");
        };
        assert!(error.contains("not a valid HTTP header value"), "{error}");
    }
}
