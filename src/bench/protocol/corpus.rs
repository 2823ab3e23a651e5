//! Prompts of exact token counts, built as llama-benchy builds them: the text of a book
//! tokenized once with the model's own tokenizer (its `tokenizer.json`), then for each request
//! a slice of `depth + pp` tokens from a random place, decoded back into text — the first
//! `depth` tokens the previous conversation (a system message), the rest the prompt. With
//! `no_cache` a random suffix makes every prompt unique, so no prefix cache can answer it.
//!
//! Reads the tokenizer and the book (files, or a book llama-benchy already downloaded: its
//! cache is read, never written); downloads nothing.

use std::path::{Path, PathBuf};

use tokenizers::Tokenizer;

use super::Rng;
use crate::input::{self, InputLimit};

/// A tokenizer.json of a large vocabulary is a few tens of MiB.
const TOKENIZER: InputLimit = InputLimit {
    max: 128 << 20,
    hint: "a model's tokenizer.json is at most a few tens of MiB; give the tokenizer.json itself",
};

/// A book of plain text; a long novel is about a MiB.
const BOOK: InputLimit = InputLimit {
    max: 64 << 20,
    hint: "give a plain-text book (a few MiB at most)",
};

/// Where llama-benchy's own text begins in a Project Gutenberg book (it drops what is before).
const GUTENBERG_START: &str = "*** START OF THE PROJECT GUTENBERG EBOOK";

/// llama-benchy's default `--book-url` (Sherlock Holmes).
pub const DEFAULT_BOOK_URL: &str = "https://www.gutenberg.org/files/1661/1661-0.txt";

#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    #[error("{0}")]
    Input(#[from] input::InputError),
    #[error("{path}: not a tokenizer.json the tokenizers library reads: {message}")]
    Tokenizer { path: PathBuf, message: String },
    #[error("{0}")]
    Missing(String),
    #[error("tokenizing: {0}")]
    Encode(String),
}

/// The model's tokenizer.
pub struct Tok(Tokenizer);

impl std::fmt::Debug for Tok {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tok")
    }
}

impl Tok {
    /// Reads `path`: a tokenizer.json, or a folder that holds one (a model's snapshot).
    pub fn load(path: &Path) -> Result<Tok, CorpusError> {
        let file = if path.is_dir() {
            path.join("tokenizer.json")
        } else {
            path.to_path_buf()
        };
        let text = input::read_utf8(&file, TOKENIZER)?;
        Tok::parse(&text).map_err(|message| CorpusError::Tokenizer {
            path: file,
            message,
        })
    }

    pub fn parse(json: &str) -> Result<Tok, String> {
        json.parse::<Tokenizer>()
            .map(Tok)
            .map_err(|e| e.to_string())
    }

    pub fn encode(&self, text: &str) -> Result<Vec<u32>, CorpusError> {
        self.0
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| CorpusError::Encode(e.to_string()))
    }

    pub fn count(&self, text: &str) -> Result<u32, CorpusError> {
        self.encode(text).map(|ids| ids.len() as u32)
    }

    pub fn decode(&self, ids: &[u32]) -> Result<String, CorpusError> {
        self.0
            .decode(ids, false)
            .map_err(|e| CorpusError::Encode(e.to_string()))
    }
}

/// The book's text where `--book-url` says: a local file, or the copy llama-benchy keeps of
/// that URL in its cache (`~/.cache/llama-benchy/<md5 of the URL>.txt`).
pub fn book_text(book: &str, home: Option<&Path>) -> Result<String, CorpusError> {
    let as_file = Path::new(book);
    if !book.contains("://") || as_file.is_file() {
        let text = input::read_text(as_file, BOOK)?;
        return Ok(match text.find(GUTENBERG_START) {
            Some(i) => text[i..].to_string(),
            None => text,
        });
    }
    let cached = home.map(|h| llama_benchy_cache(h, book));
    match cached {
        Some(p) if p.is_file() => Ok(input::read_text(&p, BOOK)?),
        _ => Err(CorpusError::Missing(format!(
            "no copy of {book} here: spark-launch downloads no book; save it as a file and give --book-url FILE{}",
            cached
                .map(|p| format!(
                    " (or run llama-benchy once: its copy {} is read)",
                    p.display()
                ))
                .unwrap_or_default()
        ))),
    }
}

/// Where llama-benchy caches the text of `url`.
pub fn llama_benchy_cache(home: &Path, url: &str) -> PathBuf {
    use md5::{Digest, Md5};
    let digest = Md5::digest(url.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    home.join(".cache/llama-benchy").join(format!("{hex}.txt"))
}

/// The book, tokenized.
pub struct Corpus {
    pub tok: Tok,
    tokens: Vec<u32>,
}

/// One request's text: the previous conversation and the prompt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prompt {
    pub context: String,
    pub prompt: String,
}

