//! The network side of `bench`: plain HTTP/1.1 over TCP (hyper), one keep-alive connection per
//! concurrent client, opened again when the server closed it. It lists the served models and sends one streaming completion, noting
//! when each chunk of generated text arrives. Decides nothing: what to send is
//! `bench::request`'s, what the times mean is `bench::measure`'s.

use std::fmt;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use super::measure::Sample;
use super::request::{
    Api, BaseUrl, Event, EventReader, StreamEnd, chunk_detail, clip, judge_stream, parse_event,
};

/// The API key sent as `Authorization: Bearer …`. Never printed: its `Debug` says `<set>`.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerKey(String);

impl BearerKey {
    pub fn new(key: impl Into<String>) -> Option<BearerKey> {
        let key = key.into();
        (!key.trim().is_empty()).then(|| BearerKey(key.trim().to_string()))
    }
}

impl fmt::Debug for BearerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerKey(<set>)")
    }
}

/// One open connection to the server.
pub struct Connection {
    sender: http1::SendRequest<Full<Bytes>>,
}

/// How to reach the server.
#[derive(Clone, Debug)]
pub struct Client {
    pub base: BaseUrl,
    pub api_key: Option<BearerKey>,
    /// The most one request may take, from sending it to its last token.
    pub timeout: Duration,
}

