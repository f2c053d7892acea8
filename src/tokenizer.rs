//! A byte-level BPE tokenizer (GGUF `tokenizer.ggml.model = "gpt2"`) built from a GGUF file's
//! metadata, and the ChatML prompt of chat models such as SmolLM2-Instruct.
//!
//! ```no_run
//! use adeadvm::{gguf::GgufFile, tokenizer::Tokenizer};
//! let file = GgufFile::open("SmolLM2-135M-Instruct.Q4_1.gguf")?;
//! let tok = Tokenizer::from_gguf(&file)?;
//! let ids = tok.encode(&tok.chat_prompt("What is 2+2?"));
//! let text = tok.decode(&ids);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Encoding, in order (as Hugging Face `tokenizers` and llama.cpp do for these models):
//! 1. The text is split around special tokens (GGUF token types 3 = control and 4 = user
//!    defined, such as `<|im_start|>`), matched longest first at each position; each becomes
//!    its id directly.
//! 2. The pre-tokenizer named by `tokenizer.ggml.pre` splits the rest. `smollm`: every numeric
//!    character (Unicode category N) stands alone, then each piece is split by the GPT-2
//!    pattern `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
//!    `gpt2`: the GPT-2 pattern alone.
//! 3. Each piece's UTF-8 bytes become GPT-2's byte characters (printable bytes as themselves,
//!    the others as U+0100 onwards), one symbol each, and the merges are applied, lowest rank
//!    first, leftmost first among equal ranks, until none applies.
//!
//! No BOS is added: [`Tokenizer::add_bos_token`] says whether the model wants one
//! (`tokenizer.ggml.add_bos_token`; SmolLM2: false) and the caller prepends [`Tokenizer::bos_id`].
//!
//! Invariants of a [`Tokenizer`] (checked by [`Tokenizer::from_gguf`]): every merge's two parts
//! and its result are tokens; the special ids are within the vocabulary. A byte whose character
//! is not a token is left out of the encoding, as Hugging Face's BPE does without an unknown
//! token (SmolLM2 has no token for 21 bytes: 0x04, 0x06, 0x13, 0x14, 0x16, 0x1d, 0xc0, 0xc1 and
//! 0xf1..=0xff, all but 0xf1 and 0xf2 never found in UTF-8 text, so `"a\u{4}b"` encodes as
//! `"ab"`). Encoding and decoding never fail: decoding
//! maps ids outside the vocabulary to nothing and invalid UTF-8 (a token that ends inside a
//! character) to U+FFFD, unless [`Tokenizer::decode_bytes`] is used.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use regex::Regex;

use crate::gguf::{Array, GgufFile};

/// Errors building a [`Tokenizer`] from GGUF metadata.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("the GGUF metadata has no `{0}`")]
    Missing(&'static str),
    #[error("GGUF metadata `{key}` should be {expected}")]
    WrongType { key: &'static str, expected: &'static str },
    #[error("unsupported tokenizer model `{0}` (only `gpt2`, byte-level BPE, is supported)")]
    UnsupportedModel(String),
    #[error("unsupported pre-tokenizer `{0}` (`smollm` and `gpt2` are supported)")]
    UnsupportedPre(String),
    #[error("`tokenizer.ggml.token_type` has {types} entries for {tokens} tokens")]
    TypeCount { types: usize, tokens: usize },
    #[error("merge {index} `{text}` {why}")]
    BadMerge { index: usize, text: String, why: &'static str },
    #[error("`{key}` = {id} is outside the vocabulary of {n} tokens")]
    BadId { key: &'static str, id: u64, n: usize },
    #[error("the program's vocabulary is malformed: {0}")]
    Vocab(String),
}

/// The pre-tokenizers supported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pre {
    /// Numeric characters alone, then the GPT-2 pattern.
    SmolLm,
    /// The GPT-2 pattern.
    Gpt2,
}

/// GGUF token type of control tokens (`<|im_start|>`).
const TYPE_CONTROL: i64 = 3;
/// GGUF token type of user-defined tokens.
const TYPE_USER_DEFINED: i64 = 4;

/// A byte-level BPE tokenizer; see the module docs.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    /// id -> the token as written in the vocabulary (byte characters for ordinary tokens).
    tokens: Vec<String>,
    /// id -> the bytes it decodes to.
    bytes: Vec<Vec<u8>>,
    /// Token text -> id (the first id where a text repeats).
    vocab: HashMap<String, u32>,
    /// (left id, right id) -> (rank, merged id).
    merges: HashMap<(u32, u32), (u32, u32)>,
    /// byte -> id of its byte character's token, if the vocabulary has one.
    byte_ids: [Option<u32>; 256],
    /// Special tokens matched in text: (text, id), longest text first.
    specials: Vec<(String, u32)>,
    /// Whether some special token starts with this byte (most positions are skipped at once).
    special_first: [bool; 256],
    pre: Pre,
    pattern: Regex,
    bos: Option<u32>,
    eos: Option<u32>,
    unk: Option<u32>,
    pad: Option<u32>,
    add_bos: bool,
    /// The system message the chat template adds when the conversation has none.
    default_system: Option<String>,
    /// Whether the chat template is ChatML.
    chatml: bool,
}

