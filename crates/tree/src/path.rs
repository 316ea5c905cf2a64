//! ZooKeeper path rules (PathUtils.validatePath) and parent/child splitting.

/// Longest path Keel accepts; ZooKeeper has no explicit bound, but a path
/// always fits in one frame, so the frame limit bounds it anyway.
pub const PATH_BYTES_MAX: usize = 64 * 1024;

/// Validates a znode path exactly as ZooKeeper's `PathUtils.validatePath`:
/// absolute, no trailing slash, no empty, "." or ".." segments, no control
/// or reserved characters.
pub fn validate(path: &str) -> bool {
    if let Some(answer) = decided_by_shape(path) {
        return answer;
    }
    // Java walks UTF-16 code units; every rejected range below lies inside
    // the Basic Multilingual Plane except the surrogates, which stand for
    // any supplementary character: those are rejected too. An ASCII path's
    // bytes are its code units (no copy: most paths are ASCII).
    if path.is_ascii() {
        return valid_ascii(path.as_bytes());
    }
    let units: Vec<u16> = path.encode_utf16().collect();
    valid_units(&units)
}

/// What a path's length and ends decide alone: not absolute, too long,
/// "/" itself, a trailing slash (None: its characters must be walked).
fn decided_by_shape(path: &str) -> Option<bool> {
    if path.is_empty() || path.len() > PATH_BYTES_MAX || !path.starts_with('/') {
        return Some(false);
    }
    if path.len() == 1 {
        return Some(true);
    }
    if path.ends_with('/') {
        return Some(false);
    }
    None
}

/// `validate` for an ASCII path of at least two bytes that starts and does
/// not end with a slash: what `valid_units` answers, in two passes the
/// compiler keeps tight (every create validates its path on every node,
/// and the walk below cost about 45 instructions a byte). In ASCII the
/// forbidden code units are the controls and DEL; a segment must not be
/// empty (a doubled slash), "." or "..".
fn valid_ascii(path: &[u8]) -> bool {
    assert!(path.len() >= 2 && path[0] == b'/');
    // Its one caller has just checked it; another scan here would cost
    // what the folds below save.
    debug_assert!(path.is_ascii());
    // Branch-free folds over every byte, which the compiler vectorizes.
    let control = path
        .iter()
        .fold(false, |seen, &b| seen | (b < 0x20) | (b == 0x7f));
    if control {
        return false;
    }
    // Only a slash followed by a slash or a dot can start a bad segment;
    // most paths have neither, and the segments are walked only if so.
    let suspect = path.iter().zip(&path[1..]).fold(false, |seen, (&a, &b)| {
        seen | ((a == b'/') & ((b == b'/') | (b == b'.')))
    });
    !suspect
        || path[1..]
            .split(|&b| b == b'/')
            .all(|segment| !matches!(segment, b"" | b"." | b".."))
}

/// `validate`'s walk over a path's UTF-16 code units (bytes for ASCII),
/// past its leading slash.
fn valid_units<T: Copy + Into<u32>>(units: &[T]) -> bool {
    let unit = |i: usize| -> u32 { units[i].into() };
    let slash = u32::from(b'/');
    let dot = u32::from(b'.');
    let mut last = slash;
    for i in 1..units.len() {
        let c = unit(i);
        let next_ends = i + 1 == units.len() || unit(i + 1) == slash;
        // "." and ".." are rejected only as whole segments.
        let relative = (c == dot && last == dot && unit(i - 2) == slash && next_ends)
            || (c == dot && last == slash && next_ends);
        let forbidden = c == 0
            || (0x01..=0x1f).contains(&c)
            || (0x7f..=0x9f).contains(&c)
            || (0xd800..=0xf8ff).contains(&c)
            || c >= 0xfff0;
        if forbidden || (c == slash && last == slash) || relative {
            return false;
        }
        last = c;
    }
    true
}

/// Splits at the last slash as ZooKeeper does: parent of "/a" is "", which
/// the tree maps to the root "/".
pub fn split(path: &str) -> Option<(&str, &str)> {
    let slash = path.rfind('/')?;
    Some((&path[..slash], &path[slash + 1..]))
}

/// The parent node's key: "" (the parent of a top-level node) is "/".
pub fn parent_key(parent: &str) -> &str {
    if parent.is_empty() {
        "/"
    } else {
        parent
    }
}

/// Joins a parent path and a child name.
pub fn join(parent: &str, child: &str) -> String {
    if parent == "/" {
        format!("/{child}")
    } else {
        format!("{parent}/{child}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_what_zookeeper_accepts() {
        for p in [
            "/",
            "/a",
            "/a/b",
            "/a.b",
            "/..a",
            "/a/...",
            "/zookeeper",
            "/ü",
        ] {
            assert!(validate(p), "{p}");
        }
    }

    #[test]
    fn rejects_what_zookeeper_rejects() {
        for p in [
            "",
            "a",
            "a/b",
            "/a/",
            "//",
            "/a//b",
            "/.",
            "/..",
            "/a/./b",
            "/a/../b",
            "/a\u{0}",
            "/a\u{1}",
            "/\u{7f}",
            "/\u{1F600}",
            "/\u{fff0}",
        ] {
            assert!(!validate(p), "{p:?}");
        }
    }

    /// The walk as it was before ASCII paths took their own check
    /// (`valid_ascii`): every path, ASCII or not, walked as its collected
    /// UTF-16 code units.
    fn reference(path: &str) -> bool {
        decided_by_shape(path).unwrap_or_else(|| {
            let units: Vec<u16> = path.encode_utf16().collect();
            valid_units(&units)
        })
    }

    /// `validate` answers as the reference for every path of up to six
    /// characters over an alphabet holding each kind of character the
    /// rules treat apart (ASCII and not).
    #[test]
    fn validate_agrees_with_the_reference_walk() {
        let alphabet = [
            '/', '.', 'a', '0', '\u{0}', '\u{1f}', ' ', '\u{7f}', 'ü', '\u{9f}', '\u{fff0}',
        ];
        let mut paths = vec![String::new(), "/".to_string(), "a".to_string()];
        let mut checked = 0;
        while let Some(path) = paths.pop() {
            assert_eq!(validate(&path), reference(&path), "{path:?}");
            checked += 1;
            if path.starts_with('/') && path.chars().count() < 6 {
                for c in alphabet {
                    let mut longer = path.clone();
                    longer.push(c);
                    paths.push(longer);
                }
            }
        }
        assert!(checked > 100_000, "{checked} paths");
    }

    /// The ASCII check agrees with the reference on every path of up to
    /// eight characters over the characters that decide segments, with a
    /// control and DEL among them.
    #[test]
    fn ascii_check_agrees_with_the_reference_walk() {
        let alphabet = ['/', '.', 'a', '\u{1}', '\u{7f}'];
        let mut paths = vec!["/".to_string()];
        let mut checked = 0;
        while let Some(path) = paths.pop() {
            assert_eq!(validate(&path), reference(&path), "{path:?}");
            checked += 1;
            if path.len() < 8 {
                for c in alphabet {
                    let mut longer = path.clone();
                    longer.push(c);
                    paths.push(longer);
                }
            }
        }
        assert!(checked > 90_000, "{checked} paths");
    }

    #[test]
    fn split_and_join() {
        assert_eq!(split("/a"), Some(("", "a")));
        assert_eq!(split("/a/b"), Some(("/a", "b")));
        assert_eq!(split("a"), None);
        assert_eq!(parent_key(""), "/");
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/a", "b"), "/a/b");
    }
}
