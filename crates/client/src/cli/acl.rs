//! zkCli's ACL syntax (`AclParser`): comma separated `scheme:id:perms`,
//! where the id is everything between the first and the last colon
//! (`digest:user:hash:rw`, `auth::cdrwa`, `ip:127.0.0.1:r`).

use crate::proto::{perms, Acl, Id};

/// The ACLs parsed from `s`, and the warnings zkCli prints (on stderr) for
/// entries it skips or permission letters it ignores.
pub fn parse_acl(s: &str) -> (Vec<Acl>, Vec<String>) {
    let mut acls = Vec::new();
    let mut warnings = Vec::new();
    for entry in java_split_commas(s) {
        let (first, last) = match (entry.find(':'), entry.rfind(':')) {
            (Some(f), Some(l)) if f != l => (f, l),
            _ => {
                warnings.push(format!("{entry} does not have the form scheme:id:perm"));
                continue;
            }
        };
        let mut p = 0;
        for c in entry[last + 1..].chars() {
            match c {
                'r' => p |= perms::READ,
                'w' => p |= perms::WRITE,
                'c' => p |= perms::CREATE,
                'd' => p |= perms::DELETE,
                'a' => p |= perms::ADMIN,
                other => warnings.push(format!("Unknown perm type: {other}")),
            }
        }
        acls.push(Acl {
            perms: p,
            id: Id {
                scheme: entry[..first].to_string(),
                id: entry[first + 1..last].to_string(),
            },
        });
    }
    (acls, warnings)
}

/// Java's `String.split(",")`: trailing empty pieces are dropped, but a
/// string without any comma is returned whole (even if empty).
fn java_split_commas(s: &str) -> Vec<&str> {
    if !s.contains(',') {
        return vec![s];
    }
    let mut parts: Vec<&str> = s.split(',').collect();
    while parts.last() == Some(&"") {
        parts.pop();
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(scheme: &str, id: &str, perms: i32) -> Acl {
        Acl {
            perms,
            id: Id {
                scheme: scheme.into(),
                id: id.into(),
            },
        }
    }

    #[test]
    fn parses_every_scheme_form() {
        let (a, w) = parse_acl("world:anyone:cdrwa");
        assert_eq!(a, vec![acl("world", "anyone", perms::ALL)]);
        assert!(w.is_empty());

        let (a, w) =
            parse_acl("digest:user:smGaoVKd/cQkjm7b88GyorAUz20=:rw,auth::crdwa,ip:127.0.0.1:r");
        assert_eq!(
            a,
            vec![
                acl(
                    "digest",
                    "user:smGaoVKd/cQkjm7b88GyorAUz20=",
                    perms::READ | perms::WRITE
                ),
                acl("auth", "", perms::ALL),
                acl("ip", "127.0.0.1", perms::READ),
            ]
        );
        assert!(w.is_empty());
    }

    #[test]
    fn reports_like_zkcli() {
        let (a, w) = parse_acl("bogus");
        assert!(a.is_empty());
        assert_eq!(w, vec!["bogus does not have the form scheme:id:perm"]);

        let (a, w) = parse_acl("world:anyone");
        assert!(a.is_empty());
        assert_eq!(
            w,
            vec!["world:anyone does not have the form scheme:id:perm"]
        );

        let (a, w) = parse_acl("world:anyone:xyr");
        assert_eq!(a, vec![acl("world", "anyone", perms::READ)]);
        assert_eq!(w, vec!["Unknown perm type: x", "Unknown perm type: y"]);

        let (a, w) = parse_acl("world:anyone:r,,ip:1.2.3.4:w,");
        assert_eq!(
            a,
            vec![
                acl("world", "anyone", perms::READ),
                acl("ip", "1.2.3.4", perms::WRITE)
            ]
        );
        assert_eq!(w, vec![" does not have the form scheme:id:perm"]);

        let (a, w) = parse_acl("");
        assert!(a.is_empty());
        assert_eq!(w, vec![" does not have the form scheme:id:perm"]);
    }
}