/// GPT-2's byte characters: printable bytes (`!`..=`~`, `¡`..=`¬`, `®`..=`ÿ`) stand for
/// themselves, the other 68 for U+0100 onwards in byte order.
fn byte_chars() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut next = 256u32;
    for (b, slot) in out.iter_mut().enumerate() {
        let printable = matches!(b, 0x21..=0x7e | 0xa1..=0xac | 0xae..=0xff);
        let code = if printable {
            b as u32
        } else {
            next += 1;
            next - 1
        };
        // Codes below 0x144 are all valid chars.
        *slot = char::from_u32(code).unwrap_or('\u{fffd}');
    }
    out
}

/// GPT-2's split pattern without its `\s+(?!\S)` alternative, which the regex crate cannot
/// express; [`Tokenizer::split_gpt2`] applies it by shortening whitespace matches.
const GPT2_PATTERN: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+";

fn strings<'a>(file: &'a GgufFile, key: &'static str) -> Result<&'a [String], TokenizerError> {
    match file.get(key) {
        None => Err(TokenizerError::Missing(key)),
        Some(v) => match v.as_array() {
            Some(Array::String(s)) => Ok(s),
            _ => Err(TokenizerError::WrongType { key, expected: "an array of strings" }),
        },
    }
}

fn opt_id(file: &GgufFile, key: &'static str, n: usize) -> Result<Option<u32>, TokenizerError> {
    let Some(v) = file.get(key) else { return Ok(None) };
    let id = v.as_u64().ok_or(TokenizerError::WrongType { key, expected: "a non-negative integer" })?;
    if id >= n as u64 {
        return Err(TokenizerError::BadId { key, id, n });
    }
    Ok(Some(id as u32))
}

impl Tokenizer {
    /// The vocabulary a program carries (`.vocab` in the assembler), or None when it has none.
    pub fn from_program(p: &crate::format::Program) -> Result<Option<Tokenizer>, TokenizerError> {
        if p.vocab.is_empty() {
            return Ok(None);
        }
        let file = GgufFile::from_bytes(p.vocab.clone()).map_err(|e| TokenizerError::Vocab(e.to_string()))?;
        Tokenizer::from_gguf(&file).map(Some)
    }

