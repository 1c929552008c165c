//! An eBPF instruction encoder and a tiny assembler with labels.
//!
//! Instructions are the kernel's 8-byte `struct bpf_insn` (`include/uapi/linux/bpf.h`):
//!
//! ```text
//! byte 0      opcode  = class (3 bits) | source (1 bit) | operation or size/mode
//! byte 1      dst_reg (low nibble) | src_reg (high nibble)
//! bytes 2..4  off     signed 16-bit, little endian (memory offset or jump distance)
//! bytes 4..8  imm     signed 32-bit, little endian
//! ```
//!
//! A 64-bit immediate load (`lddw`) takes two slots; with `src_reg = BPF_PSEUDO_MAP_FD` the kernel
//! replaces the file descriptor in `imm` by the map's address when the program is loaded.
//!
//! [`Asm`] collects instructions and resolves forward and backward jumps to [`Label`]s when it
//! is finished, so generated code never computes jump distances by hand.

/// Instruction classes (the low 3 bits of the opcode).
pub mod class {
    /// Non-standard loads (`lddw`).
    pub const LD: u8 = 0x00;
    /// Register loads from memory.
    pub const LDX: u8 = 0x01;
    /// Immediate stores to memory.
    pub const ST: u8 = 0x02;
    /// Register stores to memory.
    pub const STX: u8 = 0x03;
    /// 32-bit arithmetic.
    pub const ALU: u8 = 0x04;
    /// 64-bit jumps.
    pub const JMP: u8 = 0x05;
    /// 32-bit jumps (compare the low halves).
    pub const JMP32: u8 = 0x06;
    /// 64-bit arithmetic.
    pub const ALU64: u8 = 0x07;
}

/// Memory access sizes (bits 3..5 of a load/store opcode).
pub mod size {
    /// 4 bytes.
    pub const W: u8 = 0x00;
    /// 2 bytes.
    pub const H: u8 = 0x08;
    /// 1 byte.
    pub const B: u8 = 0x10;
    /// 8 bytes.
    pub const DW: u8 = 0x18;
}

/// Access mode of a load/store: immediate (`lddw`).
pub const MODE_IMM: u8 = 0x00;
/// Access mode of a load/store: memory at register + offset.
pub const MODE_MEM: u8 = 0x60;
/// Source operand is the immediate.
pub const SRC_K: u8 = 0x00;
/// Source operand is `src_reg`.
pub const SRC_X: u8 = 0x08;
/// `src_reg` value of an `lddw` whose immediate is a map file descriptor.
pub const PSEUDO_MAP_FD: u8 = 1;

/// Arithmetic operations (high 4 bits of an ALU opcode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum AluOp {
    /// `dst += src`
    Add = 0x00,
    /// `dst -= src`
    Sub = 0x10,
    /// `dst *= src`
    Mul = 0x20,
    /// `dst |= src`
    Or = 0x40,
    /// `dst &= src`
    And = 0x50,
    /// `dst <<= src`
    Lsh = 0x60,
    /// `dst >>= src` (logical)
    Rsh = 0x70,
    /// `dst ^= src`
    Xor = 0xa0,
    /// `dst = src`
    Mov = 0xb0,
}

/// Byte-swap opcode (`BPF_END`) with "to big endian".
const OP_END_TO_BE: u8 = 0xd0 | 0x08;

/// Jump conditions (high 4 bits of a JMP opcode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum JmpOp {
    /// Always (`ja`).
    Ja = 0x00,
    /// `==`
    Jeq = 0x10,
    /// `>` unsigned
    Jgt = 0x20,
    /// `>=` unsigned
    Jge = 0x30,
    /// `!=`
    Jne = 0x50,
    /// `<` unsigned
    Jlt = 0xa0,
    /// `<=` unsigned
    Jle = 0xb0,
}

const OP_CALL: u8 = 0x80;
const OP_EXIT: u8 = 0x90;

/// A BPF register. `R10` is the read-only frame pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Reg {
    /// Return value, helper results.
    R0 = 0,
    /// First argument (the context on entry).
    R1,
    /// Second argument.
    R2,
    /// Third argument.
    R3,
    /// Fourth argument.
    R4,
    /// Fifth argument.
    R5,
    /// Callee-saved.
    R6,
    /// Callee-saved.
    R7,
    /// Callee-saved.
    R8,
    /// Callee-saved.
    R9,
    /// Frame pointer (read only).
    R10,
}

