//! SASL on the client port as ZooKeeper's server does it: the `sasl`
//! request (opcode 102, GetSASLRequest / SetSASLResponse) carries
//! DIGEST-MD5 (RFC 2831) tokens; the user list is the `Server` section of
//! a JAAS file (`sasl_users_file`), whose `user_<name>="<password>"`
//! options ZooKeeper's SaslServerCallbackHandler reads; a client that
//! completes the exchange gets the identity `sasl:<name>` on its
//! connection, next to its digest ids (`conn.rs`, `authenticate_sasl`).
//!
//! Only the server side of DIGEST-MD5 with qop `auth` (authentication
//! only, no integrity or privacy layer), which is what ZooKeeper's clients
//! negotiate with it: realm `zk-sasl-md5`, digest-uri
//! `zookeeper/zk-sasl-md5`, as ZooKeeperSaslServer creates its SaslServer.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use md5::{Digest, Md5};

/// ZooKeeper's DIGEST-MD5 realm (ZooKeeperSaslServer, and the host name
/// its clients put in the digest-uri).
pub const ZOOKEEPER_REALM: &str = "zk-sasl-md5";
/// The SASL service name ZooKeeper's server and clients use.
pub const ZOOKEEPER_SERVICE: &str = "zookeeper";
/// The JAAS section holding the server's users (ZooKeeper's default
/// `zookeeper.sasl.serverconfig`).
pub const JAAS_SERVER_SECTION: &str = "Server";
/// JAAS options naming a user: `user_<name>="<password>"`.
pub const JAAS_USER_PREFIX: &str = "user_";
/// RFC 2831 2.1.2: a digest-response is shorter than 4096 bytes.
pub const DIGEST_RESPONSE_MAX_BYTES: usize = 4096;
/// Largest `sasl_users_file` read.
pub const USERS_FILE_MAX_BYTES: u64 = 1 << 20;
/// Random bytes in a server nonce (base64 in the challenge).
pub const NONCE_BYTES: usize = 24;

#[derive(Debug, thiserror::Error)]
pub enum SaslUsersError {
    #[error("cannot read sasl_users_file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("sasl_users_file {path} is larger than {USERS_FILE_MAX_BYTES} bytes")]
    TooLarge { path: PathBuf },
    #[error("sasl_users_file {path}, line {line}: {message}")]
    Syntax {
        path: PathBuf,
        line: usize,
        message: String,
    },
    #[error("sasl_users_file {path} has no '{JAAS_SERVER_SECTION}' section (ZooKeeper: \"Server cannot start\")")]
    NoServerSection { path: PathBuf },
}

/// The DIGEST-MD5 users: name → password, from a JAAS file's `Server`
/// section (every module's `user_*` options; the module class is not
/// checked, as ZooKeeper does not check it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SaslUsers {
    passwords: HashMap<String, String>,
}

impl SaslUsers {
    pub fn load(path: &Path) -> Result<SaslUsers, SaslUsersError> {
        let read = |source| SaslUsersError::Read {
            path: path.into(),
            source,
        };
        if std::fs::metadata(path).map_err(read)?.len() > USERS_FILE_MAX_BYTES {
            return Err(SaslUsersError::TooLarge { path: path.into() });
        }
        let text = std::fs::read_to_string(path).map_err(read)?;
        Self::parse_jaas(&text).map_err(|error| match error {
            JaasError::Syntax { line, message } => SaslUsersError::Syntax {
                path: path.into(),
                line,
                message,
            },
            JaasError::NoServerSection => SaslUsersError::NoServerSection { path: path.into() },
        })
    }

    /// The `Server` section's users of a JAAS configuration text.
    pub fn parse_jaas(text: &str) -> Result<SaslUsers, JaasError> {
        let sections = jaas::parse(text)?;
        let mut found = false;
        let mut passwords = HashMap::new();
        for section in sections
            .iter()
            .filter(|section| section.name == JAAS_SERVER_SECTION)
        {
            found = true;
            for (key, value) in section.modules.iter().flat_map(|module| &module.options) {
                if let Some(user) = key.strip_prefix(JAAS_USER_PREFIX) {
                    passwords.insert(user.to_owned(), value.clone());
                }
            }
        }
        if !found {
            return Err(JaasError::NoServerSection);
        }
        Ok(SaslUsers { passwords })
    }

