//! A compiler from refusal rules to a classic BPF program, shaped for a cheap `seccomp()` call.
//!
//! Why our own: installing a filter is not free, and it is paid by every confined spawn. Besides
//! compiling the program, the kernel computes a per-filter cache of the calls the filter always
//! allows, by emulating the program once for every call number of each architecture it serves
//! (about 900 runs on x86_64); the emulation stops at the first instruction that reads an
//! argument. A program that tests the number against each listed call in turn (as `seccompiler`
//! lays it out) walks the whole list for every call it allows, and cost 50–90 µs per spawn here
//! (BENCHMARKS.md, "Issue 21: the spawn's seccomp program"). This one:
//!
//! - tests the architecture first, so the other architecture's numbers end at once (killed);
//! - finds the number by a search over the listed calls that splits the call numbers, not the
//!   list, in halves (the gaps between listed calls differ tenfold in size), so an allowed call is
//!   settled in three to five comparisons; the x32 guard sits on the highest branch only;
//! - keeps the program short, because compiling it costs per instruction (about 0.08 µs each here,
//!   beside a fixed 13 µs): one `ret` per action, one block for calls with the same rules (the four
//!   `sched_set*` calls), and a set of values tested after one load ([`Cmp::OneOf`]: the socket
//!   rules under `--network deny` took 169 instructions as one rule per value, 94 this way).
//!
//! A listed call then runs its rules: each rule is a conjunction of argument comparisons, and the
//! first rule that holds refuses the call (`EPERM`). A call may instead be handed to dsh
//! (`SECCOMP_RET_USER_NOTIF`, the socket gate's `connect`), in the same program, so a confined spawn
//! installs one filter, not two. `interpreter.rs` runs a program the way the kernel does, for the
//! tests.

use std::collections::BTreeMap;

use nix::libc;

/// `offsetof(struct seccomp_data, nr)`, `…, arch)`, `…, args)`.
pub(crate) const NR: u32 = 0;
pub(crate) const ARCH: u32 = 4;
pub(crate) const ARGS: u32 = 16;

/// `AUDIT_ARCH_*` of this build's architecture.
#[cfg(target_arch = "x86_64")]
pub(crate) const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
pub(crate) const AUDIT_ARCH: u32 = 0xC000_00B7;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("dsh's seccomp programs know x86_64 and aarch64 only");

/// x86_64's x32 calls share its architecture value, with numbers from this bit up: all refused.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: Option<u32> = Some(0x4000_0000);
#[cfg(not(target_arch = "x86_64"))]
const X32_SYSCALL_BIT: Option<u32> = None;

/// How a 32-bit argument (the low half of its slot) or a pointer is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cmp {
    /// The low 32 bits equal the value.
    Eq(u32),
    /// The low 32 bits differ from the value.
    Ne(u32),
    /// The low 32 bits, masked, equal the value.
    MaskedEq { mask: u32, value: u32 },
    /// The whole 64-bit slot is not zero (a pointer that is not NULL).
    NonNull,
    /// The low 32 bits, masked, equal one of the values (`u32::MAX`: no mask).
    OneOf { mask: u32, values: &'static [u32] },
}

/// One comparison of argument `arg` (0–5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cond {
    pub arg: u8,
    pub cmp: Cmp,
}

/// When a listed call is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Always.
    Always,
    /// When any rule holds; a rule holds when all its conditions do.
    When(Vec<Vec<Cond>>),
}

/// What the program does with each call: the listed ones are refused under their rules, or handed
/// to dsh; every other call of this architecture is allowed; other architectures are killed.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rules {
    pub refused: BTreeMap<u32, Refusal>,
    /// Calls answered by dsh (`SECCOMP_RET_USER_NOTIF`).
    pub notified: Vec<u32>,
}

/// A compiled program.
pub(crate) type Program = Vec<libc::sock_filter>;

/// Why rules do not compile: a jump longer than BPF's 255 instructions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooLong;

/// Where a jump goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Next,
    Allow,
    Refuse,
    Notify,
    /// An instruction index in the program being built.
    At(usize),
    /// A label not yet placed (a call's block), resolved in the second pass.
    Block(u32),
    /// A label, placed where `Assembler::place` put it (the native path, the next rule, past a
    /// condition).
    Label(usize),
}

enum Insn {
    Load(u32),
    And(u32),
    Jump {
        op: u32,
        k: u32,
        yes: Target,
        no: Target,
    },
    Ret(u32),
}

