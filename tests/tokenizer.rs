//! The GGUF tokenizer (src/tokenizer.rs): small hand-built vocabularies for the BPE rules and the
//! errors, and SmolLM2-135M-Instruct's real vocabulary against an independent reference.

#[path = "support/smollm.rs"]
mod smollm;

use adeadvm::gguf::{build, GgufFile};
use adeadvm::tokenizer::{Tokenizer, TokenizerError};

/// Expected ids for SmolLM2-135M-Instruct, produced by Hugging Face `tokenizers` 0.23.3 (Python),
/// not by this crate: a `tokenizers.Tokenizer` with `models.BPE(vocab, merges)` built from the
/// GGUF's `tokenizer.ggml.tokens`/`merges` (read with llama.cpp's `gguf` Python package 0.x),
/// configured as SmolLM2's published tokenizer.json (pre-tokenizer
/// `Sequence([Digits(individual_digits=True), ByteLevel(add_prefix_space=False)])`, ByteLevel
/// decoder, the 17 tokens of GGUF type 3 as special added tokens), `encode(text,
/// add_special_tokens=False).ids`. (huggingface.co was unreachable from the machine that made
/// them, so the published tokenizer.json itself was not used; its vocabulary and merges are
/// the GGUF's.) Every case also decoded back to its text with that tokenizer, except
/// `"a\u{4}b"`: byte 0x04 has no token, and both leave it out.
const CASES: &[(&str, &[u32])] = &[
    (
        "a\u{4}b",
        &[81, 82],
    ),
    (
        "\u{0}x\u{1}",
        &[190, 104, 191],
    ),
    (
        "tab\there\r\n",
        &[15999, 197, 1531, 2738],
    ),
    (
        "Hello, world!",
        &[19556, 28, 905, 17],
    ),
    (
        "The quick brown fox jumps over the lazy dog.",
        &[504, 2365, 6354, 16438, 27003, 690, 260, 23790, 2767, 30],
    ),
    (
        "12345",
        &[33, 34, 35, 36, 37],
    ),
    (
        "In 2024, 3.14159 and 1,000,000 people.",
        &[788, 216, 34, 32, 34, 36, 28, 216, 35, 30, 33, 36, 33, 37, 41, 284, 216, 33, 28, 32, 32, 32, 28, 32, 32, 32, 701, 30],
    ),
    (
        "fn main() {\n    println!(\"hi {}\", x + 1);\n}\n",
        &[7853, 1085, 1000, 1662, 472, 1628, 34115, 17, 1470, 6004, 4548, 1002, 1792, 1232, 216, 33, 4258, 198, 109, 198],
    ),
    (
        "naïve café — 日本語のテキスト, 中文, Привет мир",
        &[3546, 46494, 37366, 1841, 17097, 241, 115, 40993, 179, 120, 248, 26453, 11100, 224, 10391, 251, 10391, 134, 11100, 226, 28, 216, 28589, 29184, 28, 5470, 249, 46879, 16464, 32547, 41337, 7872, 9175],
    ),
    (
        "I ❤\u{fe0f} 🦀 and 👩\u{200d}👩\u{200d}👧\u{200d}👦!",
        &[57, 4636, 247, 114, 31752, 15107, 116, 218, 284, 15107, 235, 119, 321, 231, 10813, 235, 119, 321, 231, 10813, 235, 117, 321, 231, 10813, 235, 116, 17],
    ),
    (
        "a  b   c\t\td\n\n\ne    ",
        &[81, 216, 278, 256, 265, 197, 197, 84, 1116, 198, 85, 289],
    ),
    (
        "   leading",
        &[256, 2899],
    ),
    (
        "trailing   ",
        &[4861, 4966, 333],
    ),
    (
        "\n",
        &[198],
    ),
    (
        "",
        &[],
    ),
    (
        "I'm don't they'll we've she'd IT'S",
        &[57, 5248, 1326, 982, 502, 3060, 392, 3543, 1041, 6737, 9627, 23, 67],
    ),
    (
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
        &[1, 4093, 198, 1780, 314, 216, 34, 27, 34, 47, 2, 198, 1, 520, 9531, 198],
    ),
    (
        "abc<|im_end|>def <|endoftext|>",
        &[25276, 2, 1604, 216, 0],
    ),
    (
        "٣٤ ½ ² x²",
        &[164, 113, 164, 114, 216, 16738, 216, 19133, 1792, 19133],
    ),
    (
        "def f(x):\n\treturn x**2  # square\n",
        &[1604, 275, 24, 104, 727, 198, 197, 5406, 1792, 828, 34, 216, 907, 5222, 198],
    ),
    (
        "   \n  \n",
        &[333, 11181, 198],
    ),
    (
        "$$$ !!! ...",
        &[9212, 20, 5728, 10095, 4563],
    ),
    (
        "Ω≈ç√∫˜µ≤≥÷ \u{a0}nbsp\u{3000}ideographic",
        &[153, 119, 40533, 226, 11512, 22052, 244, 22052, 121, 150, 246, 39269, 40533, 114, 40533, 115, 142, 132, 216, 15442, 94, 32093, 12109, 218, 489, 4551],
    ),
    (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
        &[1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, 7018, 411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 1780, 314, 216, 34, 27, 34, 47, 2, 198, 1, 520, 9531, 198],
    ),
    (
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa bbbbbbbbbbbbbbbbbbbbb",
        &[46880, 46880, 46880, 46880, 46880, 46880, 46880, 46880, 46880, 46880, 46880, 278, 15659, 15659, 15659, 15659, 15659, 15659, 15659, 15659, 15659, 15659],
    ),
    (
        "https://example.com/path?q=1&x=%20 user@mail.org",
        &[4687, 1742, 7434, 30, 824, 31, 1537, 47, 97, 45, 33, 22, 104, 23446, 34, 32, 2914, 48, 8925, 30, 2295],
    ),
];

