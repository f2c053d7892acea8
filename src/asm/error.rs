//! Assembler errors and their rustc-style rendering.
//!
//! Every error carries the source line it is about (number and text as assembled, that is
//! after `${...}` substitution), a column range and, inside `.rept` bodies, a note naming the
//! iteration. [`AsmErrors`] collects all errors in a file and renders them like rustc:
//!
//! ```text
//! error: unknown mnemonic `MATMLU`
//!   --> prog.s:12:5
//!    |
//! 12 |     MATMLU %y, %x, %w
//!    |     ^^^^^^ expected an instruction mnemonic (did you mean `MATMUL`?)
//! ```
//!
//! The renderer is our own (about 60 lines) rather than codespan-reporting: a diagnostic inside
//! a `.rept` body must show the *expanded* line under the original line number, which is not a
//! slice of any file codespan could be given, and the output must be byte-stable for golden
//! tests (no colour, no terminal-width dependent layout).

use std::fmt;
use std::ops::Range;

use thiserror::Error;

/// What went wrong, without where.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AsmErrorKind {
    /// The text does not follow the grammar here.
    #[error("expected {expected}, found {found}")]
    Syntax { expected: String, found: String },
    #[error("unknown mnemonic `{name}`")]
    UnknownMnemonic { name: String, suggestion: Option<String> },
    #[error("unknown directive `.{name}`")]
    UnknownDirective { name: String, suggestion: Option<String> },
    #[error("unknown placement `@{name}`")]
    UnknownPlacement { name: String },
    #[error("`{mnemonic}` takes {expected} operand{}, found {found}", plural(*.expected))]
    OperandCount { mnemonic: String, expected: usize, found: usize },
    #[error("expected {expected}, found `{found}`")]
    OperandKind { expected: String, found: String },
    /// A directive's value of the wrong form.
    #[error("expected {expected}, found `{found}`")]
    BadValue { expected: String, found: String },
    /// A name that is not declared (tensor, label, output, kernel, SPIR-V module, symbol...).
    #[error("unknown {what} `{name}`")]
    UnknownName { what: &'static str, name: String, suggestion: Option<String>, hint: Option<String> },
    #[error("{what} `{name}` is already defined")]
    DuplicateName { what: &'static str, name: String, first_line: usize },
    #[error("bad shape: {0}")]
    BadShape(String),
    #[error("unknown element type `{name}`")]
    BadDtype { name: String },
    #[error("invalid {kind} `{text}`: {why}")]
    BadNumber { text: String, kind: String, why: String },
    #[error("`.rept` is never closed")]
    UnterminatedRept,
    #[error("`.endr` without a matching `.rept`")]
    StrayEndr,
    #[error("`{name}` has {expected} element{}, but {found} value{} {} given", plural(*.expected), plural(*.found), if *.found == 1 { "is" } else { "are" })]
    ValueCount { name: String, expected: u64, found: u64 },
    #[error("cannot read `{path}`: {error}")]
    File { path: String, error: String },
    #[error("{0}")]
    FileMismatch(String),
    #[error("unknown define `${{{name}}}`")]
    UnknownDefine { name: String, suggestion: Option<String> },
    /// Anything else, with its own caret label.
    #[error("{message}")]
    Other { message: String, label: String },
}

fn plural(n: impl TryInto<u64>) -> &'static str {
    if n.try_into().ok() == Some(1) {
        ""
    } else {
        "s"
    }
}

fn did_you_mean(s: &Option<String>) -> String {
    s.as_ref().map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default()
}

impl AsmErrorKind {
    /// The text under the caret.
    pub fn label(&self) -> String {
        use AsmErrorKind::*;
        match self {
            Syntax { expected, .. } => format!("expected {expected}"),
            UnknownMnemonic { suggestion, .. } => {
                format!("expected an instruction mnemonic{}", did_you_mean(suggestion))
            }
            UnknownDirective { suggestion, .. } => format!("not a directive{}", did_you_mean(suggestion)),
            UnknownPlacement { .. } => "expected `@cpu` or `@gpu`".into(),
            OperandCount { expected, .. } => format!("expected {expected} operand{}", plural(*expected)),
            OperandKind { .. } => "wrong kind of operand".into(),
            BadValue { .. } => "invalid value".into(),
            UnknownName { what, suggestion, hint, .. } => match (suggestion, hint) {
                (Some(_), _) => format!("no {what} by this name{}", did_you_mean(suggestion)),
                (None, Some(h)) => h.clone(),
                (None, None) => format!("no {what} by this name is declared"),
            },
            DuplicateName { first_line, .. } => format!("first defined on line {first_line}"),
            BadShape(_) => "invalid shape".into(),
            BadDtype { .. } => "expected `f32`, `f16`, `bf16` or `i32`".into(),
            BadNumber { .. } => "invalid number".into(),
            UnterminatedRept => "no `.endr` closes this `.rept`".into(),
            StrayEndr => "nothing to close".into(),
            ValueCount { expected, .. } => format!("expected {expected} value{}", plural(*expected)),
            File { .. } => "referenced here".into(),
            FileMismatch(_) => "loaded from here".into(),
            UnknownDefine { suggestion, .. } => {
                format!("not a `-D`/`.define` name or `.rept` counter{}", did_you_mean(suggestion))
            }
            Other { label, .. } => label.clone(),
        }
    }
}

