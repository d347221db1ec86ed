//! The key names of `bash_write {keys}` (issue 22, point 2) and the bytes each one sends.
//!
//! It lives here, not with the terminal code, because the names are model-facing vocabulary:
//! they are validated with the other arguments, before anything reaches a process, and the error
//! is a contract string. What a key *does* depends on where the input goes, which the caller
//! knows:
//!
//! - under a terminal, every key is bytes written to the master, as xterm sends them
//!   ([`Key::terminal_bytes`]); the line discipline turns `C-c`, `C-z`, `C-\` into `SIGINT`,
//!   `SIGTSTP`, `SIGQUIT` for the foreground process group and `C-d` into end-of-file at the
//!   start of a line, as for a person at a keyboard;
//! - with `stdin: "open"` (a pipe, no line discipline), `C-c` is a `SIGINT` the runtime sends
//!   to the task's processes, `C-d` closes the pipe (end of input), and the other keys are the
//!   bytes a program reading a pipe expects (`Enter` is `\n`) ([`Key::pipe_input`]).
//!
//! The bytes are xterm's (`TERM=xterm-256color`, which dsh sets): `Enter` is `\r` (the terminal's
//! `ICRNL` makes it `\n` for a line-mode reader), `Backspace` is DEL (`0x7f`, the pty's default
//! `VERASE`), the cursor keys are `ESC [ A`… in normal cursor mode and `ESC O A`… once the
//! program switched the terminal to application cursor mode (`DECCKM`: `less`, `vim`, readline
//! in some setups; the emulator tells which), `Home`/`End` follow the same rule (`ESC [ H` /
//! `ESC O H`), and `PageUp`, `PageDown`, `Delete` are `ESC [ 5 ~`, `ESC [ 6 ~`, `ESC [ 3 ~`.

use std::fmt;

/// One named key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// `Enter`.
    Enter,
    /// `Tab`.
    Tab,
    /// `Backspace`.
    Backspace,
    /// `Escape`.
    Escape,
    /// `Up`.
    Up,
    /// `Down`.
    Down,
    /// `Left`.
    Left,
    /// `Right`.
    Right,
    /// `Home`.
    Home,
    /// `End`.
    End,
    /// `PageUp`.
    PageUp,
    /// `PageDown`.
    PageDown,
    /// `Delete`.
    Delete,
    /// `C-a` … `C-z` and `C-\`: Ctrl with the byte given (a lowercase letter or `\`).
    Ctrl(u8),
}

/// The named keys other than the Ctrl combinations, as the model spells them.
const NAMED: [(&str, Key); 13] = [
    ("Enter", Key::Enter),
    ("Tab", Key::Tab),
    ("Backspace", Key::Backspace),
    ("Escape", Key::Escape),
    ("Up", Key::Up),
    ("Down", Key::Down),
    ("Left", Key::Left),
    ("Right", Key::Right),
    ("Home", Key::Home),
    ("End", Key::End),
    ("PageUp", Key::PageUp),
    ("PageDown", Key::PageDown),
    ("Delete", Key::Delete),
];

/// The list of known keys, as the error and the tool's schema description show it.
pub const KNOWN_KEYS: &str = "Enter, Tab, Backspace, Escape, Up, Down, Left, Right, Home, End, \
                              PageUp, PageDown, Delete, C-a … C-z, C-\\";

/// What a key means for a task whose stdin is a pipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PipeInput {
    /// Write these bytes.
    Bytes(&'static [u8]),
    /// `C-c`: send `SIGINT` to the task's processes.
    Interrupt,
    /// `C-d`: close the task's stdin (end of input).
    EndOfInput,
}

impl Key {
    /// Parses one key name: a named key (exact spelling, or any case: `enter` is `Enter`), or
    /// `C-` with a letter (either case) or `\`.
    pub fn parse(name: &str) -> Result<Key, UnknownKey> {
        if let Some(&(_, key)) = NAMED
            .iter()
            .find(|(known, _)| known.eq_ignore_ascii_case(name))
        {
            return Ok(key);
        }
        if let Some(rest) = name.strip_prefix("C-").or_else(|| name.strip_prefix("c-"))
            && let [byte] = rest.as_bytes()
        {
            match byte.to_ascii_lowercase() {
                letter @ b'a'..=b'z' => return Ok(Key::Ctrl(letter)),
                b'\\' => return Ok(Key::Ctrl(b'\\')),
                _ => {}
            }
        }
        Err(UnknownKey(name.to_owned()))
    }

