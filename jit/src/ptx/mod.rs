//! A small PTX IR: a [`Module`] of [`Function`]s, each a list of [`Stmt`]s over virtual
//! registers ([`Reg`]), plus pre-written prelude text. Shared by the lowering, the passes and
//! the printer ([`crate::emit`]).
//!
//! | item         | printed as                                        |
//! |--------------|---------------------------------------------------|
//! | [`Reg`]      | `%p3` (pred), `%rs3` (b16), `%r3` (b32), `%rd3` (b64) |
//! | [`Operand`]  | register, signed decimal immediate, `[%rd4+8]`, label, symbol |
//! | [`Inst`]     | `@%p1 add.s64 %rd0, %rd0, 5;` (guard, opcode with types, operands) |
//! | [`Stmt::Call`] | a `{ .param ...; call.uni (ret), f, (args); }` block      |
//!
//! Registers are SSA-like temporaries; ptxas allocates the real registers. The eBPF
//! registers r0..r10 of a lowered function are `%rd0..%rd10` ([`Function::ebpf_reg`]).
//!
//! Foreign PTX (what nvcc, NVRTC, Numba, Triton or CuPy produced) is not lowered into this
//! IR: [`parse`] reads it into a span-keeping [`parse::PtxFile`], for passes that splice
//! text into it ([`crate::passes::probe`]).

pub mod parse;

/// A register class (PTX register type).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegClass {
    /// `.pred`
    Pred,
    /// `.b16`
    B16,
    /// `.b32`
    B32,
    /// `.b64`
    B64,
}

impl RegClass {
    /// The printed prefix of registers of this class.
    pub fn prefix(self) -> &'static str {
        match self {
            RegClass::Pred => "%p",
            RegClass::B16 => "%rs",
            RegClass::B32 => "%r",
            RegClass::B64 => "%rd",
        }
    }

    /// The PTX type of the declaration.
    pub fn ty(self) -> &'static str {
        match self {
            RegClass::Pred => ".pred",
            RegClass::B16 => ".b16",
            RegClass::B32 => ".b32",
            RegClass::B64 => ".b64",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A virtual register: its class in the top 2 bits, its number (within the class) in the
/// low 30, so that operands, and so IR statements, stay small.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reg(u32);

impl Reg {
    /// Register `n` (below 2^30) of class `class`.
    pub fn new(class: RegClass, n: u32) -> Reg {
        debug_assert!(n < 1 << 30);
        Reg(((class as u32) << 30) | (n & ((1 << 30) - 1)))
    }

    /// Its class.
    pub fn class(self) -> RegClass {
        match self.0 >> 30 {
            0 => RegClass::Pred,
            1 => RegClass::B16,
            2 => RegClass::B32,
            _ => RegClass::B64,
        }
    }

    /// Its number within the class.
    pub fn n(self) -> u32 {
        self.0 & ((1 << 30) - 1)
    }
}

/// A label inside one function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Label(pub u32);

/// An instruction operand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Operand {
    /// A register.
    Reg(Reg),
    /// An integer immediate, printed in signed decimal.
    Imm(i64),
    /// A memory address `[base+off]`.
    Addr(Reg, i32),
    /// A memory address `[sym+off]` (locals, params). The name is behind a thin reference
    /// (`&"stack"`) to keep operands, and so statements, small: lowering and printing move
    /// them by value.
    SymAddr(&'static &'static str, i32),
    /// A label.
    Label(Label),
    /// A symbol or special register (`%tid.x`, a local array name), thin as in `SymAddr`.
    Sym(&'static &'static str),
    /// A vector `{a, b}` (for `mov.b64 {lo, hi}`).
    Vec2(Reg, Reg),
}

impl From<Reg> for Operand {
    fn from(r: Reg) -> Self {
        Operand::Reg(r)
    }
}

impl From<i64> for Operand {
    fn from(v: i64) -> Self {
        Operand::Imm(v)
    }
}

/// One PTX instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inst {
    /// `@p` / `@!p` guard.
    pub guard: Option<(Reg, bool)>,
    /// Opcode with all its modifiers, e.g. `add.s64`, `atom.sys.global.add.u64`.
    pub op: &'static str,
    /// Operands, destination first.
    pub args: Args,
}

/// Up to four operands, stored inline (no allocation per instruction).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Args {
    len: u8,
    items: [Operand; 4],
}

impl std::ops::Deref for Args {
    type Target = [Operand];
    fn deref(&self) -> &[Operand] {
        &self.items[..self.len as usize]
    }
}