/// One 8-byte eBPF instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Insn {
    /// Opcode.
    pub code: u8,
    /// Destination register (0..=10).
    pub dst: u8,
    /// Source register (0..=10, or a pseudo value for `lddw`).
    pub src: u8,
    /// Offset.
    pub off: i16,
    /// Immediate.
    pub imm: i32,
}

impl Insn {
    /// The kernel's byte encoding.
    pub fn encode(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0] = self.code;
        b[1] = (self.dst & 0x0f) | (self.src << 4);
        b[2..4].copy_from_slice(&self.off.to_le_bytes());
        b[4..8].copy_from_slice(&self.imm.to_le_bytes());
        b
    }

    /// Decodes 8 bytes (the inverse of [`Insn::encode`]).
    pub fn decode(b: [u8; 8]) -> Insn {
        Insn {
            code: b[0],
            dst: b[1] & 0x0f,
            src: b[1] >> 4,
            off: i16::from_le_bytes([b[2], b[3]]),
            imm: i32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }

    fn new(code: u8, dst: Reg, src: Reg, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            dst: dst as u8,
            src: src as u8,
            off,
            imm,
        }
    }

    /// `dst = imm` (64-bit, sign-extended).
    pub fn mov64_imm(dst: Reg, imm: i32) -> Insn {
        Insn::alu64_imm(AluOp::Mov, dst, imm)
    }

    /// `dst = src` (64-bit).
    pub fn mov64_reg(dst: Reg, src: Reg) -> Insn {
        Insn::alu64_reg(AluOp::Mov, dst, src)
    }

    /// `dst op= imm` on 64 bits.
    pub fn alu64_imm(op: AluOp, dst: Reg, imm: i32) -> Insn {
        Insn::new(class::ALU64 | SRC_K | op as u8, dst, Reg::R0, 0, imm)
    }

    /// `dst op= src` on 64 bits.
    pub fn alu64_reg(op: AluOp, dst: Reg, src: Reg) -> Insn {
        Insn::new(class::ALU64 | SRC_X | op as u8, dst, src, 0, 0)
    }

    /// `dst op= imm` on the low 32 bits (the result is zero-extended).
    pub fn alu32_imm(op: AluOp, dst: Reg, imm: i32) -> Insn {
        Insn::new(class::ALU | SRC_K | op as u8, dst, Reg::R0, 0, imm)
    }

    /// Converts the low `bits` (16, 32 or 64) of `dst` from host order to big endian.
    pub fn to_be(dst: Reg, bits: i32) -> Insn {
        Insn::new(class::ALU | OP_END_TO_BE, dst, Reg::R0, 0, bits)
    }

    fn ldx(sz: u8, dst: Reg, src: Reg, off: i16) -> Insn {
        Insn::new(class::LDX | MODE_MEM | sz, dst, src, off, 0)
    }

    /// `dst = *(u8 *)(src + off)`
    pub fn ldx_b(dst: Reg, src: Reg, off: i16) -> Insn {
        Insn::ldx(size::B, dst, src, off)
    }

    /// `dst = *(u16 *)(src + off)`
    pub fn ldx_h(dst: Reg, src: Reg, off: i16) -> Insn {
        Insn::ldx(size::H, dst, src, off)
    }

    /// `dst = *(u32 *)(src + off)`
    pub fn ldx_w(dst: Reg, src: Reg, off: i16) -> Insn {
        Insn::ldx(size::W, dst, src, off)
    }

    /// `dst = *(u64 *)(src + off)`
    pub fn ldx_dw(dst: Reg, src: Reg, off: i16) -> Insn {
        Insn::ldx(size::DW, dst, src, off)
    }

    /// `*(u64 *)(dst + off) = src`
    pub fn stx_dw(dst: Reg, off: i16, src: Reg) -> Insn {
        Insn::new(class::STX | MODE_MEM | size::DW, dst, src, off, 0)
    }

    /// `*(u64 *)(dst + off) = imm` (sign-extended).
    pub fn st_dw(dst: Reg, off: i16, imm: i32) -> Insn {
        Insn::new(class::ST | MODE_MEM | size::DW, dst, Reg::R0, off, imm)
    }

    /// `if dst <op> imm goto +off` (64-bit compare, `imm` sign-extended).
    pub fn jmp_imm(op: JmpOp, dst: Reg, imm: i32, off: i16) -> Insn {
        Insn::new(class::JMP | SRC_K | op as u8, dst, Reg::R0, off, imm)
    }

    /// `if dst <op> src goto +off` (64-bit compare).
    pub fn jmp_reg(op: JmpOp, dst: Reg, src: Reg, off: i16) -> Insn {
        Insn::new(class::JMP | SRC_X | op as u8, dst, src, off, 0)
    }

    /// `if (u32)dst <op> (u32)imm goto +off`.
    pub fn jmp32_imm(op: JmpOp, dst: Reg, imm: i32, off: i16) -> Insn {
        Insn::new(class::JMP32 | SRC_K | op as u8, dst, Reg::R0, off, imm)
    }

    /// `goto +off`.
    pub fn ja(off: i16) -> Insn {
        Insn::new(class::JMP | JmpOp::Ja as u8, Reg::R0, Reg::R0, off, 0)
    }

    /// Calls helper number `helper`; arguments in R1..R5, result in R0, R1..R5 clobbered.
    pub fn call(helper: i32) -> Insn {
        Insn::new(class::JMP | OP_CALL, Reg::R0, Reg::R0, 0, helper)
    }

    /// Returns R0.
    pub fn exit() -> Insn {
        Insn::new(class::JMP | OP_EXIT, Reg::R0, Reg::R0, 0, 0)
    }

    /// `dst = map` (the 16-byte `lddw` with `BPF_PSEUDO_MAP_FD`): two instruction slots.
    pub fn ld_map_fd(dst: Reg, fd: i32) -> [Insn; 2] {
        [
            Insn {
                code: class::LD | MODE_IMM | size::DW,
                dst: dst as u8,
                src: PSEUDO_MAP_FD,
                off: 0,
                imm: fd,
            },
            Insn::default(),
        ]
    }

    /// True for a conditional or unconditional jump that carries a target in `off`.
    fn is_jump(&self) -> bool {
        let cls = self.code & 0x07;
        let op = self.code & 0xf0;
        (cls == class::JMP || cls == class::JMP32) && op != OP_CALL && op != OP_EXIT
    }
}

