//! `spark-launch bench` against a stand-in OpenAI-compatible server in this test that streams
//! tokens at a known rate (first token after TTFT, then one every ITL, per request, however
//! many run at once). The figures bench measures must give that rate back within a tolerance;
//! the result file is private, `--compare` shows the change against an earlier run, a
//! profile's `expect:` figures are judged, and the API key reaches the server without ever
//! showing. A soak (`--soak`) gives the rate back per window, and names the stall when the
//! server stops sending tokens for a while (its `paused` switch) with requests in flight.
//! `--plot` pictures are rendered by the real `rsvg-convert` and checked not blank.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

mod picture;

/// How the stand-in streams.
#[derive(Clone, Copy)]
struct Rate {
    ttft: Duration,
    itl: Duration,
}

struct Standin {
    url: String,
    /// Every completion request body received.
    bodies: Arc<Mutex<Vec<Value>>>,
    /// While set, no stream gets its next token (a wedged server: it still accepts requests).
    paused: Arc<AtomicBool>,
    _rt: tokio::runtime::Runtime,
}

const MODEL: &str = "standin/known-rate";
const KEY: &str = "sk-bench-test-0123456789";

fn standin(rate: Rate, key: Option<&'static str>) -> Standin {
    standin_at(rate, key, 0)
}

/// The stand-in on `port` of 127.0.0.1 (0: any free one).
fn standin_at(rate: Rate, key: Option<&'static str>, port: u16) -> Standin {
    standin_with(rate, key, port, usize::MAX)
}

/// The stand-in, answering at most `per_connection` requests on one connection: the next one
/// that comes on it is read and the connection closed without an answer, as a server that
/// limits its keep-alive requests closes one a client is reusing.
fn standin_with(
    rate: Rate,
    key: Option<&'static str>,
    port: u16,
    per_connection: usize,
) -> Standin {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let listener = rt.block_on(TcpListener::bind(("127.0.0.1", port))).unwrap();
    let port = listener.local_addr().unwrap().port();
    let b = bodies.clone();
    let paused = Arc::new(AtomicBool::new(false));
    let p = paused.clone();
    rt.spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(connection(
                stream,
                rate,
                key,
                b.clone(),
                p.clone(),
                per_connection,
            ));
        }
    });
    Standin {
        url: format!("http://127.0.0.1:{port}/v1"),
        bodies,
        paused,
        _rt: rt,
    }
}

