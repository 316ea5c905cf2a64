//! Splitting a command line the way zkCli does (`MyCommandOptions.parseCommand`)
//! and parsing command options the way Apache Commons CLI's `DefaultParser`
//! does for the short options zkCli declares.

/// Java's `\s` class.
fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\u{b}' | '\u{c}' | '\r')
}

fn is_quote(c: char) -> bool {
    c == '"' || c == '\''
}

/// Splits a line into words like zkCli's
/// `ARGS_PATTERN = \s*([^"']\S*|"[^"]*"|'[^']*')\s*` with `find()`, then
/// strips one pair of matching surrounding quotes from each word.
pub fn split_command_line(line: &str) -> Vec<String> {
    let chars: Vec<char> = line.chars().collect();
    let n = chars.len();
    let mut words = Vec::new();
    let mut i = 0;
    while i < n {
        let ws_start = i;
        let mut j = i;
        while j < n && is_space(chars[j]) {
            j += 1;
        }
        if j == n {
            break;
        }
        let non_space_end = |from: usize| {
            let mut k = from;
            while k < n && !is_space(chars[k]) {
                k += 1;
            }
            k
        };
        let (start, end) = if !is_quote(chars[j]) {
            (j, non_space_end(j))
        } else if let Some(off) = chars[j + 1..].iter().position(|&c| c == chars[j]) {
            (j, j + 1 + off + 1)
        } else if j > ws_start {
            // Unclosed quote: the regex backtracks one whitespace character
            // and matches it with `[^"']`, followed by `\S*`.
            (j - 1, non_space_end(j))
        } else {
            // No match can start here; `find()` moves on.
            i = j + 1;
            continue;
        };
        let word: String = chars[start..end].iter().collect();
        words.push(strip_quotes(word));
        // The pattern's trailing `\s*` consumes the following whitespace.
        i = end;
        while i < n && is_space(chars[i]) {
            i += 1;
        }
    }
    words
}

/// `QUOTED_PATTERN = ^(['"])(.*)(\1)$`.
fn strip_quotes(word: String) -> String {
    let cs: Vec<char> = word.chars().collect();
    if cs.len() >= 2 && is_quote(cs[0]) && cs[cs.len() - 1] == cs[0] {
        cs[1..cs.len() - 1].iter().collect()
    } else {
        word
    }
}

/// Parsed options and the remaining arguments (the command name included,
/// as in zkCli, so the path is `args[1]`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Opts {
    /// Non-option words, in order.
    pub args: Vec<String>,
    seen: Vec<(char, Option<String>)>,
}

impl Opts {
    /// Whether option `c` was given.
    pub fn has(&self, c: char) -> bool {
        self.seen.iter().any(|(o, _)| *o == c)
    }

    /// The first value given for option `c`.
    pub fn value(&self, c: char) -> Option<&str> {
        self.seen
            .iter()
            .find(|(o, v)| *o == c && v.is_some())
            .and_then(|(_, v)| v.as_deref())
    }
}

fn unrecognized(token: &str) -> String {
    format!("org.apache.commons.cli.UnrecognizedOptionException: Unrecognized option: {token}")
}

fn missing(c: char) -> String {
    format!("org.apache.commons.cli.MissingArgumentException: Missing argument for option: {c}")
}

/// Parses `tokens` with the single-letter options `flags` (no argument)
/// and `with_arg` (one argument). `Err` holds the text zkCli prints for
/// the Commons CLI `ParseException`.
pub fn parse_options(tokens: &[String], flags: &str, with_arg: &str) -> Result<Opts, String> {
    let is_flag = |c: char| flags.contains(c);
    let takes_arg = |c: char| with_arg.contains(c);
    let is_known = |c: char| is_flag(c) || takes_arg(c);
    // A token that names a declared option ("-s", "-v", "-v=1").
    let is_option = |t: &str| {
        let mut cs = t.chars();
        cs.next() == Some('-')
            && match (cs.next(), cs.next()) {
                (Some(c), None) => is_known(c),
                (Some(c), Some('=')) => takes_arg(c),
                _ => false,
            }
    };
    let is_negative_number =
        |t: &str| t.len() > 1 && t.starts_with('-') && t[1..].parse::<f64>().is_ok();

    let mut opts = Opts::default();
    let mut awaiting: Option<char> = None;
    let mut skip = false;
    for token in tokens {
        let t = token.as_str();
        if skip {
            opts.args.push(token.clone());
            continue;
        }
        if let Some(c) = awaiting {
            if !is_option(t) || is_negative_number(t) {
                opts.seen.push((c, Some(token.clone())));
                awaiting = None;
                continue;
            }
            return Err(missing(c));
        }
        if t == "--" {
            skip = true;
        } else if t.starts_with("--") {
            return Err(unrecognized(t));
        } else if t.starts_with('-') && t != "-" {
            let body = &t[1..];
            let mut cs = body.chars();
            let first = cs.next().unwrap_or('-');
            let rest = cs.as_str();
            if rest.is_empty() {
                if !is_known(first) {
                    return Err(unrecognized(t));
                }
                if takes_arg(first) {
                    awaiting = Some(first);
                } else {
                    opts.seen.push((first, None));
                }
            } else if let (true, Some(v)) = (takes_arg(first), rest.strip_prefix('=')) {
                opts.seen.push((first, Some(v.to_string())));
            } else {
                // Concatenated options ("-sw", "-v5").
                let mut pending = Vec::new();
                for (idx, c) in body.char_indices() {
                    if !is_known(c) {
                        return Err(unrecognized(t));
                    }
                    if takes_arg(c) {
                        let value = &body[idx + c.len_utf8()..];
                        if value.is_empty() {
                            awaiting = Some(c);
                        } else {
                            pending.push((c, Some(value.to_string())));
                        }
                        break;
                    }
                    pending.push((c, None));
                }
                opts.seen.extend(pending);
            }
        } else {
            opts.args.push(token.clone());
        }
    }
    if let Some(c) = awaiting {
        return Err(missing(c));
    }
    Ok(opts)
}

