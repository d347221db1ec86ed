//! `bash_output`'s `until`: a regular expression matched against each stream's unread text as the
//! text is written, one byte at a time, so that a match is found however much has been written past
//! it, and matching costs no copy of the text.
//!
//! The engine is a lazy DFA (`regex-automata`'s hybrid DFA, the one the `regex` crate itself runs
//! first) walked byte by byte: its state after the bytes fed so far is all a scan keeps, and "does
//! the pattern match the text so far" is whether a match state was reached, or is reached by the
//! end-of-text transition (how `$`, `\b` at the end, or a match on the last byte are judged). That
//! is exactly `Regex::is_match` on the whole unread text, asked after every write, with no limit on
//! how far apart a match's first and last bytes are.
//!
//! Two cases leave the DFA for a bounded fallback that runs the `regex` crate on the last
//! [`CARRY`] bytes: a pattern with a Unicode word boundary meeting non-ASCII text (the lazy DFA
//! gives up there), and a DFA cache cleared while judging the end of the text (its state would be
//! stale). There, a match spanning more than [`CARRY`] bytes is not seen.
//!
//! Text is matched as bytes: invalid UTF-8 matches no character (a read shows it as U+FFFD).

use std::sync::Arc;

use dsh_tasks::{OutputCondition, OutputScan};
use regex_automata::Anchored;
use regex_automata::hybrid::LazyStateID;
use regex_automata::hybrid::dfa::{Cache, DFA};
use regex_automata::nfa::thompson;
use regex_automata::util::{start, syntax};

/// Bytes the fallback matches over: a match longer than this may be missed there.
const CARRY: usize = 64 * 1024;
/// Bytes a DFA scan keeps of its latest text, so a switch to the fallback loses no match that
/// spans the switch by less than this.
const RECENT: usize = 4 * 1024;
/// The most memory one scan's DFA cache may take (it is cleared and refilled beyond).
const CACHE_BYTES: usize = 256 * 1024;

/// A compiled `until` pattern.
#[derive(Clone, Debug)]
pub struct UntilPattern {
    /// `None` when the pattern cannot be a lazy DFA (it then always uses the fallback).
    dfa: Option<Arc<DFA>>,
    fallback: regex::bytes::Regex,
}

impl UntilPattern {
    /// Compiles `pattern` (Rust `regex` syntax) with at most `size_limit` bytes of compiled program;
    /// the error is the `regex` crate's.
    pub fn new(pattern: &str, size_limit: usize) -> Result<Self, regex::Error> {
        // The text form validates: its errors are the contract's, and it refuses what could match
        // invalid UTF-8.
        regex::RegexBuilder::new(pattern)
            .size_limit(size_limit)
            .build()?;
        let fallback = regex::bytes::RegexBuilder::new(pattern)
            .size_limit(size_limit)
            .build()?;
        let dfa = DFA::builder()
            .configure(
                DFA::config()
                    .unicode_word_boundary(true)
                    .cache_capacity(CACHE_BYTES)
                    .skip_cache_capacity_check(true),
            )
            .syntax(syntax::Config::new())
            .thompson(thompson::Config::new().nfa_size_limit(Some(size_limit)))
            .build(pattern)
            .map_err(|err| tracing::debug!(%err, "until: no lazy DFA; matching with the fallback"))
            .ok()
            .map(Arc::new);
        Ok(Self { dfa, fallback })
    }
}

impl OutputCondition for UntilPattern {
    fn scan(&self) -> Box<dyn OutputScan> {
        let engine = match &self.dfa {
            Some(dfa) => Engine::start(dfa.clone())
                .unwrap_or_else(|| Engine::carry(self.fallback.clone(), Vec::new())),
            None => Engine::carry(self.fallback.clone(), Vec::new()),
        };
        Box::new(UntilScan {
            engine,
            fallback: self.fallback.clone(),
        })
    }
}

/// One stream's scan.
struct UntilScan {
    engine: Engine,
    fallback: regex::bytes::Regex,
}

/// How a scan matches.
enum Engine {
    /// Walking the lazy DFA: its state after every byte fed, and the latest bytes.
    Dfa {
        dfa: Arc<DFA>,
        cache: Box<Cache>,
        state: LazyStateID,
        recent: Vec<u8>,
    },
    /// The bounded fallback: the last [`CARRY`] bytes, and whether older ones were dropped (the
    /// first byte kept is then only context: look-behind for `^` and `\b`).
    Carry {
        regex: regex::bytes::Regex,
        carry: Vec<u8>,
        trimmed: bool,
    },
}

