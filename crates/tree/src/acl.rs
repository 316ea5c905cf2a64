//! ACL rules: ZooKeeper's fixupACL, checkACL and the digest/ip providers.

use std::borrow::Cow;

use base64::Engine;
use keel_jute::{perms, Acl, ErrorCode, Id};
use sha1::{Digest, Sha1};

/// Most ACL entries one node may carry; ZooKeeper has no bound, a frame does.
pub const ACL_ENTRIES_MAX: usize = 1024;

/// `world:anyone` with every permission: ZooKeeper's OPEN_ACL_UNSAFE.
pub fn open_acl_unsafe() -> Vec<Acl> {
    vec![Acl {
        perms: perms::ALL,
        id: Id {
            scheme: "world".into(),
            id: "anyone".into(),
        },
    }]
}

/// ZooKeeper's DigestAuthenticationProvider.generateDigest: the text before
/// the first ':' (all of it when there is none: Java's `split(":", 2)` then
/// yields one part), ':', base64(sha1(the whole text)). Any text has a
/// digest: `blah` gives `blah:W/H9kn37hnlJai5s8Ay+UMHIcUU=`.
pub fn generate_digest(user_password: &str) -> String {
    let user = user_password
        .split_once(':')
        .map_or(user_password, |(user, _)| user);
    let hash = Sha1::digest(user_password.as_bytes());
    format!(
        "{user}:{}",
        base64::engine::general_purpose::STANDARD.encode(hash)
    )
}

/// What `addauth` adds to a connection, or AuthFailed. As in ZooKeeper,
/// digest accepts any bytes (a wrong password, or no ':' at all, merely
/// yields an id no ACL grants); only an unknown scheme fails.
pub fn authenticate(
    scheme: &str,
    auth: &[u8],
    super_digest: Option<&str>,
) -> Result<Vec<Id>, ErrorCode> {
    match scheme {
        "digest" => {
            // Java's `new String(authData)`: invalid UTF-8 becomes U+FFFD.
            let digest = generate_digest(&String::from_utf8_lossy(auth));
            let mut ids = Vec::with_capacity(2);
            if super_digest == Some(digest.as_str()) {
                ids.push(Id {
                    scheme: "super".into(),
                    id: String::new(),
                });
            }
            ids.push(Id {
                scheme: "digest".into(),
                id: digest,
            });
            Ok(ids)
        }
        // ZooKeeper's "ip" provider authenticates by address, never by addauth.
        _ => Err(ErrorCode::AuthFailed),
    }
}

fn scheme_id_valid(id: &Id) -> bool {
    match id.scheme.as_str() {
        "digest" => id.id.split(':').count() == 2,
        "ip" => parse_ip_acl(&id.id).is_some(),
        "sasl" => sasl_id_valid(&id.id),
        _ => false,
    }
}

/// SASLAuthenticationProvider.isValid: the id must parse as a Kerberos
/// principal (`KerberosName`): a name without '@', or
/// `name[/host]@realm` with no further '/' or '@'.
fn sasl_id_valid(id: &str) -> bool {
    let Some((principal, realm)) = id.split_once('@') else {
        return true;
    };
    principal.matches('/').count() <= 1 && !realm.contains(['/', '@'])
}

/// The providers whose ids the `auth` ACL scheme expands to
/// (AuthenticationProvider.isAuthenticated: digest and sasl; ip and
/// super are not).
fn authenticated_scheme(scheme: &str) -> bool {
    matches!(scheme, "digest" | "sasl")
}

/// ZooKeeper's PrepRequestProcessor.fixupACL: dedupe, reject empty or
/// invalid entries, expand `auth` to the caller's authenticated ids.
/// A one-entry list that needs no change comes back as it came (most
/// creates carry OPEN_ACL_UNSAFE): no copy of its strings.
pub fn fixup<'a>(acl: &'a [Acl], auth: &[Id]) -> Result<Cow<'a, [Acl]>, ErrorCode> {
    if let [entry] = acl {
        if kept_as_is(&entry.id) {
            return Ok(Cow::Borrowed(acl));
        }
    }
    fixup_list(acl, auth).map(Cow::Owned)
}

/// An entry fixupACL keeps unchanged: world:anyone, or a valid id of a
/// provider (never `auth`, which expands to the caller's ids).
fn kept_as_is(id: &Id) -> bool {
    (id.scheme == "world" && id.id == "anyone") || scheme_id_valid(id)
}

