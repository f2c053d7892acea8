//! The line grammar (nom): one source line, after `${...}` substitution and with its comment
//! removed, becomes a [`LineAst`] whose pieces carry byte spans into the line.
//!
//! The grammar is deliberately generic: operands are parsed into [`Arg`] values (tensor,
//! number, identifier, list, `name=value`, `name(args)`, ...) without knowing the opcode; the
//! assembler then checks them against the operand kinds in the generated `OP_INFO` table.
//! Directive arguments are read with the same [`Cursor`].

use std::ops::Range;

use nom::branch::alt;
use nom::bytes::complete::{tag, tag_no_case, take_while, take_while1};
use nom::character::complete::{char, digit0, digit1, hex_digit1, one_of, space0};
use nom::combinator::opt;
use nom::{IResult, Parser};

use super::error::AsmErrorKind;

/// Byte range within the line.
pub type Span = Range<usize>;

/// A value with the span it was written at.
#[derive(Debug, Clone, PartialEq)]
pub struct Sp<T> {
    pub node: T,
    pub span: Span,
}

/// An error at a span of the line.
#[derive(Debug, Clone, PartialEq)]
pub struct Diag {
    /// Boxed to keep `Result<_, Diag>` small.
    pub kind: Box<AsmErrorKind>,
    pub span: Span,
    pub notes: Vec<String>,
}

impl Diag {
    pub fn new(kind: AsmErrorKind, span: Span) -> Diag {
        Diag { kind: Box::new(kind), span, notes: Vec::new() }
    }
    pub fn other(message: impl Into<String>, label: impl Into<String>, span: Span) -> Diag {
        Diag::new(AsmErrorKind::Other { message: message.into(), label: label.into() }, span)
    }
    pub fn note(mut self, n: impl Into<String>) -> Diag {
        self.notes.push(n.into());
        self
    }
}

/// `dtype[d0, d1, ...]` as written.
#[derive(Debug, Clone, PartialEq)]
pub struct TypeAst<'a> {
    pub dtype: Sp<&'a str>,
    pub dims: Vec<Sp<DimAst<'a>>>,
    pub span: Span,
}

/// One dimension as written.
#[derive(Debug, Clone, PartialEq)]
pub enum DimAst<'a> {
    Num(&'a str),
    Name(&'a str),
}

/// A generic operand or directive value.
#[derive(Debug, Clone, PartialEq)]
pub enum ArgNode<'a> {
    /// `%name`, optionally with a declaration `%name: f32[...]`.
    Tensor { name: &'a str, decl: Option<TypeAst<'a>> },
    /// A number token: decimal, hex, signed `inf`/`nan`.
    Number(&'a str),
    /// A bare identifier (register, label, name, keyword, `inf`, `nan`, `none`...).
    Ident(&'a str),
    /// A string literal, unescaped.
    Str(String),
    /// `[a, b, ...]`.
    List(Vec<Arg<'a>>),
    /// `name(a, b, ...)`.
    Call { name: Sp<&'a str>, args: Vec<Arg<'a>> },
    /// `name=value`.
    KeyValue { key: Sp<&'a str>, value: Box<Arg<'a>> },
    /// `type value`, as in `push(f32 2.0)`.
    Typed { ty: Sp<&'a str>, value: Box<Arg<'a>> },
}

pub type Arg<'a> = Sp<ArgNode<'a>>;

/// What a line holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Stmt<'a> {
    Empty,
    /// `.name` and a cursor positioned after it.
    Directive {
        name: Sp<&'a str>,
        args: Cursor<'a>,
    },
    /// `MNEMONIC[@place] args...`
    Insn {
        mnemonic: Sp<&'a str>,
        placement: Option<Sp<&'a str>>,
        args: Vec<Arg<'a>>,
        args_span: Span,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct LineAst<'a> {
    pub label: Option<Sp<&'a str>>,
    pub stmt: Stmt<'a>,
}

type PResult<'a, T> = IResult<&'a str, T>;

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}
fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Like nom's `recognize`, but measures what was consumed by length rather than by pointer:
/// nom 8's complete parsers may return a `""` that is not a sub-slice of the input at the end
/// of input, which makes pointer-based offsets wrong.
fn recog<'a, O, P>(mut p: P) -> impl FnMut(&'a str) -> PResult<'a, &'a str>
where
    P: Parser<&'a str, Output = O, Error = nom::error::Error<&'a str>>,
{
    move |i: &'a str| {
        let (rest, _) = p.parse(i)?;
        let n = i.len() - rest.len();
        Ok((&i[n..], &i[..n]))
    }
}