/// One keep-alive connection: requests until the client closes it.
async fn connection(
    stream: TcpStream,
    rate: Rate,
    key: Option<&'static str>,
    bodies: Arc<Mutex<Vec<Value>>>,
    paused: Arc<AtomicBool>,
    per_connection: usize,
) {
    let _ = stream.set_nodelay(true);
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::new(r);
    let mut served = 0;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or("").to_string(),
            parts.next().unwrap_or("").to_string(),
        );
        let (mut length, mut auth) = (0usize, None);
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).await.unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (k, v) = h.split_once(':').unwrap_or((h, ""));
            match k.to_ascii_lowercase().as_str() {
                "content-length" => length = v.trim().parse().unwrap_or(0),
                "authorization" => auth = Some(v.trim().to_string()),
                _ => {}
            }
        }
        let mut body = vec![0u8; length];
        if r.read_exact(&mut body).await.is_err() {
            return;
        }
        if served == per_connection {
            return;
        }
        served += 1;
        let reply = |code: &str, body: String| {
            format!(
                "HTTP/1.1 {code}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
        };
        if key.is_some_and(|k| auth.as_deref() != Some(&format!("Bearer {k}"))) {
            let msg = reply(
                "401 Unauthorized",
                r#"{"error":{"message":"Unauthorized"}}"#.into(),
            );
            let _ = w.write_all(msg.as_bytes()).await;
            continue;
        }
        if method == "GET" && path == "/v1/models" {
            let msg = reply("200 OK", format!(r#"{{"data":[{{"id":"{MODEL}"}}]}}"#));
            let _ = w.write_all(msg.as_bytes()).await;
            continue;
        }
        let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        // The questions bench asks first (`spark-launch check`'s): answered right, not counted.
        if path == "/v1/chat/completions" && req["stream"] != true {
            let msg = reply("200 OK", answer(&req).to_string());
            let _ = w.write_all(msg.as_bytes()).await;
            continue;
        }
        bodies.lock().unwrap().push(req.clone());
        if path != "/v1/completions" || req["model"] != MODEL {
            let msg = reply(
                "404 Not Found",
                r#"{"error":{"message":"The model does not exist."}}"#.into(),
            );
            let _ = w.write_all(msg.as_bytes()).await;
            continue;
        }
        let n = req["max_tokens"].as_u64().unwrap_or(16);
        let prompt_words = req["prompt"].as_str().unwrap_or("").split(' ').count();
        let start = tokio::time::Instant::now();
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
        if w.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        let chunk = |data: String| {
            let event = format!("data: {data}\n\n");
            format!("{:x}\r\n{event}\r\n", event.len())
        };
        // Time spent paused moves the rest of the stream's schedule.
        let mut held = Duration::ZERO;
        for i in 0..n {
            // An absolute schedule: timer overshoot does not add up over the stream.
            tokio::time::sleep_until(start + held + rate.ttft + rate.itl * i as u32).await;
            let since = tokio::time::Instant::now();
            while paused.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            held += since.elapsed();
            let c = chunk(format!(r#"{{"choices":[{{"index":0,"text":" t{i}"}}]}}"#));
            if w.write_all(c.as_bytes()).await.is_err() {
                return;
            }
        }
        let usage = chunk(format!(
            r#"{{"choices":[],"usage":{{"prompt_tokens":{prompt_words},"completion_tokens":{n}}}}}"#
        ));
        let done = chunk("[DONE]".into());
        let _ = w
            .write_all(format!("{usage}{done}0\r\n\r\n").as_bytes())
            .await;
    }
}

/// A right answer to one of `spark-launch check`'s questions, as a chat completion that
/// stops: the arithmetic computed, a few sentences for anything else.
fn answer(req: &Value) -> Value {
    let q = req["messages"][0]["content"].as_str().unwrap_or("");
    let sum = q
        .strip_prefix("What is ")
        .and_then(|r| r.split_once('?'))
        .and_then(|(e, _)| {
            let mut p = e.split(' ');
            let (a, op, b) = (p.next()?, p.next()?, p.next()?);
            let (a, b): (i64, i64) = (a.parse().ok()?, b.parse().ok()?);
            Some(match op {
                "+" => a + b,
                "-" => a - b,
                _ => a * b,
            })
        });
    let content = match sum {
        Some(v) => v.to_string(),
        None => "Air scatters short blue wavelengths of sunlight more than red ones, so the sky looks blue from every direction.".into(),
    };
    serde_json::json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}], "usage": {"completion_tokens": 3}})
}

/// Runs the binary with its own config and state folders (no cluster file, no profiles).
fn bench(home: &Path, args: &[&str], key: Option<&str>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_spark-launch"));
    c.arg("bench")
        .args(args)
        .env("SPARK_LAUNCH_NO_PROGRESS", "1")
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .env_remove("SPARK_LAUNCH_STATE_DIR")
        .env_remove("SPARK_LAUNCH_PROFILES")
        .env_remove("SPARK_LAUNCH_CLUSTER")
        .env_remove("OPENAI_API_KEY");
    if let Some(k) = key {
        c.env("OPENAI_API_KEY", k);
    }
    c.output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(o)))
}

fn within(measured: f64, known: f64, tolerance: f64) -> bool {
    (measured - known).abs() <= known * tolerance
}

const PROMPT: u32 = 24;
const OUTPUT: u32 = 16;