#[derive(Default)]
struct Assembler {
    code: Vec<Insn>,
    blocks: BTreeMap<u32, usize>,
    labels: Vec<usize>,
}

impl Assembler {
    fn push(&mut self, insn: Insn) -> usize {
        self.code.push(insn);
        self.code.len() - 1
    }

    fn label(&mut self) -> usize {
        self.labels.push(usize::MAX);
        self.labels.len() - 1
    }

    fn place(&mut self, label: usize) {
        self.labels[label] = self.code.len();
    }
}

const JEQ: u32 = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
const JGE: u32 = libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K;

/// Compiles `rules`.
pub(crate) fn compile(rules: &Rules) -> Result<Program, TooLong> {
    let mut asm = Assembler::default();
    asm.push(Insn::Load(ARCH));
    let native = asm.label();
    asm.push(Insn::Jump {
        op: JEQ,
        k: AUDIT_ARCH,
        yes: Target::Label(native),
        no: Target::Next,
    });
    asm.push(Insn::Ret(libc::SECCOMP_RET_KILL_PROCESS));
    asm.place(native);
    asm.push(Insn::Load(NR));
    let mut listed: Vec<u32> = rules.refused.keys().copied().collect();
    listed.extend(rules.notified.iter().copied());
    listed.sort_unstable();
    listed.dedup();
    search(&mut asm, &listed, Span { low: 0, top: true }, rules);
    // One block per distinct refusal: calls with the same rules jump to the same code.
    let mut placed: Vec<(&Refusal, usize)> = Vec::new();
    for (&call, refusal) in &rules.refused {
        let at = match placed.iter().find(|(seen, _)| *seen == refusal) {
            Some(&(_, at)) => at,
            None => {
                let at = asm.code.len();
                block(&mut asm, refusal);
                placed.push((refusal, at));
                at
            }
        };
        asm.blocks.insert(call, at);
    }
    assemble(asm)
}

/// The call numbers one part of the search covers: from `low` up to the next listed call above
/// them, or (`top`) to the end of the numbers.
#[derive(Clone, Copy)]
struct Span {
    low: u32,
    top: bool,
}

/// About how many call numbers the architecture has (x86_64 and aarch64 are below this): the
/// weight of the highest gap when the search splits the numbers.
const CALL_NUMBERS: u32 = 512;

/// Search over `calls` (sorted, all within `span`), the number in the accumulator: a listed call
/// jumps to its block (or is handed to dsh), anything between them is allowed; on x86_64, the
/// highest branch refuses x32's numbers.
fn search(asm: &mut Assembler, calls: &[u32], span: Span, rules: &Rules) {
    match calls {
        [] => unallowed_tail(asm, span),
        [call] => {
            let yes = if rules.notified.contains(call) && !rules.refused.contains_key(call) {
                Target::Notify
            } else {
                Target::Block(*call)
            };
            let no = if span.top && X32_SYSCALL_BIT.is_some() {
                Target::Next
            } else {
                Target::Allow
            };
            asm.push(Insn::Jump {
                op: JEQ,
                k: *call,
                yes,
                no,
            });
            if no == Target::Next {
                unallowed_tail(asm, span);
            }
        }
        _ => {
            // Split where the numbers below and above are closest to equal in count.
            let end = if span.top {
                CALL_NUMBERS.max(calls[calls.len() - 1] + 1)
            } else {
                calls[calls.len() - 1] + 1
            };
            let split = (1..calls.len())
                .min_by_key(|&i| {
                    let below = calls[i] - span.low;
                    let above = end - calls[i];
                    below.abs_diff(above)
                })
                .unwrap_or(calls.len() / 2);
            let (low, high) = calls.split_at(split);
            let jump = asm.push(Insn::Jump {
                op: JGE,
                k: high[0],
                yes: Target::Next, // patched below
                no: Target::Next,
            });
            search(asm, low, Span { top: false, ..span }, rules);
            let at = asm.code.len();
            if let Insn::Jump { yes, .. } = &mut asm.code[jump] {
                *yes = Target::At(at);
            }
            search(
                asm,
                high,
                Span {
                    low: high[0],
                    top: span.top,
                },
                rules,
            );
        }
    }
}

