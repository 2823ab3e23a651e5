//! One plain HTTP/1.1 GET, for readiness checks (`WaitHttp`): does `http://host:port/path`
//! answer 2xx? No TLS, no redirects, no body kept: a health endpoint needs none of that.
//! Decides nothing; the executor polls it with a deadline.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What one GET saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HttpAnswer {
    /// The status code of the answer.
    Status(u16),
    /// No answer: connection refused, reset, timed out, ... (the text says which).
    NoAnswer(String),
}

/// The parts of an `http://` URL a GET needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpUrl {
    pub host: String,
    pub port: u16,
    pub path: String,
}

impl HttpUrl {
    pub fn parse(url: &str) -> Result<HttpUrl, String> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("only http:// URLs can be awaited, got {url:?}"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => (
                h.trim_start_matches('[').trim_end_matches(']').to_string(),
                p.parse::<u16>()
                    .map_err(|_| format!("bad port in {url:?}"))?,
            ),
            _ => (authority.to_string(), 80),
        };
        if host.is_empty() {
            return Err(format!("no host in {url:?}"));
        }
        Ok(HttpUrl {
            host,
            port,
            path: path.to_string(),
        })
    }
}

/// GETs `url` once, within `timeout`.
pub async fn get(url: &HttpUrl, timeout: Duration) -> HttpAnswer {
    match tokio::time::timeout(timeout, get_inner(url)).await {
        Ok(Ok(status)) => HttpAnswer::Status(status),
        Ok(Err(e)) => HttpAnswer::NoAnswer(e),
        Err(_) => HttpAnswer::NoAnswer(format!("no answer within {}s", timeout.as_secs())),
    }
}

async fn get_inner(url: &HttpUrl) -> Result<u16, String> {
    let mut stream = tokio::net::TcpStream::connect((url.host.as_str(), url.port))
        .await
        .map_err(|e| e.to_string())?;
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}:{}\r\nUser-Agent: spark-launch\r\nAccept: */*\r\nConnection: close\r\n\r\n",
        url.path, url.host, url.port
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut head = Vec::with_capacity(256);
    let mut buf = [0u8; 256];
    while !head.windows(2).any(|w| w == b"\r\n") && head.len() < 8192 {
        let n = stream.read(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    let status = line
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| "the answer was not HTTP".to_string())?;
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_host_port_and_path() {
        assert_eq!(
            HttpUrl::parse("http://169.254.1.2:8000/v1/models").unwrap(),
            HttpUrl {
                host: "169.254.1.2".into(),
                port: 8000,
                path: "/v1/models".into()
            }
        );
        assert_eq!(HttpUrl::parse("http://h").unwrap().port, 80);
        assert!(HttpUrl::parse("https://h/").is_err());
    }

    #[tokio::test]
    async fn a_get_reads_the_status_of_a_real_server() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            s.write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
                .await
                .unwrap();
        });
        let url = HttpUrl::parse(&format!("http://127.0.0.1:{port}/health")).unwrap();
        assert_eq!(
            get(&url, Duration::from_secs(5)).await,
            HttpAnswer::Status(503)
        );
    }

    #[tokio::test]
    async fn a_closed_port_is_no_answer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let url = HttpUrl::parse(&format!("http://127.0.0.1:{port}/")).unwrap();
        assert!(matches!(
            get(&url, Duration::from_secs(5)).await,
            HttpAnswer::NoAnswer(_)
        ));
    }
}
