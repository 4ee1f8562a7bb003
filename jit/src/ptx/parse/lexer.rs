//! The PTX lexer: source text → [`Token`]s with byte spans, lines and columns.
//!
//! | token            | examples                                              |
//! |------------------|-------------------------------------------------------|
//! | [`TokKind::Ident`]     | `ld.global.nc.v4.f32`, `%tid.x`, `$L__BB0_2`, `_`, `mapa.shared::cluster.u32` |
//! | [`TokKind::Directive`] | `.version`, `.b8`, `.debug_info`, `.shared::cta`      |
//! | [`TokKind::Int`]       | `42`, `0xff`, `0b101`, `017`, `4294967295U`           |
//! | [`TokKind::Float`]     | `0f3F800000`, `0d3FF0000000000000`, `1.5`, `8.8`, `1e-3` |
//! | [`TokKind::Str`]       | `"nounroll"`, `"/path/x.cu"`                          |
//! | [`TokKind::Punct`]     | one of `{ } ( ) [ ] , ; : + - ! @ < > = | & * / ~ ? %` |
//!
//! Comments (`//` to the end of the line, `/* */`) and white space separate tokens and are
//! dropped: the parser keeps byte spans, so the original text is never rebuilt from tokens.
//! Identifiers continue over `.` and `::`, so an opcode with its modifiers, or a register
//! with a vector suffix (`%tid.x`), is one token.

use super::ParseError;

/// What a token is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokKind {
    /// A name: opcode, register, symbol, label.
    Ident,
    /// A `.`-directive or modifier standing on its own.
    Directive,
    /// An integer literal.
    Int,
    /// A floating-point literal (also `8.8` of `.version 8.8`).
    Float,
    /// A string literal, quotes included.
    Str,
    /// One punctuation byte.
    Punct(u8),
}

/// One token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Token {
    /// What it is.
    pub kind: TokKind,
    /// Byte offset of its first byte.
    pub start: usize,
    /// Byte offset just after it.
    pub end: usize,
    /// 1-based line.
    pub line: u32,
    /// 1-based column (in bytes).
    pub col: u32,
}

impl Token {
    /// Its text in `src`.
    pub fn text<'a>(&self, src: &'a str) -> &'a str {
        src.get(self.start..self.end).unwrap_or("")
    }
}

fn ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b == b'$' || b == b'%'
}

fn ident_continue(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'$'
}