/// A jump target inside an [`Asm`] program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Label(usize);

/// Why a program could not be assembled.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AsmError {
    /// A label was jumped to but never bound (or belongs to another `Asm`).
    #[error("label {0} is used but never bound")]
    Unbound(usize),
    /// A jump is farther than a 16-bit offset reaches.
    #[error("a jump of {0} instructions does not fit in 16 bits (program too large)")]
    TooFar(i64),
}

/// An instruction buffer with labels resolved when finished.
#[derive(Debug, Default)]
pub struct Asm {
    insns: Vec<Insn>,
    labels: Vec<Option<usize>>,
    fixups: Vec<(usize, Label)>,
    foreign: Option<usize>,
}

impl Asm {
    /// An empty program.
    pub fn new() -> Asm {
        Asm::default()
    }

    /// A fresh, unbound label.
    pub fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }

    /// Binds `l` to the next instruction emitted. (A label of another `Asm` is reported by
    /// [`Asm::finish`].)
    pub fn bind(&mut self, l: Label) {
        match self.labels.get_mut(l.0) {
            Some(slot) => *slot = Some(self.insns.len()),
            None => self.foreign = Some(l.0),
        }
    }

    /// Appends one instruction.
    pub fn emit(&mut self, i: Insn) {
        self.insns.push(i);
    }

    /// Appends several instructions.
    pub fn emit_all(&mut self, is: &[Insn]) {
        self.insns.extend_from_slice(is);
    }

    /// Number of instruction slots so far.
    pub fn len(&self) -> usize {
        self.insns.len()
    }

    /// True if nothing was emitted.
    pub fn is_empty(&self) -> bool {
        self.insns.is_empty()
    }

    /// Appends the jump `i` (whose `off` is ignored) with target `to`.
    pub fn jump(&mut self, i: Insn, to: Label) {
        debug_assert!(i.is_jump());
        self.fixups.push((self.insns.len(), to));
        self.insns.push(i);
    }

    /// `if dst <op> imm goto to` (64-bit).
    pub fn jmp_imm(&mut self, op: JmpOp, dst: Reg, imm: i32, to: Label) {
        self.jump(Insn::jmp_imm(op, dst, imm, 0), to);
    }

    /// `if dst <op> src goto to` (64-bit).
    pub fn jmp_reg(&mut self, op: JmpOp, dst: Reg, src: Reg, to: Label) {
        self.jump(Insn::jmp_reg(op, dst, src, 0), to);
    }

    /// `if (u32)dst <op> (u32)imm goto to`.
    pub fn jmp32_imm(&mut self, op: JmpOp, dst: Reg, imm: i32, to: Label) {
        self.jump(Insn::jmp32_imm(op, dst, imm, 0), to);
    }

    /// `goto to`.
    pub fn ja(&mut self, to: Label) {
        self.jump(Insn::ja(0), to);
    }

    /// Resolves all jumps.
    ///
    /// # Errors
    /// [`AsmError::Unbound`] for a label never bound, [`AsmError::TooFar`] for a jump that does
    /// not fit the 16-bit offset.
    pub fn finish(mut self) -> Result<Vec<Insn>, AsmError> {
        if let Some(l) = self.foreign {
            return Err(AsmError::Unbound(l));
        }
        for &(at, l) in &self.fixups {
            let target = self
                .labels
                .get(l.0)
                .copied()
                .flatten()
                .ok_or(AsmError::Unbound(l.0))?;
            let off = target as i64 - (at as i64 + 1);
            self.insns[at].off = i16::try_from(off).map_err(|_| AsmError::TooFar(off))?;
        }
        Ok(self.insns)
    }
}