#[test]
fn the_figures_match_a_server_streaming_at_a_known_rate() {
    let rate = Rate {
        ttft: Duration::from_millis(60),
        itl: Duration::from_millis(15),
    };
    let s = standin(rate, Some(KEY));
    let home = tempfile::tempdir().unwrap();
    let out = bench(
        home.path(),
        &[
            "--url",
            &s.url,
            "--concurrency",
            "1,4,16",
            "--prompt-tokens",
            &PROMPT.to_string(),
            "--output-tokens",
            &OUTPUT.to_string(),
            "--json",
        ],
        Some(KEY),
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v = json(&out);
    let report = &v["report"];
    assert_eq!(report["model"], MODEL);
    assert_eq!(report["url"], s.url.as_str());
    // One request takes TTFT + (N-1) × ITL; c of them at once.
    let per_request = rate.ttft.as_secs_f64() + (f64::from(OUTPUT) - 1.0) * rate.itl.as_secs_f64();
    let levels = report["levels"].as_array().unwrap();
    assert_eq!(levels.len(), 3);
    for l in levels {
        let c = l["concurrency"].as_f64().unwrap();
        let figure = |k: &str| l[k].as_f64().unwrap_or(f64::NAN);
        let known_tps = c * f64::from(OUTPUT) / per_request;
        assert_eq!(l["failed"], 0, "{l}");
        assert_eq!(
            l["requests"].as_f64(),
            Some(c * 4.0).map(|n| n.max(8.0)),
            "{l}"
        );
        assert!(
            within(figure("output_tokens_per_s"), known_tps, 0.12),
            "c={c}: {} output tok/s, the server streams {known_tps:.1}\n{l}",
            figure("output_tokens_per_s")
        );
        assert!(
            within(figure("requests_per_s"), c / per_request, 0.12),
            "c={c}: {l}"
        );
        let ttft = l["ttft_ms"]["p50"].as_f64().unwrap();
        assert!(
            (60.0..75.0).contains(&ttft),
            "c={c}: TTFT p50 {ttft} ms\n{l}"
        );
        let itl = l["itl_ms"]["p50"].as_f64().unwrap();
        assert!((13.0..18.0).contains(&itl), "c={c}: ITL p50 {itl} ms\n{l}");
        assert_eq!(l["tokens_counted_by"], "usage");
        assert_eq!(l["mean_prompt_tokens"].as_f64(), Some(f64::from(PROMPT)));
        assert_eq!(l["mean_output_tokens"].as_f64(), Some(f64::from(OUTPUT)));
    }
    // What the server received: fixed lengths, streaming, and no two prompts alike.
    let bodies = s.bodies.lock().unwrap().clone();
    assert_eq!(bodies.len(), 1 + 8 + 16 + 64, "warm-up + three levels");
    assert!(bodies.iter().all(|b| b["max_tokens"] == OUTPUT
        && b["stream"] == true
        && b["prompt"].as_str().unwrap().split(' ').count() == PROMPT as usize));
    let prompts: std::collections::BTreeSet<&str> = bodies
        .iter()
        .map(|b| b["prompt"].as_str().unwrap())
        .collect();
    assert_eq!(prompts.len(), bodies.len());
    // The result file: where it says, private, the same report; the key nowhere.
    let saved = PathBuf::from(v["saved"].as_str().unwrap());
    assert!(
        saved.starts_with(home.path().join("state/spark-launch/bench")),
        "{}",
        saved.display()
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&saved).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let file = std::fs::read_to_string(&saved).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&file).unwrap(), *report);
    for place in [&file, &text(&out)] {
        assert!(!place.contains(KEY), "the API key leaked:\n{place}");
    }
}