impl Engine {
    /// A DFA scan at the start of a text; `None` if the DFA gives up at once.
    fn start(dfa: Arc<DFA>) -> Option<Self> {
        let mut cache = Box::new(dfa.create_cache());
        let state = dfa
            .start_state(&mut cache, &start::Config::new().anchored(Anchored::No))
            .ok()?;
        Some(Engine::Dfa {
            dfa,
            cache,
            state,
            recent: Vec::new(),
        })
    }

    fn carry(regex: regex::bytes::Regex, start: Vec<u8>) -> Self {
        Engine::Carry {
            regex,
            carry: start,
            trimmed: false,
        }
    }
}

/// What a DFA walk came to.
enum Walk {
    Holds,
    Goes,
    /// The DFA cannot go on: switch to the fallback with what it had not judged from `from` on.
    GaveUp {
        from: usize,
    },
}

impl UntilScan {
    fn feed_fallback(&mut self, bytes: &[u8]) -> bool {
        let Engine::Carry {
            regex,
            carry,
            trimmed,
        } = &mut self.engine
        else {
            return false;
        };
        carry.extend_from_slice(bytes);
        let start = usize::from(*trimmed);
        if regex.is_match_at(carry, start.min(carry.len())) {
            return true;
        }
        if carry.len() > 2 * CARRY {
            // Keep the last CARRY bytes and one before them as look-behind.
            carry.drain(..carry.len() - CARRY - 1);
            *trimmed = true;
        }
        false
    }

    fn fall_back(&mut self, start: Vec<u8>) {
        self.engine = Engine::carry(self.fallback.clone(), start);
    }
}

impl OutputScan for UntilScan {
    fn feed(&mut self, bytes: &[u8]) -> bool {
        let Engine::Dfa {
            dfa,
            cache,
            state,
            recent,
        } = &mut self.engine
        else {
            return self.feed_fallback(bytes);
        };
        let walk = walk(dfa, cache, state, bytes);
        match walk {
            Walk::Holds => true,
            Walk::GaveUp { from } => {
                let mut start = std::mem::take(recent);
                start.extend_from_slice(&bytes[..from]);
                self.fall_back(start);
                self.feed_fallback(&bytes[from..])
            }
            Walk::Goes => {
                keep_recent(recent, bytes);
                // The end of the text so far: a match on its last byte, `$`, `\b`.
                let clears = cache.clear_count();
                let end = dfa.next_eoi_state(cache, *state);
                if end.as_ref().is_ok_and(|end| end.is_match()) {
                    return true;
                }
                if end.is_err() || cache.clear_count() != clears {
                    // The cache was cleared under the current state, which is stale now.
                    let start = std::mem::take(recent);
                    self.fall_back(start);
                }
                false
            }
        }
    }

    fn gap(&mut self) {
        let restarted = match &self.engine {
            Engine::Dfa { dfa, .. } => Engine::start(dfa.clone()),
            Engine::Carry { .. } => None,
        };
        self.engine = restarted.unwrap_or_else(|| Engine::carry(self.fallback.clone(), Vec::new()));
    }
}

/// Walks `bytes` from `state`.
fn walk(dfa: &DFA, cache: &mut Cache, state: &mut LazyStateID, bytes: &[u8]) -> Walk {
    for (at, byte) in bytes.iter().enumerate() {
        let Ok(next) = dfa.next_state(cache, *state, *byte) else {
            return Walk::GaveUp { from: at };
        };
        if next.is_tagged() {
            if next.is_match() {
                return Walk::Holds;
            }
            if next.is_quit() {
                return Walk::GaveUp { from: at };
            }
            // Dead: no match can start anywhere in this text any more (`\A…`); stay there.
        }
        *state = next;
    }
    Walk::Goes
}

