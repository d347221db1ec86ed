//! An interpreter of classic BPF as the kernel runs a seccomp program, for the tests: they run dsh's
//! programs and `seccompiler`'s through it on every call number and a grid of arguments.

use nix::libc;

use super::bpf::{ARCH, ARGS, NR};

/// What the kernel hands a filter (`struct seccomp_data`), for [`run`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Data {
    pub nr: u32,
    pub arch: u32,
    pub args: [u64; 6],
}

/// Runs `program` on `data` the way the kernel does: the action it returns, and how many
/// instructions that took.
pub(crate) fn run(program: &[libc::sock_filter], data: &Data) -> (u32, usize) {
    let word = |offset: u32| -> u32 {
        match offset {
            NR => data.nr,
            ARCH => data.arch,
            8 | 12 => 0, // instruction_pointer
            _ => {
                let arg = ((offset - ARGS) / 8) as usize;
                let slot = data.args[arg];
                if (offset - ARGS).is_multiple_of(8) {
                    slot as u32
                } else {
                    (slot >> 32) as u32
                }
            }
        }
    };
    let (mut pc, mut acc) = (0usize, 0u32);
    for steps in 1.. {
        let insn = program[pc];
        let code = u32::from(insn.code);
        pc += 1;
        match code {
            c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => acc = word(insn.k),
            c if c == libc::BPF_ALU | libc::BPF_AND | libc::BPF_K => acc &= insn.k,
            c if c == libc::BPF_RET | libc::BPF_K => return (insn.k, steps),
            c if c == libc::BPF_JMP | libc::BPF_JA => pc += insn.k as usize,
            c if c & 0x07 == libc::BPF_JMP => {
                let taken = match c & 0xf0 {
                    0x10 => acc == insn.k,     // BPF_JEQ
                    0x20 => acc > insn.k,      // BPF_JGT
                    0x30 => acc >= insn.k,     // BPF_JGE
                    0x40 => acc & insn.k != 0, // BPF_JSET
                    other => panic!("jump {other:#x}"),
                };
                pc += usize::from(if taken { insn.jt } else { insn.jf });
            }
            other => panic!("instruction {other:#x}"),
        }
    }
    unreachable!("a BPF program ends in a return")
}
