//! The filter's tests: its memfd, and its program checked against `seccompiler` (rust-vmm's
//! compiler, the one dsh used before `bpf.rs`) on every call number and a grid of arguments, run
//! through an interpreter of the kernel's semantics.

use std::io::Write;

use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch,
};

use super::bpf;
use super::interpreter::{self, Data};
use super::*;

#[test]
fn the_launcher_descriptor_holds_the_program_and_is_sealed() {
    let filter = Filter::build(Sockets::TcpOnly).unwrap();
    let path = format!("/proc/self/fd/{}", filter.launcher_fd().unwrap());
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len(), 8 * filter.inner.program.len());
    // The same descriptor on a second use: built once.
    assert_eq!(
        filter.launcher_fd().unwrap(),
        filter.clone().launcher_fd().unwrap()
    );
    let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    assert!(file.write_all(b"x").is_err(), "the memfd is sealed");
}

#[test]
fn the_network_policy_adds_the_socket_rules() {
    let any = Filter::build(Sockets::Any).unwrap();
    let tcp_only = Filter::build(Sockets::TcpOnly).unwrap();
    assert!(tcp_only.inner.program.len() > any.inner.program.len());
    assert_eq!(tcp_only.sockets(), Sockets::TcpOnly);
}

/// The rules as `seccompiler` took them (the module table), compiled by it, behind the x32 guard
/// dsh put in front of its program.
fn reference(sockets: Sockets) -> Vec<libc::sock_filter> {
    let cond = |arg, len, op, value| SeccompCondition::new(arg, len, op, value).unwrap();
    let dword = |arg, op, value| cond(arg, SeccompCmpArgLen::Dword, op, value);
    let rule = |conds: Vec<SeccompCondition>| SeccompRule::new(conds).unwrap();
    let ne0 = |arg| dword(arg, SeccompCmpOp::Ne, 0);
    let eq = |arg, value: i32| dword(arg, SeccompCmpOp::Eq, value as u64);
    let kind = |arg, kind: i32| dword(arg, SeccompCmpOp::MaskedEq(0xf), kind as u64);
    let mut rules = std::collections::BTreeMap::new();
    rules.insert(
        libc::SYS_prlimit64,
        vec![rule(vec![
            ne0(0),
            cond(2, SeccompCmpArgLen::Qword, SeccompCmpOp::Ne, 0),
        ])],
    );
    rules.insert(
        libc::SYS_setpriority,
        vec![
            rule(vec![ne0(1)]),
            rule(vec![eq(0, libc::PRIO_USER as i32)]),
        ],
    );
    rules.insert(
        libc::SYS_ioprio_set,
        vec![rule(vec![ne0(1)]), rule(vec![eq(0, 3)])],
    );
    for call in [
        libc::SYS_sched_setaffinity,
        libc::SYS_sched_setscheduler,
        libc::SYS_sched_setparam,
        libc::SYS_sched_setattr,
    ] {
        rules.insert(call, vec![rule(vec![ne0(0)])]);
    }
    let unix_datagram = || {
        [libc::SOCK_DGRAM, libc::SOCK_RAW]
            .map(|k| rule(vec![eq(0, libc::AF_UNIX), kind(1, k)]))
            .to_vec()
    };
    rules.insert(libc::SYS_socketpair, unix_datagram());
    rules.insert(libc::SYS_io_uring_setup, Vec::new());
    let mut socket = unix_datagram();
    if sockets == Sockets::TcpOnly {
        for (call, arg) in [
            (libc::SYS_sendto, 3),
            (libc::SYS_sendmsg, 2),
            (libc::SYS_sendmmsg, 3),
        ] {
            let fast_open = libc::MSG_FASTOPEN as u64;
            rules.insert(
                call,
                vec![rule(vec![dword(
                    arg,
                    SeccompCmpOp::MaskedEq(fast_open),
                    fast_open,
                )])],
            );
        }
        for family in [libc::AF_INET, libc::AF_INET6] {
            // Every type but SOCK_STREAM (10: SOCK_PACKET), one rule each, as dsh gave them.
            let not_stream = [
                libc::SOCK_DGRAM,
                libc::SOCK_RAW,
                libc::SOCK_RDM,
                libc::SOCK_SEQPACKET,
                libc::SOCK_DCCP,
                10,
            ];
            for k in not_stream {
                socket.push(rule(vec![eq(0, family), kind(1, k)]));
            }
            socket.push(rule(vec![
                eq(0, family),
                ne0(2),
                dword(2, SeccompCmpOp::Ne, libc::IPPROTO_TCP as u64),
            ]));
        }
    }
    rules.insert(libc::SYS_socket, socket);
    let arch = TargetArch::try_from(std::env::consts::ARCH).unwrap();
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .unwrap();
    let program: seccompiler::BpfProgram = filter.try_into().unwrap();
    let insn = |code: u32, jt, jf, k| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    let mut guarded = Vec::new();
    if cfg!(target_arch = "x86_64") {
        guarded.extend([
            insn(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0, 0, 0),
            insn(
                libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K,
                0,
                1,
                0x4000_0000,
            ),
            insn(
                libc::BPF_RET | libc::BPF_K,
                0,
                0,
                libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
            ),
        ]);
    }
    guarded.extend(
        program
            .into_iter()
            .map(|i| insn(u32::from(i.code), i.jt, i.jf, i.k)),
    );
    guarded
}