/// The program as the bytes `BPF_PROG_LOAD` takes.
pub fn to_bytes(insns: &[Insn]) -> Vec<u8> {
    insns.iter().flat_map(|i| i.encode()).collect()
}

/// Access mode of an atomic read-modify-write store (`BPF_ATOMIC`).
pub const MODE_ATOMIC: u8 = 0xc0;
/// `imm` flag of an atomic operation: the old value is returned in `src_reg` (`BPF_FETCH`).
pub const ATOMIC_FETCH: i32 = 0x01;
/// `src_reg` of a `BPF_CALL` whose `imm` is a kernel function's BTF id
/// (`BPF_PSEUDO_KFUNC_CALL`, `include/uapi/linux/bpf.h`).
pub const PSEUDO_KFUNC_CALL: u8 = 2;
/// Modulo (`BPF_MOD`, high 4 bits of an ALU opcode).
pub const OP_MOD: u8 = 0x90;

impl Insn {
    /// `*(u16 *)(dst + off) = src`
    pub fn stx_h(dst: Reg, off: i16, src: Reg) -> Insn {
        Insn::new(class::STX | MODE_MEM | size::H, dst, src, off, 0)
    }

    /// `*(u32 *)(dst + off) = src`
    pub fn stx_w(dst: Reg, off: i16, src: Reg) -> Insn {
        Insn::new(class::STX | MODE_MEM | size::W, dst, src, off, 0)
    }

    /// `src = atomic_fetch_add((u64 *)(dst + off), src)`: adds `src` to the 8 bytes at
    /// `dst + off` and puts their old value in `src` (`BPF_ATOMIC | BPF_DW`, `imm = BPF_ADD |
    /// BPF_FETCH`; kernel 5.12).
    pub fn atomic_fetch_add_dw(dst: Reg, off: i16, src: Reg) -> Insn {
        Insn::new(
            class::STX | MODE_ATOMIC | size::DW,
            dst,
            src,
            off,
            AluOp::Add as i32 | ATOMIC_FETCH,
        )
    }

    /// `*(u32 *)(dst + off) = imm`.
    pub fn st_w(dst: Reg, off: i16, imm: i32) -> Insn {
        Insn::new(class::ST | MODE_MEM | size::W, dst, Reg::R0, off, imm)
    }

