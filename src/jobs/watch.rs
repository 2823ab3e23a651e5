//! `spark-launch status --watch [JOB]`: samples of the cluster (`report::live`) taken over the
//! nodes' shells — one script per node (`nvidia-smi`, `/proc/meminfo`, and on the job's serving
//! head its `/metrics` read twice) — with the job's parts found by their labels and the last
//! lines of its event log (`<state_dir>/records/JOB/events.jsonl`). Shown as one sample
//! (`--json`), plain text samples (stdout not a terminal), or one refreshing screen (ratatui on
//! crossterm; `q`, Esc or Ctrl-C leaves it). Effects only; the sample is built and worded in
//! `report::live`.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ratatui::layout::{Constraint, Layout};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Wrap};
use tokio_util::sync::CancellationToken;

use super::command::{JobsError, StatusRequest};
use super::find;
use crate::node::for_each_node;
use crate::plan::JobName;
use crate::progress::Reporter;
use crate::report::live::{self, LiveSample, NodeReading, PartState};
use crate::resolve::{self, Needs, Purpose};
use crate::runtime::Cluster;

/// How often the screen (or the text) is refreshed.
const EVERY: Duration = Duration::from_secs(2);

/// The events shown.
const EVENTS: usize = 8;

/// How the samples are shown.
pub enum WatchShow<'a> {
    /// One sample, returned (`--json`).
    Once,
    /// A text sample every few seconds into the sink until Ctrl-C, or until the sink cannot
    /// be written (stdout not a terminal: `status --watch | head` ends when `head` does).
    Lines(LineSink<'a>),
    /// One refreshing screen until `q`, Esc or Ctrl-C.
    Screen,
}

/// Where the text samples go; an error ends the watch (a closed reader: cleanly).
pub type LineSink<'a> = &'a (dyn Fn(&str) -> std::io::Result<()> + Send + Sync);

/// `spark-launch status --watch [JOB]`: the last sample taken.
pub async fn watch(
    req: &StatusRequest,
    reporter: &Arc<dyn Reporter>,
    cancel: &CancellationToken,
    show: WatchShow<'_>,
) -> Result<LiveSample, JobsError> {
    let resolved = resolve::resolve(
        &req.selection,
        Needs::links(Purpose::Observe("status")),
        reporter,
    )
    .await?;
    resolved
        .scope(async |resolved| {
            let cluster = resolved.runtime()?;
            let job = req.job.as_ref();
            match show {
                WatchShow::Once => Ok(sample(&cluster, job).await),
                WatchShow::Lines(sink) => lines(|| sample(&cluster, job), sink, cancel).await,
                WatchShow::Screen => screen(&cluster, job, cancel).await,
            }
        })
        .await
}

/// Text samples into `sink` until Ctrl-C or until it cannot be written: a reader that went
/// away (a broken pipe, as after `| head`) ends the watch cleanly, as it ends other Unix
/// tools; any other write error ends it with that error. Never polls the nodes for nobody.
async fn lines<F, Fut>(
    mut take: F,
    sink: LineSink<'_>,
    cancel: &CancellationToken,
) -> Result<LiveSample, JobsError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = LiveSample>,
{
    let mut last = take().await;
    loop {
        match sink(&format!("{}\n", last.text())) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(last),
            Err(e) => return Err(JobsError::Output(e)),
        }
        tokio::select! {
            _ = cancel.cancelled() => return Ok(last),
            _ = tokio::time::sleep(EVERY) => {}
        }
        last = take().await;
    }
}

/// The refreshing screen: a sample is taken in the background while keys are read.
async fn screen(
    cluster: &Cluster,
    job: Option<&JobName>,
    cancel: &CancellationToken,
) -> Result<LiveSample, JobsError> {
    let mut terminal = ratatui::try_init()
        .map_err(|e| JobsError::Runtime(crate::runtime::RuntimeError::Other(e.to_string())))?;
    // The terminal is put back however this ends (a dropped future included).
    struct Restore;
    impl Drop for Restore {
        fn drop(&mut self) {
            ratatui::restore();
        }
    }
    let _restore = Restore;
    let mut last = LiveSample {
        at: "taking the first sample…".into(),
        job: job.map(|j| j.to_string()),
        ..LiveSample::default()
    };
    loop {
        let _ = terminal.draw(|f| draw(f, &last));
        let next = sample(cluster, job);
        tokio::pin!(next);
        let quit = loop {
            tokio::select! {
                s = &mut next => { last = s; break false; }
                _ = cancel.cancelled() => break true,
                q = tokio::task::spawn_blocking(quit_key) => {
                    if q.unwrap_or(false) {
                        break true;
                    }
                }
            }
        };
        if quit {
            break Ok(last);
        }
        let _ = terminal.draw(|f| draw(f, &last));
        let until = tokio::time::Instant::now() + EVERY;
        let quit = loop {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => break false,
                _ = cancel.cancelled() => break true,
                q = tokio::task::spawn_blocking(quit_key) => {
                    if q.unwrap_or(false) {
                        break true;
                    }
                }
            }
        };
        if quit {
            break Ok(last);
        }
    }
}

