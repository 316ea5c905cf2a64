//! Glob-style patterns as Redis's KEYS, SCAN MATCH and friends read them:
//! `*` any run, `?` one byte, `[abc]`, `[^abc]`, `[a-z]` (reversed ranges
//! swap their ends; bytes compare as C's signed chars do), `\x` the byte
//! x. An unclosed `[` ends the pattern there. Case-sensitive.

/// Byte `at` of `bytes`, or 0 past the end (Redis's patterns and keys are
/// NUL-terminated; its matcher reads that terminator in two places).
fn byte(bytes: &[u8], at: usize) -> u8 {
    bytes.get(at).copied().unwrap_or(0)
}

/// Whether `pattern` matches all of `subject`.
pub fn matches(pattern: &[u8], subject: &[u8]) -> bool {
    let mut give_up = false;
    match_from(pattern, subject, &mut give_up)
}

fn match_from(pattern: &[u8], subject: &[u8], give_up: &mut bool) -> bool {
    let (mut p, mut s) = (0usize, 0usize);
    while p < pattern.len() && s < subject.len() {
        match pattern[p] {
            b'*' => {
                while p + 1 < pattern.len() && pattern[p + 1] == b'*' {
                    p += 1;
                }
                if p + 1 == pattern.len() {
                    return true;
                }
                while s < subject.len() {
                    if match_from(&pattern[p + 1..], &subject[s..], give_up) {
                        return true;
                    }
                    if *give_up {
                        return false;
                    }
                    s += 1;
                }
                // No suffix of the subject matches the rest: a longer
                // match of an earlier star cannot help either.
                *give_up = true;
                return false;
            }
            b'?' => s += 1,
            b'[' => {
                let (matched, end) = class(pattern, p + 1, subject[s]);
                if !matched {
                    return false;
                }
                p = end;
                s += 1;
            }
            literal => {
                let expected = if literal == b'\\' && p + 1 < pattern.len() {
                    p += 1;
                    pattern[p]
                } else {
                    literal
                };
                if expected != subject[s] {
                    return false;
                }
                s += 1;
            }
        }
        p += 1;
        if s == subject.len() {
            while byte(pattern, p) == b'*' && p < pattern.len() {
                p += 1;
            }
            break;
        }
    }
    p >= pattern.len() && s == subject.len()
}

/// A `[...]` class starting at `p` (after the `[`) against `c`: whether it
/// matches and the index of its closing `]` (or of the pattern's last
/// byte when it is unclosed).
fn class(pattern: &[u8], mut p: usize, c: u8) -> (bool, usize) {
    let negate = byte(pattern, p) == b'^';
    if negate {
        p += 1;
    }
    let mut matched = false;
    loop {
        let left = pattern.len().saturating_sub(p);
        let current = byte(pattern, p);
        if current == b'\\' && left >= 2 {
            p += 1;
            if pattern[p] == c {
                matched = true;
            }
        } else if current == b']' && left > 0 {
            break;
        } else if left == 0 {
            p -= 1;
            break;
        } else if left >= 3 && pattern[p + 1] == b'-' {
            let (mut start, mut end) = (pattern[p] as i8, pattern[p + 2] as i8);
            if start > end {
                std::mem::swap(&mut start, &mut end);
            }
            let c = c as i8;
            if c >= start && c <= end {
                matched = true;
            }
            p += 2;
        } else if current == c {
            matched = true;
        }
        p += 1;
    }
    (matched != negate, p)
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn stars_question_marks_and_literals() {
        // As Redis's matcher: an empty subject matches no non-empty
        // pattern, "*" included (KEYS and SCAN special-case "*").
        assert!(!matches(b"*", b""));
        assert!(matches(b"*", b"anything"));
        assert!(matches(b"h?llo", b"hello"));
        assert!(!matches(b"h?llo", b"hllo"));
        assert!(matches(b"h*llo", b"hllo"));
        assert!(matches(b"h*llo", b"heeeello"));
        assert!(matches(b"user:*:name", b"user:42:name"));
        assert!(!matches(b"user:*:name", b"user:42:age"));
        assert!(matches(b"a**b", b"ab"));
        assert!(matches(b"ab*", b"ab"));
        assert!(!matches(b"ab?", b"ab"));
        assert!(matches(b"", b""));
        assert!(!matches(b"", b"a"));
    }

    #[test]
    fn classes_ranges_negation_and_escapes() {
        assert!(matches(b"h[ae]llo", b"hello"));
        assert!(matches(b"h[ae]llo", b"hallo"));
        assert!(!matches(b"h[ae]llo", b"hillo"));
        assert!(matches(b"h[^e]llo", b"hallo"));
        assert!(!matches(b"h[^e]llo", b"hello"));
        assert!(matches(b"h[a-b]llo", b"hbllo"));
        assert!(matches(b"h[b-a]llo", b"hallo"), "reversed range");
        assert!(matches(b"h\\*llo", b"h*llo"));
        assert!(!matches(b"h\\*llo", b"hello"));
        assert!(matches(b"[\\]]", b"]"));
        // An unclosed class ends the pattern.
        assert!(matches(b"a[bc", b"ab"));
        assert!(!matches(b"a[bc", b"abx"));
        // A trailing backslash matches itself.
        assert!(matches(b"a\\", b"a\\"));
    }

    #[test]
    fn pathological_patterns_finish_quickly() {
        let subject = vec![b'a'; 64];
        let pattern = b"a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b";
        assert!(!matches(pattern, &subject));
    }
}