/// Java's `Integer.parseInt`, with the message of its NumberFormatException.
pub fn parse_java_int(s: &str) -> Result<i32, String> {
    let ok = !s.is_empty()
        && s.strip_prefix(['-', '+'])
            .unwrap_or(s)
            .chars()
            .all(|c| c.is_ascii_digit())
        && s != "-"
        && s != "+";
    match (ok, s.parse::<i32>()) {
        (true, Ok(v)) => Ok(v),
        _ => Err(format!(
            "java.lang.NumberFormatException: For input string: \"{s}\""
        )),
    }
}

/// Java's `Integer.decode` (decimal, 0x/0X/# hex, leading-0 octal).
pub fn java_decode_int(s: &str) -> Option<i64> {
    let (neg, rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let v = if let Some(h) = rest.strip_prefix("0x").or_else(|| rest.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()?
    } else if let Some(h) = rest.strip_prefix('#') {
        i64::from_str_radix(h, 16).ok()?
    } else if rest.len() > 1 && rest.starts_with('0') {
        i64::from_str_radix(&rest[1..], 8).ok()?
    } else {
        rest.parse::<i64>().ok()?
    };
    Some(if neg { -v } else { v })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        split_command_line(line)
    }

    fn toks(line: &str) -> Vec<String> {
        line.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn splitting_like_zkcli() {
        assert_eq!(words("ls /"), vec!["ls", "/"]);
        assert_eq!(words("  create   /a  b "), vec!["create", "/a", "b"]);
        assert_eq!(
            words("create /sp \"hello world\""),
            vec!["create", "/sp", "hello world"]
        );
        assert_eq!(words("create /sq 'a b'"), vec!["create", "/sq", "a b"]);
        assert_eq!(words("create /ee \"\""), vec!["create", "/ee", ""]);
        assert_eq!(words("set /a x\"y"), vec!["set", "/a", "x\"y"]);
        assert_eq!(words("set /a \"x y\"z"), vec!["set", "/a", "x y", "z"]);
        assert_eq!(words("set /a \"unclosed"), vec!["set", "/a", "unclosed"]);
        assert_eq!(words(" \"unclosed x"), vec![" \"unclosed", "x"]);
        assert_eq!(words(""), Vec::<String>::new());
    }

    #[test]
    fn options_like_commons_cli() {
        let o = parse_options(&toks("ls -s -w /a"), "swR?", "").unwrap();
        assert!(o.has('s') && o.has('w') && !o.has('R'));
        assert_eq!(o.args, vec!["ls", "/a"]);

        let o = parse_options(&toks("set /a data -s -v 3"), "s", "v").unwrap();
        assert_eq!(o.args, vec!["set", "/a", "data"]);
        assert_eq!(o.value('v'), Some("3"));

        let o = parse_options(&toks("set -v5 /a data"), "s", "v").unwrap();
        assert_eq!(o.value('v'), Some("5"));
        let o = parse_options(&toks("set -v -5 /a d"), "s", "v").unwrap();
        assert_eq!(o.value('v'), Some("-5"));
        let o = parse_options(&toks("get -sw /a"), "sw", "").unwrap();
        assert!(o.has('s') && o.has('w'));
        let o = parse_options(&toks("create -- /a -e"), "esc", "t").unwrap();
        assert_eq!(o.args, vec!["create", "/a", "-e"]);

        assert_eq!(
            parse_options(&toks("ls -x /"), "swR", "").unwrap_err(),
            "org.apache.commons.cli.UnrecognizedOptionException: Unrecognized option: -x"
        );
        assert_eq!(
            parse_options(&toks("set /a -5"), "s", "v").unwrap_err(),
            "org.apache.commons.cli.UnrecognizedOptionException: Unrecognized option: -5"
        );
        assert_eq!(
            parse_options(&toks("set -v"), "s", "v").unwrap_err(),
            "org.apache.commons.cli.MissingArgumentException: Missing argument for option: v"
        );
        assert_eq!(
            parse_options(&toks("set -v -s"), "s", "v").unwrap_err(),
            "org.apache.commons.cli.MissingArgumentException: Missing argument for option: v"
        );
    }

    #[test]
    fn java_numbers() {
        assert_eq!(parse_java_int("12"), Ok(12));
        assert_eq!(parse_java_int("-1"), Ok(-1));
        assert_eq!(
            parse_java_int("abc").unwrap_err(),
            "java.lang.NumberFormatException: For input string: \"abc\""
        );
        assert!(parse_java_int("99999999999").is_err());
        assert_eq!(java_decode_int("0x10"), Some(16));
        assert_eq!(java_decode_int("010"), Some(8));
        assert_eq!(java_decode_int("7"), Some(7));
        assert_eq!(java_decode_int("x"), None);
    }
}