/// Waits a moment for a key: whether it asks to leave (`q`, Esc, Ctrl-C: raw mode turns
/// Ctrl-C into a key).
fn quit_key() -> bool {
    use ratatui::crossterm::event::{self, Event, KeyCode, KeyModifiers};
    if !event::poll(Duration::from_millis(200)).unwrap_or(false) {
        return false;
    }
    match event::read() {
        Ok(Event::Key(k)) => {
            matches!(k.code, KeyCode::Char('q') | KeyCode::Esc)
                || (k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL))
        }
        _ => false,
    }
}

/// One frame: the nodes, the engine, the job's parts, its last events.
fn draw(f: &mut ratatui::Frame, s: &LiveSample) {
    let title = format!(
        " spark-launch status --watch {}· {} · q quits ",
        s.job.as_ref().map(|j| format!("{j} ")).unwrap_or_default(),
        s.at
    );
    let lines = |v: Vec<String>| -> Vec<Line> { v.into_iter().map(Line::from).collect() };
    let mut nodes: Vec<String> = s.nodes.iter().map(NodeReading::line).collect();
    nodes.extend(
        s.unreachable
            .iter()
            .map(|(n, why)| format!("{n}: could not be asked: {why}")),
    );
    let engine = match (&s.engine, &s.engine_note) {
        (Some(e), _) => vec![e.url.clone(), e.line()],
        (None, Some(why)) => vec![why.clone()],
        (None, None) => vec!["no JOB given: name one to see its engine's metrics".into()],
    };
    let parts: Vec<String> = s
        .parts
        .iter()
        .map(|p| format!("{}: {} {}", p.node, p.name, p.state))
        .collect();
    let events: Vec<String> = s
        .events
        .iter()
        .map(|e| format!("{} {} {}", e.at, e.kind, e.detail))
        .collect();
    let height = |n: usize| Constraint::Length(n.max(1) as u16 + 2);
    let outer = Block::bordered().title(title);
    let area = outer.inner(f.area());
    f.render_widget(outer, f.area());
    let rows = Layout::vertical([
        height(nodes.len()),
        height(engine.len()),
        height(parts.len()),
        Constraint::Min(3),
    ])
    .split(area);
    let boxed = |title: &'static str, v: Vec<String>| {
        Paragraph::new(lines(v))
            .wrap(Wrap { trim: true })
            .block(Block::bordered().title(title))
    };
    f.render_widget(boxed(" nodes ", nodes), rows[0]);
    f.render_widget(boxed(" engine ", engine), rows[1]);
    f.render_widget(boxed(" job ", parts), rows[2]);
    f.render_widget(boxed(" events ", events), rows[3]);
}