#[test]
fn the_table_names_every_level_and_where_the_result_was_saved() {
    let s = standin(
        Rate {
            ttft: Duration::from_millis(20),
            itl: Duration::from_millis(5),
        },
        None,
    );
    let home = tempfile::tempdir().unwrap();
    let out = bench(
        home.path(),
        &[
            "--url",
            &s.url,
            "--concurrency",
            "1,2",
            "--prompt-tokens",
            "8",
            "--output-tokens",
            "8",
            "--requests",
            "4",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for want in [
        &format!(
            "{MODEL} at {}: 8 prompt + 8 output tokens per request",
            s.url
        ),
        "CONCURRENCY",
        "OUTPUT TOK/S",
        "TTFT P50 ms",
        "ITL P95 ms",
        "tokens as the server counted them: 8 prompt, 8 output per request",
        "saved: ",
    ] {
        assert!(stdout.contains(want), "no {want:?} in:\n{stdout}");
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.is_empty(), "progress was asked off: {stderr}");
}

#[test]
fn compare_shows_how_much_slower_a_slower_server_is() {
    let fast = standin(
        Rate {
            ttft: Duration::from_millis(20),
            itl: Duration::from_millis(10),
        },
        None,
    );
    let slow = standin(
        Rate {
            ttft: Duration::from_millis(40),
            itl: Duration::from_millis(20),
        },
        None,
    );
    let home = tempfile::tempdir().unwrap();
    let earlier = home.path().join("fast.json");
    let common = [
        "--concurrency",
        "1,4",
        "--prompt-tokens",
        "8",
        "--output-tokens",
        "12",
        "--no-warmup",
    ];
    let mut args = vec!["--url", &fast.url, "--out", earlier.to_str().unwrap()];
    args.extend(common);
    let out = bench(home.path(), &args, None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let mut args = vec![
        "--url",
        &slow.url,
        "--compare",
        earlier.to_str().unwrap(),
        "--json",
    ];
    args.extend(common);
    let out = bench(home.path(), &args, None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let c = &json(&out)["comparison"];
    assert!(
        c["notes"][0]
            .as_str()
            .unwrap()
            .starts_with("the server differs"),
        "{c}"
    );
    for level in c["levels"].as_array().unwrap() {
        for ch in level["changes"].as_array().unwrap() {
            let pct = ch["change_pct"].as_f64().unwrap();
            assert_eq!(ch["better"], false, "{ch}");
            match ch["figure"].as_str().unwrap() {
                // Twice the time per token: half the throughput, twice the latency.
                "output_tokens_per_s" | "requests_per_s" => {
                    assert!((-58.0..-42.0).contains(&pct), "{ch}")
                }
                "ttft_p50_ms" | "itl_p50_ms" => assert!((70.0..130.0).contains(&pct), "{ch}"),
                _ => {}
            }
        }
    }
    // The same in text: the change, marked worse.
    let mut args = vec!["--url", &slow.url, "--compare", earlier.to_str().unwrap()];
    args.extend(common);
    let out = bench(home.path(), &args, None);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("change against the run of"), "{stdout}");
    assert!(stdout.contains("% worse)"), "{stdout}");
}

#[test]
fn a_profile_says_what_to_expect_and_bench_judges_the_run_against_it() {
    let rate = Rate {
        ttft: Duration::from_millis(20),
        itl: Duration::from_millis(10),
    };
    let s = standin(rate, None);
    let home = tempfile::tempdir().unwrap();
    let profiles = home.path().join("config/spark-launch/profiles");
    std::fs::create_dir_all(&profiles).unwrap();
    // 10 tokens in 0.11 s: ~91 tok/s per stream. Concurrency 1 meets its figures; 2 is
    // expected to do far more than it can.
    std::fs::write(
        profiles.join("demo.yaml"),
        "name: demo\ndescription: a known-rate stand-in\nengine: vllm\nmodel: {id: standin/known-rate}\nnodes: 1\nexpect:\n  prompt_tokens: 8\n  output_tokens: 10\n  levels:\n    - {concurrency: 1, output_tokens_per_s: 70, itl_p50_ms: 12}\n    - {concurrency: 2, output_tokens_per_s: 1000}\n",
    )
    .unwrap();
    let out = bench(
        home.path(),
        &[
            "--url",
            &s.url,
            "--profile",
            "demo",
            "--concurrency",
            "1,2",
            "--json",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let v = json(&out);
    // The profile's lengths are used when none are given.
    assert_eq!(v["report"]["prompt_tokens"], 8);
    assert_eq!(v["report"]["output_tokens"], 10);
    let verdicts: Vec<(u64, String, String)> = v["expectations"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["concurrency"].as_u64().unwrap(),
                c["figure"].as_str().unwrap().to_string(),
                c["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        verdicts,
        vec![
            (1, "output_tokens_per_s".into(), "meets".into()),
            (1, "itl_p50_ms".into(), "meets".into()),
            (2, "output_tokens_per_s".into(), "below".into()),
        ]
    );
    // A profile without figures cannot be judged against.
    std::fs::write(
        profiles.join("plain.yaml"),
        "name: plain\ndescription: no figures\nengine: vllm\nmodel: {id: standin/known-rate}\nnodes: 1\n",
    )
    .unwrap();
    let out = bench(home.path(), &["--url", &s.url, "--profile", "plain"], None);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("has no `expect:` figures"),
        "{}",
        text(&out)
    );
}

#[test]
fn what_cannot_be_measured_is_said_plainly() {
    let home = tempfile::tempdir().unwrap();
    // No server there.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    let out = bench(
        home.path(),
        &["--url", &format!("http://127.0.0.1:{port}")],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("cannot connect to 127.0.0.1:{port}")),
        "{}",
        text(&out)
    );
    // https, and a compare file that is not a result: refused before anything is sent.
    let out = bench(home.path(), &["--url", "https://api.example.com/v1"], None);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("plain HTTP"), "{}", text(&out));
    let s = standin(
        Rate {
            ttft: Duration::from_millis(5),
            itl: Duration::from_millis(5),
        },
        Some(KEY),
    );
    let bogus = home.path().join("bogus.json");
    std::fs::write(&bogus, "[]").unwrap();
    let out = bench(
        home.path(),
        &["--url", &s.url, "--compare", bogus.to_str().unwrap()],
        Some(KEY),
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("is not a result file"),
        "{}",
        text(&out)
    );
    assert!(s.bodies.lock().unwrap().is_empty());
    // A server that wants a key we do not have, and a model it does not serve.
    let out = bench(home.path(), &["--url", &s.url], None);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("HTTP 401"), "{}", text(&out));
    assert!(text(&out).contains("OPENAI_API_KEY"), "{}", text(&out));
    let out = bench(
        home.path(),
        &["--url", &s.url, "--model", "other/model"],
        Some(KEY),
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("the warm-up request failed: HTTP 404"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_soak_keeps_its_streams_busy_and_gives_back_the_rate_in_every_window() {
    let rate = Rate {
        ttft: Duration::from_millis(20),
        itl: Duration::from_millis(10),
    };
    let s = standin(rate, None);
    let home = tempfile::tempdir().unwrap();
    let svg = home.path().join("soak.svg");
    let out = bench(
        home.path(),
        &[
            "--url",
            &s.url,
            "--soak",
            "6s",
            "--window",
            "2",
            "--concurrency",
            "4",
            "--prompt-tokens",
            "8",
            "--output-tokens",
            "16",
            "--plot",
            svg.to_str().unwrap(),
            "--json",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v = json(&out);
    let report = &v["report"];
    assert_eq!(report["levels"], serde_json::json!([]));
    let soak = &report["soak"];
    assert_eq!(soak["concurrency"], 4);
    assert_eq!(soak["duration_s"].as_f64(), Some(6.0));
    assert_eq!(soak["stalls"], serde_json::json!([]));
    assert_eq!(soak["failed"], 0);
    // Four streams, each 16 tokens per TTFT + 15 × ITL.
    let per_request = rate.ttft.as_secs_f64() + 15.0 * rate.itl.as_secs_f64();
    let known = 4.0 * 16.0 / per_request;
    let windows = soak["windows"].as_array().unwrap();
    assert_eq!(windows.len(), 3, "{soak}");
    for w in windows {
        let tps = w["tokens_per_s"].as_f64().unwrap();
        assert!(
            within(tps, known, 0.2),
            "{tps} tok/s, the server streams {known:.1}: {w}"
        );
        assert_eq!(w["in_flight_max"], 4, "{w}");
    }
    assert!(soak["requests"].as_u64().unwrap() >= 100, "{soak}");
    // Saved like a sweep, and drawn.
    let saved = std::fs::read_to_string(v["saved"].as_str().unwrap()).unwrap();
    assert_eq!(serde_json::from_str::<Value>(&saved).unwrap(), *report);
    let p = picture::render(&svg);
    p.assert_not_blank();
    p.assert_drawn("the tokens/s series", picture::NOW, 300);
    assert_eq!(p.count(picture::STALL_SHADE, 6), 0, "no stall, no shading");
}

#[test]
fn a_request_refused_while_the_server_restarts_is_sent_again_and_not_counted_failed() {
    // No server for the first 1.5 s of the soak (connections refused, as while a supervised
    // group restarts), then the stand-in on that port.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    let rate = Rate {
        ttft: Duration::from_millis(20),
        itl: Duration::from_millis(10),
    };
    let later = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        standin_at(rate, None, port)
    });
    let home = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{port}/v1");
    let out = bench(
        home.path(),
        &[
            "--url",
            &url,
            "--model",
            MODEL,
            // What is measured here, not whether it answers right.
            "--skip-check",
            "--no-warmup",
            "--soak",
            "5s",
            "--concurrency",
            "2",
            "--prompt-tokens",
            "8",
            "--output-tokens",
            "8",
            "--json",
        ],
        None,
    );
    let _standin = later.join().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let soak = &json(&out)["report"]["soak"];
    assert_eq!(soak["failed"], 0, "{soak}");
    assert!(
        soak["refused_and_resent"].as_u64().unwrap() >= 2,
        "each stream was refused at least once: {soak}"
    );
    assert!(soak["requests"].as_u64().unwrap() >= 10, "{soak}");
}

#[test]
fn a_kept_alive_connection_the_server_closes_is_opened_again_and_no_request_fails() {
    // llama-server closes a connection after a few requests on it; a request sent on it just
    // then gets no answer at all.
    let rate = Rate {
        ttft: Duration::from_millis(5),
        itl: Duration::from_millis(2),
    };
    let s = standin_with(rate, None, 0, 2);
    let home = tempfile::tempdir().unwrap();
    let out = bench(
        home.path(),
        &[
            "--url",
            &s.url,
            "--model",
            MODEL,
            "--skip-check",
            "--no-warmup",
            "--concurrency",
            "1",
            "--prompt-tokens",
            "8",
            "--output-tokens",
            "8",
            "--json",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let level = &json(&out)["report"]["levels"][0];
    assert_eq!(level["failed"], 0, "{level}");
    assert_eq!(level["requests"], 8, "{level}");
}

#[test]
fn a_server_that_stops_sending_tokens_is_a_stall_named_with_its_span_and_the_soak_exits_one() {
    let s = standin(
        Rate {
            ttft: Duration::from_millis(20),
            itl: Duration::from_millis(10),
        },
        None,
    );
    let home = tempfile::tempdir().unwrap();
    let svg = home.path().join("stall.svg");
    // The server stops generating from about 2 s to 6 s into the soak (after the warm-up).
    let paused = s.paused.clone();
    let switch = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(2300));
        paused.store(true, Ordering::Relaxed);
        std::thread::sleep(Duration::from_secs(4));
        paused.store(false, Ordering::Relaxed);
    });
    let out = bench(
        home.path(),
        &[
            "--url",
            &s.url,
            "--soak",
            "9",
            "--window",
            "1",
            "--stall-after",
            "2",
            "--concurrency",
            "3",
            "--prompt-tokens",
            "8",
            "--output-tokens",
            "16",
            "--plot",
            svg.to_str().unwrap(),
        ],
        None,
    );
    switch.join().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stall = stdout
        .lines()
        .find(|l| l.starts_with("STALL "))
        .unwrap_or_else(|| panic!("no STALL line in:\n{stdout}"));
    assert!(
        stall.ends_with("3 requests in flight and no token"),
        "{stall}"
    );
    // Noticed while it lasted, not only at the end.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("stall: no token since") && stderr.contains("with 3 requests in flight"),
        "{stderr}"
    );
    // The span, from the saved result: about 4 s, after about 2 s.
    let saved = stdout
        .lines()
        .find_map(|l| l.strip_prefix("saved: "))
        .unwrap();
    let report: Value = serde_json::from_str(&std::fs::read_to_string(saved).unwrap()).unwrap();
    let stalls = report["soak"]["stalls"].as_array().unwrap();
    assert_eq!(stalls.len(), 1, "{stalls:?}");
    let (start, duration) = (
        stalls[0]["start_s"].as_f64().unwrap(),
        stalls[0]["duration_s"].as_f64().unwrap(),
    );
    assert!((1.0..3.0).contains(&start), "{}", stalls[0]);
    assert!((3.0..5.0).contains(&duration), "{}", stalls[0]);
    assert_eq!(stalls[0]["ongoing_at_end"], false);
    // Tokens came again after it: the last windows are not empty.
    let last = report["soak"]["windows"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(last["tokens"].as_u64().unwrap() > 0, "{last}");
    let p = picture::render(&svg);
    p.assert_not_blank();
    p.assert_drawn("the stall's shading", picture::STALL_SHADE, 2000);
}

#[test]
fn compare_with_plot_draws_both_runs_side_by_side() {
    let fast = standin(
        Rate {
            ttft: Duration::from_millis(10),
            itl: Duration::from_millis(5),
        },
        None,
    );
    let slow = standin(
        Rate {
            ttft: Duration::from_millis(30),
            itl: Duration::from_millis(10),
        },
        None,
    );
    let home = tempfile::tempdir().unwrap();
    let earlier = home.path().join("fast.json");
    let svg = home.path().join("compare.svg");
    let common = [
        "--concurrency",
        "1,2,4",
        "--prompt-tokens",
        "8",
        "--output-tokens",
        "8",
        "--requests",
        "8",
        "--no-warmup",
    ];
    let mut args = vec!["--url", &fast.url, "--out", earlier.to_str().unwrap()];
    args.extend(common);
    let out = bench(home.path(), &args, None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let mut args = vec![
        "--url",
        &slow.url,
        "--compare",
        earlier.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ];
    args.extend(common);
    let out = bench(home.path(), &args, None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let doc = std::fs::read_to_string(&svg).unwrap();
    for label in [
        "output tokens/s by concurrency",
        "time to first token by concurrency",
        "now: standin/known-rate",
        "earlier: standin/known-rate",
    ] {
        assert!(doc.contains(label), "no {label:?} in the SVG");
    }
    let p = picture::render(&svg);
    p.assert_not_blank();
    p.assert_drawn("this run", picture::NOW, 300);
    p.assert_drawn("the earlier run", picture::EARLIER, 300);
}

/// What a broken server sends after `200 OK` (as an event stream, then it closes).
#[derive(Clone, Copy)]
enum Broken {
    /// Bytes that are no event stream at all.
    RandomBytes,
    /// Two tokens, then the connection closes: no `[DONE]`, no `finish_reason`.
    CutShort,
}

/// A server that answers every request with `200 OK` and what `broken` says, then closes the
/// connection (the body ends there); the count of requests it answered.
fn broken_server(broken: Broken) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{BufRead, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut r = std::io::BufReader::new(&stream);
                let mut length = 0usize;
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).unwrap_or(0) == 0 {
                        return;
                    }
                    let h = h.trim_end().to_ascii_lowercase();
                    if h.is_empty() {
                        break;
                    }
                    if let Some(v) = h.strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0u8; length];
                if r.read_exact(&mut body).is_err() {
                    return;
                }
                seen.fetch_add(1, Ordering::SeqCst);
                let payload: Vec<u8> = match broken {
                    // A fixed pseudo-random sequence (a linear congruential generator).
                    Broken::RandomBytes => {
                        let mut x = 0x2545_f491_u32;
                        (0..4096)
                            .map(|_| {
                                x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                                (x >> 16) as u8
                            })
                            .collect()
                    }
                    Broken::CutShort => {
                        b"data: {\"choices\":[{\"index\":0,\"text\":\" t0\"}]}\n\ndata: {\"choices\":[{\"index\":0,\"text\":\" t1\"}]}\n\n".to_vec()
                    }
                };
                let mut w = &stream;
                let _ = w.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
                );
                let _ = w.write_all(&payload);
                let _ = w.flush();
                let _ = stream.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    (url, count)
}

#[test]
fn a_200_of_random_bytes_or_a_stream_cut_short_is_a_failed_request_and_exits_one() {
    let home = tempfile::tempdir().unwrap();
    for (broken, reason) in [
        (
            Broken::RandomBytes,
            "the answer was not a stream of server-sent events",
        ),
        (
            Broken::CutShort,
            "the stream closed before its end (no [DONE] and no finish_reason) after 2 tokens",
        ),
    ] {
        let (url, answered) = broken_server(broken);
        let common = [
            "--url",
            &url,
            "--model",
            MODEL,
            // What is measured here, not whether it answers right.
            "--skip-check",
            "--concurrency",
            "2",
            "--requests",
            "4",
            "--prompt-tokens",
            "8",
            "--output-tokens",
            "8",
        ];
        // Measured: every request failed with its reason, and the run says so.
        let mut args = common.to_vec();
        args.push("--no-warmup");
        let out = bench(home.path(), &args, None);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("0 (4 FAILED)"), "{}", text(&out));
        assert!(
            stdout.contains("EVERY REQUEST FAILED (4 of 4): nothing was measured"),
            "{}",
            text(&out)
        );
        assert!(stdout.contains(reason), "{}", text(&out));
        assert_eq!(answered.load(Ordering::SeqCst), 4);
        let mut args = common.to_vec();
        args.push("--json");
        args.push("--no-warmup");
        let v = json(&bench(home.path(), &args, None));
        let level = &v["report"]["levels"][0];
        assert_eq!(
            (&level["requests"], &level["failed"]),
            (&0.into(), &4.into())
        );
        // With its warm-up, the first request's failure stops the run with the reason.
        let out = bench(home.path(), &common, None);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        assert!(
            text(&out).contains(&format!("the warm-up request failed: {reason}")),
            "{}",
            text(&out)
        );
    }
}

