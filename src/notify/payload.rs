//! The bodies sent: generic JSON (every field of the notice), Slack (`text` and `blocks`) and Microsoft Teams (a MessageCard), and the generic body's HMAC-SHA256 signature (pure).

use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::{api::alert::ProviderType, notify::Notice};

/// The header carrying the generic body's signature, `sha256=<hex>`.
pub(crate) const SIGNATURE_HEADER: &str = "X-Tenancy-Hub-Signature";
/// A message's text is cut to this many characters, so a body stays small whatever a status says.
pub(crate) const MESSAGE_LIMIT: usize = 2048;

/// The message cut to [`MESSAGE_LIMIT`] characters.
fn bounded(message: &str) -> String {
    if message.chars().count() <= MESSAGE_LIMIT {
        return message.to_owned();
    }
    let mut cut: String = message.chars().take(MESSAGE_LIMIT - 1).collect();
    cut.push('…');
    cut
}

/// `namespace/controller`, with `cluster/release` when known.
fn subject(n: &Notice) -> String {
    let mut s = format!("{}/{}", n.namespace, n.controller);
    match (&n.cluster, &n.release) {
        (Some(c), Some(r)) => s.push_str(&format!(" ({c}, release {r})")),
        (Some(c), None) => s.push_str(&format!(" ({c})")),
        (None, Some(r)) => s.push_str(&format!(" (release {r})")),
        (None, None) => {}
    }
    s
}

/// The body for `provider`, as JSON bytes.
pub(crate) fn body(provider: ProviderType, n: &Notice) -> Vec<u8> {
    let value = match provider {
        ProviderType::Generic => generic(n),
        ProviderType::Slack => slack(n),
        ProviderType::Msteams => msteams(n),
    };
    serde_json::to_vec(&value).expect("JSON values serialize")
}

fn severity(n: &Notice) -> &'static str {
    if n.event.is_warning() {
        "warning"
    } else {
        "info"
    }
}

fn generic(n: &Notice) -> Value {
    json!({
        "controller": n.controller,
        "namespace": n.namespace,
        "cluster": n.cluster,
        "release": n.release,
        "event": n.event.as_str(),
        "severity": severity(n),
        "reason": n.reason,
        "message": bounded(&n.message),
        "time": n.time.to_string(),
    })
}

/// Slack's mrkdwn takes `&`, `<` and `>` only escaped.
fn slack_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn slack(n: &Notice) -> Value {
    let head = slack_escape(&format!("{} {}: {}", n.event, subject(n), n.reason));
    let message = slack_escape(&bounded(&n.message));
    json!({
        "text": format!("{head}\n{message}"),
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": format!("*{head}*\n{message}")}},
            {"type": "context", "elements": [
                {"type": "mrkdwn", "text": format!("tenancy-hub · {} · {}", severity(n), n.time)}
            ]}
        ]
    })
}