/// `fixup` of any list.
fn fixup_list(acl: &[Acl], auth: &[Id]) -> Result<Vec<Acl>, ErrorCode> {
    let mut unique: Vec<&Acl> = Vec::with_capacity(acl.len().min(ACL_ENTRIES_MAX));
    for entry in acl {
        if !unique.contains(&entry) {
            // Stop at the bound: deduplicating a frame's worth of distinct
            // entries is quadratic (seconds of apply time per request).
            if unique.len() == ACL_ENTRIES_MAX {
                return Err(ErrorCode::InvalidAcl);
            }
            unique.push(entry);
        }
    }
    if unique.is_empty() || unique.len() > ACL_ENTRIES_MAX {
        return Err(ErrorCode::InvalidAcl);
    }
    let mut fixed = Vec::with_capacity(unique.len());
    for entry in unique {
        if kept_as_is(&entry.id) {
            fixed.push(entry.clone());
        } else if entry.id.scheme == "auth" {
            // Only ids of providers that "authenticate" count: digest and
            // sasl do, ip and super do not (isAuthenticated).
            let authenticated: Vec<&Id> = auth
                .iter()
                .filter(|id| authenticated_scheme(&id.scheme))
                .collect();
            if authenticated.is_empty() {
                return Err(ErrorCode::InvalidAcl);
            }
            for id in authenticated {
                fixed.push(Acl {
                    perms: entry.perms,
                    id: id.clone(),
                });
            }
        } else {
            return Err(ErrorCode::InvalidAcl);
        }
    }
    Ok(fixed)
}

/// ZooKeeperServer.checkACL: super passes everything, an empty ACL passes,
/// otherwise some entry granting `perm` must match one of the caller's ids.
pub fn check(acl: &[Acl], perm: i32, auth: &[Id]) -> Result<(), ErrorCode> {
    if acl.is_empty() || auth.iter().any(|id| id.scheme == "super") || crate::planted::acl_blind() {
        return Ok(());
    }
    for entry in acl.iter().filter(|entry| entry.perms & perm != 0) {
        if entry.id.scheme == "world" && entry.id.id == "anyone" {
            return Ok(());
        }
        let matched = auth.iter().any(|id| {
            id.scheme == entry.id.scheme
                && match id.scheme.as_str() {
                    "ip" => ip_matches(&id.id, &entry.id.id),
                    "digest" => id.id == entry.id.id,
                    // SASLAuthenticationProvider.matches: the same name, or
                    // the SASL user named "super".
                    "sasl" => id.id == entry.id.id || id.id == "super",
                    _ => false,
                }
        });
        if matched {
            return Ok(());
        }
    }
    Err(ErrorCode::NoAuth)
}

/// `addr[/bits]` for IPv4 or IPv6, as IPAuthenticationProvider accepts it.
fn parse_ip_acl(expr: &str) -> Option<(std::net::IpAddr, u32)> {
    let (addr, bits) = match expr.split_once('/') {
        Some((addr, bits)) => (addr, Some(bits.parse::<u32>().ok()?)),
        None => (expr, None),
    };
    let ip: std::net::IpAddr = addr.parse().ok()?;
    let width = if ip.is_ipv4() { 32 } else { 128 };
    let bits = bits.unwrap_or(width);
    if bits > width {
        return None;
    }
    Some((ip, bits))
}

fn ip_matches(client: &str, expr: &str) -> bool {
    let (Some((net, bits)), Ok(client)) = (parse_ip_acl(expr), client.parse::<std::net::IpAddr>())
    else {
        return false;
    };
    let (net, client, width) = match (net, client) {
        (std::net::IpAddr::V4(n), std::net::IpAddr::V4(c)) => {
            (u32::from(n) as u128, u32::from(c) as u128, 32)
        }
        (std::net::IpAddr::V6(n), std::net::IpAddr::V6(c)) => (u128::from(n), u128::from(c), 128),
        _ => return false,
    };
    if bits == 0 {
        return true;
    }
    let shift = width - bits;
    (net >> shift) == (client >> shift)
}

