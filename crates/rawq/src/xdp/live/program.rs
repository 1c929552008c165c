//! The live-frames XDP program: count the frame, write the varying fields, redirect it.

use super::plan::LivePlan;
use super::{ETH, UDP};
use crate::error::{Error, Result};
use crate::xdp::bpf::insn::{AluOp, Asm, Insn, JmpOp, Reg};
use crate::xdp::bpf::sys::{
    action, HELPER_GET_SMP_PROCESSOR_ID, HELPER_MAP_LOOKUP_ELEM, HELPER_REDIRECT,
};

/// Emits `r = fold(r)` then `r = ~r & 0xffff`, using `tmp`.
fn fold_invert(a: &mut Asm, r: Reg, tmp: Reg) {
    for _ in 0..3 {
        a.emit(Insn::mov64_reg(tmp, r));
        a.emit(Insn::alu64_imm(AluOp::Rsh, tmp, 16));
        a.emit(Insn::alu64_imm(AluOp::And, r, 0xffff));
        a.emit(Insn::alu64_reg(AluOp::Add, r, tmp));
    }
    a.emit(Insn::alu64_imm(AluOp::Xor, r, 0xffff));
}

/// The live-frames program for `plan`: count the frame in `counters` (key 0, per CPU), write the
/// varying fields, `bpf_redirect(ifindex)`.
///
/// Registers: R6 context, R7 this CPU's frame number, R8 packet start, R9 CPU number, R0 the
/// flow index (once the counter is taken), R5 UDP checksum sum, R4 IPv4 header sum.
///
/// # Errors
/// [`Error::Config`] if the program cannot be assembled.
pub fn live_program(plan: &LivePlan, counters_fd: i32, ifindex: u32) -> Result<Vec<Insn>> {
    let mut a = Asm::new();
    let drop = a.label();
    a.emit(Insn::mov64_reg(Reg::R6, Reg::R1));
    if plan.stamp {
        a.emit(Insn::call(HELPER_GET_SMP_PROCESSOR_ID));
        a.emit(Insn::mov64_reg(Reg::R9, Reg::R0));
    }
    // r0 = &counters[0] (this CPU's copy)
    a.emit(Insn::st_dw(Reg::R10, -8, 0));
    a.emit_all(&Insn::ld_map_fd(Reg::R1, counters_fd));
    a.emit(Insn::mov64_reg(Reg::R2, Reg::R10));
    a.emit(Insn::alu64_imm(AluOp::Add, Reg::R2, -8));
    a.emit(Insn::call(HELPER_MAP_LOOKUP_ELEM));
    a.jmp_imm(JmpOp::Jeq, Reg::R0, 0, drop);
    // r7 = counter++ (atomic: two threads on one core share the CPU's copy)
    a.emit(Insn::mov64_imm(Reg::R7, 1));
    a.emit(Insn::atomic_fetch_add_dw(Reg::R0, 0, Reg::R7));
    if plan.writes() {
        a.emit(Insn::ldx_w(Reg::R8, Reg::R6, 0)); // ctx->data
        a.emit(Insn::ldx_w(Reg::R2, Reg::R6, 4)); // ctx->data_end
        a.emit(Insn::mov64_reg(Reg::R3, Reg::R8));
        a.emit(Insn::alu64_imm(AluOp::Add, Reg::R3, plan.len as i32));
        a.jmp_reg(JmpOp::Jgt, Reg::R3, Reg::R2, drop);
        a.emit(Insn::mov64_imm(Reg::R5, plan.udp_sum as i32));
        if plan.flows > 1 {
            // r0 = counter % flows, the flow index (the map value pointer is no longer needed)
            a.emit(Insn::mov64_reg(Reg::R0, Reg::R7));
            if plan.flows.is_power_of_two() {
                a.emit(Insn::alu64_imm(AluOp::And, Reg::R0, plan.flows as i32 - 1));
            } else {
                a.emit(Insn::mod64_imm(Reg::R0, plan.flows as i32));
            }
            // r1 = base + flow index (+ 1 from the destination's index on), the flow's word
            a.emit(Insn::mov64_reg(Reg::R1, Reg::R0));
            if let Some(d) = plan.flow_skip.filter(|&d| (d as u32) < plan.flows) {
                let below = a.label();
                a.jmp_imm(JmpOp::Jlt, Reg::R1, d as i32, below);
                a.emit(Insn::alu64_imm(AluOp::Add, Reg::R1, 1));
                a.bind(below);
            }
            a.emit(Insn::alu64_imm(AluOp::Add, Reg::R1, plan.flow_base as i32));
            a.emit(Insn::alu64_imm(AluOp::And, Reg::R1, 0xffff));
            a.emit(Insn::alu64_reg(AluOp::Add, Reg::R5, Reg::R1));
            if plan.src_ip && plan.v4 {
                a.emit(Insn::mov64_imm(Reg::R4, plan.ip_sum as i32));
                a.emit(Insn::alu64_reg(AluOp::Add, Reg::R4, Reg::R1));
                fold_invert(&mut a, Reg::R4, Reg::R3);
                a.emit(Insn::to_be(Reg::R4, 16));
                a.emit(Insn::stx_h(Reg::R8, (ETH + 10) as i16, Reg::R4));
            }
            a.emit(Insn::to_be(Reg::R1, 16));
            a.emit(Insn::stx_h(Reg::R8, plan.flow_off as i16, Reg::R1));
        }
        if plan.stamp {
            let pay = (plan.l4 + UDP) as i16;
            a.emit(Insn::alu64_imm(AluOp::And, Reg::R9, 0xffff));
            a.emit(Insn::alu64_reg(AluOp::Add, Reg::R5, Reg::R9));
            a.emit(Insn::to_be(Reg::R9, 16));
            a.emit(Insn::stx_h(Reg::R8, pay + 4, Reg::R9));
            if plan.flows > 1 {
                // The flow index (r0, below 65536): at pay + 6 and in the sum. With one flow it
                // is 0, as in the template.
                a.emit(Insn::alu64_reg(AluOp::Add, Reg::R5, Reg::R0));
                a.emit(Insn::to_be(Reg::R0, 16));
                a.emit(Insn::stx_h(Reg::R8, pay + 6, Reg::R0));
            }
            // The sequence number's low 48 bits, as the Stamper masks it: bits 47..32 at
            // pay + 10, bits 31..0 at pay + 12 (flows - 1 at pay + 8 stays the template's).
            a.emit(Insn::mov64_reg(Reg::R1, Reg::R7));
            a.emit(Insn::alu64_imm(AluOp::Rsh, Reg::R1, 32));
            a.emit(Insn::alu64_imm(AluOp::And, Reg::R1, 0xffff));
            a.emit(Insn::alu64_reg(AluOp::Add, Reg::R5, Reg::R1));
            a.emit(Insn::to_be(Reg::R1, 16));
            a.emit(Insn::stx_h(Reg::R8, pay + 10, Reg::R1));
            a.emit(Insn::mov64_reg(Reg::R1, Reg::R7));
            a.emit(Insn::to_be(Reg::R1, 32));
            a.emit(Insn::stx_w(Reg::R8, pay + 12, Reg::R1));
            for shift in [16, 0] {
                a.emit(Insn::mov64_reg(Reg::R1, Reg::R7));
                if shift > 0 {
                    a.emit(Insn::alu64_imm(AluOp::Rsh, Reg::R1, shift));
                }
                a.emit(Insn::alu64_imm(AluOp::And, Reg::R1, 0xffff));
                a.emit(Insn::alu64_reg(AluOp::Add, Reg::R5, Reg::R1));
            }
        }
        fold_invert(&mut a, Reg::R5, Reg::R3);
        // 0 means "no checksum" over IPv4 and is invalid over IPv6: its one's-complement twin.
        let nonzero = a.label();
        a.jmp_imm(JmpOp::Jne, Reg::R5, 0, nonzero);
        a.emit(Insn::mov64_imm(Reg::R5, 0xffff));
        a.bind(nonzero);
        a.emit(Insn::to_be(Reg::R5, 16));
        a.emit(Insn::stx_h(Reg::R8, (plan.l4 + 6) as i16, Reg::R5));
    }
    a.emit(Insn::mov64_imm(Reg::R1, ifindex as i32));
    a.emit(Insn::mov64_imm(Reg::R2, 0));
    a.emit(Insn::call(HELPER_REDIRECT));
    a.emit(Insn::exit());
    a.bind(drop);
    a.emit(Insn::mov64_imm(Reg::R0, action::DROP as i32));
    a.emit(Insn::exit());
    a.finish()
        .map_err(|e| Error::Config(format!("live program: {e}")))
}
