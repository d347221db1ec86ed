//! The pseudo-terminal pair: a real child with the slave as its controlling terminal sees it as
//! its `tty`, its echo switches are visible on the master, and a resize reaches it.

use crate::terminal::Session;
use dsh_contain::pty::Size;
use dsh_test_support::wait::{SOON, wait_until};

#[test]
fn the_child_sees_the_slave_as_its_controlling_terminal_and_stdio() {
    let mut s = Session::tty(
        &[
            "sh",
            "-c",
            "tty; tty <&1; tty <&2; ps -o tty= -p $$; echo pgid=$(ps -o pgid= -p $$ | tr -d ' ') sid=$(ps -o sid= -p $$ | tr -d ' '); echo done",
        ],
        Size::DEFAULT,
    );
    let text = s.read_until("done");
    let path = s.pty().slave_path().to_str().unwrap().to_owned();
    assert_eq!(
        text.matches(&path).count(),
        3,
        "fds 0, 1 and 2 are the slave: {text:?}"
    );
    let pts = path.trim_start_matches("/dev/");
    assert!(
        text.contains(&format!("{pts}\r\n")),
        "ps shows the controlling tty: {text:?}"
    );
    let pid = s.pid();
    assert!(text.contains(&format!("pgid={pid} sid={pid}")), "{text:?}");
    // ONLCR: the terminal turns the program's \n into \r\n, as a real one does.
    assert!(text.contains("\r\n"), "{text:?}");
}

#[test]
fn the_foreground_group_is_the_session_leader_until_it_exits() {
    let mut s = Session::tty(&["sh", "-c", "echo ready; read x"], Size::DEFAULT);
    s.read_until("ready");
    assert_eq!(s.pty().foreground_group().unwrap(), Some(s.pid()));
    s.write(b"\n");
    s.child.wait().unwrap();
    assert!(wait_until(SOON, || s.pty().foreground_group().unwrap()
        != Some(s.pid())));
}

#[test]
fn echo_is_off_at_a_read_s_prompt_and_on_at_a_read_p_prompt() {
    let mut s = Session::tty(
        &[
            "bash",
            "-c",
            "read -p 'name? ' a; read -s -p 'secret? ' b; echo; echo \"got=$a/$b\"",
        ],
        Size::DEFAULT,
    );
    s.read_until("name? ");
    let mode = s.pty().line_mode().unwrap();
    assert!(mode.echo && mode.canonical && !mode.hidden(), "{mode:?}");
    s.write(b"ann\n");
    s.read_until("secret? ");
    assert!(
        wait_until(SOON, || s.pty().line_mode().unwrap().hidden()),
        "read -s turns echo off in line mode"
    );
    s.write(b"hunter2\n");
    let text = s.read_until("got=ann/hunter2");
    assert_eq!(text.matches("hunter2").count(), 1, "not echoed: {text:?}");
    assert!(
        text.contains("ann\r\n"),
        "the plain answer is echoed: {text:?}"
    );
}

#[test]
fn a_resize_is_seen_by_stty_size() {
    let mut s = Session::tty(
        &["sh", "-c", "stty size; read x; stty size; echo end"],
        Size {
            rows: 40,
            cols: 120,
        },
    );
    s.read_until("40 120");
    s.pty()
        .resize(Size {
            rows: 25,
            cols: 100,
        })
        .unwrap();
    assert_eq!(
        s.pty().size().unwrap(),
        Size {
            rows: 25,
            cols: 100
        }
    );
    s.write(b"\n");
    s.read_until("25 100\r\nend");
}

#[test]
fn output_is_pending_on_the_master_until_read() {
    let mut s = Session::tty(&["sh", "-c", "echo 12345; read x"], Size::DEFAULT);
    assert!(wait_until(SOON, || s.pty().pending_output().unwrap() > 0));
    s.read_until("12345");
    assert_eq!(s.pty().pending_output().unwrap(), 0);
}
