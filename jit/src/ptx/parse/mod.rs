//! A parser for foreign PTX: the text nvcc, NVRTC, Numba, Triton or CuPy produced, as
//! opposed to the JIT's own IR ([`crate::ptx::Module`]).
//!
//! ```text
//! PTX text → [lexer] → tokens (byte spans) → [parser] → PtxFile { header, files, globals,
//!                                                                   functions { params, statements } }
//! ```
//!
//! Everything keeps byte spans into the original text, so a pass can splice text in
//! ([`crate::passes::probe`]) and leave every other byte as it was. The parser knows the
//! module structure (header, module-scope declarations, functions, nested blocks) and the
//! shape of a statement (guard, opcode with modifiers, operands); it does not check types
//! or instruction semantics: ptxas does.
//!
//! | item                   | parsed into                                                 |
//! |------------------------|-------------------------------------------------------------|
//! | `.version` / `.target` / `.address_size` | [`PtxFile::version`], [`PtxFile::target`], [`PtxFile::address_size`] |
//! | `.file 1 "x.cu"`       | [`PtxFile::files`]                                          |
//! | `.global`/`.const`/`.shared` variables, `.extern` declarations | [`PtxFile::globals`] |
//! | `.section .debug_* { }`, `.pragma`, `.alias`, module-scope `.callprototype` | skipped (as every byte, they stay in [`PtxFile::src`]) |
//! | `.entry` / `.func`     | [`PtxFunction`]: params, performance directives, body       |
//! | body lines             | [`PtxStatement`]: instruction, label or directive, with the current `.loc` |
//!
//! Errors are [`ParseError`]s with a line and a column; no input makes the parser panic.
//! [`parse`] fails on the first error; [`parse_lenient`] keeps a function whose body it
//! cannot read as a span with its error ([`PtxFunction::error`]), so that one odd kernel
//! does not stop the others from being instrumented.

pub mod lexer;

use std::collections::BTreeMap;
use std::ops::Range;

use lexer::{TokKind, Token};

/// Why a PTX text could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {col}: {what}")]
pub struct ParseError {
    /// 1-based line.
    pub line: u32,
    /// 1-based column (bytes).
    pub col: u32,
    /// What was found, and what was expected.
    pub what: String,
}

/// A parsed PTX module. Spans are byte ranges of [`PtxFile::src`].
#[derive(Clone, Debug)]
pub struct PtxFile<'a> {
    /// The text.
    pub src: &'a str,
    /// `.version major.minor`.
    pub version: (u32, u32),
    /// `.target` items, e.g. `["sm_90a", "debug"]`.
    pub target: Vec<String>,
    /// `.address_size` (64 when absent).
    pub address_size: u32,
    /// Byte offset just after the line of `.address_size` (or of `.target` when there is
    /// none): where module-scope text may be inserted.
    pub header_end: usize,
    /// Span of the version number (`8.8`).
    pub version_span: Range<usize>,
    /// Span of the target list, from its first item to its last.
    pub target_span: Range<usize>,
    /// The `.file` table: index → path.
    pub files: BTreeMap<u32, String>,
    /// Module-scope variables.
    pub globals: Vec<PtxGlobal>,
    /// Functions, declarations included, in text order.
    pub functions: Vec<PtxFunction<'a>>,
}

impl<'a> PtxFile<'a> {
    /// The SM number of the target (`sm_90a` → 90), if the target names one.
    pub fn sm(&self) -> Option<u32> {
        self.target.iter().find_map(|t| split_sm(t).map(|(n, _)| n))
    }

    /// The function named `name` that has a body, else the first declaration of it.
    pub fn function(&self, name: &str) -> Option<&PtxFunction<'a>> {
        self.functions
            .iter()
            .find(|f| f.name == name && f.definition)
            .or_else(|| self.functions.iter().find(|f| f.name == name))
    }

    /// `.entry` definitions: the kernels.
    pub fn kernels(&self) -> impl Iterator<Item = &PtxFunction<'a>> {
        self.functions
            .iter()
            .filter(|f| f.kind == FuncKind::Entry && f.definition)
    }
}

/// `sm_90a` → `(90, "a")`; `None` for target items that are not `sm_N`.
pub fn split_sm(item: &str) -> Option<(u32, &str)> {
    let rest = item.strip_prefix("sm_")?;
    let digits = rest.bytes().take_while(|b| b.is_ascii_digit()).count();
    let n = rest.get(..digits)?.parse().ok()?;
    Some((n, rest.get(digits..).unwrap_or("")))
}

/// A module-scope variable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtxGlobal {
    /// Its name.
    pub name: String,
    /// State space: `.global`, `.const`, `.shared`, `.local`, `.tex`...
    pub space: String,
    /// Linkage directive (`.visible`, `.extern`, `.weak`, `.common`), if any.
    pub linkage: Option<String>,
    /// The declaration, up to and including its `;`.
    pub span: Range<usize>,
    /// 1-based line.
    pub line: u32,
}

/// `.entry` or `.func`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FuncKind {
    /// A kernel.
    Entry,
    /// A device function.
    Func,
}

/// A function: a kernel or device function, a declaration or a definition.
#[derive(Clone, Debug)]
pub struct PtxFunction<'a> {
    /// Its name.
    pub name: &'a str,
    /// `.entry` or `.func`.
    pub kind: FuncKind,
    /// `.visible`, `.extern`, `.weak`, `.common`, if given.
    pub linkage: Option<String>,
    /// Has a body.
    pub definition: bool,
    /// Return parameters of a `.func`.
    pub ret_params: Vec<PtxParam>,
    /// Parameters.
    pub params: Vec<PtxParam>,
    /// Span of the name.
    pub name_span: Range<usize>,
    /// Byte offset of the `)` closing the parameter list; `None` when there is no list
    /// (then a list may be inserted at `name_span.end`).
    pub params_close: Option<usize>,
    /// Performance and other directives between the parameters and the body (`.maxntid`,
    /// `.reqntid`, `.minnctapersm`, `.maxnreg`, `.noreturn`, `.explicitcluster`...).
    pub directives: Vec<PerfDirective>,
    /// The body, from `{` to `}` inclusive.
    pub body: Option<Range<usize>>,
    /// Statements of the body, in text order.
    pub statements: Vec<PtxStatement>,
    /// The whole function, from its first directive to its `}` or `;`.
    pub span: Range<usize>,
    /// Why the body could not be parsed ([`parse_lenient`] only; then `statements` is
    /// empty).
    pub error: Option<ParseError>,
    /// 1-based line of `.entry`/`.func`.
    pub line: u32,
}