/// Keeps the last [`RECENT`] bytes of the text in `recent`.
fn keep_recent(recent: &mut Vec<u8>, bytes: &[u8]) {
    recent.extend_from_slice(&bytes[bytes.len().saturating_sub(RECENT)..]);
    if recent.len() > 2 * RECENT {
        recent.drain(..recent.len() - RECENT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(p: &str) -> UntilPattern {
        UntilPattern::new(p, 1 << 20).unwrap()
    }

    /// Feeds `chunks` one by one; the index of the chunk after which the scan holds.
    fn holds_after(p: &UntilPattern, chunks: &[&[u8]]) -> Option<usize> {
        let mut scan = p.scan();
        chunks.iter().position(|chunk| scan.feed(chunk))
    }

    #[test]
    fn a_match_spanning_many_writes_is_found_where_it_completes() {
        let p = pattern(r"ready: (\d+) workers");
        let chunks: [&[u8]; 5] = [b"starting\nrea", b"dy: ", b"1", b"2 work", b"ers\n"];
        assert_eq!(holds_after(&p, &chunks), Some(4));
        assert_eq!(holds_after(&p, &chunks[..4]), None);
    }

    #[test]
    fn a_match_far_behind_a_flood_is_still_seen() {
        let p = pattern(r"(?s)BEGIN.*END");
        let mut scan = p.scan();
        assert!(!scan.feed(b"BEGIN"));
        let flood = vec![b'x'; 1 << 20];
        for _ in 0..10 {
            assert!(!scan.feed(&flood));
        }
        assert!(scan.feed(b"END"));
    }

    #[test]
    fn the_end_of_the_text_is_judged_after_each_write() {
        // A match on the very last byte, with nothing after it yet.
        assert_eq!(holds_after(&pattern("done"), &[b"all ", b"done"]), Some(1));
        assert_eq!(holds_after(&pattern("done$"), &[b"done", b"!"]), Some(0));
        assert_eq!(holds_after(&pattern(r"(?m)^ok$"), &[b"ok", b"\n"]), Some(0));
        assert_eq!(
            holds_after(&pattern(r"\bok\b"), &[b"look ", b"ok"]),
            Some(1)
        );
        // An empty pattern holds on an empty text.
        assert_eq!(holds_after(&pattern(""), &[b""]), Some(0));
        // Anchored at the start of the unread text, as before.
        assert_eq!(holds_after(&pattern(r"\Aab"), &[b"xab", b"ab"]), None);
        assert_eq!(holds_after(&pattern(r"^ab"), &[b"a", b"b"]), Some(1));
    }

    #[test]
    fn a_gap_starts_a_new_text() {
        let p = pattern("abc");
        let mut scan = p.scan();
        assert!(!scan.feed(b"ab"));
        scan.gap();
        assert!(!scan.feed(b"c"), "no match across lost bytes");
        assert!(scan.feed(b"abc"));
    }

    #[test]
    fn a_unicode_word_boundary_over_non_ascii_text_falls_back_and_still_matches() {
        let p = pattern(r"\bgrüße\b");
        assert_eq!(
            holds_after(
                &p,
                &["viele ".as_bytes(), "grü".as_bytes(), "ße!".as_bytes()]
            ),
            Some(2)
        );
        assert_eq!(holds_after(&p, &["viele grüßen".as_bytes()]), None);
    }

    #[test]
    fn the_first_write_it_holds_after_is_the_regex_crates_first_matching_prefix() {
        let patterns = [
            r"\d{3}-\d{4}",
            r"(?m)^error: .*$",
            r"warn|fail(ed)?",
            r"[[:alpha:]]+\s+\d+\z",
            r"(?i)READY",
            r"é+",
            r"\bwarn\b",
            r"(?s)error.*é",
        ];
        let text = "line 1\nerror: disk full\nfailed 555-1234\nready é\nwarn";
        // One character per write.
        let ends: Vec<usize> = text.char_indices().map(|(i, c)| i + c.len_utf8()).collect();
        for p in patterns {
            let until = pattern(p);
            let regex = regex::Regex::new(p).unwrap();
            let mut scan = until.scan();
            let mut start = 0;
            let mut ours = None;
            for &end in &ends {
                if scan.feed(&text.as_bytes()[start..end]) {
                    ours = Some(end);
                    break;
                }
                start = end;
            }
            let theirs = ends
                .iter()
                .copied()
                .find(|&end| regex.is_match(&text[..end]));
            assert!(theirs.is_some(), "{p} never matches the test text");
            assert_eq!(ours, theirs, "{p}");
        }
    }
}