    /// The bytes an xterm sends for this key; `application_cursor` is the terminal's `DECCKM`
    /// mode (cursor keys and Home/End as `ESC O x` instead of `ESC [ x`).
    pub fn terminal_bytes(self, application_cursor: bool) -> &'static [u8] {
        let cursor = |normal: &'static [u8], application: &'static [u8]| {
            if application_cursor {
                application
            } else {
                normal
            }
        };
        match self {
            Key::Enter => b"\r",
            Key::Tab => b"\t",
            Key::Backspace => b"\x7f",
            Key::Escape => b"\x1b",
            Key::Up => cursor(b"\x1b[A", b"\x1bOA"),
            Key::Down => cursor(b"\x1b[B", b"\x1bOB"),
            Key::Right => cursor(b"\x1b[C", b"\x1bOC"),
            Key::Left => cursor(b"\x1b[D", b"\x1bOD"),
            Key::Home => cursor(b"\x1b[H", b"\x1bOH"),
            Key::End => cursor(b"\x1b[F", b"\x1bOF"),
            Key::PageUp => b"\x1b[5~",
            Key::PageDown => b"\x1b[6~",
            Key::Delete => b"\x1b[3~",
            Key::Ctrl(byte) => ctrl_byte(byte),
        }
    }

    /// What the key means for a task whose stdin is a pipe (no terminal, no line discipline).
    pub fn pipe_input(self) -> PipeInput {
        match self {
            Key::Ctrl(b'c') => PipeInput::Interrupt,
            Key::Ctrl(b'd') => PipeInput::EndOfInput,
            Key::Enter => PipeInput::Bytes(b"\n"),
            other => PipeInput::Bytes(other.terminal_bytes(false)),
        }
    }
}

/// `C-x` as a control byte: the letter's code with the top three bits cleared (`C-a` 0x01 …
/// `C-z` 0x1a, `C-\` 0x1c).
fn ctrl_byte(byte: u8) -> &'static [u8] {
    static CONTROL: [u8; 32] = {
        let mut table = [0u8; 32];
        let mut i = 0;
        while i < 32 {
            table[i] = i as u8;
            i += 1;
        }
        table
    };
    let code = usize::from(byte & 0x1f);
    CONTROL.get(code..=code).unwrap_or(&[])
}

/// Parses `keys` in order, failing on the first unknown name.
pub fn parse_keys<S: AsRef<str>>(names: &[S]) -> Result<Vec<Key>, UnknownKey> {
    names.iter().map(|name| Key::parse(name.as_ref())).collect()
}

/// A key name that is not one of [`KNOWN_KEYS`]. Its `Display` is the contract's error text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownKey(pub String);

/// The longest part of an unknown name the error repeats.
const SHOWN: usize = 40;

impl fmt::Display for UnknownKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name: String = self.0.chars().take(SHOWN).collect();
        let more = if self.0.chars().count() > SHOWN {
            "…"
        } else {
            ""
        };
        write!(
            f,
            "invalid keys: unknown key \"{}{more}\"; known keys: {KNOWN_KEYS}",
            name.escape_debug()
        )
    }
}

impl std::error::Error for UnknownKey {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_key_parses_and_sends_xterm_bytes() {
        let expected: [(&str, &[u8]); 13] = [
            ("Enter", b"\r"),
            ("Tab", b"\t"),
            ("Backspace", b"\x7f"),
            ("Escape", b"\x1b"),
            ("Up", b"\x1b[A"),
            ("Down", b"\x1b[B"),
            ("Left", b"\x1b[D"),
            ("Right", b"\x1b[C"),
            ("Home", b"\x1b[H"),
            ("End", b"\x1b[F"),
            ("PageUp", b"\x1b[5~"),
            ("PageDown", b"\x1b[6~"),
            ("Delete", b"\x1b[3~"),
        ];
        for (name, bytes) in expected {
            assert_eq!(
                Key::parse(name).unwrap().terminal_bytes(false),
                bytes,
                "{name}"
            );
            assert!(KNOWN_KEYS.contains(name), "{name} is listed");
        }
        assert_eq!(Key::parse("enter"), Ok(Key::Enter));
        assert_eq!(Key::parse("PAGEUP"), Ok(Key::PageUp));
    }