impl PtxFunction<'_> {
    /// Its `ret`/`exit` instructions, at any depth, in text order.
    pub fn exits(&self) -> impl Iterator<Item = &PtxStatement> {
        self.statements.iter().filter(|s| s.is_return())
    }
}

/// A directive between a function's parameters and its body, e.g. `.maxntid 128, 1, 1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerfDirective {
    /// `.maxntid`, ...
    pub name: String,
    /// Its numbers.
    pub values: Vec<u64>,
}

/// A parameter (or return parameter) of a function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtxParam {
    /// Its name.
    pub name: String,
    /// Its type (`.u64`, `.b8`, ...).
    pub ty: String,
    /// Size in bytes, arrays included (0 for an unsized array `[]`).
    pub size: u32,
    /// Alignment in bytes: `.align N`, else the type's size.
    pub align: u32,
    /// `.ptr` attributes, e.g. `.ptr .global .align 16`, as written (empty when none).
    pub ptr: String,
    /// The declaration, from `.param` (or `.reg`) to the end of the name or array bounds.
    pub span: Range<usize>,
}

/// The predicate guard of an instruction: `@%p1` or `@!%p1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Guard {
    /// The predicate register.
    pub pred: String,
    /// `@!`: runs when the predicate is false.
    pub negated: bool,
}

/// A source location of a `.loc` directive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loc {
    /// File index of the `.file` table.
    pub file: u32,
    /// 1-based line.
    pub line: u32,
    /// Column.
    pub col: u32,
    /// `inlined_at file line col`, when the code was inlined.
    pub inlined_at: Option<(u32, u32, u32)>,
}

/// What a statement of a body is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StmtKind {
    /// An instruction; `opcode` holds it with its modifiers.
    Instruction,
    /// A label definition; `opcode` holds the label.
    Label,
    /// A directive (`.reg`, `.local`, `.shared`, `.param`, `.loc`, `.pragma`,
    /// `.callprototype`...); `opcode` holds the directive.
    Directive,
}

/// One statement of a body.
#[derive(Clone, Debug, PartialEq)]
pub struct PtxStatement {
    /// What it is.
    pub kind: StmtKind,
    /// From its first token (the guard's `@`, a label) to its `;` (`:` for labels, the last
    /// token for directives without `;` such as `.loc`).
    pub span: Range<usize>,
    /// 1-based line of its first token.
    pub line: u32,
    /// Block nesting: 1 = the function body.
    pub depth: u32,
    /// Guard of an instruction.
    pub guard: Option<Guard>,
    /// Opcode with modifiers (`ld.global.nc.v4.f32`), label, or directive.
    pub opcode: String,
    /// Operands of an instruction.
    pub operands: Vec<Operand>,
    /// The `.loc` in effect (instructions only).
    pub loc: Option<Loc>,
}

impl PtxStatement {
    /// The opcode without modifiers (`ld.global.u32` → `ld`).
    pub fn base_opcode(&self) -> &str {
        self.opcode.split('.').next().unwrap_or("")
    }

    /// A `ret` or `exit` instruction, with any modifiers.
    pub fn is_return(&self) -> bool {
        self.kind == StmtKind::Instruction && matches!(self.base_opcode(), "ret" | "exit")
    }
}

/// An instruction operand.
#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    /// `%r1`, `%tid.x`, or a name declared by a `.reg` of an enclosing block (`p` of
    /// `{ .reg .pred p; ... }`).
    Reg(String),
    /// `!%p1` (a negated predicate operand).
    NotReg(String),
    /// An integer immediate (hex, octal, binary and `U` suffixes decoded).
    Int(i128),
    /// A float immediate as written (`0f3F800000`, `1.5`).
    Float(String),
    /// A symbol or label.
    Symbol(String),
    /// `_`.
    Sink,
    /// `[base+offset]`; `base` is `None` for an absolute address `[0x100]`.
    Address {
        /// Register or symbol.
        base: Option<String>,
        /// Byte offset.
        offset: i128,
    },
    /// `{a, b, ...}`.
    Vector(Vec<Operand>),
    /// `(a, b, ...)` of `call`.
    List(Vec<Operand>),
    /// Anything else (expressions such as `%p1|%p2`, `sym+8`), as written.
    Other(String),
}

/// Parses a PTX module.
pub fn parse(src: &str) -> Result<PtxFile<'_>, ParseError> {
    parse_with(src, false)
}

/// Parses a PTX module, tolerating function bodies it cannot read: such a function keeps
/// its header, its body span (found by matching braces) and the error in
/// [`PtxFunction::error`], with no statements. The module still fails on errors outside
/// bodies, and on a body whose braces do not balance before the next function.
pub fn parse_lenient(src: &str) -> Result<PtxFile<'_>, ParseError> {
    parse_with(src, true)
}

fn parse_with(src: &str, lenient: bool) -> Result<PtxFile<'_>, ParseError> {
    let toks = lexer::lex(src)?;
    let mut p = Parser {
        src,
        toks,
        pos: 0,
        loc: None,
        lenient,
        bare_regs: Vec::new(),
    };
    p.file()
}

struct Parser<'a> {
    src: &'a str,
    toks: Vec<Token>,
    pos: usize,
    loc: Option<Loc>,
    lenient: bool,
    /// Registers declared without `%` (`.reg .pred p;` in inline-asm blocks), one set per
    /// open block of the current body.
    bare_regs: Vec<Vec<&'a str>>,
}

const FUNC_DIRECTIVES: &[&str] = &[
    ".maxntid",
    ".reqntid",
    ".minnctapersm",
    ".maxnctapersm",
    ".maxnreg",
    ".noreturn",
    ".explicitcluster",
    ".reqnctapercluster",
    ".maxclusterrank",
    ".blocksareclusters",
    ".abi_preserve",
    ".abi_preserve_control",
];