    /// Builds the tokenizer from `tokenizer.ggml.*` metadata (model, pre, tokens, token_type,
    /// merges, bos/eos/unknown/padding ids, add_bos_token) and `tokenizer.chat_template`.
    pub fn from_gguf(file: &GgufFile) -> Result<Tokenizer, TokenizerError> {
        let model =
            file.get("tokenizer.ggml.model").ok_or(TokenizerError::Missing("tokenizer.ggml.model"))?;
        let model = model
            .as_str()
            .ok_or(TokenizerError::WrongType { key: "tokenizer.ggml.model", expected: "a string" })?;
        if model != "gpt2" {
            return Err(TokenizerError::UnsupportedModel(model.into()));
        }
        let pre = match file.get("tokenizer.ggml.pre").map(|v| v.as_str()) {
            None => Pre::Gpt2,
            Some(Some("smollm")) => Pre::SmolLm,
            Some(Some("gpt2" | "default")) => Pre::Gpt2,
            Some(Some(other)) => return Err(TokenizerError::UnsupportedPre(other.into())),
            Some(None) => {
                return Err(TokenizerError::WrongType { key: "tokenizer.ggml.pre", expected: "a string" })
            }
        };
        let tokens = strings(file, "tokenizer.ggml.tokens")?.to_vec();
        let n = tokens.len();
        let types: Vec<i64> = match file.get("tokenizer.ggml.token_type") {
            None => vec![1; n],
            Some(v) => v.as_array().and_then(Array::to_i64s).ok_or(TokenizerError::WrongType {
                key: "tokenizer.ggml.token_type",
                expected: "an array of integers",
            })?,
        };
        if types.len() != n {
            return Err(TokenizerError::TypeCount { types: types.len(), tokens: n });
        }
        let mut vocab = HashMap::with_capacity(n);
        for (i, t) in tokens.iter().enumerate() {
            vocab.entry(t.clone()).or_insert(i as u32);
        }
        let chars = byte_chars();
        let mut to_byte = HashMap::with_capacity(256);
        let mut byte_ids = [None; 256];
        for (b, &c) in chars.iter().enumerate() {
            to_byte.insert(c, b as u8);
            byte_ids[b] = vocab.get(c.to_string().as_str()).copied();
        }
        let mut specials = Vec::new();
        let mut bytes = Vec::with_capacity(n);
        for (i, t) in tokens.iter().enumerate() {
            if matches!(types[i], TYPE_CONTROL | TYPE_USER_DEFINED) && !t.is_empty() {
                specials.push((t.clone(), i as u32));
                bytes.push(t.as_bytes().to_vec());
            } else {
                // A char outside the byte alphabet (none in a well-formed vocabulary) decodes
                // to its own UTF-8.
                let mut b = Vec::with_capacity(t.len());
                for c in t.chars() {
                    match to_byte.get(&c) {
                        Some(&x) => b.push(x),
                        None => b.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
                    }
                }
                bytes.push(b);
            }
        }
        specials.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        let mut special_first = [false; 256];
        for (t, _) in &specials {
            special_first[t.as_bytes()[0] as usize] = true;
        }
        let merge_list = strings(file, "tokenizer.ggml.merges")?;
        let mut merges = HashMap::with_capacity(merge_list.len());
        for (index, m) in merge_list.iter().enumerate() {
            let bad = |why| TokenizerError::BadMerge { index, text: m.clone(), why };
            let (l, r) = m.split_once(' ').ok_or_else(|| bad("has no space between its two parts"))?;
            let (Some(&li), Some(&ri)) = (vocab.get(l), vocab.get(r)) else {
                return Err(bad("has a part that is not a token"));
            };
            let merged =
                vocab.get(&format!("{l}{r}")).ok_or_else(|| bad("makes a token not in the vocabulary"))?;
            // The first (lowest-ranked) of repeated merges wins, as in Hugging Face's BPE.
            merges.entry((li, ri)).or_insert((index as u32, *merged));
        }
        let add_bos = match file.get("tokenizer.ggml.add_bos_token") {
            None => false,
            Some(v) => v.as_bool().ok_or(TokenizerError::WrongType {
                key: "tokenizer.ggml.add_bos_token",
                expected: "a bool",
            })?,
        };
        let template = file.get_str("tokenizer.chat_template");
        let chatml = template.is_some_and(|t| t.contains("<|im_start|>"));
        let default_system = template.and_then(default_system_message);
        Ok(Tokenizer {
            bos: opt_id(file, "tokenizer.ggml.bos_token_id", n)?,
            eos: opt_id(file, "tokenizer.ggml.eos_token_id", n)?,
            unk: opt_id(file, "tokenizer.ggml.unknown_token_id", n)?,
            pad: opt_id(file, "tokenizer.ggml.padding_token_id", n)?,
            tokens,
            bytes,
            vocab,
            merges,
            byte_ids,
            specials,
            special_first,
            pre,
            // A constant pattern: it compiles.
            pattern: Regex::new(GPT2_PATTERN).expect("the GPT-2 pattern is valid"),
            add_bos,
            default_system,
            chatml,
        })
    }