    #[test]
    fn application_cursor_mode_changes_cursor_keys_only() {
        let app = |name| Key::parse(name).unwrap().terminal_bytes(true);
        assert_eq!(app("Up"), b"\x1bOA");
        assert_eq!(app("Down"), b"\x1bOB");
        assert_eq!(app("Right"), b"\x1bOC");
        assert_eq!(app("Left"), b"\x1bOD");
        assert_eq!(app("Home"), b"\x1bOH");
        assert_eq!(app("End"), b"\x1bOF");
        assert_eq!(app("PageUp"), b"\x1b[5~");
        assert_eq!(app("Enter"), b"\r");
    }

    #[test]
    fn ctrl_letters_and_backslash_are_control_bytes() {
        for (offset, letter) in (b'a'..=b'z').enumerate() {
            let name = format!("C-{}", letter as char);
            let key = Key::parse(&name).unwrap();
            assert_eq!(key.terminal_bytes(false), &[offset as u8 + 1], "{name}");
            assert_eq!(Key::parse(&name.to_uppercase()), Ok(key));
        }
        assert_eq!(Key::parse("C-c").unwrap().terminal_bytes(false), b"\x03");
        assert_eq!(Key::parse("C-d").unwrap().terminal_bytes(false), b"\x04");
        assert_eq!(Key::parse("C-z").unwrap().terminal_bytes(false), b"\x1a");
        assert_eq!(Key::parse("C-\\").unwrap().terminal_bytes(false), b"\x1c");
    }

    #[test]
    fn on_a_pipe_ctrl_c_interrupts_ctrl_d_ends_input_and_enter_is_a_newline() {
        let pipe = |name| Key::parse(name).unwrap().pipe_input();
        assert_eq!(pipe("C-c"), PipeInput::Interrupt);
        assert_eq!(pipe("C-d"), PipeInput::EndOfInput);
        assert_eq!(pipe("Enter"), PipeInput::Bytes(b"\n"));
        assert_eq!(pipe("Tab"), PipeInput::Bytes(b"\t"));
        assert_eq!(pipe("Up"), PipeInput::Bytes(b"\x1b[A"));
        assert_eq!(pipe("C-z"), PipeInput::Bytes(b"\x1a"));
    }

    #[test]
    fn unknown_keys_are_named_in_the_error_with_the_known_ones() {
        for bad in ["Return", "C-", "C-1", "C-ab", "M-x", "", "F1", "Ctrl-c"] {
            assert!(Key::parse(bad).is_err(), "{bad:?}");
        }
        let err = parse_keys(&["Enter", "Spacebar", "Nope"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid keys: unknown key \"Spacebar\"; known keys: Enter, Tab, Backspace, Escape, \
             Up, Down, Left, Right, Home, End, PageUp, PageDown, Delete, C-a … C-z, C-\\"
        );
        let odd = Key::parse("a\"b\nc").unwrap_err().to_string();
        assert!(
            odd.starts_with("invalid keys: unknown key \"a\\\"b\\nc\";"),
            "{odd}"
        );
        let long = Key::parse(&"x".repeat(100)).unwrap_err().to_string();
        assert!(long.contains(&format!("\"{}…\"", "x".repeat(40))), "{long}");
    }

    #[test]
    fn keys_parse_in_order() {
        assert_eq!(
            parse_keys(&["Escape", "C-x", "Enter"]).unwrap(),
            vec![Key::Escape, Key::Ctrl(b'x'), Key::Enter]
        );
        assert_eq!(parse_keys::<&str>(&[]).unwrap(), vec![]);
    }
}
