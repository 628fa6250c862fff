//! What a Git source's Secrets hold, as the fetcher takes it: the credentials and CA of a source (`access_of`) and the keys a signature rule trusts (`verify_keys`); errors say which key is missing or misplaced, never what one holds.

use crate::{api::policy::VerifyProvider, charts::credentials::SecretData};

use super::{
    GIT_KEYS,
    protocol::{self, Access, VerifyKeys},
};

/// A Git source's credentials and CA from its Secret (`None`: anonymous): `username` and
/// `password`, or `bearerToken`, over https; `identity` (a PEM private key) and `known_hosts`
/// over ssh, `password` then being the key's passphrase; `ca.crt` (or `caFile`) for https.
/// The error says which key is missing or misplaced, never what one holds.
pub(crate) fn access_of(
    secret: Option<&SecretData>,
    ssh: bool,
) -> std::result::Result<Access, String> {
    let Some(secret) = secret else {
        return Ok(Access::default());
    };
    secret.bounded()?;
    let text = |key: &str| secret.text(key);
    let ca = match (text("ca.crt")?, text("caFile")?) {
        (Some(ca), _) | (None, Some(ca)) if ca.contains("-----BEGIN CERTIFICATE-----") => Some(ca),
        (None, None) => None,
        _ => return Err("its key ca.crt (or caFile) holds no PEM certificate".into()),
    };
    let (username, password) = (text("username")?, text("password")?);
    let token = text("bearerToken")?.or(text("token")?);
    let (identity, known_hosts) = (text("identity")?, text("known_hosts")?);
    let mut auth = protocol::Auth::default();
    match ssh {
        true => {
            if username.is_some() || token.is_some() {
                return Err("holds username or bearerToken, which an ssh:// source does not take: give identity and known_hosts".into());
            }
            match (identity, known_hosts) {
                (Some(key), Some(hosts))
                    if key.contains("PRIVATE KEY-----") && !hosts.trim().is_empty() =>
                {
                    auth.ssh_private_key = Some(key);
                    auth.ssh_passphrase = password;
                    auth.known_hosts = Some(hosts);
                }
                (Some(key), Some(_)) if !key.contains("PRIVATE KEY-----") => {
                    return Err("its key identity holds no PEM private key".into());
                }
                (Some(_), _) => {
                    return Err("has key identity but no known_hosts (the host keys the server may present; none is trusted on first use)".into());
                }
                (None, _) => {
                    return Err(
                        "has no key identity, which an ssh:// source needs (with known_hosts)"
                            .into(),
                    );
                }
            }
        }
        false => {
            if identity.is_some() {
                return Err("holds identity, which an https:// source does not take: give username and password, or bearerToken".into());
            }
            match (username, password, token) {
                (Some(_), Some(_), Some(_)) => {
                    return Err("holds both username/password and bearerToken: keep one".into());
                }
                (Some(u), Some(p), None) if !u.is_empty() => {
                    auth.username = Some(u);
                    auth.password = Some(p);
                }
                (Some(_), Some(_), None) => return Err("its key username is empty".into()),
                (Some(_), None, _) => return Err("has key username but no key password".into()),
                (None, Some(_), _) => return Err("has key password but no key username".into()),
                (None, None, Some(t)) if !t.is_empty() => auth.bearer_token = Some(t),
                (None, None, Some(_)) => return Err("its key bearerToken is empty".into()),
                (None, None, None) if ca.is_none() => {
                    return Err(format!("holds none of the keys {GIT_KEYS}"));
                }
                (None, None, None) => {}
            }
        }
    }
    let anything = auth != protocol::Auth::default();
    Ok(Access {
        auth: anything.then_some(auth),
        ca_bundle: ca,
    })
}

/// The keys a Git signature rule trusts, from its Secret: for `pgp` every key ending in `.asc`
/// (armored public keys), for `ssh` every line of every key ending in `.pub`.
pub(crate) fn verify_keys(
    provider: VerifyProvider,
    secret: &SecretData,
) -> std::result::Result<VerifyKeys, String> {
    let texts = |suffix: &str| -> Vec<String> {
        secret
            .data
            .iter()
            .filter(|(k, _)| k.ends_with(suffix))
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            .collect()
    };
    let keys = match provider {
        VerifyProvider::Pgp => VerifyKeys {
            pgp_keys: texts(".asc")
                .into_iter()
                .filter(|k| k.contains("BEGIN PGP PUBLIC KEY BLOCK"))
                .collect(),
            ..VerifyKeys::default()
        },
        VerifyProvider::Ssh => VerifyKeys {
            ssh_keys: texts(".pub")
                .iter()
                .flat_map(|t| t.lines())
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(str::to_owned)
                .collect(),
            ..VerifyKeys::default()
        },
        other => {
            return Err(format!(
                "{} checks charts, not Git commits: a Git source takes pgp or ssh",
                other.as_str()
            ));
        }
    };
    if keys.pgp_keys.is_empty() && keys.ssh_keys.is_empty() {
        return Err(match provider {
            VerifyProvider::Pgp => {
                "holds no armored PGP public key under a key ending in .asc".into()
            }
            _ => "holds no SSH public key under a key ending in .pub".into(),
        });
    }
    Ok(keys)
}