/// Splits `src` into tokens.
pub fn lex(src: &str) -> Result<Vec<Token>, ParseError> {
    let b = src.as_bytes();
    let mut toks = Vec::with_capacity(src.len() / 4);
    // A UTF-8 byte order mark is not a token.
    let mut i = if src.starts_with('\u{feff}') { 3 } else { 0 };
    let mut line = 1u32;
    let mut line_start = i;
    let col = |i: usize, ls: usize| (i - ls + 1) as u32;
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            i += 1;
            line += 1;
            line_start = i;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let (l0, c0) = (line, col(i, line_start));
            i += 2;
            loop {
                if i + 1 >= b.len() {
                    return Err(ParseError {
                        line: l0,
                        col: c0,
                        what: "found an unterminated `/*` comment, expected `*/`".into(),
                    });
                }
                if b[i] == b'*' && b[i + 1] == b'/' {
                    i += 2;
                    break;
                }
                if b[i] == b'\n' {
                    line += 1;
                    line_start = i + 1;
                }
                i += 1;
            }
            continue;
        }
        let start = i;
        let (tl, tc) = (line, col(i, line_start));
        let kind = if c == b'"' {
            i += 1;
            loop {
                match b.get(i) {
                    None | Some(b'\n') => {
                        return Err(ParseError {
                            line: tl,
                            col: tc,
                            what: "found an unterminated string literal, expected `\"`".into(),
                        });
                    }
                    Some(b'\\') => i += 2,
                    Some(b'"') => {
                        i += 1;
                        break;
                    }
                    Some(_) => i += 1,
                }
            }
            TokKind::Str
        } else if c.is_ascii_digit() {
            let hexfloat = c == b'0'
                && matches!(b.get(i + 1), Some(b'f' | b'F' | b'd' | b'D'))
                && b.get(i + 2).is_some_and(|x| x.is_ascii_hexdigit());
            if hexfloat {
                i += 2;
                while i < b.len() && b[i].is_ascii_hexdigit() {
                    i += 1;
                }
                TokKind::Float
            } else {
                let is_hex = c == b'0' && matches!(b.get(i + 1), Some(b'x' | b'X'));
                let mut float = false;
                i += 1;
                while i < b.len() {
                    let x = b[i];
                    if x.is_ascii_alphanumeric() {
                        if !is_hex
                            && matches!(x, b'e' | b'E')
                            && matches!(b.get(i + 1), Some(b'+' | b'-'))
                            && b.get(i + 2).is_some_and(|d| d.is_ascii_digit())
                        {
                            float = true;
                            i += 2;
                        } else if !is_hex && matches!(x, b'e' | b'E') {
                            float = true;
                        }
                        i += 1;
                    } else if x == b'.'
                        && !is_hex
                        && b.get(i + 1).is_some_and(|d| d.is_ascii_digit())
                    {
                        float = true;
                        i += 1;
                    } else {
                        break;
                    }
                }
                if float { TokKind::Float } else { TokKind::Int }
            }
        } else if ident_start(c) || c == b'.' {
            let directive = c == b'.';
            i += 1;
            if directive && !b.get(i).is_some_and(|&x| ident_start(x)) {
                // A lone `.`: punctuation.
                toks.push(Token {
                    kind: TokKind::Punct(b'.'),
                    start,
                    end: i,
                    line: tl,
                    col: tc,
                });
                continue;
            }
            loop {
                match b.get(i) {
                    Some(&x) if ident_continue(x) => i += 1,
                    Some(b'.') if b.get(i + 1).is_some_and(|&x| ident_continue(x)) => i += 1,
                    Some(b':')
                        if b.get(i + 1) == Some(&b':')
                            && b.get(i + 2).is_some_and(|&x| ident_continue(x)) =>
                    {
                        i += 2
                    }
                    _ => break,
                }
            }
            if directive {
                TokKind::Directive
            } else {
                TokKind::Ident
            }
        } else if c.is_ascii_punctuation() {
            i += 1;
            TokKind::Punct(c)
        } else {
            let ch = src.get(i..).and_then(|s| s.chars().next()).unwrap_or('?');
            return Err(ParseError {
                line: tl,
                col: tc,
                what: format!("found character {ch:?}, expected a PTX token"),
            });
        };
        toks.push(Token {
            kind,
            start,
            end: i.min(b.len()),
            line: tl,
            col: tc,
        });
    }
    Ok(toks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<(TokKind, &str)> {
        lex(src)
            .unwrap()
            .iter()
            .map(|t| (t.kind, t.text(src)))
            .collect()
    }

    #[test]
    fn opcodes_registers_and_literals() {
        let src = "@!%p1 ld.global.nc.v4.f32 {%f1, _}, [%rd1+-4]; // c\n/* x\n */ 0f3F800000 0xffU 8.8 1e-3";
        assert_eq!(
            kinds(src),
            vec![
                (TokKind::Punct(b'@'), "@"),
                (TokKind::Punct(b'!'), "!"),
                (TokKind::Ident, "%p1"),
                (TokKind::Ident, "ld.global.nc.v4.f32"),
                (TokKind::Punct(b'{'), "{"),
                (TokKind::Ident, "%f1"),
                (TokKind::Punct(b','), ","),
                (TokKind::Ident, "_"),
                (TokKind::Punct(b'}'), "}"),
                (TokKind::Punct(b','), ","),
                (TokKind::Punct(b'['), "["),
                (TokKind::Ident, "%rd1"),
                (TokKind::Punct(b'+'), "+"),
                (TokKind::Punct(b'-'), "-"),
                (TokKind::Int, "4"),
                (TokKind::Punct(b']'), "]"),
                (TokKind::Punct(b';'), ";"),
                (TokKind::Float, "0f3F800000"),
                (TokKind::Int, "0xffU"),
                (TokKind::Float, "8.8"),
                (TokKind::Float, "1e-3"),
            ]
        );
        let t = lex(src).unwrap();
        assert_eq!((t[17].line, t[17].col), (3, 5));
    }

    #[test]
    fn labels_scopes_and_directives() {
        assert_eq!(
            kinds("$L__BB0_2: mapa.shared::cluster.u32 .shared::cta .b8"),
            vec![
                (TokKind::Ident, "$L__BB0_2"),
                (TokKind::Punct(b':'), ":"),
                (TokKind::Ident, "mapa.shared::cluster.u32"),
                (TokKind::Directive, ".shared::cta"),
                (TokKind::Directive, ".b8"),
            ]
        );
    }

    #[test]
    fn errors_have_positions() {
        let e = lex("a\n  \"open").unwrap_err();
        assert_eq!((e.line, e.col), (2, 3));
        let e = lex("a /* never").unwrap_err();
        assert_eq!((e.line, e.col), (1, 3));
        let e = lex("x\n\u{e9}").unwrap_err();
        assert_eq!(e.line, 2);
    }
}