/// The end of a search branch with no listed call left: allowed, but on the highest branch of
/// x86_64 the x32 numbers are refused.
fn unallowed_tail(asm: &mut Assembler, span: Span) {
    match X32_SYSCALL_BIT {
        Some(bit) if span.top => {
            asm.push(Insn::Jump {
                op: JGE,
                k: bit,
                yes: Target::Refuse,
                no: Target::Allow,
            });
        }
        _ => {
            asm.push(Insn::Ret(libc::SECCOMP_RET_ALLOW));
        }
    }
}

/// One call's block: its rules in turn, then allowed.
fn block(asm: &mut Assembler, refusal: &Refusal) {
    let rules = match refusal {
        Refusal::Always => {
            asm.push(Insn::Ret(libc::SECCOMP_RET_ERRNO | libc::EPERM as u32));
            return;
        }
        Refusal::When(rules) => rules,
    };
    for rule in rules {
        let next = asm.label();
        for (i, cond) in rule.iter().enumerate() {
            // The last condition holding refuses the call; any failing one tries the next rule.
            let holds = if i + 1 == rule.len() {
                Target::Refuse
            } else {
                Target::Next
            };
            condition(asm, *cond, holds, Target::Label(next));
        }
        asm.place(next);
    }
    asm.push(Insn::Ret(libc::SECCOMP_RET_ALLOW));
}

fn condition(asm: &mut Assembler, cond: Cond, holds: Target, fails: Target) {
    // A condition may take several jumps; "holds, go on" must mean past all of them.
    let past = (holds == Target::Next).then(|| asm.label());
    let holds = past.map_or(holds, Target::Label);
    let low = ARGS + 8 * u32::from(cond.arg);
    asm.push(Insn::Load(low));
    let (k, yes, no) = match cond.cmp {
        Cmp::Eq(value) => (value, holds, fails),
        Cmp::Ne(value) => (value, fails, holds),
        Cmp::MaskedEq { mask, value } => {
            asm.push(Insn::And(mask));
            (value, holds, fails)
        }
        Cmp::OneOf { mask, values } => {
            if mask != u32::MAX {
                asm.push(Insn::And(mask));
            }
            match values.split_last() {
                Some((&last, rest)) => {
                    for &value in rest {
                        asm.push(Insn::Jump {
                            op: JEQ,
                            k: value,
                            yes: holds,
                            no: Target::Next,
                        });
                    }
                    (last, holds, fails)
                }
                // No value: the condition never holds.
                None => (0, fails, fails),
            }
        }
        Cmp::NonNull => {
            // Low half not zero: holds; else the high half decides.
            let high = asm.label();
            asm.push(Insn::Jump {
                op: JEQ,
                k: 0,
                yes: Target::Label(high),
                no: holds,
            });
            asm.place(high);
            asm.push(Insn::Load(low + 4));
            (0, fails, holds)
        }
    };
    asm.push(Insn::Jump {
        op: JEQ,
        k,
        yes,
        no,
    });
    if let Some(past) = past {
        asm.place(past);
    }
}

/// Second pass: the shared `ret`s at the end, every target turned into a forward offset.
fn assemble(mut asm: Assembler) -> Result<Program, TooLong> {
    let allow = asm.push(Insn::Ret(libc::SECCOMP_RET_ALLOW));
    let refuse = asm.push(Insn::Ret(libc::SECCOMP_RET_ERRNO | libc::EPERM as u32));
    let notify = asm.push(Insn::Ret(libc::SECCOMP_RET_USER_NOTIF));
    let resolve = |at: usize, target: Target| -> Result<u8, TooLong> {
        let to = match target {
            Target::Next => at + 1,
            Target::Allow => allow,
            Target::Refuse => refuse,
            Target::Notify => notify,
            Target::At(to) => to,
            Target::Block(call) => *asm.blocks.get(&call).ok_or(TooLong)?,
            Target::Label(label) => asm.labels[label],
        };
        to.checked_sub(at + 1)
            .and_then(|offset| u8::try_from(offset).ok())
            .ok_or(TooLong)
    };
    let mut program = Vec::with_capacity(asm.code.len());
    for (at, insn) in asm.code.iter().enumerate() {
        let (code, jt, jf, k) = match *insn {
            Insn::Load(offset) => (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0, 0, offset),
            Insn::And(mask) => (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K, 0, 0, mask),
            Insn::Ret(action) => (libc::BPF_RET | libc::BPF_K, 0, 0, action),
            Insn::Jump { op, k, yes, no } => (op, resolve(at, yes)?, resolve(at, no)?, k),
        };
        program.push(libc::sock_filter {
            code: code as u16,
            jt,
            jf,
            k,
        });
    }
    Ok(program)
}
