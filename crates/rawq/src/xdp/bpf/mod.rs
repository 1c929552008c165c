//! The XDP steering program: an eBPF encoder ([`insn`]), the rule compiler ([`compile()`]) and
//! the `bpf()` system call ([`sys`]). No clang, libbpf or libxdp: rawq writes the instructions
//! itself.

pub mod btf;
pub mod compile;
pub mod insn;
pub mod sys;

pub use compile::{
    compile, compile_counted, compile_meta, compile_stamped, meta, Counting, Stamp, Variant,
    VERDICT_BASE, VERDICT_NONE,
};
pub use insn::{Asm, Insn, Label, Reg};
pub use sys::{action, PerCpuCounters, Program, XdpLink, XskMap};