/// Teams renders a MessageCard's title, text and facts as Markdown with some HTML: `&`, `<`
/// and `>` become entities and every Markdown mark is escaped, so a name or a message shows as
/// written and never as a link, an image or markup.
fn teams_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\\' | '`' | '*' | '_' | '{' | '}' | '[' | ']' | '(' | ')' | '#' | '+' | '-' | '.'
            | '!' | '|' | '~' | '"' | '\'' => {
                out.push('\\');
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    out
}

fn msteams(n: &Notice) -> Value {
    let fact = |name: &str, value: &str| json!({"name": name, "value": teams_escape(value)});
    let mut facts = vec![
        fact("Controller", &format!("{}/{}", n.namespace, n.controller)),
        fact("Event", n.event.as_str()),
        fact("Reason", &n.reason),
    ];
    if let Some(c) = &n.cluster {
        facts.push(fact("Cluster", c));
    }
    if let Some(r) = &n.release {
        facts.push(fact("Release", r));
    }
    facts.push(fact("Time", &n.time.to_string()));
    let title = format!("{} {}", n.event, subject(n));
    json!({
        "@type": "MessageCard",
        "@context": "https://schema.org/extensions",
        "summary": title,
        "themeColor": if n.event.is_warning() { "D93F0B" } else { "2EA44F" },
        "title": teams_escape(&title),
        "text": teams_escape(&bounded(&n.message)),
        "sections": [{"facts": facts}],
    })
}

/// The signature header's value for `body` under `key`: `sha256=` and the hex HMAC-SHA256.
pub(crate) fn signature(key: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256={hex}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::alert::AlertEvent;

    fn notice() -> Notice {
        Notice {
            controller: "shop".into(),
            namespace: "team-a".into(),
            cluster: Some("member-1".into()),
            release: Some("web".into()),
            event: AlertEvent::Stalled,
            reason: "ReleaseFailed".into(),
            message: "release(s) member-1/shop/web <failed> & wait".into(),
            time: "2026-01-02T03:04:05Z".parse().unwrap(),
        }
    }

    #[test]
    fn the_generic_body_carries_every_field() {
        let v: Value = serde_json::from_slice(&body(ProviderType::Generic, &notice())).unwrap();
        assert_eq!(v["controller"], "shop");
        assert_eq!(v["namespace"], "team-a");
        assert_eq!(v["cluster"], "member-1");
        assert_eq!(v["release"], "web");
        assert_eq!(v["event"], "Stalled");
        assert_eq!(v["severity"], "warning");
        assert_eq!(v["reason"], "ReleaseFailed");
        assert_eq!(v["time"], "2026-01-02T03:04:05Z");
    }

    #[test]
    fn the_signature_verifies_with_the_key_and_not_with_another_or_another_body() {
        // RFC 4231, test case 2.
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let b = body(ProviderType::Generic, &notice());
        let signed = signature(b"k3y", &b);
        let mut mac = Hmac::<Sha256>::new_from_slice(b"k3y").unwrap();
        mac.update(&b);
        let hex = signed.strip_prefix("sha256=").unwrap();
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        assert!(mac.verify_slice(&bytes).is_ok());
        assert_ne!(signature(b"other", &b), signed);
        assert_ne!(signature(b"k3y", b"{}"), signed);
    }

    #[test]
    fn slack_gets_text_and_blocks_escaped() {
        let v: Value = serde_json::from_slice(&body(ProviderType::Slack, &notice())).unwrap();
        let text = v["text"].as_str().unwrap();
        assert!(text.starts_with("Stalled team-a/shop (member-1, release web): ReleaseFailed"));
        assert!(text.contains("&lt;failed&gt; &amp; wait"), "{text}");
        assert_eq!(v["blocks"][0]["type"], "section");
        assert_eq!(v["blocks"][0]["text"]["type"], "mrkdwn");
    }

    #[test]
    fn teams_gets_a_message_card_with_facts() {
        let v: Value = serde_json::from_slice(&body(ProviderType::Msteams, &notice())).unwrap();
        assert_eq!(v["@type"], "MessageCard");
        assert_eq!(v["themeColor"], "D93F0B");
        let facts = v["sections"][0]["facts"].as_array().unwrap();
        assert!(
            facts
                .iter()
                .any(|f| f["name"] == "Release" && f["value"] == "web")
        );
    }

    #[test]
    fn teams_text_cannot_carry_links_images_or_markup() {
        let n = Notice {
            reason: "[click](https://evil.example/x)".into(),
            message: "![img](https://evil.example/p.png) <img src=x onerror=alert(1)> **bold** _it_ `code` & done".into(),
            ..notice()
        };
        let v: Value = serde_json::from_slice(&body(ProviderType::Msteams, &n)).unwrap();
        let text = v["text"].as_str().unwrap();
        assert_eq!(
            text,
            r"\!\[img\]\(https://evil\.example/p\.png\) &lt;img src=x onerror=alert\(1\)&gt; \*\*bold\*\* \_it\_ \`code\` &amp; done"
        );
        let reason = &v["sections"][0]["facts"][2];
        assert_eq!(reason["name"], "Reason");
        assert_eq!(reason["value"], r"\[click\]\(https://evil\.example/x\)");
        assert_eq!(
            v["title"],
            r"Stalled team\-a/shop \(member\-1, release web\)"
        );
    }

    #[test]
    fn a_long_message_is_cut() {
        let n = Notice {
            message: "x".repeat(100_000),
            ..notice()
        };
        assert!(body(ProviderType::Generic, &n).len() < MESSAGE_LIMIT * 4 + 1024);
    }
}