impl<const N: usize> From<[Operand; N]> for Args {
    fn from(a: [Operand; N]) -> Self {
        const { assert!(N <= 4, "at most 4 operands") };
        let mut items = [
            Operand::Imm(0),
            Operand::Imm(0),
            Operand::Imm(0),
            Operand::Imm(0),
        ];
        for (slot, v) in items.iter_mut().zip(a) {
            *slot = v;
        }
        Args {
            len: N as u8,
            items,
        }
    }
}

/// One statement of a function body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stmt {
    /// An instruction.
    Inst(Inst),
    /// A label definition.
    Label(Label),
    /// A call of a `.func` with `.b64` parameters and an optional `.b64` result.
    Call {
        /// The callee.
        func: String,
        /// Argument registers (all `.b64`).
        args: Vec<Reg>,
        /// Result register (`.b64`).
        ret: Option<Reg>,
    },
    /// A line of text copied as is (comments).
    Raw(String),
    /// A helper's body inlined at a call site: a `{ }` block of text reading `args` (the
    /// caller's registers) and writing `ret` (see [`crate::prelude::inline_block`]).
    Inline {
        /// The block, printed as is.
        text: String,
        /// Caller registers the block reads.
        args: Vec<Reg>,
        /// Caller register the block writes.
        ret: Reg,
    },
}

/// Whether a function is a kernel or a device function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FuncKind {
    /// `.entry`: launchable.
    Entry,
    /// `.func`: callable.
    Func,
}

/// A `.local` array declared in a function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalArray {
    /// Symbol name.
    pub name: String,
    /// Alignment in bytes.
    pub align: u32,
    /// Size in bytes.
    pub size: u32,
}

/// A PTX function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    /// Name.
    pub name: String,
    /// `.entry` or `.func`.
    pub kind: FuncKind,
    /// Whether it is `.visible` (exported from the module).
    pub visible: bool,
    /// Parameter names (all `.b64`/`.u64`).
    pub params: Vec<String>,
    /// Name of the `.b64` return parameter, if any.
    pub ret: Option<String>,
    /// `.local` arrays.
    pub locals: Vec<LocalArray>,
    /// The body.
    pub body: Vec<Stmt>,
    /// An `.entry` that continues with another function's body, inlined (see [`InlineBody`]).
    pub inline: Option<InlineBody>,
    next_reg: [u32; 4],
    next_label: u32,
    /// Labels placed with [`Function::place`], and those [`Function::bra`] refers to.
    placed: Vec<u32>,
    branched: Vec<bool>,
}

/// How an `.entry` runs a `.func` of the same module inline: after the entry's own statements
/// (which set up the registers named here) comes the function's body, printed once and
/// copied, with its parameter read and its return value store rewritten:
///
/// | in the function                     | in the entry                                       |
/// |-------------------------------------|----------------------------------------------------|
/// | `ld.param.b64 %rd1, [ctx]`          | `mov.b64 %rd1, ctx`                                 |
/// | `ld.u64 %rdX, [%rd1+8k]` before any branch, label, call or write of `%rd1` | `mov.b64 %rdX, fields[k]` (the ctx word itself) |
/// | `st.param.b64 [ret0], %rd0`         | `@!no_res st.u64 [slot], %rd0`                     |
///
/// ptxas does not inline calls, and a call plus a ctx in local memory read back through a
/// generic pointer cost several times the work of a small program (see
/// `bench/results/jit_gpu_bench.md`). The entry's registers and labels are numbered after
/// the function's ([`Function::continue_numbering`]), so the two bodies never collide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InlineBody {
    /// Index of the inlined function in [`Module::functions`]; it is printed before the entry.
    pub func: usize,
    /// Register holding the generic address of the job ctx.
    pub ctx: Reg,
    /// Registers holding the ctx's ten 8-byte words (`JobCtx` order).
    pub fields: [Reg; 10],
    /// Address of the thread's result slot.
    pub slot: Reg,
    /// True when there is no result array.
    pub no_res: Reg,
    /// For a chunk loop ([`crate::JitOptions::chunk_loop`]): the statements printed after
    /// the body, which starts at the loop head; every `ret` of the body becomes a branch to
    /// `next`, the first of these statements.
    pub looped: Option<LoopTail>,
    /// The copied body's `.global` loads and stores made generic (the one-record run of
    /// a chunk-loop module, whose input may be in shared memory).
    pub generic: bool,
}