    /// Number of tokens in the vocabulary.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// The token's text as the vocabulary writes it (`Ġthe` for " the").
    pub fn token(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// The id of a token written as the vocabulary writes it.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.get(text).copied()
    }

    /// Beginning-of-sequence id (`tokenizer.ggml.bos_token_id`).
    pub fn bos_id(&self) -> Option<u32> {
        self.bos
    }

    /// End-of-sequence id (`tokenizer.ggml.eos_token_id`; SmolLM2-Instruct: `<|im_end|>`).
    pub fn eos_id(&self) -> Option<u32> {
        self.eos
    }

    /// Unknown-token id (`tokenizer.ggml.unknown_token_id`).
    pub fn unk_id(&self) -> Option<u32> {
        self.unk
    }

    /// Padding id (`tokenizer.ggml.padding_token_id`).
    pub fn pad_id(&self) -> Option<u32> {
        self.pad
    }

    /// Whether the model expects a BOS before the text (`tokenizer.ggml.add_bos_token`,
    /// false when absent). [`Tokenizer::encode`] never adds it.
    pub fn add_bos_token(&self) -> bool {
        self.add_bos
    }

    /// Whether `id` is a special (control or user-defined) token.
    pub fn is_special(&self, id: u32) -> bool {
        self.specials.iter().any(|&(_, s)| s == id)
    }