/// One sample of `cluster` (of `job`'s parts, engine and events when given).
pub async fn sample(cluster: &Cluster, job: Option<&JobName>) -> LiveSample {
    let found = find(cluster, job).await;
    let parts = found
        .entries
        .iter()
        .map(|e| PartState {
            node: e.node.to_string(),
            name: e.name.clone(),
            state: e.state.clone(),
            exit_code: e.exit_code,
        })
        .collect();
    // The serving head's metrics, read on the head itself (its bound address, else loopback).
    let (head, engine_note) = match job {
        Some(j) => match crate::bench::locate::serving_head(j, &found.entries, &[]) {
            Ok(h) => {
                let host = h
                    .bind
                    .map(|a| a.to_string())
                    .unwrap_or_else(|| "127.0.0.1".into());
                (
                    Some((
                        h.node.clone(),
                        format!("http://{host}:{}/metrics", h.ports[0]),
                    )),
                    None,
                )
            }
            Err(why) => (None, Some(why)),
        },
        None => (None, None),
    };
    let head = &head;
    let read = for_each_node(cluster.names(), 0, |node| async move {
        let url = head
            .as_ref()
            .filter(|(n, _)| *n == node)
            .map(|(_, u)| u.clone());
        let shell = cluster.node(&node)?.target.shell()?;
        let out = shell
            .run(&live::node_script(url.as_deref()), Vec::new(), None)
            .await
            .map_err(crate::runtime::RuntimeError::from)?;
        Ok::<_, crate::runtime::RuntimeError>(live::node_sample(
            node.as_str(),
            &out.stdout,
            url.as_deref(),
        ))
    })
    .await;
    let mut s = LiveSample {
        at: crate::clock::utc_stamp(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0),
        ),
        job: job.map(|j| j.to_string()),
        parts,
        engine_note,
        ..LiveSample::default()
    };
    for (node, r) in read {
        match r {
            Ok((n, e)) => {
                s.nodes.push(n);
                if e.is_some() {
                    s.engine = e;
                }
            }
            Err(e) => s.unreachable.push((node.to_string(), e.to_string())),
        }
    }
    for (node, e) in &found.failed {
        if !s.unreachable.iter().any(|(n, _)| n == node.as_str()) {
            s.unreachable.push((node.to_string(), e.to_string()));
        }
    }
    if let Some(j) = job {
        let path = crate::records::events_path(&crate::state::state_dir(), j);
        // Read as a log is (a bad byte spoils its line, never the rest; a FIFO is refused).
        if let Ok(text) = crate::input::read_text(&path, crate::input::LOG) {
            s.events = live::last_events(&text, EVENTS);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::live::EngineReading;

    /// A sink that takes `ok` samples, then fails as `kind` says.
    fn sink_failing_after(
        ok: usize,
        kind: std::io::ErrorKind,
    ) -> impl Fn(&str) -> std::io::Result<()> + Send + Sync {
        let written = std::sync::atomic::AtomicUsize::new(0);
        move |_| {
            if written.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < ok {
                Ok(())
            } else {
                Err(std::io::Error::from(kind))
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_closed_reader_ends_the_text_watch_cleanly_after_the_sample_it_refused() {
        let taken = std::sync::atomic::AtomicUsize::new(0);
        let take = || {
            taken.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::future::ready(LiveSample::default())
        };
        let sink = sink_failing_after(2, std::io::ErrorKind::BrokenPipe);
        let cancel = CancellationToken::new();
        let ended = tokio::time::timeout(Duration::from_secs(60), lines(take, &sink, &cancel))
            .await
            .expect("the watch went on sampling for a closed reader");
        assert!(ended.is_ok(), "{ended:?}");
        assert_eq!(taken.load(std::sync::atomic::Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn another_write_error_ends_the_text_watch_with_that_error() {
        let sink = sink_failing_after(0, std::io::ErrorKind::StorageFull);
        let cancel = CancellationToken::new();
        let ended = lines(|| std::future::ready(LiveSample::default()), &sink, &cancel).await;
        let e = ended.expect_err("a full disk is not a reader that left");
        assert!(e.to_string().contains("could not write"), "{e}");
    }

    #[test]
    fn the_screen_shows_every_box_of_a_sample() {
        let s = LiveSample {
            at: "2026-11-26T18:00:00Z".into(),
            job: Some("demo".into()),
            nodes: vec![live::node_sample("spark1", "@@ nvidia-smi\nabsent\n", None).0],
            parts: vec![PartState {
                node: "spark1".into(),
                name: "sl-demo-spark1".into(),
                state: "running".into(),
                exit_code: None,
            }],
            engine: Some(EngineReading {
                url: "http://127.0.0.1:8000/metrics".into(),
                running: Some(2.0),
                ..EngineReading::default()
            }),
            ..LiveSample::default()
        };
        let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(110, 24)).unwrap();
        t.draw(|f| draw(f, &s)).unwrap();
        let screen: String = t
            .backend()
            .buffer()
            .content()
            .iter()
            .map(|c| c.symbol())
            .collect();
        for text in [
            "spark-launch status --watch demo",
            " nodes ",
            "spark1: GPU nvidia-smi is not installed · memory not recorded",
            " engine ",
            "requests running 2 · waiting not recorded",
            " job ",
            "spark1: sl-demo-spark1 running",
            " events ",
        ] {
            assert!(
                screen.contains(text),
                "no `{text}` on the screen:\n{screen}"
            );
        }
    }
}