fn smollm() -> Option<Tokenizer> {
    let path = smollm::model_path()?;
    let file = GgufFile::open(&path).expect("the cached model parses");
    Some(Tokenizer::from_gguf(&file).expect("SmolLM2's tokenizer builds"))
}

#[test]
fn smollm2_encode_matches_reference() {
    let Some(tok) = smollm() else { return };
    for (text, want) in CASES {
        assert_eq!(tok.encode(text), *want, "encoding {text:?}");
        if !text.contains('\u{4}') {
            assert_eq!(tok.decode(want), *text, "decoding the ids of {text:?}");
        }
    }
}

#[test]
fn smollm2_ids_and_chat_prompt() {
    let Some(tok) = smollm() else { return };
    assert_eq!(tok.vocab_size(), 49152);
    assert_eq!(tok.bos_id(), Some(1));
    assert_eq!(tok.eos_id(), Some(2));
    assert_eq!(tok.unk_id(), Some(0));
    assert_eq!(tok.pad_id(), Some(2));
    assert!(!tok.add_bos_token());
    assert_eq!(tok.token(1), Some("<|im_start|>"));
    assert_eq!(tok.token(2), Some("<|im_end|>"));
    assert!(tok.is_special(2) && !tok.is_special(17));
    // Rendered with jinja2 3.1.6 from the GGUF's tokenizer.chat_template, one user message,
    // add_generation_prompt=True.
    let want = "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n";
    assert_eq!(tok.chat_prompt("What is 2+2?"), want);
}

#[test]
fn smollm2_partial_characters_decode_lossily() {
    let Some(tok) = smollm() else { return };
    // 🦀 is 4 bytes; its ids split the character between tokens.
    let ids = tok.encode("🦀");
    assert!(ids.len() > 1, "{ids:?}");
    let first = tok.decode(&ids[..1]);
    assert!(first.contains('\u{fffd}'), "{first:?}");
    let mut bytes = Vec::new();
    for &id in &ids {
        bytes.extend_from_slice(tok.token_bytes(id));
    }
    assert_eq!(bytes, "🦀".as_bytes());
    assert_eq!(tok.decode_bytes(&ids), "🦀".as_bytes());
    // Ids outside the vocabulary decode to nothing.
    assert_eq!(tok.decode(&[19556, 1_000_000]), "Hello");
}

// ---------------------------------------------------------------------------------------------
// Hand-built vocabularies

fn string_array(items: &[&str]) -> Vec<u8> {
    let mut v = 8u32.to_le_bytes().to_vec();
    v.extend_from_slice(&(items.len() as u64).to_le_bytes());
    for s in items {
        build::string(&mut v, s);
    }
    v
}

fn str_value(s: &str) -> Vec<u8> {
    let mut v = Vec::new();
    build::string(&mut v, s);
    v
}

/// GPT-2's byte characters, written independently of the crate's table: bytes `!`..=`~`,
/// 0xa1..=0xac and 0xae..=0xff as themselves, the rest U+0100.. in byte order.
fn byte_char(b: u8) -> char {
    let printable =
        |x: u32| (0x21..=0x7e).contains(&x) || (0xa1..=0xac).contains(&x) || (0xae..=0xff).contains(&x);
    if printable(b as u32) {
        return char::from_u32(b as u32).unwrap();
    }
    let n = (0..b as u32).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + n).unwrap()
}