    /// Text -> ids. Special tokens written in the text (`<|im_start|>`) become their ids.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        let mut plain_start = 0;
        let mut at = 0;
        while at < text.len() {
            let rest = &text[at..];
            let special = if self.special_first[rest.as_bytes()[0] as usize] {
                self.specials.iter().find(|(s, _)| rest.starts_with(s.as_str()))
            } else {
                None
            };
            if let Some((s, id)) = special {
                self.encode_plain(&text[plain_start..at], &mut out);
                out.push(*id);
                at += s.len();
                plain_start = at;
            } else {
                at += rest.chars().next().map_or(1, char::len_utf8);
            }
        }
        self.encode_plain(&text[plain_start..], &mut out);
        out
    }

    /// Encodes text that holds no special tokens.
    fn encode_plain(&self, text: &str, out: &mut Vec<u32>) {
        match self.pre {
            Pre::Gpt2 => self.split_gpt2(text, out),
            Pre::SmolLm => {
                let mut start = 0;
                for (i, c) in text.char_indices() {
                    if c.is_numeric() {
                        self.split_gpt2(&text[start..i], out);
                        self.bpe(&text[i..i + c.len_utf8()], out);
                        start = i + c.len_utf8();
                    }
                }
                self.split_gpt2(&text[start..], out);
            }
        }
    }

    /// Splits by the GPT-2 pattern and encodes each piece. A whitespace run followed by more
    /// text gives up its last character to what follows (the pattern's `\s+(?!\S)`).
    fn split_gpt2(&self, text: &str, out: &mut Vec<u32>) {
        let mut at = 0;
        while at < text.len() {
            let Some(m) = self.pattern.find_at(text, at) else {
                // Every character matches some alternative; kept as a fallback.
                self.bpe(&text[at..], out);
                return;
            };
            let mut end = m.end();
            let piece = m.as_str();
            if end < text.len() && piece.chars().all(char::is_whitespace) {
                let mut chars = piece.char_indices();
                if let (Some(_), Some((last, _))) = (chars.next(), chars.next_back()) {
                    end = m.start() + last;
                }
            }
            if m.start() > at {
                self.bpe(&text[at..m.start()], out);
            }
            self.bpe(&text[m.start()..end], out);
            at = end;
        }
    }

    /// Byte-level BPE of one piece.
    fn bpe(&self, piece: &str, out: &mut Vec<u32>) {
        let b = piece.as_bytes();
        match b.len() {
            0 => return,
            1 => return out.extend(self.byte_ids[b[0] as usize]),
            _ => {}
        }
        // Symbols as a linked list over the piece's bytes; `None` in `ids` marks a merged-away one.
        let n = b.len();
        let mut ids: Vec<Option<u32>> = b.iter().map(|&x| self.byte_ids[x as usize]).collect();
        let mut next: Vec<usize> = (1..=n).collect();
        let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
        let mut heap = BinaryHeap::new();
        let rank = |l: Option<u32>, r: Option<u32>| self.merges.get(&(l?, r?)).copied();
        for i in 0..n - 1 {
            if let Some((rk, _)) = rank(ids[i], ids[i + 1]) {
                heap.push(Reverse((rk, i)));
            }
        }
        while let Some(Reverse((rk, i))) = heap.pop() {
            let j = next[i];
            if j >= n {
                continue;
            }
            // Stale entries (a side changed since the pair was queued) do not match any more.
            let Some((now, merged)) = rank(ids[i], ids[j]) else { continue };
            if now != rk {
                continue;
            }
            ids[i] = Some(merged);
            ids[j] = None;
            next[i] = next[j];
            if next[j] < n {
                prev[next[j]] = i;
            }
            let p = prev[i];
            if p < n {
                if let Some((r, _)) = rank(ids[p], ids[i]) {
                    heap.push(Reverse((r, p)));
                }
            }
            if next[i] < n {
                if let Some((r, _)) = rank(ids[i], ids[next[i]]) {
                    heap.push(Reverse((r, i)));
                }
            }
        }
        out.extend(ids.into_iter().flatten());
    }

    /// Ids -> bytes: each token's bytes in order (special tokens as their text); ids outside
    /// the vocabulary give nothing. For streaming, where a character may span two tokens.
    pub fn decode_bytes(&self, ids: &[u32]) -> Vec<u8> {
        let mut out = Vec::new();
        for &id in ids {
            if let Some(b) = self.bytes.get(id as usize) {
                out.extend_from_slice(b);
            }
        }
        out
    }

    /// The bytes one token decodes to (empty for an id outside the vocabulary).
    pub fn token_bytes(&self, id: u32) -> &[u8] {
        self.bytes.get(id as usize).map_or(&[], Vec::as_slice)
    }

    /// Ids -> text ([`Tokenizer::decode_bytes`], invalid UTF-8 replaced by U+FFFD).
    pub fn decode(&self, ids: &[u32]) -> String {
        String::from_utf8_lossy(&self.decode_bytes(ids)).into_owned()
    }

    /// Whether the vocabulary's `tokenizer.chat_template` is ChatML (`<|im_start|>` turns), the
    /// form [`Tokenizer::chat_prompt`] writes.
    pub fn has_chatml_template(&self) -> bool {
        self.chatml
    }

    /// The prompt for one user message in ChatML, as the model's chat template renders it with
    /// `add_generation_prompt`: the template's default system message when it has one
    /// (SmolLM2: "You are a helpful AI assistant named SmolLM, trained by Hugging Face"), the
    /// user turn, and the opened assistant turn:
    ///
    /// ```text
    /// <|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n
    /// ```
    pub fn chat_prompt(&self, user_text: &str) -> String {
        let mut s = String::new();
        if let Some(sys) = &self.default_system {
            s.push_str("<|im_start|>system\n");
            s.push_str(sys);
            s.push_str("<|im_end|>\n");
        }
        s.push_str("<|im_start|>user\n");
        s.push_str(user_text);
        s.push_str("<|im_end|>\n<|im_start|>assistant\n");
        s
    }
}

/// The system message a ChatML template inserts when the conversation has none: the literal
/// text between `<|im_start|>system\n` and `<|im_end|>` in the template (a Jinja string
/// literal, with `\n` escapes undone), if there is one.
fn default_system_message(template: &str) -> Option<String> {
    let start = template
        .find("<|im_start|>system\\n")
        .map(|i| i + "<|im_start|>system\\n".len())
        .or_else(|| template.find("<|im_start|>system\n").map(|i| i + "<|im_start|>system\n".len()))?;
    let len = template[start..].find("<|im_end|>")?;
    let raw = &template[start..start + len];
    // A template that builds the system message from a variable has quotes or braces there.
    if raw.contains(['\'', '"', '{', '}']) {
        return None;
    }
    Some(raw.replace("\\n", "\n"))
}