fn ident_token(i: &str) -> PResult<'_, &str> {
    recog((take_while1(is_ident_start), take_while(is_ident_char)))(i)
}

fn tensor_name_token(i: &str) -> PResult<'_, &str> {
    recog((take_while1(is_ident_start), take_while(|c: char| is_ident_char(c) || c == '.')))(i)
}

fn exponent(i: &str) -> PResult<'_, &str> {
    recog((one_of("eE"), opt(one_of("+-")), digit1))(i)
}

/// A number token. Bare `inf`/`nan` are identifiers; signed ones are numbers.
fn number_token(i: &str) -> PResult<'_, &str> {
    recog((
        opt(one_of("+-")),
        alt((
            recog((tag_no_case("0x"), hex_digit1)),
            recog((digit1, opt((char('.'), digit0)), opt(exponent))),
            recog((char('.'), digit1, opt(exponent))),
            tag("inf"),
            tag("nan"),
        )),
    ))(i)
}

/// Strips a `;` comment that is not inside a string literal; returns (code, comment).
pub fn split_comment(line: &str) -> (&str, &str) {
    let mut in_str = false;
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        if in_str {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_str = false;
            }
        } else if c == '"' {
            in_str = true;
        } else if c == ';' {
            return (&line[..i], &line[i..]);
        }
    }
    (line, "")
}

/// A position in a line, with nom-based token readers that report errors with spans.
#[derive(Debug, Clone, PartialEq)]
pub struct Cursor<'a> {
    pub line: &'a str,
    pub rest: &'a str,
    /// How many values [`Cursor::value`] is inside (lists, calls, `name=value`), so that it
    /// can refuse [`MAX_NESTING`] levels instead of overflowing the stack.
    depth: usize,
}

/// The deepest a value may nest: `[[...]]`, `fill(fill(...))` and `a=b=...` together. A
/// constant of the highest rank (8) needs 9 levels; the parser recurses once per level, and so
/// do the stages after it, so about 10,000 levels overflowed the stack (an abort, and through
/// the C ABI a crash of the host).
pub const MAX_NESTING: usize = 64;