impl Client {
    /// Opens a connection.
    pub async fn connect(&self) -> Result<Connection, String> {
        let stream = TcpStream::connect((self.base.host.as_str(), self.base.port))
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", self.base.authority()))?;
        let _ = stream.set_nodelay(true);
        let (sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("HTTP handshake with {}: {e}", self.base.authority()))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Connection { sender })
    }

    fn request(
        &self,
        method: &str,
        tail: &str,
        body: Vec<u8>,
    ) -> Result<hyper::Request<Full<Bytes>>, String> {
        let mut b = hyper::Request::builder()
            .method(method)
            .uri(self.base.path_of(tail))
            .header("host", self.base.authority())
            .header(
                "user-agent",
                concat!("spark-launch/", env!("CARGO_PKG_VERSION")),
            );
        if !body.is_empty() {
            b = b
                .header("content-type", "application/json")
                .header("accept", "text/event-stream");
        }
        if let Some(BearerKey(key)) = &self.api_key {
            b = b.header("authorization", format!("Bearer {key}"));
        }
        b.body(Full::new(Bytes::from(body)))
            .map_err(|e| format!("cannot build the request: {e}"))
    }

    /// The model ids `GET /models` lists.
    pub async fn models(&self) -> Result<Vec<String>, String> {
        let fut = async {
            let mut conn = self.connect().await?;
            let req = self.request("GET", "models", Vec::new())?;
            let resp = conn
                .sender
                .send_request(req)
                .await
                .map_err(|e| format!("GET {}: {e}", self.base.path_of("models")))?;
            let status = resp.status().as_u16();
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| format!("reading the model list: {e}"))?
                .to_bytes();
            let text = String::from_utf8_lossy(&body);
            if status != 200 {
                return Err(http_error(status, &text));
            }
            let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
                format!(
                    "{} did not answer with a model list ({e}): {}",
                    self.base.path_of("models"),
                    clip(&text, 200)
                )
            })?;
            Ok(v.get("data")
                .and_then(|d| d.as_array())
                .map(|models| {
                    models
                        .iter()
                        .filter_map(|m| m.get("id").and_then(|i| i.as_str()).map(str::to_string))
                        .collect()
                })
                .unwrap_or_default())
        };
        match tokio::time::timeout(Duration::from_secs(30), fut).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "{} did not answer within 30s",
                self.base.path_of("models")
            )),
        }
    }

    /// Sends one streaming request over `conn` (opened, or reopened when the server closed
    /// it) and times it against `epoch`. Never fails: a failure is a sample with its error
    /// (and the connection is dropped).
    pub async fn stream(
        &self,
        conn: &mut Option<Connection>,
        api: Api,
        body: Vec<u8>,
        epoch: Instant,
        cancel: &CancellationToken,
    ) -> Sample {
        self.stream_observed(conn, api, body, epoch, cancel, &mut |_| {})
            .await
    }

    /// [`Client::stream`], also telling `on_token` the time of every chunk of text as it
    /// arrives (a soak watches for stalls while a request is still in flight).
    pub async fn stream_observed(
        &self,
        conn: &mut Option<Connection>,
        api: Api,
        body: Vec<u8>,
        epoch: Instant,
        cancel: &CancellationToken,
        on_token: &mut (dyn FnMut(f64) + Send),
    ) -> Sample {
        self.stream_with(conn, api, body, epoch, cancel, on_token, false)
            .await
    }

    /// [`Client::stream`], also noting the first response and every chunk of generated
    /// content or reasoning with its token ids (`Sample::first_response`, `Sample::pieces`):
    /// what a protocol's metrics need.
    pub async fn stream_detailed(
        &self,
        conn: &mut Option<Connection>,
        api: Api,
        body: Vec<u8>,
        epoch: Instant,
        cancel: &CancellationToken,
    ) -> Sample {
        self.stream_with(conn, api, body, epoch, cancel, &mut |_| {}, true)
            .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn stream_with(
        &self,
        conn: &mut Option<Connection>,
        api: Api,
        body: Vec<u8>,
        epoch: Instant,
        cancel: &CancellationToken,
        on_token: &mut (dyn FnMut(f64) + Send),
        detail: bool,
    ) -> Sample {
        let mut sample = Sample {
            sent: epoch.elapsed().as_secs_f64(),
            ..Sample::default()
        };
        let result = tokio::select! {
            r = tokio::time::timeout(self.timeout, self.stream_inner(conn, api, body, epoch, &mut sample, on_token, detail)) => match r {
                Ok(r) => r,
                Err(_) => Err(format!("no end of the stream within {}s", self.timeout.as_secs())),
            },
            _ = cancel.cancelled() => Err("interrupted".to_string()),
        };
        sample.done = epoch.elapsed().as_secs_f64();
        if let Err(e) = result {
            sample.error = Some(e);
            *conn = None;
        }
        sample
    }

    #[allow(clippy::too_many_arguments)]
    async fn stream_inner(
        &self,
        conn: &mut Option<Connection>,
        api: Api,
        body: Vec<u8>,
        epoch: Instant,
        sample: &mut Sample,
        on_token: &mut (dyn FnMut(f64) + Send),
        detail: bool,
    ) -> Result<(), String> {
        if let Some(c) = conn.as_mut()
            && c.sender.ready().await.is_err()
        {
            *conn = None;
        }
        // Until an answer other than 502/503 comes, the server has taken no part of it.
        sample.refused = true;
        let reused = conn.is_some();
        let c = match conn {
            Some(c) => c,
            None => conn.insert(self.connect().await?),
        };
        let req = self.request("POST", api.path(), body.clone())?;
        let resp = match c.sender.send_request(req).await {
            Ok(resp) => resp,
            // A kept-alive connection the server closed as the request went out (servers close
            // idle ones, and some after a number of requests) took no part of it: sent once
            // more on a new connection, the time it took counted in the request's.
            Err(e) if reused && (e.is_incomplete_message() || e.is_canceled() || e.is_closed()) => {
                let c = conn.insert(self.connect().await?);
                let req = self.request("POST", api.path(), body)?;
                c.sender
                    .send_request(req)
                    .await
                    .map_err(|e| format!("POST {}: {e}", self.base.path_of(api.path())))?
            }
            Err(e) => return Err(format!("POST {}: {e}", self.base.path_of(api.path()))),
        };
        let status = resp.status().as_u16();
        sample.refused = matches!(status, 502 | 503);
        let mut body = resp.into_body();
        if status != 200 {
            let bytes = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            return Err(http_error(status, &String::from_utf8_lossy(&bytes)));
        }
        let mut reader = EventReader::default();
        let mut end = StreamEnd::default();
        'stream: while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                format!(
                    "the stream broke after {} token{}: {e}",
                    sample.tokens.len(),
                    if sample.tokens.len() == 1 { "" } else { "s" }
                )
            })?;
            let Some(data) = frame.data_ref() else {
                continue;
            };
            let now = epoch.elapsed().as_secs_f64();
            for event in reader.push(data) {
                end.events += 1;
                if detail && let Some(d) = chunk_detail(&event) {
                    sample.first_response.get_or_insert(now);
                    if d.generated {
                        sample.pieces.push((now, d.token_ids));
                    }
                }
                match parse_event(&event) {
                    Event::Chunk {
                        text,
                        usage,
                        finished,
                    } => {
                        if text {
                            sample.tokens.push(now);
                            on_token(now);
                        }
                        if usage.is_some() {
                            sample.usage = usage;
                        }
                        end.proper_end |= finished;
                    }
                    Event::Done => {
                        end.proper_end = true;
                        break 'stream;
                    }
                    Event::Error(e) => return Err(format!("the server reported: {e}")),
                }
            }
        }
        // A detailed stream's reasoning is generated text too.
        end.tokens = sample.tokens.len().max(sample.pieces.len());
        // A request counts only when its stream was one, with a token and its proper end.
        judge_stream(end, reader.foreign())
    }
}