/// ZooKeeper hides digests from callers without ADMIN in getACL replies.
pub fn redact_digests(acl: &[Acl]) -> Vec<Acl> {
    acl.iter()
        .map(|entry| {
            if entry.id.scheme != "digest" {
                return entry.clone();
            }
            let user = entry.id.id.split(':').next().unwrap_or("");
            Acl {
                perms: entry.perms,
                id: Id {
                    scheme: "digest".into(),
                    id: format!("{user}:x"),
                },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(scheme: &str, id: &str) -> Id {
        Id {
            scheme: scheme.into(),
            id: id.into(),
        }
    }

    #[test]
    fn digest_matches_zookeeper() {
        // The super digest every ZooKeeper client harness configures.
        assert_eq!(
            generate_digest("super:test"),
            "super:D/InIHSb7yEEbrWz8b9l71RjZJU="
        );
    }

    #[test]
    fn digest_of_text_without_a_colon_is_the_whole_text_and_its_hash() {
        // Expected values printed by ZooKeeper 3.8's own
        // `DigestAuthenticationProvider.main` for the same inputs.
        assert_eq!(generate_digest("blah"), "blah:W/H9kn37hnlJai5s8Ay+UMHIcUU=");
        assert_eq!(generate_digest(""), ":2jmj7l5rSw0yVb/vlWAYkK/YBwk=");
        assert_eq!(
            generate_digest("blah:"),
            "blah:TymHSXFkwTnaDgXPsJ4vB8rbD00="
        );
        assert_eq!(generate_digest(":"), ":BaefBs8/Z/cm2uaNGKIpD2yaUMk=");
        assert_eq!(generate_digest("a:b:c"), "a:cLzgnoJ6mP5qz3w+mwvPE2vDgu0=");
    }

    #[test]
    fn empty_acl_is_invalid_and_auth_needs_a_digest() {
        assert_eq!(fixup(&[], &[]), Err(ErrorCode::InvalidAcl));
        let auth_acl = vec![Acl {
            perms: perms::ALL,
            id: id("auth", ""),
        }];
        assert_eq!(
            fixup(&auth_acl, &[id("ip", "127.0.0.1")]),
            Err(ErrorCode::InvalidAcl)
        );
        let fixed = fixup(&auth_acl, &[id("ip", "127.0.0.1"), id("digest", "u:h")]).unwrap();
        assert_eq!(
            fixed,
            vec![Acl {
                perms: perms::ALL,
                id: id("digest", "u:h")
            }]
        );
    }

    #[test]
    fn sasl_ids_are_kerberos_names_and_count_as_authenticated() {
        for valid in ["alice", "", "zk/host@EXAMPLE.COM", "a@B", "a/b/c"] {
            assert!(scheme_id_valid(&id("sasl", valid)), "{valid}");
        }
        for invalid in ["a@b@c", "a/b/c@R", "a@R/x"] {
            assert!(!scheme_id_valid(&id("sasl", invalid)), "{invalid}");
        }
        let auth_acl = vec![Acl {
            perms: perms::READ,
            id: id("auth", ""),
        }];
        let fixed = fixup(&auth_acl, &[id("ip", "127.0.0.1"), id("sasl", "alice")]).unwrap();
        assert_eq!(fixed[0].id, id("sasl", "alice"));
        let alice_only = vec![Acl {
            perms: perms::READ,
            id: id("sasl", "alice"),
        }];
        assert_eq!(
            check(&alice_only, perms::READ, &[id("sasl", "alice")]),
            Ok(())
        );
        assert_eq!(
            check(&alice_only, perms::READ, &[id("sasl", "bob")]),
            Err(ErrorCode::NoAuth)
        );
        assert_eq!(
            check(&alice_only, perms::READ, &[id("digest", "alice")]),
            Err(ErrorCode::NoAuth),
            "a digest id of the same name is another identity"
        );
        assert_eq!(
            check(&alice_only, perms::READ, &[id("sasl", "super")]),
            Ok(())
        );
    }

    #[test]
    fn duplicates_are_removed() {
        let acl = open_acl_unsafe();
        let doubled = [acl.clone(), acl.clone()].concat();
        assert_eq!(fixup(&doubled, &[]).unwrap(), acl);
    }

    #[test]
    fn check_acl_rules() {
        let acl = vec![Acl {
            perms: perms::READ,
            id: id("digest", "u:h"),
        }];
        assert_eq!(check(&acl, perms::READ, &[]), Err(ErrorCode::NoAuth));
        assert_eq!(check(&acl, perms::READ, &[id("digest", "u:h")]), Ok(()));
        assert_eq!(
            check(&acl, perms::WRITE, &[id("digest", "u:h")]),
            Err(ErrorCode::NoAuth)
        );
        assert_eq!(check(&acl, perms::WRITE, &[id("super", "")]), Ok(()));
        let ip = vec![Acl {
            perms: perms::ALL,
            id: id("ip", "10.0.0.0/8"),
        }];
        assert_eq!(check(&ip, perms::READ, &[id("ip", "10.1.2.3")]), Ok(()));
        assert_eq!(
            check(&ip, perms::READ, &[id("ip", "11.1.2.3")]),
            Err(ErrorCode::NoAuth)
        );
    }

    #[test]
    fn addauth() {
        let ids = authenticate(
            "digest",
            b"super:test",
            Some("super:D/InIHSb7yEEbrWz8b9l71RjZJU="),
        )
        .unwrap();
        assert_eq!(ids[0].scheme, "super");
        assert_eq!(
            authenticate("digest", b"blah", None),
            Ok(vec![id("digest", "blah:W/H9kn37hnlJai5s8Ay+UMHIcUU=")])
        );
        // Not UTF-8: decoded lossily, as Java's `new String(bytes)` does.
        assert_eq!(
            authenticate("digest", b"u\xff:p", None),
            Ok(vec![id("digest", &generate_digest("u\u{fffd}:p"))])
        );
        assert_eq!(
            authenticate("kerberos", b"x", None),
            Err(ErrorCode::AuthFailed)
        );
    }
}