impl Corpus {
    pub fn new(tok: Tok, text: &str) -> Result<Corpus, CorpusError> {
        let tokens = tok.encode(text)?;
        if tokens.is_empty() {
            return Err(CorpusError::Missing("the book has no text".into()));
        }
        Ok(Corpus { tok, tokens })
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// A prompt of `pp` tokens after `depth` tokens of previous conversation, from a random
    /// place in the book (repeated when it is too short); with `no_cache`, the prompt ends in
    /// a random unique suffix counted within `pp`.
    pub fn prompt(
        &self,
        rng: &mut Rng,
        pp: u32,
        depth: u32,
        no_cache: bool,
    ) -> Result<Prompt, CorpusError> {
        let suffix = if no_cache {
            format!(" {}", uuid_like(rng))
        } else {
            String::new()
        };
        let suffix_len = if no_cache {
            self.tok.count(&suffix)?
        } else {
            0
        };
        let text_pp = pp.saturating_sub(suffix_len) as usize;
        let need = text_pp + depth as usize;
        let n = self.tokens.len();
        // As llama-benchy: a pool of the book repeated until it holds the slice, a start in it.
        let pool = if n < need { n * (need / n + 2) } else { n };
        let start = rng.below((pool - need).max(1) as u64) as usize;
        let slice: Vec<u32> = (start..start + need).map(|i| self.tokens[i % n]).collect();
        let (ctx, rest) = slice.split_at(depth as usize);
        let context = if ctx.is_empty() {
            String::new()
        } else {
            self.tok.decode(ctx)?
        };
        let prompt = self.tok.decode(rest)? + &suffix;
        Ok(Prompt { context, prompt })
    }
}

/// 36 characters shaped like a random UUID.
fn uuid_like(rng: &mut Rng) -> String {
    let a = rng.next_u64();
    let b = rng.next_u64();
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        (b >> 48) & 0x3fff | 0x8000,
        b & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/bench")
            .join(name)
    }

    fn corpus() -> Corpus {
        let tok = Tok::load(&fixture("tokenizer.json")).unwrap();
        let text = book_text(fixture("book.txt").to_str().unwrap(), None).unwrap();
        Corpus::new(tok, &text).unwrap()
    }

    #[test]
    fn a_prompt_holds_the_tokens_asked_for_as_the_model_counts_them() {
        let c = corpus();
        let mut rng = Rng::new(1);
        for (pp, depth) in [(64, 0), (128, 256), (1000, 0)] {
            let p = c.prompt(&mut rng, pp, depth, false).unwrap();
            let got = c.tok.count(&p.prompt).unwrap() as i64;
            // Decoding a slice and encoding it again may merge a token or two at its ends.
            assert!((got - pp as i64).abs() <= 2, "pp {pp}: {got}");
            let ctx = c.tok.count(&p.context).unwrap() as i64;
            assert!((ctx - depth as i64).abs() <= 2, "depth {depth}: {ctx}");
        }
    }

    #[test]
    fn a_prompt_longer_than_the_book_repeats_it_and_no_cache_makes_each_unique() {
        let c = corpus();
        let mut rng = Rng::new(2);
        let long = c.len() as u32 * 2 + 10;
        let p = c.prompt(&mut rng, long, 0, false).unwrap();
        assert!(c.tok.count(&p.prompt).unwrap() + 4 >= long);
        let a = c.prompt(&mut rng, 50, 100, true).unwrap();
        let b = c.prompt(&mut rng, 50, 100, true).unwrap();
        assert_ne!(a.prompt, b.prompt);
        let got = c.tok.count(&a.prompt).unwrap() as i64;
        assert!((got - 50).abs() <= 3, "{got}");
    }

    #[test]
    fn a_url_is_read_from_llama_benchys_cache_and_a_missing_one_says_what_to_do() {
        let home = tempfile::tempdir().unwrap();
        let url = "https://example.org/book.txt";
        let e = book_text(url, Some(home.path())).unwrap_err().to_string();
        assert!(e.contains("--book-url FILE"), "{e}");
        let p = llama_benchy_cache(home.path(), url);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, "cached words").unwrap();
        assert_eq!(book_text(url, Some(home.path())).unwrap(), "cached words");
        // md5("https://www.gutenberg.org/files/1661/1661-0.txt"), as Python's hashlib gives it.
        let d = llama_benchy_cache(Path::new("/h"), DEFAULT_BOOK_URL);
        assert_eq!(
            d,
            Path::new("/h/.cache/llama-benchy/cc6a0b5782734ee3b9069aa3b64cc62c.txt")
        );
    }
}