/// Argument values that sit on and beside every constant the rules compare with.
const VALUES: [u64; 16] = [
    0,
    1,
    2,
    3,
    4,
    5,
    6,
    10,
    17,
    0x800 | 2,             // SOCK_NONBLOCK | SOCK_DGRAM
    0x80000 | 1,           // SOCK_CLOEXEC | SOCK_STREAM
    0x2000_0000,           // MSG_FASTOPEN
    0x2000_0040,           // MSG_FASTOPEN | MSG_DONTWAIT
    0xffff_ffff,           // -1 as an int
    0x1_0000_0000,         // only the high half set (a pointer)
    0xdead_beef_0000_000a, // garbage high half, AF_INET6 low
];

fn data(nr: u32, args: [u64; 6]) -> Data {
    Data {
        nr,
        arch: bpf::AUDIT_ARCH,
        args,
    }
}

#[test]
fn the_program_decides_like_seccompiler_on_every_call_and_argument_grid() {
    for sockets in [Sockets::Any, Sockets::TcpOnly] {
        let filter = Filter::build(sockets).unwrap();
        let ours = &filter.inner.program;
        let theirs = reference(sockets);
        let mut compared = 0usize;
        let mut refused = 0usize;
        let check = |d: &Data, compared: &mut usize, refused: &mut usize| {
            let (a, _) = interpreter::run(ours, d);
            let (b, _) = interpreter::run(&theirs, d);
            assert_eq!(a, b, "{sockets:?}: nr {} args {:x?}", d.nr, d.args);
            *compared += 1;
            *refused += usize::from(a != libc::SECCOMP_RET_ALLOW);
        };
        // Every number, with a few argument sets.
        for nr in (0..1024).chain([0x4000_0000, 0x4000_0029, 0xffff_ffff]) {
            for args in [[0; 6], [1; 6], [2, 2, 1, 0x2000_0000, 0, 0]] {
                check(&data(nr, args), &mut compared, &mut refused);
            }
        }
        // The listed calls on the whole grid of their first four arguments.
        for &nr in filter_calls(sockets).iter() {
            for a in VALUES {
                for b in VALUES {
                    for c in VALUES {
                        for d in VALUES {
                            check(&data(nr, [a, b, c, d, 0, 0]), &mut compared, &mut refused);
                        }
                    }
                }
            }
        }
        assert!(
            compared > 500_000 && refused > 10_000,
            "{compared} {refused}"
        );
    }
}

fn filter_calls(sockets: Sockets) -> Vec<u32> {
    refusals(sockets).keys().copied().collect()
}

#[test]
fn another_architecture_is_killed() {
    let filter = Filter::build(Sockets::Any).unwrap();
    // i386's numbers (socketcall is 102, connect's own number 362).
    for nr in [0, 102, 362, 0x4000_0000] {
        let d = Data {
            nr,
            arch: 0x4000_0003,
            args: [0; 6],
        };
        for program in [&filter.inner.program, &filter.inner.gated] {
            assert_eq!(
                interpreter::run(program, &d).0,
                libc::SECCOMP_RET_KILL_PROCESS
            );
        }
    }
}