#[test]
fn a_soak_that_got_no_token_at_all_says_so_and_exits_one() {
    let home = tempfile::tempdir().unwrap();
    let (url, answered) = broken_server(Broken::RandomBytes);
    let out = bench(
        home.path(),
        &[
            "--url",
            &url,
            "--model",
            MODEL,
            // What is measured here, not whether it answers right.
            "--skip-check",
            "--no-warmup",
            "--soak",
            "3s",
            "--concurrency",
            "2",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("NO TOKEN: not a single token came in 0:03 of soak"),
        "{}",
        text(&out)
    );
    assert!(!stdout.contains("no stall"), "{}", text(&out));
    assert!(
        stdout.contains("first failure: the answer was not a stream of server-sent events"),
        "{}",
        text(&out)
    );
    assert!(answered.load(Ordering::SeqCst) >= 2);
}

#[test]
fn a_plot_that_cannot_be_written_and_an_endless_soak_are_refused_before_anything_is_sent() {
    let s = standin(
        Rate {
            ttft: Duration::from_millis(5),
            itl: Duration::from_millis(5),
        },
        None,
    );
    let home = tempfile::tempdir().unwrap();
    let theirs = home.path().join("theirs.svg");
    std::fs::write(&theirs, "<svg>someone's picture</svg>").unwrap();
    let link = home.path().join("link.svg");
    std::os::unix::fs::symlink(&theirs, &link).unwrap();
    let missing = home.path().join("no/such/folder/run.svg");
    for (plot, why) in [
        (&missing, "does not exist"),
        (&link, "symbolic link"),
        (&theirs, "not a picture spark-launch drew"),
    ] {
        let out = bench(
            home.path(),
            &[
                "--url",
                &s.url,
                "--soak",
                "5s",
                "--plot",
                plot.to_str().unwrap(),
            ],
            None,
        );
        assert_eq!(out.status.code(), Some(2), "{}", text(&out));
        assert!(text(&out).contains(why), "{}", text(&out));
    }
    assert_eq!(
        std::fs::read_to_string(&theirs).unwrap(),
        "<svg>someone's picture</svg>"
    );
    let out = bench(
        home.path(),
        &["--url", &s.url, "--soak", "18446744073709551615s"],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("at most 7 days"), "{}", text(&out));
    assert!(s.bodies.lock().unwrap().is_empty(), "nothing was sent");
}

#[test]
fn a_picture_is_announced_after_the_results_and_a_failed_write_leaves_the_table_shown() {
    let s = standin(
        Rate {
            ttft: Duration::from_millis(5),
            itl: Duration::from_millis(5),
        },
        None,
    );
    let home = tempfile::tempdir().unwrap();
    let svg = home.path().join("run.svg");
    let args = [
        "--url",
        &s.url,
        "--concurrency",
        "1",
        "--requests",
        "2",
        "--prompt-tokens",
        "8",
        "--output-tokens",
        "8",
        "--no-warmup",
        "--plot",
        svg.to_str().unwrap(),
    ];
    let out = bench(home.path(), &args, None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let wrote = format!("wrote plot {}", svg.display());
    assert!(stdout.trim_end().ends_with(&wrote), "{}", text(&out));
    // The same place again: the picture is ours, replaced.
    let out = bench(home.path(), &args, None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    // Something put at the picture's place during the run (here a folder, once the first
    // request arrived): the write fails after the run, and the table is shown before the error.
    std::fs::remove_file(&svg).unwrap();
    let later = home.path().join("later.svg");
    let plot = later.to_str().unwrap().to_string();
    let mut args = args.to_vec();
    *args.last_mut().unwrap() = &plot;
    args[5] = "40";
    let bodies = s.bodies.clone();
    let sent_before = bodies.lock().unwrap().len();
    let swap = std::thread::spawn(move || {
        while bodies.lock().unwrap().len() == sent_before {
            std::thread::sleep(Duration::from_millis(2));
        }
        std::fs::create_dir(&later).unwrap();
    });
    let out = bench(home.path(), &args, None);
    swap.join().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("CONCURRENCY"), "{}", text(&out));
    assert!(stdout.contains("saved: "), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a regular file"),
        "{}",
        text(&out)
    );
}