/// A vocabulary of the 256 byte characters, then `extra`, with `merges`, `<s>` as a control token.
fn tiny(extra: &[&str], merges: &[&str], pre: &str) -> Result<Tokenizer, TokenizerError> {
    let bytes: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    let mut tokens: Vec<&str> = bytes.iter().map(String::as_str).collect();
    tokens.extend_from_slice(extra);
    tokens.push("<s>");
    let mut types = 5u32.to_le_bytes().to_vec();
    types.extend_from_slice(&(tokens.len() as u64).to_le_bytes());
    for i in 0..tokens.len() {
        let t: i32 = if i == tokens.len() - 1 { 3 } else { 1 };
        types.extend_from_slice(&t.to_le_bytes());
    }
    let meta = vec![
        ("tokenizer.ggml.model", 8, str_value("gpt2")),
        ("tokenizer.ggml.pre", 8, str_value(pre)),
        ("tokenizer.ggml.tokens", 9, string_array(&tokens)),
        ("tokenizer.ggml.token_type", 9, types),
        ("tokenizer.ggml.merges", 9, string_array(merges)),
        ("tokenizer.ggml.eos_token_id", 4, ((tokens.len() - 1) as u32).to_le_bytes().to_vec()),
    ];
    let file = GgufFile::from_bytes(build::file(&meta, &[])).expect("a valid file");
    Tokenizer::from_gguf(&file)
}

fn pieces(tok: &Tokenizer, text: &str) -> Vec<String> {
    tok.encode(text).iter().map(|&id| tok.token(id).unwrap().to_string()).collect()
}

#[test]
fn merges_apply_by_rank_then_leftmost() {
    // "ab" ranks before "bc": "abc" -> "ab" "c"; "aaa" with "a a" -> "aa" "a" (leftmost first).
    let tok = tiny(&["ab", "bc", "aa", "abc"], &["a b", "b c", "a a", "ab c"], "gpt2").unwrap();
    assert_eq!(pieces(&tok, "abc"), ["abc"]);
    assert_eq!(pieces(&tok, "bca"), ["bc", "a"]);
    assert_eq!(pieces(&tok, "aaa"), ["aa", "a"]);
    let tok = tiny(&["bc", "ab"], &["b c", "a b"], "gpt2").unwrap();
    assert_eq!(pieces(&tok, "abc"), ["a", "bc"]);
}

#[test]
fn pre_tokenizers_split_as_named() {
    let sp = byte_char(b' ').to_string();
    let s1 = format!("{sp}1");
    let tok = tiny(&["12", &s1], &["1 2", &format!("{sp} 1")], "smollm").unwrap();
    // smollm: every digit alone, so "12" never merges and " 1" neither.
    assert_eq!(pieces(&tok, "12 1"), ["1", "2", &sp, "1"]);
    let tok = tiny(&["12", &s1], &["1 2", &format!("{sp} 1")], "gpt2").unwrap();
    assert_eq!(pieces(&tok, "12 1"), ["12", &s1]);
    // Whitespace runs keep their last space for the next word; a trailing run stays whole.
    let tok = tiny(&[], &[], "gpt2").unwrap();
    assert_eq!(tok.encode("a   b").len(), 5);
    assert_eq!(pieces(&tok, "a   b")[1..4], [sp.clone(), sp.clone(), sp.clone()]);
    // Special tokens are split out first and round-trip.
    let ids = tok.encode("x<s>y");
    assert_eq!(ids.len(), 3);
    assert_eq!(tok.eos_id(), Some(ids[1]));
    assert_eq!(tok.decode(&ids), "x<s>y");
    assert_eq!(tok.decode(&tok.encode("héllo\n\tworld ∑")), "héllo\n\tworld ∑");
}

#[test]
fn bad_tokenizer_metadata_is_an_error() {
    let err = |r: Result<Tokenizer, TokenizerError>| r.expect_err("an error").to_string();
    assert_eq!(
        err(tiny(&[], &[], "llama3")),
        "unsupported pre-tokenizer `llama3` (`smollm` and `gpt2` are supported)"
    );
    assert_eq!(err(tiny(&[], &["a z"], "gpt2")), "merge 0 `a z` makes a token not in the vocabulary");
    assert_eq!(err(tiny(&[], &["ab"], "gpt2")), "merge 0 `ab` has no space between its two parts");
    assert_eq!(err(tiny(&[], &["a qq"], "gpt2")), "merge 0 `a qq` has a part that is not a token");
    let file =
        GgufFile::from_bytes(build::file(&[("tokenizer.ggml.model", 8, str_value("llama"))], &[])).unwrap();
    assert_eq!(
        Tokenizer::from_gguf(&file).err().unwrap().to_string(),
        "unsupported tokenizer model `llama` (only `gpt2`, byte-level BPE, is supported)"
    );
    let file = GgufFile::from_bytes(build::file(&[], &[])).unwrap();
    assert_eq!(
        Tokenizer::from_gguf(&file).err().unwrap().to_string(),
        "the GGUF metadata has no `tokenizer.ggml.model`"
    );
    let file = GgufFile::from_bytes(build::file(
        &[
            ("tokenizer.ggml.model", 8, str_value("gpt2")),
            ("tokenizer.ggml.tokens", 9, string_array(&["a", "b"])),
            ("tokenizer.ggml.merges", 9, string_array(&[])),
        ],
        &[],
    ))
    .unwrap();
    // Bytes without a token are left out (Hugging Face's BPE without an unknown token).
    let tok = Tokenizer::from_gguf(&file).unwrap();
    assert_eq!(tok.encode("abcab"), [0, 1, 0, 1]);
}