/// Not streamed: one JSON request and its whole answer (`spark-launch check`'s questions).
impl Client {
    /// Posts `body` to `tail` under the base URL and returns the status and the body's text,
    /// within the client's timeout; a failure to connect or a timeout is the error.
    pub async fn post_json(&self, tail: &str, body: Vec<u8>) -> Result<(u16, String), String> {
        let fut = async {
            let mut conn = self.connect().await?;
            let req = self.request("POST", tail, body)?;
            let resp = conn
                .sender
                .send_request(req)
                .await
                .map_err(|e| format!("POST {}: {e}", self.base.path_of(tail)))?;
            let status = resp.status().as_u16();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| format!("reading the answer: {e}"))?
                .to_bytes();
            Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
        };
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(format!("no answer within {}s", self.timeout.as_secs())),
        }
    }
}

/// An HTTP error with the server's own message, and what to do about the usual ones.
fn http_error(status: u16, body: &str) -> String {
    let message = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            let e = v.get("error")?;
            e.get("message")
                .and_then(|m| m.as_str())
                .map(str::to_string)
                .or_else(|| e.as_str().map(str::to_string))
        })
        .or_else(|| v_detail(body))
        .unwrap_or_else(|| clip(body, 300));
    let hint = match status {
        401 | 403 => " (the server wants an API key: set OPENAI_API_KEY to it)",
        404 => " (is the model name right? `--model` must be one the server lists at /v1/models)",
        _ => "",
    };
    format!("HTTP {status}: {message}{hint}")
}

/// FastAPI's `{"detail": "..."}`.
fn v_detail(body: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    v.get("detail").and_then(|d| d.as_str()).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_key_never_shows_in_debug_output() {
        let k = BearerKey::new("sk-secret").unwrap();
        assert_eq!(format!("{k:?}"), "BearerKey(<set>)");
        assert!(BearerKey::new("  ").is_none());
    }

    #[test]
    fn http_errors_carry_the_servers_message_and_a_hint() {
        let e = http_error(
            404,
            r#"{"error":{"message":"The model `x` does not exist."}}"#,
        );
        assert!(
            e.starts_with("HTTP 404: The model `x` does not exist."),
            "{e}"
        );
        assert!(e.contains("--model"), "{e}");
        assert!(http_error(401, r#"{"error":"Unauthorized"}"#).contains("OPENAI_API_KEY"));
        assert_eq!(http_error(500, "boom"), "HTTP 500: boom");
        assert_eq!(http_error(422, r#"{"detail":"bad"}"#), "HTTP 422: bad");
    }
}