/// The end of a chunk loop: what runs after each record, and after the last.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoopTail {
    /// Label the body's exits branch to.
    pub next: Label,
    /// Statements from `next` on (advance, branch back, return).
    pub tail: Vec<Stmt>,
}

impl Function {
    /// An empty function. The first 11 `.b64` registers are reserved for r0..r10.
    pub fn new(name: impl Into<String>, kind: FuncKind) -> Self {
        Function {
            name: name.into(),
            kind,
            visible: false,
            params: Vec::new(),
            ret: None,
            locals: Vec::new(),
            body: Vec::new(),
            inline: None,
            next_reg: [0, 0, 0, ebpf::isa::NUM_REGS as u32],
            next_label: 0,
            placed: Vec::new(),
            branched: Vec::new(),
        }
    }

    /// The register holding eBPF register `r`.
    pub fn ebpf_reg(r: u8) -> Reg {
        Reg::new(RegClass::B64, r as u32)
    }

    /// A fresh register of class `c`.
    pub fn reg(&mut self, c: RegClass) -> Reg {
        let n = self.next_reg[c.index()];
        self.next_reg[c.index()] += 1;
        Reg::new(c, n)
    }

    /// A fresh label.
    pub fn label(&mut self) -> Label {
        let l = Label(self.next_label);
        self.next_label += 1;
        l
    }

    /// Reserves labels `0..n` (used for instruction pcs) so that fresh labels come after.
    pub fn reserve_labels(&mut self, n: u32) {
        self.next_label = self.next_label.max(n);
    }

    /// Whether every label placed with [`Function::place`] is the target of a
    /// [`Function::bra`] (then no label needs removing).
    pub fn all_placed_labels_used(&self) -> bool {
        self.placed
            .iter()
            .all(|&l| self.branched.get(l as usize).copied().unwrap_or(false))
    }

    /// Numbers this function's fresh registers and labels after those of `other`.
    pub fn continue_numbering(&mut self, other: &Function) {
        for (a, b) in self.next_reg.iter_mut().zip(other.next_reg) {
            *a = (*a).max(b);
        }
        self.next_label = self.next_label.max(other.next_label);
    }

    /// How many registers of class `c` are in use.
    pub fn reg_count(&self, c: RegClass) -> u32 {
        self.next_reg[c.index()]
    }

    /// Appends an instruction.
    pub fn push(&mut self, op: &'static str, args: impl Into<Args>) {
        self.body.push(Stmt::Inst(Inst {
            guard: None,
            op,
            args: args.into(),
        }));
    }

    /// Appends a guarded instruction: runs when `pred` is `when`.
    pub fn push_if(&mut self, pred: Reg, when: bool, op: &'static str, args: impl Into<Args>) {
        self.body.push(Stmt::Inst(Inst {
            guard: Some((pred, when)),
            op,
            args: args.into(),
        }));
    }

    /// Places a label.
    pub fn place(&mut self, l: Label) {
        self.placed.push(l.0);
        self.body.push(Stmt::Label(l));
    }

    /// `bra l`, optionally guarded. A guarded branch is a plain `bra`: its predicate may
    /// differ between the threads of a warp, and `bra.uni` promises that it does not (a
    /// divergent `@p bra.uni` was seen to compute wrong values on an H100).
    pub fn bra(&mut self, l: Label, guard: Option<(Reg, bool)>) {
        let k = l.0 as usize;
        if k >= self.branched.len() {
            self.branched.resize(k + 1, false);
        }
        self.branched[k] = true;
        self.body.push(Stmt::Inst(Inst {
            guard,
            op: if guard.is_some() { "bra" } else { "bra.uni" },
            args: [Operand::Label(l)].into(),
        }));
    }

    /// Calls `func`.
    pub fn call(&mut self, func: impl Into<String>, args: Vec<Reg>, ret: Option<Reg>) {
        self.body.push(Stmt::Call {
            func: func.into(),
            args,
            ret,
        });
    }
}

/// A PTX module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// PTX ISA version, e.g. `(8, 0)`.
    pub version: (u32, u32),
    /// Target, e.g. `sm_90`.
    pub target: String,
    /// Prelude text (helper functions, module globals), printed after the prototypes.
    pub prelude: Vec<String>,
    /// Prototypes of prelude functions, printed first so any function may call any other.
    pub prelude_protos: Vec<String>,
    /// Lowered functions.
    pub functions: Vec<Function>,
}