#[test]
fn the_gated_form_hands_connect_to_dsh_and_is_otherwise_the_same() {
    for sockets in [Sockets::Any, Sockets::TcpOnly] {
        let filter = Filter::build(sockets).unwrap();
        let connect = libc::SYS_connect as u32;
        for nr in 0..1024 {
            for args in [[0; 6], [1, 2, 3, 0x2000_0000, 0, 0]] {
                let d = data(nr, args);
                let plain = interpreter::run(&filter.inner.program, &d).0;
                let gated = interpreter::run(&filter.inner.gated, &d).0;
                if nr == connect {
                    assert_eq!(plain, libc::SECCOMP_RET_ALLOW);
                    assert_eq!(gated, libc::SECCOMP_RET_USER_NOTIF);
                } else {
                    assert_eq!(plain, gated, "nr {nr}");
                }
            }
        }
    }
}

/// What makes the program cheap to install: the kernel emulates it for every call number to find
/// the ones it always allows, so an allowed call must be settled in a few instructions (the
/// architecture, the number, the x32 bit, a binary search), not a walk past every listed call.
#[test]
fn an_allowed_call_is_settled_in_a_few_instructions() {
    for sockets in [Sockets::Any, Sockets::TcpOnly] {
        let filter = Filter::build(sockets).unwrap();
        let listed = filter_calls(sockets);
        let mut longest = 0;
        for nr in (0..1024).filter(|nr| !listed.contains(nr)) {
            for program in [&filter.inner.program, &filter.inner.gated] {
                let (action, steps) = interpreter::run(program, &data(nr, [0; 6]));
                if nr != libc::SYS_connect as u32 {
                    assert_eq!(action, libc::SECCOMP_RET_ALLOW, "nr {nr}");
                }
                longest = longest.max(steps);
            }
        }
        // 4 before the search, at most ⌈log2(16)⌉ + 1 comparisons in it, the return.
        assert!(longest <= 10, "{sockets:?}: {longest} instructions");
        let (_, theirs) = interpreter::run(&reference(sockets), &data(200, [0; 6]));
        assert!(theirs > 2 * longest, "seccompiler's layout takes {theirs}");
    }
}

#[test]
fn x32_numbers_are_refused_by_both_forms() {
    if !cfg!(target_arch = "x86_64") {
        return;
    }
    for sockets in [Sockets::Any, Sockets::TcpOnly] {
        let filter = Filter::build(sockets).unwrap();
        for program in [&filter.inner.program, &filter.inner.gated] {
            for nr in [
                0x4000_0000,
                0x4000_0000 + 42,
                0x4000_0000 + 425,
                0x7fff_ffff,
                u32::MAX,
            ] {
                let (action, _) = interpreter::run(program, &data(nr, [0; 6]));
                assert_eq!(
                    action,
                    libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
                    "nr {nr:#x}"
                );
            }
        }
    }
}

/// The compiler's corners the module's rules do not reach: nothing listed, a pointer test that is
/// not a rule's last condition, an empty set of values.
#[test]
fn the_compiler_handles_rules_the_filter_does_not_use() {
    use bpf::{Cmp, Cond, Refusal, Rules};
    let refused = |action: u32| action == libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    let nothing = bpf::compile(&Rules::default()).unwrap();
    for nr in 0..1024 {
        assert_eq!(
            interpreter::run(&nothing, &data(nr, [0; 6])).0,
            libc::SECCOMP_RET_ALLOW
        );
    }
    if cfg!(target_arch = "x86_64") {
        assert!(refused(
            interpreter::run(&nothing, &data(0x4000_0001, [0; 6])).0
        ));
    }
    let mut rules = Rules::default();
    let pointer_then_five = vec![
        Cond {
            arg: 0,
            cmp: Cmp::NonNull,
        },
        Cond {
            arg: 1,
            cmp: Cmp::Eq(5),
        },
    ];
    rules
        .refused
        .insert(100, Refusal::When(vec![pointer_then_five]));
    let never = Cond {
        arg: 0,
        cmp: Cmp::OneOf {
            mask: u32::MAX,
            values: &[],
        },
    };
    rules.refused.insert(101, Refusal::When(vec![vec![never]]));
    let program = bpf::compile(&rules).unwrap();
    for a in VALUES {
        for b in VALUES {
            let (action, _) = interpreter::run(&program, &data(100, [a, b, 0, 0, 0, 0]));
            assert_eq!(refused(action), a != 0 && b as u32 == 5, "{a:#x} {b:#x}");
            let (action, _) = interpreter::run(&program, &data(101, [a, b, 0, 0, 0, 0]));
            assert_eq!(action, libc::SECCOMP_RET_ALLOW);
        }
    }
}
