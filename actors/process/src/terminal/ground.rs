//! Whether the escape-sequence parser inside `vt100` (the `vte` crate) is certainly in its ground
//! state after some output: the fast path for plain lines ([`super::plain`]) may take bytes as
//! text only then, because the same bytes right after an unfinished sequence (`ESC [ 3`, an OSC
//! title without its end, half a UTF-8 character) would mean something else to the parser.
//!
//! `vte` does not say which state it is in, so this follows its state table from the last escape
//! byte on, conservatively: whatever it is unsure of counts as not ground, and the slow path keeps
//! the output until a later escape sequence is seen complete.

/// Whether the parser is certainly in the ground state after `bytes`, given whether it was before.
pub(super) fn after(was: bool, bytes: &[u8]) -> bool {
    let tail = match bytes.iter().rposition(|&b| b == 0x1b) {
        None if !was => return false,
        None => bytes,
        Some(at) => match sequence_len(&bytes[at..]) {
            Some(len) => &bytes[at + len..],
            None => return false,
        },
    };
    // Text in the ground state: done unless it ends inside a UTF-8 character (kept by `vte`
    // for the next bytes) or with bytes that are not UTF-8 at all.
    tail.utf8_chunks()
        .last()
        .is_none_or(|chunk| chunk.invalid().is_empty())
}

/// The length of the complete escape sequence at the start of `bytes` (which starts with ESC)
/// after which `vte` is in the ground state; `None` if unfinished or anything else.
fn sequence_len(bytes: &[u8]) -> Option<usize> {
    let &kind = bytes.get(1)?;
    match kind {
        // CSI: parameters and intermediates, then a final byte.
        b'[' => {
            let end = bytes[2..].iter().position(|b| !(0x20..=0x3f).contains(b))?;
            (0x40..=0x7e)
                .contains(&bytes[2 + end])
                .then_some(2 + end + 1)
        }
        // OSC: ends with BEL here (its other end, `ESC \`, would be a later ESC).
        b']' => bytes[2..]
            .iter()
            .position(|&b| b == 0x07)
            .map(|end| 2 + end + 1),
        // DCS, SOS, PM, APC: strings ended only by a later ESC.
        b'P' | b'X' | b'^' | b'_' => None,
        // Intermediates, then a final byte.
        0x20..=0x2f => {
            let end = bytes[1..].iter().position(|b| !(0x20..=0x2f).contains(b))?;
            (0x30..=0x7e)
                .contains(&bytes[1 + end])
                .then_some(1 + end + 1)
        }
        0x30..=0x7e => Some(2),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::after;

    #[test]
    fn complete_sequences_end_in_ground_and_unfinished_ones_do_not() {
        assert!(after(true, b"plain text\r\n"));
        assert!(after(true, b"\x1b[1;31mred\x1b[0m\r\n"));
        assert!(after(false, b"junk \x1b[0m then text"));
        assert!(after(true, b"\x1b]0;title\x07text"));
        assert!(after(true, b"\x1b(Bx"));
        assert!(after(true, b"\x1b7"));
        assert!(!after(false, b"plain text"));
        assert!(!after(true, b"text \x1b[3"));
        assert!(!after(true, b"text \x1b"));
        assert!(!after(true, b"\x1b]0;title without its end"));
        assert!(!after(true, b"\x1bPq#0;2;0;0;0"));
        assert!(!after(true, b"half a character \xe4\xb8"));
        assert!(after(true, b"a whole one \xe4\xb8\xad"));
    }
}