impl<'a> Cursor<'a> {
    pub fn new(line: &'a str) -> Cursor<'a> {
        Cursor { line, rest: line, depth: 0 }
    }

    pub fn pos(&self) -> usize {
        self.line.len() - self.rest.len()
    }

    /// Runs a token parser at the cursor; returns the token and its span.
    fn token(&mut self, p: fn(&'a str) -> PResult<'a, &'a str>) -> Option<Sp<&'a str>> {
        let start = self.pos();
        let (rest, t) = p(self.rest).ok()?;
        let start_of_rest = self.line.len() - rest.len();
        self.rest = &self.line[start_of_rest..];
        Some(Sp { node: t, span: start..start + t.len() })
    }

    pub fn ws(&mut self) {
        if let Ok((r, _)) = space0::<&str, nom::error::Error<&str>>(self.rest) {
            self.rest = r;
        }
    }

    pub fn at_end(&self) -> bool {
        self.rest.trim().is_empty()
    }

    pub fn peek(&self) -> Option<char> {
        self.rest.chars().next()
    }

    /// Skips whitespace, then consumes `c` if it is next.
    pub fn eat(&mut self, c: char) -> bool {
        self.ws();
        if self.peek() == Some(c) {
            self.rest = &self.rest[c.len_utf8()..];
            true
        } else {
            false
        }
    }

    /// Describes the next token for "found ..." messages, with its span.
    pub fn found(&self) -> (String, Span) {
        let r = self.rest.trim_start();
        let start = self.line.len() - r.len();
        if r.is_empty() {
            return ("end of line".into(), start..start);
        }
        let len = if let Ok((_, t)) = number_token(r) {
            t.len()
                + r[t.len()..].chars().take_while(|&c| is_ident_char(c)).map(char::len_utf8).sum::<usize>()
        } else if let Some(name) = r.strip_prefix('%') {
            1 + name.chars().take_while(|&c| is_ident_char(c) || c == '.').map(char::len_utf8).sum::<usize>()
        } else {
            let n: usize = r.chars().take_while(|&c| is_ident_char(c)).map(char::len_utf8).sum();
            if n == 0 {
                r.chars().next().map_or(0, char::len_utf8)
            } else {
                n
            }
        };
        (format!("`{}`", &r[..len]), start..start + len)
    }

    /// An error "expected X, found <next token>".
    pub fn expected(&self, what: &str) -> Diag {
        let (found, span) = self.found();
        Diag::new(AsmErrorKind::Syntax { expected: what.into(), found }, span)
    }

    pub fn expect(&mut self, c: char, what: &str) -> Result<(), Diag> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.expected(what))
        }
    }

    /// Requires that nothing but whitespace is left.
    pub fn end(&mut self) -> Result<(), Diag> {
        self.ws();
        if self.at_end() {
            Ok(())
        } else {
            Err(self.expected("end of line"))
        }
    }