    /// Calls the kernel function whose BTF type id (a `FUNC` of vmlinux's BTF) is `btf_id`
    /// (`BPF_CALL` with `src_reg = BPF_PSEUDO_KFUNC_CALL`, `off = 0`: vmlinux). Arguments in
    /// R1..R5, result in R0, R1..R5 clobbered, as for a helper.
    pub fn call_kfunc(btf_id: i32) -> Insn {
        Insn {
            code: class::JMP | OP_CALL,
            dst: 0,
            src: PSEUDO_KFUNC_CALL,
            off: 0,
            imm: btf_id,
        }
    }

    /// `dst %= imm` (64-bit, unsigned; the verifier rejects `imm == 0`).
    pub fn mod64_imm(dst: Reg, imm: i32) -> Insn {
        Insn::new(class::ALU64 | SRC_K | OP_MOD, dst, Reg::R0, 0, imm)
    }
}

#[cfg(test)]
mod live_encodings {
    use super::*;

    // Bytes of the kernel's BPF_STX_MEM(BPF_H/BPF_W), BPF_ATOMIC_OP(BPF_DW, BPF_ADD | BPF_FETCH)
    // and BPF_ALU64_IMM(BPF_MOD) macros, from the opcode tables of
    // Documentation/bpf/standardization/instruction-set.rst.
    #[test]
    fn encodings_match_the_instruction_set() {
        assert_eq!(
            Insn::stx_h(Reg::R8, 34, Reg::R2).encode(),
            [0x6b, 0x28, 34, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            Insn::stx_w(Reg::R10, -4, Reg::R1).encode(),
            [0x63, 0x1a, 0xfc, 0xff, 0, 0, 0, 0]
        );
        assert_eq!(
            Insn::atomic_fetch_add_dw(Reg::R0, 0, Reg::R7).encode(),
            [0xdb, 0x70, 0, 0, 1, 0, 0, 0]
        );
        assert_eq!(
            Insn::mod64_imm(Reg::R1, 100).encode(),
            [0x97, 0x01, 0, 0, 100, 0, 0, 0]
        );
        // BPF_ST_MEM(BPF_W, BPF_REG_2, 0, imm): class ST 0x02 | MEM 0x60 | W 0x00.
        assert_eq!(
            Insn::st_w(Reg::R2, 0, 0x1234_5678).encode(),
            [0x62, 0x02, 0, 0, 0x78, 0x56, 0x34, 0x12]
        );
        // BPF_CALL_KFUNC(0, id): JMP | CALL 0x85, src_reg 2 (BPF_PSEUDO_KFUNC_CALL).
        assert_eq!(
            Insn::call_kfunc(0x0102_0304).encode(),
            [0x85, 0x20, 0, 0, 0x04, 0x03, 0x02, 0x01]
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Fixtures: the bytes the kernel's own macros (BPF_MOV64_IMM, BPF_LDX_MEM, BPF_JMP_IMM,
    // BPF_LD_MAP_FD, BPF_EXIT_INSN, ...) produce for these instructions, written out by hand from
    // the opcode tables in Documentation/bpf/standardization/instruction-set.rst.
    #[test]
    fn encodings_match_the_instruction_set() {
        let cases: &[(Insn, [u8; 8])] = &[
            (Insn::mov64_imm(Reg::R0, 2), [0xb7, 0x00, 0, 0, 2, 0, 0, 0]),
            (
                Insn::mov64_reg(Reg::R6, Reg::R1),
                [0xbf, 0x16, 0, 0, 0, 0, 0, 0],
            ),
            (
                Insn::ldx_w(Reg::R7, Reg::R1, 4),
                [0x61, 0x17, 4, 0, 0, 0, 0, 0],
            ),
            (
                Insn::ldx_h(Reg::R3, Reg::R7, 12),
                [0x69, 0x73, 12, 0, 0, 0, 0, 0],
            ),
            (
                Insn::ldx_b(Reg::R4, Reg::R1, 9),
                [0x71, 0x14, 9, 0, 0, 0, 0, 0],
            ),
            (
                Insn::ldx_dw(Reg::R1, Reg::R10, -8),
                [0x79, 0xa1, 0xf8, 0xff, 0, 0, 0, 0],
            ),
            (
                Insn::stx_dw(Reg::R10, -16, Reg::R3),
                [0x7b, 0x3a, 0xf0, 0xff, 0, 0, 0, 0],
            ),
            (
                Insn::st_dw(Reg::R10, -8, -1),
                [0x7a, 0x0a, 0xf8, 0xff, 0xff, 0xff, 0xff, 0xff],
            ),
            (
                Insn::alu64_imm(AluOp::Add, Reg::R2, 14),
                [0x07, 0x02, 0, 0, 14, 0, 0, 0],
            ),
            (
                Insn::alu64_reg(AluOp::Add, Reg::R1, Reg::R9),
                [0x0f, 0x91, 0, 0, 0, 0, 0, 0],
            ),
            (
                Insn::alu32_imm(AluOp::And, Reg::R4, 0x0fff),
                [0x54, 0x04, 0, 0, 0xff, 0x0f, 0, 0],
            ),
            (
                Insn::alu64_imm(AluOp::Lsh, Reg::R4, 2),
                [0x67, 0x04, 0, 0, 2, 0, 0, 0],
            ),
            (Insn::to_be(Reg::R3, 16), [0xdc, 0x03, 0, 0, 16, 0, 0, 0]),
            (
                Insn::jmp_imm(JmpOp::Jne, Reg::R3, 0x8100, 5),
                [0x55, 0x03, 5, 0, 0x00, 0x81, 0, 0],
            ),
            (
                Insn::jmp_reg(JmpOp::Jgt, Reg::R2, Reg::R8, -3),
                [0x2d, 0x82, 0xfd, 0xff, 0, 0, 0, 0],
            ),
            (
                Insn::jmp32_imm(JmpOp::Jne, Reg::R1, 7, 1),
                [0x56, 0x01, 1, 0, 7, 0, 0, 0],
            ),
            (Insn::ja(2), [0x05, 0x00, 2, 0, 0, 0, 0, 0]),
            (Insn::call(51), [0x85, 0x00, 0, 0, 51, 0, 0, 0]),
            (Insn::exit(), [0x95, 0x00, 0, 0, 0, 0, 0, 0]),
        ];
        for (i, bytes) in cases {
            assert_eq!(&i.encode(), bytes, "{i:?}");
            assert_eq!(Insn::decode(*bytes), *i);
        }
        let [a, b] = Insn::ld_map_fd(Reg::R1, 5);
        assert_eq!(a.encode(), [0x18, 0x11, 0, 0, 5, 0, 0, 0]);
        assert_eq!(b.encode(), [0; 8]);
    }

    #[test]
    fn labels_resolve_forward_and_backward() {
        let mut a = Asm::new();
        let top = a.label();
        let end = a.label();
        a.bind(top);
        a.emit(Insn::mov64_imm(Reg::R0, 0)); // 0
        a.jmp_imm(JmpOp::Jeq, Reg::R0, 1, end); // 1 -> 4: off 2
        a.emit(Insn::mov64_imm(Reg::R0, 1)); // 2
        a.ja(top); // 3 -> 0: off -4
        a.bind(end);
        a.emit(Insn::exit()); // 4
        let p = a.finish().unwrap();
        assert_eq!(p[1].off, 2);
        assert_eq!(p[3].off, -4);
        assert_eq!(to_bytes(&p).len(), 5 * 8);

        let mut a = Asm::new();
        let nowhere = a.label();
        a.ja(nowhere);
        assert_eq!(a.finish(), Err(AsmError::Unbound(0)));

        // A label of another assembler is an error, not a panic.
        let mut other = Asm::new();
        let _ = other.label();
        let theirs = other.label();
        let mut a = Asm::new();
        a.bind(theirs);
        a.ja(theirs);
        assert_eq!(a.finish(), Err(AsmError::Unbound(1)));

        let mut a = Asm::new();
        let far = a.label();
        a.ja(far);
        for _ in 0..40_000 {
            a.emit(Insn::mov64_imm(Reg::R0, 0));
        }
        a.bind(far);
        a.emit(Insn::exit());
        assert!(matches!(a.finish(), Err(AsmError::TooFar(40_000))));
    }
}
