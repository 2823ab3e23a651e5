//! The Hub transport used for real: `curl` run on the head through its [`NodeShell`], so the
//! requests leave from the node that downloads the weights. The token goes in on stdin as a
//! header file, never on a command line. Decides nothing: `model::hub::resolve` interprets.

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::model::hub::{HubResponse, HubTransport, TransportError};
use crate::model::script::quote;
use crate::runtime::shell::NodeShell;

/// `curl` on a node.
pub struct CurlHub {
    shell: Arc<dyn NodeShell>,
    token: Option<String>,
}

impl CurlHub {
    pub fn new(shell: Arc<dyn NodeShell>, token: Option<String>) -> Self {
        CurlHub { shell, token }
    }

    fn script(url: &str, head: bool) -> String {
        let method = if head { "-I" } else { "-L" };
        format!(
            r#"set -u
command -v curl >/dev/null || {{ echo "curl is not installed on this node (sudo apt-get install curl)" >&2; exit 127; }}
T=$(umask 077; mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT
IFS= read -r hdr || hdr=
: > "$T/h"
[ -n "$hdr" ] && printf '%s\n' "$hdr" > "$T/h"
code=$(curl -sS {method} --connect-timeout 20 --max-time 120 -o "$T/body" -D "$T/hdrs" -w '%{{http_code}}' -H @"$T/h" {url}) || exit $?
printf 'status\t%s\n' "$code"
grep -i '^x-error-code:' "$T/hdrs" | tail -n1 | sed 's/^[^:]*:[[:space:]]*//; s/\r$//; s/^/code\t/'
grep -i '^x-error-message:' "$T/hdrs" | tail -n1 | sed 's/^[^:]*:[[:space:]]*//; s/\r$//; s/^/message\t/'
echo body
cat "$T/body"
"#,
            url = quote(url)
        )
    }

    async fn request(
        &self,
        url: &str,
        head: bool,
        auth: bool,
    ) -> Result<HubResponse, TransportError> {
        let header = match (&self.token, auth) {
            (Some(t), true) => format!("Authorization: Bearer {t}\n"),
            _ => "\n".to_string(),
        };
        let out = self
            .shell
            .run(&Self::script(url, head), header.into_bytes(), None)
            .await
            .map_err(|e| TransportError(e.to_string()))?;
        if !out.success() {
            return Err(TransportError(format!(
                "curl {url} on {} failed (exit {}): {}",
                self.shell.node(),
                out.status,
                out.stderr_tail().trim()
            )));
        }
        parse_answer(&out.stdout).ok_or_else(|| {
            TransportError(format!(
                "unreadable curl output for {url}: {:?}",
                out.stdout
            ))
        })
    }
}

/// Parses the script's `status`/`code`/`message` lines, then `body` and the body.
pub fn parse_answer(out: &str) -> Option<HubResponse> {
    let (head, body) = match out.split_once("\nbody\n") {
        Some((h, b)) => (h, b),
        None => (out.strip_suffix("\nbody")?, ""),
    };
    let mut a = HubResponse {
        body: body.to_string(),
        ..Default::default()
    };
    for line in head.lines() {
        match line.split_once('\t') {
            Some(("status", v)) => a.status = v.trim().parse().ok()?,
            Some(("code", v)) => a.error_code = Some(v.trim().to_string()),
            Some(("message", v)) => a.error_message = Some(v.trim().to_string()),
            _ => {}
        }
    }
    (a.status != 0).then_some(a)
}

impl HubTransport for CurlHub {
    fn get(&self, url: &str, auth: bool) -> BoxFuture<'_, Result<HubResponse, TransportError>> {
        let url = url.to_string();
        Box::pin(async move { self.request(&url, false, auth).await })
    }

    fn head(&self, url: &str, auth: bool) -> BoxFuture<'_, Result<HubResponse, TransportError>> {
        let url = url.to_string();
        Box::pin(async move { self.request(&url, true, auth).await })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_keeps_status_error_headers_and_body() {
        let a = parse_answer(
            "status\t403\ncode\tGatedRepo\nmessage\tAccess restricted\nbody\n{\"x\":1}\n",
        )
        .unwrap();
        assert_eq!(a.status, 403);
        assert_eq!(a.error_code.as_deref(), Some("GatedRepo"));
        assert_eq!(a.error_message.as_deref(), Some("Access restricted"));
        assert_eq!(a.body, "{\"x\":1}\n");
        assert_eq!(parse_answer("status\t200\nbody\n").unwrap().body, "");
        assert!(parse_answer("nothing").is_none());
    }
}