    pub fn password(&self, user: &str) -> Option<&str> {
        self.passwords.get(user).map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.passwords.len()
    }

    pub fn is_empty(&self) -> bool {
        self.passwords.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JaasError {
    #[error("line {line}: {message}")]
    Syntax { line: usize, message: String },
    #[error("no '{JAAS_SERVER_SECTION}' section")]
    NoServerSection,
}

/// The JAAS login configuration file format (Java's ConfigFile):
/// `Name { module.Class flag key=value key="value" ; ... };`, with `//`,
/// `/* */` and `#` comments.
mod jaas {
    use super::JaasError;

    pub struct Section {
        pub name: String,
        pub modules: Vec<Module>,
    }

    pub struct Module {
        pub options: Vec<(String, String)>,
    }

    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Token {
        Word(String),
        Quoted(String),
        Open,
        Close,
        Semicolon,
        Equals,
    }

    /// Java's ConfigFile word characters.
    fn word_char(c: char) -> bool {
        c.is_alphanumeric() || matches!(c, '.' | '_' | '$' | '-' | '*')
    }

    fn tokenize(text: &str) -> Result<Vec<(Token, usize)>, JaasError> {
        let mut tokens = Vec::new();
        let mut chars = text.chars().peekable();
        let mut line = 1;
        let syntax = |line, message: &str| JaasError::Syntax {
            line,
            message: message.into(),
        };
        while let Some(c) = chars.next() {
            match c {
                '\n' => line += 1,
                c if c.is_whitespace() => {}
                '#' => while chars.next_if(|&c| c != '\n').is_some() {},
                '/' if chars.peek() == Some(&'/') => {
                    while chars.next_if(|&c| c != '\n').is_some() {}
                }
                '/' if chars.peek() == Some(&'*') => {
                    chars.next();
                    let start = line;
                    let mut last = ' ';
                    loop {
                        let Some(c) = chars.next() else {
                            return Err(syntax(start, "unterminated /* comment"));
                        };
                        if c == '\n' {
                            line += 1;
                        }
                        if last == '*' && c == '/' {
                            break;
                        }
                        last = c;
                    }
                }
                '{' => tokens.push((Token::Open, line)),
                '}' => tokens.push((Token::Close, line)),
                ';' => tokens.push((Token::Semicolon, line)),
                '=' => tokens.push((Token::Equals, line)),
                '"' => {
                    let start = line;
                    let mut value = String::new();
                    loop {
                        match chars.next() {
                            None => return Err(syntax(start, "unterminated quoted string")),
                            Some('"') => break,
                            Some('\\') => match chars.next() {
                                Some('n') => value.push('\n'),
                                Some('t') => value.push('\t'),
                                Some(c) => value.push(c),
                                None => return Err(syntax(start, "unterminated quoted string")),
                            },
                            Some(c) => {
                                if c == '\n' {
                                    line += 1;
                                }
                                value.push(c);
                            }
                        }
                    }
                    tokens.push((Token::Quoted(value), start));
                }
                c if word_char(c) => {
                    let mut word = String::from(c);
                    while let Some(c) = chars.next_if(|&c| word_char(c)) {
                        word.push(c);
                    }
                    tokens.push((Token::Word(word), line));
                }
                c => return Err(syntax(line, &format!("unexpected character {c:?}"))),
            }
        }
        Ok(tokens)
    }

    /// The tokens not parsed yet.
    struct Cursor {
        tokens: std::vec::IntoIter<(Token, usize)>,
        last_line: usize,
    }

    impl Cursor {
        fn next(&mut self, what: &str) -> Result<(Token, usize), JaasError> {
            self.tokens.next().ok_or_else(|| JaasError::Syntax {
                line: self.last_line,
                message: format!("file ends where {what} was expected"),
            })
        }
    }

    pub fn parse(text: &str) -> Result<Vec<Section>, JaasError> {
        let tokens = tokenize(text)?;
        let last_line = tokens.last().map_or(1, |(_, line)| *line);
        let mut cursor = Cursor {
            tokens: tokens.into_iter(),
            last_line,
        };
        let mut sections = Vec::new();
        let unexpected = |line, what: &str, token: &Token| JaasError::Syntax {
            line,
            message: format!("expected {what}, found {token:?}"),
        };
        while cursor.tokens.len() > 0 {
            let name = match cursor.next("a section name")? {
                (Token::Word(name), _) => name,
                (token, line) => return Err(unexpected(line, "a section name", &token)),
            };
            match cursor.next("'{'")? {
                (Token::Open, _) => {}
                (token, line) => return Err(unexpected(line, "'{'", &token)),
            }
            let mut modules = Vec::new();
            loop {
                match cursor.next("a login module or '}'")? {
                    (Token::Close, _) => break,
                    (Token::Word(_class), _) => {}
                    (token, line) => return Err(unexpected(line, "a login module", &token)),
                }
                match cursor.next("a control flag")? {
                    (Token::Word(flag), line) => {
                        let known = ["required", "requisite", "sufficient", "optional"];
                        if !known.contains(&flag.to_ascii_lowercase().as_str()) {
                            return Err(unexpected(
                                line,
                                "required|requisite|sufficient|optional",
                                &Token::Word(flag),
                            ));
                        }
                    }
                    (token, line) => return Err(unexpected(line, "a control flag", &token)),
                }
                let mut options = Vec::new();
                loop {
                    let key = match cursor.next("an option or ';'")? {
                        (Token::Semicolon, _) => break,
                        (Token::Word(key), _) => key,
                        (token, line) => return Err(unexpected(line, "an option", &token)),
                    };
                    match cursor.next("'='")? {
                        (Token::Equals, _) => {}
                        (token, line) => return Err(unexpected(line, "'='", &token)),
                    }
                    let value = match cursor.next("a value")? {
                        (Token::Word(value) | Token::Quoted(value), _) => value,
                        (token, line) => return Err(unexpected(line, "a value", &token)),
                    };
                    options.push((key, value));
                }
                modules.push(Module { options });
            }
            match cursor.next("';' after '}'")? {
                (Token::Semicolon, _) => {}
                (token, line) => return Err(unexpected(line, "';' after '}'", &token)),
            }
            sections.push(Section { name, modules });
        }
        Ok(sections)
    }
}

/// Why a DIGEST-MD5 exchange failed (logged; the client only sees
/// AuthFailed, as from ZooKeeper).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestMd5Failure {
    #[error("DIGEST-MD5 has no initial response, but the first token was not empty")]
    InitialResponse,
    #[error("digest-response longer than {DIGEST_RESPONSE_MAX_BYTES} bytes")]
    TooLong,
    #[error("malformed digest-response: {0}")]
    Malformed(&'static str),
    #[error("directive {0} given twice")]
    Duplicate(String),
    #[error("directive {0} missing")]
    Missing(&'static str),
    #[error("nonce does not match the challenge's")]
    Nonce,
    #[error("nonce count {0:?} is not 00000001")]
    NonceCount(String),
    #[error("unsupported qop {0:?} (only auth)")]
    Qop(String),
    #[error("unsupported charset {0:?}")]
    Charset(String),
    #[error("realm {0:?} is not {ZOOKEEPER_REALM:?}")]
    Realm(String),
    #[error("digest-uri {0:?} is not this server's")]
    DigestUri(String),
    #[error("user {0:?} is not in the user list")]
    UnknownUser(String),
    #[error("wrong password for user {0:?}")]
    WrongResponse(String),
    #[error("the exchange already ended")]
    Finished,
}

/// What the server sends back after a client token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DigestMd5Step {
    /// The digest-challenge, answering the client's empty first token.
    Challenge(Vec<u8>),
    /// Authenticated as `user`; `token` is `rspauth=...` (the server's
    /// proof that it knows the password too).
    Authenticated { user: String, token: Vec<u8> },
}

enum State {
    Start,
    Challenged,
    Finished,
}

/// The server side of one DIGEST-MD5 exchange (RFC 2831 section 2.1).
pub struct DigestMd5Server {
    realm: String,
    digest_uri: String,
    nonce: String,
    state: State,
}

impl DigestMd5Server {
    /// ZooKeeper's realm and digest-uri, with a random nonce.
    pub fn zookeeper() -> DigestMd5Server {
        use base64::Engine;
        let bytes: [u8; NONCE_BYTES] = rand::random();
        let nonce = base64::engine::general_purpose::STANDARD.encode(bytes);
        let digest_uri = format!("{ZOOKEEPER_SERVICE}/{ZOOKEEPER_REALM}");
        DigestMd5Server::new(ZOOKEEPER_REALM, &digest_uri, &nonce)
    }

    /// A server of `realm` expecting `digest_uri` (`service/host`), whose
    /// challenge carries `nonce`.
    pub fn new(realm: &str, digest_uri: &str, nonce: &str) -> DigestMd5Server {
        assert!(!nonce.is_empty() && !nonce.contains('"'));
        DigestMd5Server {
            realm: realm.into(),
            digest_uri: digest_uri.into(),
            nonce: nonce.into(),
            state: State::Start,
        }
    }

    /// Evaluates the client's next token. After an error the exchange is
    /// over (every further token fails).
    pub fn step(
        &mut self,
        token: &[u8],
        users: &SaslUsers,
    ) -> Result<DigestMd5Step, DigestMd5Failure> {
        let state = std::mem::replace(&mut self.state, State::Finished);
        match state {
            State::Start if token.is_empty() => {
                self.state = State::Challenged;
                Ok(DigestMd5Step::Challenge(self.challenge()))
            }
            State::Start => Err(DigestMd5Failure::InitialResponse),
            State::Challenged => self.verify(token, users),
            State::Finished => Err(DigestMd5Failure::Finished),
        }
    }

    fn challenge(&self) -> Vec<u8> {
        format!(
            "realm=\"{}\",nonce=\"{}\",qop=\"auth\",charset=utf-8,algorithm=md5-sess",
            self.realm, self.nonce
        )
        .into_bytes()
    }

    fn verify(&self, token: &[u8], users: &SaslUsers) -> Result<DigestMd5Step, DigestMd5Failure> {
        if token.len() >= DIGEST_RESPONSE_MAX_BYTES {
            return Err(DigestMd5Failure::TooLong);
        }
        let response = DigestResponse::parse(token)?;
        let utf8 = match &response.charset {
            None => false,
            Some(charset) if charset.eq_ignore_ascii_case("utf-8") => true,
            Some(charset) => return Err(DigestMd5Failure::Charset(charset.clone())),
        };
        let text = |bytes: &[u8]| decode(bytes, utf8);
        let user = text(&response.username)?;
        let realm = text(response.realm.as_deref().unwrap_or_default())?;
        if response.realm.is_some() && realm != self.realm {
            return Err(DigestMd5Failure::Realm(realm));
        }
        if response.nonce != self.nonce.as_bytes() {
            return Err(DigestMd5Failure::Nonce);
        }
        if response.nc != b"00000001" {
            return Err(DigestMd5Failure::NonceCount(
                String::from_utf8_lossy(&response.nc).into_owned(),
            ));
        }
        let qop = text(response.qop.as_deref().unwrap_or(b"auth"))?;
        if qop != "auth" {
            return Err(DigestMd5Failure::Qop(qop));
        }
        let digest_uri = text(&response.digest_uri)?;
        if !digest_uri.eq_ignore_ascii_case(&self.digest_uri) {
            return Err(DigestMd5Failure::DigestUri(digest_uri));
        }
        let Some(password) = users.password(&user) else {
            return Err(DigestMd5Failure::UnknownUser(user));
        };
        let secret = Secret {
            user: &user,
            realm: &realm,
            password,
            utf8,
        };
        let expected = response_value(&secret, &response, "AUTHENTICATE:");
        if !equal_in_constant_time(expected.as_bytes(), &response.response) {
            return Err(DigestMd5Failure::WrongResponse(user));
        }
        let rspauth = response_value(&secret, &response, ":");
        Ok(DigestMd5Step::Authenticated {
            user: user.clone(),
            token: format!("rspauth={rspauth}").into_bytes(),
        })
    }
}

/// The credentials the digest is keyed with, and how they are encoded.
struct Secret<'a> {
    user: &'a str,
    realm: &'a str,
    password: &'a str,
    utf8: bool,
}

/// RFC 2831 2.1.2.1: without charset=utf-8 the strings are ISO 8859-1
/// when every character fits, UTF-8 otherwise.
fn encode(text: &str, utf8: bool) -> Vec<u8> {
    if !utf8 && text.chars().all(|c| (c as u32) < 0x100) {
        return text.chars().map(|c| c as u8).collect();
    }
    text.as_bytes().to_vec()
}

fn decode(bytes: &[u8], utf8: bool) -> Result<String, DigestMd5Failure> {
    if utf8 {
        return String::from_utf8(bytes.to_vec())
            .map_err(|_| DigestMd5Failure::Malformed("invalid UTF-8"));
    }
    Ok(bytes.iter().map(|&b| b as char).collect())
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// RFC 2831 2.1.2.1 response-value (`a2_prefix` "AUTHENTICATE:" for the
/// client's response, ":" for the server's rspauth), qop auth.
fn response_value(secret: &Secret<'_>, response: &DigestResponse, a2_prefix: &str) -> String {
    let mut inner = Md5::new();
    inner.update(encode(secret.user, secret.utf8));
    inner.update(b":");
    inner.update(encode(secret.realm, secret.utf8));
    inner.update(b":");
    inner.update(encode(secret.password, secret.utf8));
    let mut a1 = Md5::new();
    a1.update(inner.finalize());
    a1.update(b":");
    a1.update(&response.nonce);
    a1.update(b":");
    a1.update(&response.cnonce);
    if let Some(authzid) = &response.authzid {
        a1.update(b":");
        a1.update(authzid);
    }
    let a1 = hex(&a1.finalize());
    let mut a2 = Md5::new();
    a2.update(a2_prefix.as_bytes());
    a2.update(&response.digest_uri);
    let a2 = hex(&a2.finalize());
    let mut kd = Md5::new();
    kd.update(a1.as_bytes());
    kd.update(b":");
    kd.update(&response.nonce);
    kd.update(b":");
    kd.update(&response.nc);
    kd.update(b":");
    kd.update(&response.cnonce);
    kd.update(b":auth:");
    kd.update(a2.as_bytes());
    hex(&kd.finalize())
}

fn equal_in_constant_time(left: &[u8], right: &[u8]) -> bool {
    let right = right.to_ascii_lowercase();
    left.len() == right.len()
        && left
            .iter()
            .zip(&right)
            .fold(0u8, |difference, (a, b)| difference | (a ^ b))
            == 0
}

/// The directives of a digest-response the server uses (RFC 2831
/// 2.1.2), raw bytes as sent (unquoted).
#[derive(Debug, Default)]
struct DigestResponse {
    username: Vec<u8>,
    realm: Option<Vec<u8>>,
    nonce: Vec<u8>,
    cnonce: Vec<u8>,
    nc: Vec<u8>,
    qop: Option<Vec<u8>>,
    digest_uri: Vec<u8>,
    response: Vec<u8>,
    charset: Option<String>,
    authzid: Option<Vec<u8>>,
}

impl DigestResponse {
    fn parse(token: &[u8]) -> Result<DigestResponse, DigestMd5Failure> {
        let mut directives: HashMap<String, Vec<u8>> = HashMap::new();
        for (name, value) in directives_of(token)? {
            if directives.insert(name.clone(), value).is_some() {
                return Err(DigestMd5Failure::Duplicate(name));
            }
        }
        let mut required = |name: &'static str| {
            directives
                .remove(name)
                .ok_or(DigestMd5Failure::Missing(name))
        };
        let response = DigestResponse {
            username: required("username")?,
            nonce: required("nonce")?,
            cnonce: required("cnonce")?,
            nc: required("nc")?,
            digest_uri: required("digest-uri")?,
            response: required("response")?,
            ..DigestResponse::default()
        };
        Ok(DigestResponse {
            realm: directives.remove("realm"),
            qop: directives.remove("qop"),
            charset: directives
                .remove("charset")
                .map(|charset| String::from_utf8_lossy(&charset).into_owned()),
            authzid: directives.remove("authzid"),
            ..response
        })
    }
}

/// RFC 2831 7.1's `#rule` of `token "=" (token | quoted-string)`:
/// elements separated by commas and optional white space, empty elements
/// allowed; names are case-insensitive (returned lowercase).
fn directives_of(token: &[u8]) -> Result<Vec<(String, Vec<u8>)>, DigestMd5Failure> {
    let mut directives = Vec::new();
    let mut at = 0;
    let skip_space = |at: &mut usize| {
        while token.get(*at).is_some_and(|b| b" \t\r\n".contains(b)) {
            *at += 1;
        }
    };
    loop {
        skip_space(&mut at);
        while token.get(at) == Some(&b',') {
            at += 1;
            skip_space(&mut at);
        }
        if at == token.len() {
            return Ok(directives);
        }
        let start = at;
        while token
            .get(at)
            .is_some_and(|b| !b" \t\r\n=,\"".contains(b) && !b.is_ascii_control())
        {
            at += 1;
        }
        if at == start {
            return Err(DigestMd5Failure::Malformed("directive name expected"));
        }
        let name = String::from_utf8_lossy(&token[start..at]).to_ascii_lowercase();
        skip_space(&mut at);
        if token.get(at) != Some(&b'=') {
            return Err(DigestMd5Failure::Malformed(
                "'=' expected after a directive name",
            ));
        }
        at += 1;
        skip_space(&mut at);
        let mut value = Vec::new();
        if token.get(at) == Some(&b'"') {
            at += 1;
            loop {
                match token.get(at) {
                    None => return Err(DigestMd5Failure::Malformed("unterminated quoted string")),
                    Some(b'"') => break,
                    Some(b'\\') if at + 1 < token.len() => {
                        value.push(token[at + 1]);
                        at += 1;
                    }
                    Some(&b) => value.push(b),
                }
                at += 1;
            }
            at += 1;
        } else {
            while token.get(at).is_some_and(|b| !b" \t\r\n,".contains(b)) {
                value.push(token[at]);
                at += 1;
            }
        }
        directives.push((name, value));
        skip_space(&mut at);
        match token.get(at) {
            None | Some(b',') => {}
            Some(_) => {
                return Err(DigestMd5Failure::Malformed(
                    "',' expected between directives",
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users(pairs: &[(&str, &str)]) -> SaslUsers {
        SaslUsers {
            passwords: pairs
                .iter()
                .map(|(user, password)| (user.to_string(), password.to_string()))
                .collect(),
        }
    }

    /// RFC 2831 section 4's first example: chris/secret, IMAP.
    fn rfc_example_server() -> DigestMd5Server {
        DigestMd5Server::new(
            "elwood.innosoft.com",
            "imap/elwood.innosoft.com",
            "OA6MG9tEQGm2hh",
        )
    }

    const RFC_EXAMPLE_RESPONSE: &str = "charset=utf-8,username=\"chris\",realm=\"elwood.innosoft.com\",nonce=\"OA6MG9tEQGm2hh\",nc=00000001,cnonce=\"OA6MHXh6VqTrRk\",digest-uri=\"imap/elwood.innosoft.com\",response=d388dad90d4bbd760a152321f2143af7,qop=auth";

    #[test]
    fn rfc_2831_imap_example_authenticates_with_its_rspauth() {
        let mut server = rfc_example_server();
        let users = users(&[("chris", "secret")]);
        let DigestMd5Step::Challenge(challenge) = server.step(b"", &users).unwrap() else {
            panic!("the first step is a challenge");
        };
        let challenge = String::from_utf8(challenge).unwrap();
        assert!(
            challenge.contains("nonce=\"OA6MG9tEQGm2hh\""),
            "{challenge}"
        );
        assert!(
            challenge.contains("realm=\"elwood.innosoft.com\""),
            "{challenge}"
        );
        assert!(challenge.contains("algorithm=md5-sess"), "{challenge}");
        let step = server
            .step(RFC_EXAMPLE_RESPONSE.as_bytes(), &users)
            .unwrap();
        assert_eq!(
            step,
            DigestMd5Step::Authenticated {
                user: "chris".into(),
                token: b"rspauth=ea40f60335c427b5527b84dbabcdfffd".to_vec(),
            }
        );
        assert_eq!(
            server.step(b"", &users).unwrap_err(),
            DigestMd5Failure::Finished
        );
    }

    #[test]
    fn rfc_2831_acap_example_authenticates_with_its_rspauth() {
        let mut server = DigestMd5Server::new(
            "elwood.innosoft.com",
            "acap/elwood.innosoft.com",
            "OA9BSXrbuRhWay",
        );
        let users = users(&[("chris", "secret")]);
        server.step(b"", &users).unwrap();
        let response = "charset=utf-8,username=\"chris\",realm=\"elwood.innosoft.com\",nonce=\"OA9BSXrbuRhWay\",nc=00000001,cnonce=\"OA9BSuZWMSpW8m\",digest-uri=\"acap/elwood.innosoft.com\",response=6084c6db3fede7352c551284490fd0fc,qop=auth";
        let step = server.step(response.as_bytes(), &users).unwrap();
        assert_eq!(
            step,
            DigestMd5Step::Authenticated {
                user: "chris".into(),
                token: b"rspauth=2f0b3d7c3c2e486600ef710726aa2eae".to_vec(),
            }
        );
    }

    #[test]
    fn a_wrong_password_or_unknown_user_fails() {
        let mut server = rfc_example_server();
        let wrong = users(&[("chris", "Secret")]);
        server.step(b"", &wrong).unwrap();
        assert_eq!(
            server
                .step(RFC_EXAMPLE_RESPONSE.as_bytes(), &wrong)
                .unwrap_err(),
            DigestMd5Failure::WrongResponse("chris".into())
        );
        let mut server = rfc_example_server();
        let nobody = users(&[("alice", "secret")]);
        server.step(b"", &nobody).unwrap();
        assert_eq!(
            server
                .step(RFC_EXAMPLE_RESPONSE.as_bytes(), &nobody)
                .unwrap_err(),
            DigestMd5Failure::UnknownUser("chris".into())
        );
    }

    #[test]
    fn the_response_must_answer_this_challenge() {
        let users = users(&[("chris", "secret")]);
        let cases = [
            ("OA6MG9tEQGm2hh", "OA6MG9tEQGm2hX", DigestMd5Failure::Nonce),
            (
                "nc=00000001",
                "nc=00000002",
                DigestMd5Failure::NonceCount("00000002".into()),
            ),
            (
                "imap/elwood",
                "smtp/elwood",
                DigestMd5Failure::DigestUri("smtp/elwood.innosoft.com".into()),
            ),
            (
                "qop=auth",
                "qop=auth-conf",
                DigestMd5Failure::Qop("auth-conf".into()),
            ),
            (
                "realm=\"elwood",
                "realm=\"x.elwood",
                DigestMd5Failure::Realm("x.elwood.innosoft.com".into()),
            ),
            (
                "charset=utf-8",
                "charset=latin-9",
                DigestMd5Failure::Charset("latin-9".into()),
            ),
            (
                ",cnonce=\"OA6MHXh6VqTrRk\"",
                "",
                DigestMd5Failure::Missing("cnonce"),
            ),
            (
                "qop=auth",
                "qop=auth,nc=00000001",
                DigestMd5Failure::Duplicate("nc".into()),
            ),
            (
                "qop=auth",
                "qop=auth,broken",
                DigestMd5Failure::Malformed("'=' expected after a directive name"),
            ),
        ];
        for (from, to, failure) in cases {
            let mut server = rfc_example_server();
            server.step(b"", &users).unwrap();
            let response = RFC_EXAMPLE_RESPONSE.replacen(from, to, 1);
            assert_ne!(response, RFC_EXAMPLE_RESPONSE, "{from}");
            assert_eq!(
                server.step(response.as_bytes(), &users).unwrap_err(),
                failure,
                "{response}"
            );
        }
    }

    #[test]
    fn directives_accept_white_space_empty_elements_and_escapes() {
        let token = b" username = \"ch\\\"ris\" ,, realm=\"r\",\tqop=auth ,";
        let directives = directives_of(token).unwrap();
        assert_eq!(
            directives,
            vec![
                ("username".to_string(), b"ch\"ris".to_vec()),
                ("realm".to_string(), b"r".to_vec()),
                ("qop".to_string(), b"auth".to_vec()),
            ]
        );
        assert!(directives_of(b"username=\"open").is_err());
        assert!(directives_of(b"=value").is_err());
    }

    #[test]
    fn an_initial_response_or_an_oversized_response_fails() {
        let users = users(&[("chris", "secret")]);
        let mut server = rfc_example_server();
        assert_eq!(
            server.step(b"username=\"chris\"", &users).unwrap_err(),
            DigestMd5Failure::InitialResponse
        );
        let mut server = rfc_example_server();
        server.step(b"", &users).unwrap();
        let huge = vec![b'a'; DIGEST_RESPONSE_MAX_BYTES];
        assert_eq!(
            server.step(&huge, &users).unwrap_err(),
            DigestMd5Failure::TooLong
        );
    }

    #[test]
    fn without_charset_credentials_are_latin_1() {
        // The RFC example's digest depends on user, realm and password
        // only through MD5(user:realm:password); a Latin-1 password must
        // hash as its ISO 8859-1 bytes when charset=utf-8 is absent.
        let secret = |utf8| Secret {
            user: "chris",
            realm: "r",
            password: "s\u{e9}cret",
            utf8,
        };
        let response = DigestResponse {
            nonce: b"n".to_vec(),
            cnonce: b"c".to_vec(),
            nc: b"00000001".to_vec(),
            digest_uri: b"zookeeper/zk-sasl-md5".to_vec(),
            ..DigestResponse::default()
        };
        assert_eq!(encode("s\u{e9}", false), vec![b's', 0xe9]);
        assert_eq!(encode("s\u{e9}", true), "s\u{e9}".as_bytes());
        assert_ne!(
            response_value(&secret(false), &response, "AUTHENTICATE:"),
            response_value(&secret(true), &response, "AUTHENTICATE:")
        );
    }

    #[test]
    fn zookeeper_challenges_carry_fresh_nonces() {
        let users = users(&[]);
        let challenge = |server: &mut DigestMd5Server| match server.step(b"", &users).unwrap() {
            DigestMd5Step::Challenge(bytes) => String::from_utf8(bytes).unwrap(),
            other => panic!("{other:?}"),
        };
        let first = challenge(&mut DigestMd5Server::zookeeper());
        let second = challenge(&mut DigestMd5Server::zookeeper());
        assert!(
            first.starts_with("realm=\"zk-sasl-md5\",nonce=\""),
            "{first}"
        );
        assert_ne!(first, second);
    }

    #[test]
    fn jaas_server_section_users_are_read() {
        let text = r#"
            // the server's users
            Server {
                org.apache.zookeeper.server.auth.DigestLoginModule required
                user_super="adminsecret"
                user_alice="a;b=c"   /* quotes keep ; and = */
                debug=true;
            };
            # a client section is ignored
            Client {
                org.apache.zookeeper.server.auth.DigestLoginModule required
                username="bob" password="bobsecret";
            };
        "#;
        let users = SaslUsers::parse_jaas(text).unwrap();
        assert_eq!(users.len(), 2);
        assert_eq!(users.password("alice"), Some("a;b=c"));
        assert_eq!(users.password("super"), Some("adminsecret"));
        assert_eq!(users.password("bob"), None);
    }

    #[test]
    fn jaas_errors_name_the_line() {
        let missing_semicolon = "Server {\n  Module required user_a=\"x\"\n};\n";
        let error = SaslUsers::parse_jaas(missing_semicolon).unwrap_err();
        assert!(
            matches!(error, JaasError::Syntax { line: 3, .. }),
            "{error:?}"
        );
        let bad_flag = "Server {\n Module mandatory user_a=\"x\";\n};";
        let error = SaslUsers::parse_jaas(bad_flag).unwrap_err();
        assert!(
            matches!(error, JaasError::Syntax { line: 2, .. }),
            "{error:?}"
        );
        assert_eq!(
            SaslUsers::parse_jaas("Client { M required; };").unwrap_err(),
            JaasError::NoServerSection
        );
        assert!(SaslUsers::parse_jaas("Server { M required a=\"open ; };").is_err());
    }
}