/// One assembler error: what, and where.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{kind}")]
pub struct AsmError {
    pub kind: AsmErrorKind,
    /// 1-based source line.
    pub line: usize,
    /// Byte range within `text` that the error is about.
    pub span: Range<usize>,
    /// The line as assembled (after `${...}` substitution).
    pub text: String,
    /// Extra `= note:` lines (usage, `.rept` iteration).
    pub notes: Vec<String>,
}

/// Every error found in one file. `Display` renders them all, rustc style, followed by a
/// summary line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsmErrors {
    /// The file name as given to the assembler.
    pub path: String,
    pub errors: Vec<AsmError>,
}

impl std::error::Error for AsmErrors {}

/// Display width of a char in the rendered snippet (tabs become 4 spaces).
fn width(c: char) -> usize {
    if c == '\t' {
        4
    } else {
        1
    }
}

impl AsmError {
    /// Renders this error alone (no summary line), with `path` in the `-->` line.
    pub fn render(&self, path: &str) -> String {
        let text = &self.text;
        let start = floor_char_boundary(text, self.span.start.min(text.len()));
        let end = floor_char_boundary(text, self.span.end.clamp(start, text.len()));
        let col = text[..start].chars().count() + 1;
        let pad: usize = text[..start].chars().map(width).sum();
        let carets: usize = text[start..end].chars().map(width).sum::<usize>().max(1);
        let shown: String = text.trim_end().replace('\t', "    ");
        let num = self.line.to_string();
        let g = " ".repeat(num.len());
        let mut s = format!("error: {}\n{g}--> {path}:{}:{col}\n{g} |\n", self.kind, self.line);
        s += &format!("{num} | {shown}\n").replace(" | \n", " |\n");
        s += &format!("{g} | {}{} {}\n", " ".repeat(pad), "^".repeat(carets), self.kind.label());
        if !self.notes.is_empty() {
            s += &format!("{g} |\n");
            for n in &self.notes {
                s += &format!("{g} = note: {n}\n");
            }
        }
        s
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

impl fmt::Display for AsmErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in &self.errors {
            writeln!(f, "{}", e.render(&self.path))?;
        }
        let n = self.errors.len();
        writeln!(
            f,
            "error: could not assemble {} due to {n} previous error{}",
            self.path,
            if n == 1 { "" } else { "s" }
        )
    }
}

/// Edit distance over chars, case-insensitive, counting a swap of two adjacent chars as one
/// edit (optimal string alignment), since `inptu` for `input` is the typical typo.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.to_lowercase().chars().collect();
    let b: Vec<char> = b.to_lowercase().chars().collect();
    let w = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * w];
    for i in 0..=a.len() {
        for j in 0..=b.len() {
            d[i * w + j] = if i == 0 || j == 0 {
                i + j
            } else {
                let mut v = (d[(i - 1) * w + j - 1] + (a[i - 1] != b[j - 1]) as usize)
                    .min(d[(i - 1) * w + j] + 1)
                    .min(d[i * w + j - 1] + 1);
                if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                    v = v.min(d[(i - 2) * w + j - 2] + 1);
                }
                v
            };
        }
    }
    d[a.len() * w + b.len()]
}

/// The closest candidate, if close enough to be a plausible typo.
pub(crate) fn suggest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let limit = (name.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (edit_distance(name, c), c))
        .filter(|&(d, c)| d <= limit && c != name)
        .min_by_key(|&(d, c)| (d, c))
        .map(|(_, c)| c.to_string())
}

/// Up to `n` candidates ordered by closeness.
pub(crate) fn closest<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    n: usize,
) -> Vec<String> {
    let mut v: Vec<(usize, &str)> = candidates.into_iter().map(|c| (edit_distance(name, c), c)).collect();
    v.sort();
    v.into_iter().take(n).map(|(_, c)| c.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_like_rustc() {
        let e = AsmError {
            kind: AsmErrorKind::UnknownMnemonic { name: "MATMLU".into(), suggestion: Some("MATMUL".into()) },
            line: 12,
            span: 4..10,
            text: "    MATMLU %y, %x, %w".into(),
            notes: vec![],
        };
        let all = AsmErrors { path: "prog.s".into(), errors: vec![e] };
        assert_eq!(
            all.to_string(),
            "error: unknown mnemonic `MATMLU`\n  --> prog.s:12:5\n   |\n12 |     MATMLU %y, %x, %w\n   |     ^^^^^^ \
             expected an instruction mnemonic (did you mean `MATMUL`?)\n\nerror: could not assemble prog.s due \
             to 1 previous error\n"
        );
    }

    #[test]
    fn suggestions() {
        assert_eq!(suggest("MATMLU", ["MATMUL", "ADD"]), Some("MATMUL".into()));
        assert_eq!(suggest("XYZ", ["MATMUL", "ADD"]), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("inptu", "input"), 1);
    }
}