    pub fn try_ident(&mut self) -> Option<Sp<&'a str>> {
        self.ws();
        self.token(ident_token)
    }

    pub fn ident(&mut self, what: &str) -> Result<Sp<&'a str>, Diag> {
        self.try_ident().ok_or_else(|| self.expected(what))
    }

    /// `%name`.
    pub fn tensor_name(&mut self) -> Result<Sp<&'a str>, Diag> {
        self.ws();
        let start = self.pos();
        if !self.eat('%') {
            return Err(self.expected("a tensor name `%name`"));
        }
        match self.token(tensor_name_token) {
            Some(name) => Ok(Sp { node: name.node, span: start..name.span.end }),
            None => Err(self.expected("a tensor name after `%`")),
        }
    }

    /// A string literal `"..."` with `\"`, `\\`, `\n`, `\t` escapes.
    pub fn string(&mut self, what: &str) -> Result<Sp<String>, Diag> {
        self.ws();
        let start = self.pos();
        if self.peek() != Some('"') {
            return Err(self.expected(what));
        }
        let mut out = String::new();
        let mut chars = self.rest.char_indices().skip(1);
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.rest = &self.rest[i + 1..];
                    return Ok(Sp { node: out, span: start..self.pos() });
                }
                '\\' => match chars.next() {
                    Some((_, '"')) => out.push('"'),
                    Some((_, '\\')) => out.push('\\'),
                    Some((_, 'n')) => out.push('\n'),
                    Some((_, 't')) => out.push('\t'),
                    Some((j, e)) => {
                        let at = start + j;
                        return Err(Diag::other(
                            format!("unknown escape `\\{e}` in string"),
                            "expected one of `\\\"`, `\\\\`, `\\n`, `\\t`",
                            at - 1..at + e.len_utf8(),
                        ));
                    }
                    None => break,
                },
                c => out.push(c),
            }
        }
        Err(Diag::other("unterminated string", "this string has no closing `\"`", start..self.line.len()))
    }

    /// `dtype[d0, d1, ...]`.
    pub fn type_ast(&mut self) -> Result<TypeAst<'a>, Diag> {
        let dtype = self.ident("an element type like `f32[...]`")?;
        let start = dtype.span.start;
        self.expect('[', "`[` and the shape")?;
        let mut dims = Vec::new();
        self.ws();
        if !self.eat(']') {
            loop {
                self.ws();
                let save = self.rest;
                if let Some(n) = self.token(digit1) {
                    if self.peek().is_some_and(is_ident_char) {
                        self.rest = save;
                        return Err(self.expected("a dimension (a number or a name)"));
                    }
                    dims.push(Sp { span: n.span, node: DimAst::Num(n.node) });
                } else if let Some(id) = self.try_ident() {
                    dims.push(Sp { span: id.span, node: DimAst::Name(id.node) });
                } else {
                    return Err(self.expected("a dimension (a number or a name)"));
                }
                if self.eat(']') {
                    break;
                }
                self.expect(',', "`,` or `]`")?;
            }
        }
        Ok(TypeAst { dtype, dims, span: start..self.pos() })
    }

    /// A comma-separated list of values up to `close` (the opening bracket already eaten).
    fn list_until(&mut self, close: char) -> Result<Vec<Arg<'a>>, Diag> {
        let mut items = Vec::new();
        if self.eat(close) {
            return Ok(items);
        }
        loop {
            items.push(self.value()?);
            if self.eat(close) {
                return Ok(items);
            }
            self.expect(',', &format!("`,` or `{close}`"))?;
        }
    }

    /// One generic value (see [`ArgNode`]), nested at most [`MAX_NESTING`] deep.
    pub fn value(&mut self) -> Result<Arg<'a>, Diag> {
        self.ws();
        if self.depth >= MAX_NESTING {
            let start = self.pos();
            let end = start + self.peek().map_or(0, char::len_utf8);
            return Err(Diag::other(
                "value nested too deeply",
                format!("more than {MAX_NESTING} levels of `[...]`, `name(...)` and `name=value`"),
                start..end,
            ));
        }
        self.depth += 1;
        let value = self.value_unbounded();
        self.depth -= 1;
        value
    }

    /// [`Cursor::value`] without the depth check; only `value` calls it.
    fn value_unbounded(&mut self) -> Result<Arg<'a>, Diag> {
        let start = self.pos();
        let node = match self.peek() {
            Some('%') => {
                let name = self.tensor_name()?;
                let mut decl = None;
                let save = self.rest;
                if self.eat(':') {
                    self.ws();
                    if self.peek().is_some_and(is_ident_start) {
                        decl = Some(self.type_ast()?);
                    } else {
                        self.rest = save;
                    }
                }
                ArgNode::Tensor { name: name.node, decl }
            }
            Some('[') => {
                self.rest = &self.rest[1..];
                ArgNode::List(self.list_until(']')?)
            }
            Some('"') => ArgNode::Str(self.string("a string")?.node),
            Some(c) if c.is_ascii_digit() || c == '+' || c == '-' || c == '.' => {
                let save = self.rest;
                match self.token(number_token) {
                    Some(n) if !self.peek().is_some_and(|c| is_ident_char(c) || c == '.') => {
                        ArgNode::Number(n.node)
                    }
                    _ => {
                        self.rest = save;
                        let (found, span) = self.found();
                        return Err(Diag::new(
                            AsmErrorKind::BadNumber {
                                text: found.trim_matches('`').to_string(),
                                kind: "number".into(),
                                why: "not a decimal, hex (`0x...`), `inf` or `nan` number".into(),
                            },
                            span,
                        ));
                    }
                }
            }
            Some(c) if is_ident_start(c) => {
                let id = self.ident("a value")?;
                let save = self.rest;
                self.ws();
                match self.peek() {
                    Some('(') => {
                        self.rest = &self.rest[1..];
                        ArgNode::Call { name: id, args: self.list_until(')')? }
                    }
                    Some('=') => {
                        self.rest = &self.rest[1..];
                        ArgNode::KeyValue { key: id, value: Box::new(self.value()?) }
                    }
                    Some(c) if c.is_ascii_digit() || c == '+' || c == '-' || c == '.' => {
                        ArgNode::Typed { ty: id, value: Box::new(self.value()?) }
                    }
                    _ => {
                        self.rest = save;
                        ArgNode::Ident(id.node)
                    }
                }
            }
            _ => return Err(self.expected("an operand")),
        };
        Ok(Sp { node, span: start..self.pos() })
    }

    /// Values separated by commas up to the end of the line.
    pub fn value_list(&mut self) -> Result<Vec<Arg<'a>>, Diag> {
        let mut args = Vec::new();
        if self.at_end() {
            return Ok(args);
        }
        loop {
            args.push(self.value()?);
            self.ws();
            if self.at_end() {
                return Ok(args);
            }
            self.expect(',', "`,` or end of line")?;
        }
    }
}