fn type_size(ty: &str) -> Option<u32> {
    Some(match ty {
        ".pred" | ".b8" | ".u8" | ".s8" => 1,
        ".b16" | ".u16" | ".s16" | ".f16" | ".bf16" => 2,
        ".b32" | ".u32" | ".s32" | ".f32" | ".f16x2" | ".bf16x2" | ".tf32" => 4,
        ".b64" | ".u64" | ".s64" | ".f64" => 8,
        ".b128" => 16,
        ".texref" | ".samplerref" | ".surfref" => 8,
        _ => return None,
    })
}

fn parse_int(text: &str) -> Option<i128> {
    let t = text.strip_suffix(['U', 'u']).unwrap_or(text);
    let (digits, radix) = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        (h, 16)
    } else if let Some(b) = t.strip_prefix("0b").or_else(|| t.strip_prefix("0B")) {
        (b, 2)
    } else if t.len() > 1 && t.starts_with('0') {
        (&t[1..], 8)
    } else {
        (t, 10)
    };
    i128::from_str_radix(digits, radix).ok()
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<Token> {
        self.toks.get(self.pos).copied()
    }

    fn peek_at(&self, k: usize) -> Option<Token> {
        self.toks.get(self.pos + k).copied()
    }

    fn text(&self, t: Token) -> &'a str {
        t.text(self.src)
    }

    fn is_punct(&self, c: u8) -> bool {
        self.peek().is_some_and(|t| t.kind == TokKind::Punct(c))
    }

    fn is_directive(&self, d: &str) -> bool {
        self.peek()
            .is_some_and(|t| t.kind == TokKind::Directive && self.text(t) == d)
    }

    fn describe(&self, t: Option<Token>) -> String {
        match t {
            None => "the end of the text".into(),
            Some(t) => format!("`{}`", self.text(t)),
        }
    }

    fn err_at(&self, t: Option<Token>, expected: &str) -> ParseError {
        let (line, col) = match t {
            Some(t) => (t.line, t.col),
            None => self.end_pos(),
        };
        ParseError {
            line,
            col,
            what: format!("found {}, expected {expected}", self.describe(t)),
        }
    }

    fn err(&self, expected: &str) -> ParseError {
        self.err_at(self.peek(), expected)
    }

    fn end_pos(&self) -> (u32, u32) {
        let line = 1 + self.src.bytes().filter(|&b| b == b'\n').count() as u32;
        let col = 1 + self.src.rsplit('\n').next().map_or(0, str::len) as u32;
        (line, col)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.peek();
        if t.is_some() {
            self.pos += 1;
        }
        t
    }

    fn expect_punct(&mut self, c: u8) -> Result<Token, ParseError> {
        match self.peek() {
            Some(t) if t.kind == TokKind::Punct(c) => {
                self.pos += 1;
                Ok(t)
            }
            t => Err(self.err_at(t, &format!("`{}`", c as char))),
        }
    }

    fn expect_kind(&mut self, k: TokKind, what: &str) -> Result<Token, ParseError> {
        match self.peek() {
            Some(t) if t.kind == k => {
                self.pos += 1;
                Ok(t)
            }
            t => Err(self.err_at(t, what)),
        }
    }

    fn expect_u32(&mut self, what: &str) -> Result<u32, ParseError> {
        let t = self.peek();
        let tok = self.expect_kind(TokKind::Int, what)?;
        parse_int(self.text(tok))
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| self.err_at(t, what))
    }

    /// Skips tokens up to and including the next `;` outside brackets. Returns that `;`.
    fn skip_to_semi(&mut self, what: &str) -> Result<Token, ParseError> {
        let mut depth = 0i32;
        while let Some(t) = self.next() {
            match t.kind {
                TokKind::Punct(b'{' | b'(' | b'[') => depth += 1,
                TokKind::Punct(b'}' | b')' | b']') => {
                    depth -= 1;
                    if depth < 0 {
                        return Err(self.err_at(Some(t), &format!("`;` ending {what}")));
                    }
                }
                TokKind::Punct(b';') if depth == 0 => return Ok(t),
                _ => {}
            }
        }
        Err(self.err_at(None, &format!("`;` ending {what}")))
    }

    /// Skips a balanced `{ ... }` block; the current token is its `{`. Returns the `}`.
    fn skip_braces(&mut self, what: &str) -> Result<Token, ParseError> {
        self.expect_punct(b'{')?;
        let mut depth = 1u32;
        while let Some(t) = self.next() {
            match t.kind {
                TokKind::Punct(b'{') => depth += 1,
                TokKind::Punct(b'}') => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(t);
                    }
                }
                _ => {}
            }
        }
        Err(self.err_at(None, &format!("`}}` closing {what}")))
    }

    fn line_end_after(&self, off: usize) -> usize {
        match self.src.get(off..).and_then(|s| s.find('\n')) {
            Some(k) => off + k + 1,
            None => self.src.len(),
        }
    }

    fn file(&mut self) -> Result<PtxFile<'a>, ParseError> {
        let mut f = PtxFile {
            src: self.src,
            version: (0, 0),
            target: Vec::new(),
            address_size: 64,
            header_end: 0,
            version_span: 0..0,
            target_span: 0..0,
            files: BTreeMap::new(),
            globals: Vec::new(),
            functions: Vec::new(),
        };
        // Header.
        if !self.is_directive(".version") {
            return Err(self.err("`.version`"));
        }
        self.pos += 1;
        let vt = self.peek();
        let v = self.expect_kind(TokKind::Float, "a version number such as `8.0`")?;
        let (maj, min) = self.text(v).split_once('.').unwrap_or(("", ""));
        f.version = match (maj.parse(), min.parse()) {
            (Ok(a), Ok(b)) => (a, b),
            _ => return Err(self.err_at(vt, "a version number such as `8.0`")),
        };
        f.version_span = v.start..v.end;
        if !self.is_directive(".target") {
            return Err(self.err("`.target`"));
        }
        self.pos += 1;
        loop {
            let t = self.expect_kind(TokKind::Ident, "a target such as `sm_90`")?;
            if f.target.is_empty() {
                f.target_span = t.start..t.end;
            }
            f.target_span.end = t.end;
            f.target.push(self.text(t).to_string());
            if self.is_punct(b',') {
                self.pos += 1;
            } else {
                break;
            }
        }
        f.header_end = self.line_end_after(f.target_span.end);
        if self.is_directive(".address_size") {
            self.pos += 1;
            let t = self.peek();
            f.address_size = self.expect_u32("`32` or `64`")?;
            if !matches!(f.address_size, 32 | 64) {
                return Err(self.err_at(t, "`32` or `64`"));
            }
            f.header_end = self.line_end_after(t.map_or(0, |t| t.end));
        }
        // Module scope.
        while let Some(t) = self.peek() {
            self.module_item(t, &mut f)?;
        }
        Ok(f)
    }

    fn module_item(&mut self, t: Token, f: &mut PtxFile<'a>) -> Result<(), ParseError> {
        let text = self.text(t);
        if t.kind == TokKind::Ident
            && self
                .peek_at(1)
                .is_some_and(|c| c.kind == TokKind::Punct(b':'))
            && self
                .peek_at(2)
                .is_some_and(|d| d.kind == TokKind::Directive && self.text(d) == ".callprototype")
        {
            // `proto: .callprototype (...) _ (...);`
            self.pos += 2;
            self.skip_to_semi("`.callprototype`")?;
            return Ok(());
        }
        if t.kind != TokKind::Directive {
            return Err(self.err("a module-scope directive (`.entry`, `.func`, `.global`, ...)"));
        }
        match text {
            ".file" => {
                self.pos += 1;
                let idx = self.expect_u32("a file index")?;
                let s = self.expect_kind(TokKind::Str, "a file name string")?;
                let mut path = unquote(self.text(s));
                // A second string: `.file 1 "dir" "name"`.
                if let Some(n) = self.peek().filter(|t| t.kind == TokKind::Str) {
                    self.pos += 1;
                    path = format!("{}/{}", path.trim_end_matches('/'), unquote(self.text(n)));
                }
                // Optional `, timestamp, size`.
                while self.is_punct(b',') {
                    self.pos += 1;
                    self.expect_kind(TokKind::Int, "a timestamp or file size")?;
                }
                f.files.insert(idx, path);
            }
            ".section" => {
                self.pos += 1;
                self.expect_kind(TokKind::Directive, "a section name such as `.debug_info`")?;
                self.skip_braces("the section")?;
            }
            ".pragma" | ".alias" => {
                self.pos += 1;
                self.skip_to_semi(text)?;
            }
            ".loc" => {
                self.pos += 1;
                self.loc_args()?;
            }
            ".version" | ".target" | ".address_size" => {
                return Err(self.err("a module-scope declaration (the header comes once, first)"));
            }
            _ => {
                // Linkage, then a function or a variable.
                let start = t.start;
                let mut linkage = None;
                while let Some(l) = self.peek() {
                    let lt = self.text(l);
                    if l.kind == TokKind::Directive
                        && matches!(lt, ".visible" | ".extern" | ".weak" | ".common")
                    {
                        linkage = Some(lt.to_string());
                        self.pos += 1;
                    } else {
                        break;
                    }
                }
                match self.peek() {
                    Some(k) if k.kind == TokKind::Directive => {
                        let kt = self.text(k);
                        if kt == ".entry" || kt == ".func" {
                            let func = self.function(start, linkage)?;
                            f.functions.push(func);
                        } else if kt == ".callprototype" {
                            self.skip_to_semi("`.callprototype`")?;
                        } else {
                            let g = self.global(start, linkage)?;
                            f.globals.push(g);
                        }
                    }
                    k => {
                        return Err(self.err_at(
                            k,
                            "`.entry`, `.func` or a variable declaration after the linkage",
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    fn global(&mut self, start: usize, linkage: Option<String>) -> Result<PtxGlobal, ParseError> {
        let first = self.peek();
        let space = first.map(|t| self.text(t).to_string()).unwrap_or_default();
        if !matches!(
            space.as_str(),
            ".global" | ".const" | ".shared" | ".local" | ".tex" | ".param"
        ) && !space.starts_with(".shared::")
        {
            return Err(self.err("a module-scope directive (`.entry`, `.func`, `.global`, `.const`, `.shared`, `.file`, `.section`, ...)"));
        }
        let line = first.map_or(0, |t| t.line);
        let mut name = None;
        let mut depth = 0i32;
        let semi = loop {
            let Some(t) = self.next() else {
                return Err(self.err_at(None, "`;` ending the variable declaration"));
            };
            match t.kind {
                TokKind::Ident if name.is_none() && depth == 0 => {
                    name = Some(self.text(t).to_string())
                }
                TokKind::Punct(b'{' | b'(' | b'[') => depth += 1,
                TokKind::Punct(b'}' | b')' | b']') => depth -= 1,
                TokKind::Punct(b';') if depth <= 0 => break t,
                _ => {}
            }
        };
        let Some(name) = name else {
            return Err(ParseError {
                line,
                col: first.map_or(0, |t| t.col),
                what: "found a variable declaration without a name, expected a name".into(),
            });
        };
        Ok(PtxGlobal {
            name,
            space,
            linkage,
            span: start..semi.end,
            line,
        })
    }

    /// `file line col [, function_name name] [, inlined_at file line col]`.
    fn loc_args(&mut self) -> Result<Loc, ParseError> {
        let file = self.expect_u32("a `.loc` file index")?;
        let line = self.expect_u32("a `.loc` line")?;
        let col = self.expect_u32("a `.loc` column")?;
        let mut inlined_at = None;
        while self.is_punct(b',') {
            self.pos += 1;
            let k = self.expect_kind(TokKind::Ident, "`function_name` or `inlined_at`")?;
            match self.text(k) {
                "function_name" => {
                    self.expect_kind(TokKind::Ident, "a function name label")?;
                    if self.is_punct(b'+') {
                        self.pos += 1;
                        self.expect_kind(TokKind::Int, "an offset")?;
                    }
                }
                "inlined_at" => {
                    let a = self.expect_u32("a file index")?;
                    let b = self.expect_u32("a line")?;
                    let c = self.expect_u32("a column")?;
                    inlined_at = Some((a, b, c));
                }
                _ => return Err(self.err_at(Some(k), "`function_name` or `inlined_at`")),
            }
        }
        Ok(Loc {
            file,
            line,
            col,
            inlined_at,
        })
    }

    fn function(
        &mut self,
        start: usize,
        linkage: Option<String>,
    ) -> Result<PtxFunction<'a>, ParseError> {
        let kt = self.next().unwrap_or(Token {
            kind: TokKind::Directive,
            start,
            end: start,
            line: 0,
            col: 0,
        });
        let kind = if self.text(kt) == ".entry" {
            FuncKind::Entry
        } else {
            FuncKind::Func
        };
        let mut ret_params = Vec::new();
        if kind == FuncKind::Func && self.is_punct(b'(') {
            ret_params = self.param_list()?.0;
        }
        let name_tok = self.expect_kind(TokKind::Ident, "a function name")?;
        let name = self.text(name_tok);
        let (params, params_close) = if self.is_punct(b'(') {
            let (p, close) = self.param_list()?;
            (p, Some(close))
        } else {
            (Vec::new(), None)
        };
        let mut directives = Vec::new();
        loop {
            let Some(t) = self.peek() else {
                return Err(self.err("`{` or `;` after the function header"));
            };
            let tt = self.text(t);
            if t.kind == TokKind::Directive && (FUNC_DIRECTIVES.contains(&tt) || tt == ".pragma") {
                self.pos += 1;
                if tt == ".pragma" {
                    self.skip_to_semi("`.pragma`")?;
                    continue;
                }
                let mut values = Vec::new();
                while let Some(n) = self.peek().filter(|n| n.kind == TokKind::Int) {
                    self.pos += 1;
                    values.push(
                        parse_int(self.text(n))
                            .and_then(|v| u64::try_from(v).ok())
                            .unwrap_or(0),
                    );
                    if self.is_punct(b',') {
                        self.pos += 1;
                    } else {
                        break;
                    }
                }
                directives.push(PerfDirective {
                    name: tt.to_string(),
                    values,
                });
            } else {
                break;
            }
        }
        let mut func = PtxFunction {
            name,
            kind,
            linkage,
            definition: false,
            ret_params,
            params,
            name_span: name_tok.start..name_tok.end,
            params_close,
            directives,
            body: None,
            statements: Vec::new(),
            span: start..start,
            error: None,
            line: kt.line,
        };
        match self.peek() {
            Some(t) if t.kind == TokKind::Punct(b';') => {
                self.pos += 1;
                func.span.end = t.end;
            }
            Some(t) if t.kind == TokKind::Punct(b'{') => {
                self.pos += 1;
                let open_pos = self.pos;
                self.loc = None;
                let close = match self.body(&mut func.statements) {
                    Ok(close) => close,
                    Err(e) if self.lenient => {
                        self.pos = open_pos - 1;
                        let close = self.skip_body().map_err(|_| e.clone())?;
                        tracing::debug!(function = name, error = %e, "function body not parsed");
                        func.statements.clear();
                        func.error = Some(e);
                        close
                    }
                    Err(e) => return Err(e),
                };
                func.definition = true;
                func.body = Some(t.start..close.end);
                func.span.end = close.end;
            }
            t => return Err(self.err_at(t, "`{` or `;` after the function header")),
        }
        Ok(func)
    }

    /// Skips a body by matching braces (the current token is its `{`); fails on the end of
    /// the text or a module-scope directive before the closing `}`.
    fn skip_body(&mut self) -> Result<Token, ParseError> {
        self.expect_punct(b'{')?;
        let mut depth = 1u32;
        while let Some(t) = self.next() {
            match t.kind {
                TokKind::Punct(b'{') => depth += 1,
                TokKind::Punct(b'}') => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(t);
                    }
                }
                TokKind::Directive
                    if matches!(self.text(t), ".entry" | ".func" | ".visible" | ".weak") =>
                {
                    return Err(self.err_at(Some(t), "`}` closing the function body"));
                }
                _ => {}
            }
        }
        Err(self.err_at(None, "`}` closing the function body"))
    }

    /// `( param, ... )`; returns the parameters and the offset of `)`.
    fn param_list(&mut self) -> Result<(Vec<PtxParam>, usize), ParseError> {
        self.expect_punct(b'(')?;
        let mut params = Vec::new();
        if let Some(t) = self.peek().filter(|t| t.kind == TokKind::Punct(b')')) {
            self.pos += 1;
            return Ok((params, t.start));
        }
        loop {
            params.push(self.param()?);
            match self.next() {
                Some(t) if t.kind == TokKind::Punct(b',') => {}
                Some(t) if t.kind == TokKind::Punct(b')') => return Ok((params, t.start)),
                t => return Err(self.err_at(t, "`,` or `)` in the parameter list")),
            }
        }
    }

    fn param(&mut self) -> Result<PtxParam, ParseError> {
        let first = self.peek();
        let start = first.map_or(0, |t| t.start);
        let mut ty = String::new();
        let mut align = None;
        let mut ptr = String::new();
        let mut in_ptr = false;
        while let Some(t) = self.peek().filter(|t| t.kind == TokKind::Directive) {
            self.pos += 1;
            let d = self.text(t);
            // `.ptr .global .align 16`, also written `.ptr.global.align 16`.
            if d == ".ptr" || d.starts_with(".ptr.") {
                in_ptr = true;
            }
            if in_ptr {
                if !ptr.is_empty() {
                    ptr.push(' ');
                }
                ptr.push_str(d);
                if d == ".align" || d.ends_with(".align") {
                    let n = self.expect_u32("an alignment")?;
                    ptr.push_str(&format!(" {n}"));
                }
                continue;
            }
            if d == ".align" {
                align = Some(self.expect_u32("an alignment")?);
            } else if type_size(d).is_some() {
                ty = d.to_string();
            }
        }
        let name_tok = self.expect_kind(TokKind::Ident, "a parameter name")?;
        let mut end = name_tok.end;
        let mut count = 1u32;
        while self.is_punct(b'[') {
            self.pos += 1;
            if let Some(close) = self.peek().filter(|t| t.kind == TokKind::Punct(b']')) {
                self.pos += 1;
                count = 0;
                end = close.end;
                continue;
            }
            let n = self.expect_u32("an array length")?;
            let close = self.expect_punct(b']')?;
            count = count.saturating_mul(n);
            end = close.end;
        }
        if ty.is_empty() {
            return Err(self.err_at(first, "a parameter with a type such as `.u64`"));
        }
        let elem = type_size(&ty).unwrap_or(1);
        Ok(PtxParam {
            name: self.text(name_tok).to_string(),
            size: elem.saturating_mul(count),
            align: align.unwrap_or(elem),
            ty,
            ptr,
            span: start..end,
        })
    }

    /// Statements up to the `}` closing the body (whose `{` is consumed). Returns the `}`.
    fn body(&mut self, out: &mut Vec<PtxStatement>) -> Result<Token, ParseError> {
        let body_line = self
            .toks
            .get(self.pos.saturating_sub(1))
            .map_or(0, |t| t.line);
        let mut depth = 1u32;
        self.bare_regs.clear();
        self.bare_regs.push(Vec::new());
        loop {
            let Some(t) = self.peek() else {
                return Err(self.err("`}` closing the function body"));
            };
            match t.kind {
                TokKind::Punct(b'{') => {
                    self.pos += 1;
                    depth += 1;
                    self.bare_regs.push(Vec::new());
                }
                TokKind::Punct(b'}') => {
                    self.pos += 1;
                    depth -= 1;
                    self.bare_regs.pop();
                    if depth == 0 {
                        return Ok(t);
                    }
                }
                TokKind::Punct(b';') => {
                    // An empty statement.
                    self.pos += 1;
                }
                TokKind::Directive => {
                    let d = self.text(t);
                    if matches!(
                        d,
                        ".entry" | ".func" | ".visible" | ".weak" | ".version" | ".target"
                    ) {
                        return Err(self.err(&format!(
                            "`}}` closing the function body that opened on line {body_line} \
                             (`{d}` is module-scope)"
                        )));
                    }
                    self.pos += 1;
                    let end = if d == ".loc" {
                        let loc = self.loc_args()?;
                        self.loc = Some(loc);
                        self.toks[self.pos - 1].end
                    } else if d == ".file" {
                        self.expect_u32("a file index")?;
                        let s = self.expect_kind(TokKind::Str, "a file name string")?;
                        s.end
                    } else if d == ".section" {
                        self.expect_kind(TokKind::Directive, "a section name")?;
                        self.skip_braces("the section")?.end
                    } else {
                        let from = self.pos;
                        let semi = self.skip_to_semi(&format!("`{d}`"))?;
                        if d == ".reg" {
                            self.declare_bare_regs(from, self.pos - 1);
                        }
                        semi.end
                    };
                    out.push(PtxStatement {
                        kind: StmtKind::Directive,
                        span: t.start..end,
                        line: t.line,
                        depth,
                        guard: None,
                        opcode: d.to_string(),
                        operands: Vec::new(),
                        loc: None,
                    });
                }
                TokKind::Ident
                    if self
                        .peek_at(1)
                        .is_some_and(|n| n.kind == TokKind::Punct(b':')) =>
                {
                    // A label, or `name: .callprototype ...;`.
                    self.pos += 2;
                    let colon = self.toks[self.pos - 1];
                    if self.is_directive(".callprototype") {
                        let semi = self.skip_to_semi("`.callprototype`")?;
                        out.push(PtxStatement {
                            kind: StmtKind::Directive,
                            span: t.start..semi.end,
                            line: t.line,
                            depth,
                            guard: None,
                            opcode: ".callprototype".into(),
                            operands: Vec::new(),
                            loc: None,
                        });
                    } else {
                        out.push(PtxStatement {
                            kind: StmtKind::Label,
                            span: t.start..colon.end,
                            line: t.line,
                            depth,
                            guard: None,
                            opcode: self.text(t).to_string(),
                            operands: Vec::new(),
                            loc: None,
                        });
                    }
                }
                TokKind::Ident | TokKind::Punct(b'@') => {
                    let st = self.instruction(depth)?;
                    out.push(st);
                }
                _ => return Err(self.err("an instruction, a label, a directive, `{` or `}`")),
            }
        }
    }

    fn instruction(&mut self, depth: u32) -> Result<PtxStatement, ParseError> {
        let first = self.peek();
        let start = first.map_or(0, |t| t.start);
        let mut guard = None;
        if self.is_punct(b'@') {
            self.pos += 1;
            let negated = self.is_punct(b'!');
            if negated {
                self.pos += 1;
            }
            let r = self.expect_kind(TokKind::Ident, "a predicate register after `@`")?;
            guard = Some(Guard {
                pred: self.text(r).to_string(),
                negated,
            });
        }
        let op = self.expect_kind(TokKind::Ident, "an opcode")?;
        let opcode = self.text(op).to_string();
        // Operands: the tokens up to `;`, split at top-level commas.
        let ops_start = self.pos;
        let mut depth_b = 0i32;
        let semi = loop {
            let Some(t) = self.next() else {
                return Err(self.err_at(None, &format!("`;` ending `{opcode}`")));
            };
            match t.kind {
                TokKind::Punct(b'{' | b'(' | b'[') => depth_b += 1,
                TokKind::Punct(b'}' | b')' | b']') => {
                    depth_b -= 1;
                    if depth_b < 0 {
                        return Err(self.err_at(Some(t), &format!("`;` ending `{opcode}`")));
                    }
                }
                TokKind::Punct(b';') if depth_b == 0 => break t,
                TokKind::Directive if depth_b == 0 => {
                    return Err(self.err_at(Some(t), &format!("`;` ending `{opcode}`")));
                }
                _ => {}
            }
        };
        let toks = &self.toks[ops_start..self.pos - 1];
        let operands = split_commas(toks)
            .into_iter()
            .filter(|g| !g.is_empty())
            .map(|g| self.operand(g))
            .collect();
        Ok(PtxStatement {
            kind: StmtKind::Instruction,
            span: start..semi.end,
            line: first.map_or(0, |t| t.line),
            depth,
            guard,
            opcode,
            operands,
            loc: self.loc.clone(),
        })
    }

    /// Records the names of `.reg` declarations (tokens `from..to`) that lack the `%`.
    fn declare_bare_regs(&mut self, from: usize, to: usize) {
        let mut angle = 0i32;
        let mut names = Vec::new();
        for t in self.toks.get(from..to).unwrap_or(&[]) {
            match t.kind {
                TokKind::Punct(b'<') => angle += 1,
                TokKind::Punct(b'>') => angle -= 1,
                TokKind::Ident if angle == 0 => {
                    let name = t.text(self.src);
                    if !name.starts_with('%') {
                        names.push(name);
                    }
                }
                _ => {}
            }
        }
        if let Some(scope) = self.bare_regs.last_mut() {
            scope.extend(names);
        }
    }

    fn is_bare_reg(&self, name: &str) -> bool {
        self.bare_regs.iter().any(|s| s.contains(&name))
    }

    fn operand(&self, g: &[Token]) -> Operand {
        let raw = || {
            let (a, b) = (
                g.first().map_or(0, |t| t.start),
                g.last().map_or(0, |t| t.end),
            );
            Operand::Other(self.src.get(a..b).unwrap_or("").to_string())
        };
        let kinds: Vec<TokKind> = g.iter().map(|t| t.kind).collect();
        match kinds.as_slice() {
            [TokKind::Ident] => {
                let s = self.text(g[0]);
                if s == "_" {
                    Operand::Sink
                } else if s.starts_with('%') || self.is_bare_reg(s) {
                    Operand::Reg(s.to_string())
                } else {
                    Operand::Symbol(s.to_string())
                }
            }
            [TokKind::Punct(b'!'), TokKind::Ident] => Operand::NotReg(self.text(g[1]).to_string()),
            [TokKind::Int] => parse_int(self.text(g[0])).map_or_else(raw, Operand::Int),
            [TokKind::Punct(b'-'), TokKind::Int] => {
                parse_int(self.text(g[1])).map_or_else(raw, |v| Operand::Int(-v))
            }
            [TokKind::Float] => Operand::Float(self.text(g[0]).to_string()),
            [TokKind::Punct(b'-'), TokKind::Float] => {
                Operand::Float(format!("-{}", self.text(g[1])))
            }
            [TokKind::Punct(b'['), .., TokKind::Punct(b']')] => {
                self.address(&g[1..g.len() - 1]).unwrap_or_else(raw)
            }
            [TokKind::Punct(b'{'), .., TokKind::Punct(b'}')] => Operand::Vector(
                split_commas(&g[1..g.len() - 1])
                    .into_iter()
                    .filter(|x| !x.is_empty())
                    .map(|x| self.operand(x))
                    .collect(),
            ),
            [TokKind::Punct(b'('), .., TokKind::Punct(b')')] => Operand::List(
                split_commas(&g[1..g.len() - 1])
                    .into_iter()
                    .filter(|x| !x.is_empty())
                    .map(|x| self.operand(x))
                    .collect(),
            ),
            _ => raw(),
        }
    }

    /// The inside of `[...]`: `base`, `base+off`, `base+-off`, `base-off`, `off`.
    fn address(&self, g: &[Token]) -> Option<Operand> {
        let (base, rest) = match g.first() {
            Some(t) if t.kind == TokKind::Ident => (Some(self.text(*t).to_string()), &g[1..]),
            _ => (None, g),
        };
        if rest.is_empty() {
            return base.map(|b| Operand::Address {
                base: Some(b),
                offset: 0,
            });
        }
        let mut neg = false;
        let mut i = 0;
        while let Some(t) = rest.get(i) {
            match t.kind {
                TokKind::Punct(b'+') => {}
                TokKind::Punct(b'-') => neg = !neg,
                _ => break,
            }
            i += 1;
        }
        if (base.is_some() && i == 0) || i + 1 != rest.len() || rest[i].kind != TokKind::Int {
            return None;
        }
        let v = parse_int(self.text(rest[i]))?;
        Some(Operand::Address {
            base,
            offset: if neg { -v } else { v },
        })
    }
}

/// Splits tokens at commas outside brackets.
fn split_commas(toks: &[Token]) -> Vec<&[Token]> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut from = 0;
    for (k, t) in toks.iter().enumerate() {
        match t.kind {
            TokKind::Punct(b'{' | b'(' | b'[') => depth += 1,
            TokKind::Punct(b'}' | b')' | b']') => depth -= 1,
            TokKind::Punct(b',') if depth == 0 => {
                out.push(&toks[from..k]);
                from = k + 1;
            }
            _ => {}
        }
    }
    out.push(&toks[from..]);
    out
}

fn unquote(s: &str) -> String {
    let inner = s
        .strip_prefix('"')
        .and_then(|x| x.strip_suffix('"'))
        .unwrap_or(s);
    let mut out = String::with_capacity(inner.len());
    let mut it = inner.chars();
    while let Some(c) = it.next() {
        if c == '\\' {
            if let Some(n) = it.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = r#"//
.version 8.0
.target sm_90a, debug
.address_size 64

.file 1 "/a b/k.cu", 1700000000, 1234
.extern .func (.param .b32 func_retval0) vprintf(.param .b64 a, .param .b64 b);
.global .align 8 .b8 table[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
.extern .shared .align 16 .b8 dyn[];

.visible .entry k(
	.param .u64 .ptr .global .align 16 k_param_0,
	.param .align 8 .b8 k_param_1[24],
	.param .u32 k_param_2
)
.maxntid 128, 1, 1
.minnctapersm 2
{
	.reg .pred %p<3>;
	.reg .b64 %rd<5>;
	.loc 1 5 3
	ld.param.u64 %rd1, [k_param_0];
	@!%p1 bra $L__BB0_2;
	{ // callseq 0, 0
	.param .b64 param0;
	st.param.b64 [param0+0], %rd1;
	.param .b32 retval0;
	call.uni (retval0), vprintf, (param0, param1);
	}
$L__BB0_2:
	.loc 1 7 1, function_name $L__info_string0, inlined_at 1 9 2
	ld.global.nc.v2.f32 {%f1, _}, [%rd1+-8];
	setp.lt.s32 %p1|%p2, %r1, -3;
	@%p2 ret;
	exit;
}
.section .debug_str
{
$L__info_string0:
.b8 95,0
}
"#;

    #[test]
    fn small_module() {
        let f = parse(SMALL).unwrap();
        assert_eq!(f.version, (8, 0));
        assert_eq!(f.target, vec!["sm_90a", "debug"]);
        assert_eq!(f.sm(), Some(90));
        assert_eq!(&SMALL[f.version_span.clone()], "8.0");
        assert_eq!(&SMALL[f.target_span.clone()], "sm_90a, debug");
        assert!(SMALL[f.header_end..].starts_with("\n.file"));
        assert_eq!(f.files.get(&1).map(String::as_str), Some("/a b/k.cu"));
        assert_eq!(
            f.globals
                .iter()
                .map(|g| g.name.as_str())
                .collect::<Vec<_>>(),
            vec!["table", "dyn"]
        );
        assert_eq!(f.functions.len(), 2);
        let v = &f.functions[0];
        assert!(!v.definition);
        assert_eq!(v.ret_params[0].name, "func_retval0");
        let k = &f.functions[1];
        assert_eq!(k.kind, FuncKind::Entry);
        assert_eq!(k.linkage.as_deref(), Some(".visible"));
        let p: Vec<_> = k
            .params
            .iter()
            .map(|p| (p.name.as_str(), p.ty.as_str(), p.size, p.align))
            .collect();
        assert_eq!(
            p,
            vec![
                ("k_param_0", ".u64", 8, 8),
                ("k_param_1", ".b8", 24, 8),
                ("k_param_2", ".u32", 4, 4)
            ]
        );
        assert_eq!(k.params[0].ptr, ".ptr .global .align 16");
        let old = parse(
            ".version 6.0\n.target sm_60\n.entry e(.param .u64 .ptr.global.align 16 p) { ret; }",
        )
        .unwrap();
        let p = &old.functions[0].params[0];
        assert_eq!((p.ptr.as_str(), p.align), (".ptr.global.align 16", 8));
        assert_eq!(&SMALL[k.params_close.unwrap()..][..1], ")");
        assert_eq!(k.directives[0].name, ".maxntid");
        assert_eq!(k.directives[0].values, vec![128, 1, 1]);
        let body = k.body.clone().unwrap();
        assert!(SMALL[body.clone()].starts_with('{') && SMALL[body].ends_with('}'));
        let ins: Vec<_> = k
            .statements
            .iter()
            .filter(|s| s.kind == StmtKind::Instruction)
            .collect();
        assert_eq!(
            ins[0].operands[1],
            Operand::Address {
                base: Some("k_param_0".into()),
                offset: 0
            }
        );
        assert_eq!(ins[0].loc.as_ref().map(|l| l.line), Some(5));
        assert_eq!(
            ins[1].guard,
            Some(Guard {
                pred: "%p1".into(),
                negated: true
            })
        );
        let call = ins.iter().find(|s| s.base_opcode() == "call").unwrap();
        assert_eq!(call.depth, 2);
        assert_eq!(
            call.operands[0],
            Operand::List(vec![Operand::Symbol("retval0".into())])
        );
        let ld = ins
            .iter()
            .find(|s| s.opcode == "ld.global.nc.v2.f32")
            .unwrap();
        assert_eq!(
            ld.operands[0],
            Operand::Vector(vec![Operand::Reg("%f1".into()), Operand::Sink])
        );
        assert_eq!(
            ld.operands[1],
            Operand::Address {
                base: Some("%rd1".into()),
                offset: -8
            }
        );
        assert_eq!(ld.loc.as_ref().unwrap().inlined_at, Some((1, 9, 2)));
        let setp = ins.iter().find(|s| s.base_opcode() == "setp").unwrap();
        assert_eq!(setp.operands[0], Operand::Other("%p1|%p2".into()));
        assert_eq!(setp.operands[2], Operand::Int(-3));
        let rets: Vec<_> = ins.iter().filter(|s| s.is_return()).collect();
        assert_eq!(rets.len(), 2);
        assert_eq!(&SMALL[rets[0].span.clone()], "@%p2 ret;");
        assert!(
            k.statements
                .iter()
                .any(|s| s.kind == StmtKind::Label && s.opcode == "$L__BB0_2")
        );
    }

    #[test]
    fn module_scope_odds() {
        let src = ".version 8.0\n.target sm_90\n.pragma \"nounroll\";\nproto: .callprototype (.param .b32 _) _ (.param .b32 _);\n.global .attribute(.managed) .align 4 .u32 m;\n.common .global .align 8 .u64 env;\n";
        let f = parse(src).unwrap();
        assert_eq!(f.header_end, src.find(".pragma").unwrap());
        let g: Vec<_> = f
            .globals
            .iter()
            .map(|g| (g.name.as_str(), g.linkage.as_deref()))
            .collect();
        assert_eq!(g, vec![("m", None), ("env", Some(".common"))]);
    }

    #[test]
    fn errors() {
        let e = parse(".version 8.0\n.target sm_90\n.entry k(\n.param .u64 a\n{\n").unwrap_err();
        assert_eq!(e.line, 5, "{e}");
        let e = parse(".version 8.0\n.target sm_90\n.entry k()\n{\n ret;\n").unwrap_err();
        assert_eq!(e.line, 6, "{e}");
        assert!(e.what.contains("end of the text"), "{e}");
        let e = parse(".version 8.0\n.target sm_90\nfoo bar;\n").unwrap_err();
        assert_eq!((e.line, e.col), (3, 1), "{e}");
        let e = parse("hello").unwrap_err();
        assert!(e.what.contains("`.version`"), "{e}");
        let e = parse(".version 8.0\n.target sm_90\n.entry k()\n{\n ret;\n}\n}\n").unwrap_err();
        assert_eq!(e.line, 7, "{e}");
    }
}