/// Parses one line (comment already removed).
pub fn parse_line(text: &str) -> Result<LineAst<'_>, Diag> {
    let mut c = Cursor::new(text);
    c.ws();
    let mut label = None;
    let save = c.rest;
    if let Some(id) = c.try_ident() {
        if c.rest.starts_with(':') {
            c.rest = &c.rest[1..];
            label = Some(id);
        } else {
            c.rest = save;
        }
    }
    c.ws();
    if c.at_end() {
        return Ok(LineAst { label, stmt: Stmt::Empty });
    }
    if c.peek() == Some('.') {
        c.rest = &c.rest[1..];
        let name = match c.token(ident_token) {
            Some(n) => Sp { node: n.node, span: n.span.start - 1..n.span.end },
            None => return Err(c.expected("a directive name after `.`")),
        };
        return Ok(LineAst { label, stmt: Stmt::Directive { name, args: c } });
    }
    let mnemonic = c.ident("an instruction, a directive or a label")?;
    let mut placement = None;
    if c.rest.starts_with('@') {
        c.rest = &c.rest[1..];
        match c.token(ident_token) {
            Some(p) => placement = Some(Sp { node: p.node, span: p.span.start - 1..p.span.end }),
            None => return Err(c.expected("`cpu` or `gpu` after `@`")),
        }
    }
    if !c.rest.is_empty() && !c.rest.starts_with([' ', '\t']) {
        return Err(c.expected("whitespace after the mnemonic"));
    }
    c.ws();
    let args_start = c.pos();
    let args = c.value_list()?;
    let args_span = args_start..c.line.trim_end().len().max(args_start);
    Ok(LineAst { label, stmt: Stmt::Insn { mnemonic, placement, args, args_span } })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_instruction_with_spans() {
        let l = parse_line("loop:  MATMUL@gpu %y, %x, %w, bias=%b, tb, act=relu").unwrap();
        assert_eq!(l.label.as_ref().unwrap().node, "loop");
        let Stmt::Insn { mnemonic, placement, args, .. } = l.stmt else { panic!() };
        assert_eq!(mnemonic.node, "MATMUL");
        assert_eq!(mnemonic.span, 7..13);
        assert_eq!(placement.unwrap().node, "gpu");
        assert_eq!(args.len(), 6);
        assert_eq!(args[0].node, ArgNode::Tensor { name: "y", decl: None });
        assert!(matches!(args[3].node, ArgNode::KeyValue { .. }));
        assert_eq!(args[4].node, ArgNode::Ident("tb"));
    }

    #[test]
    fn parses_numbers_and_decls() {
        let l = parse_line("ALLOC %h.0: f32[B, 128]").unwrap();
        let Stmt::Insn { args, .. } = l.stmt else { panic!() };
        let ArgNode::Tensor { name, decl: Some(t) } = &args[0].node else { panic!() };
        assert_eq!(*name, "h.0");
        assert_eq!(t.dims.len(), 2);
        for n in ["1.5", "-2", "0x7fc00000", "1e-5", "-inf", ".5", "3.", "0.0625"] {
            let mut c = Cursor::new(n);
            assert_eq!(c.value().unwrap().node, ArgNode::Number(n), "{n}");
        }
        assert!(Cursor::new("12ab").value().is_err());
    }

    #[test]
    fn comments_respect_strings() {
        assert_eq!(split_comment(".file \"a;b\" ; c"), (".file \"a;b\" ", "; c"));
    }
}
