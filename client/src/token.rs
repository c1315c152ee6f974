//! Lease tokens: the secret that proves ownership to the server.

use std::fmt;

use fencedlock_protocol::command::token_len_ok;
use fencedlock_protocol::limits::MAX_TOKEN_LEN;
use rand::RngCore;

use crate::error::Error;

/// Random bytes in a generated token: 128 bits.
pub const TOKEN_BYTES: usize = 16;

/// How generated tokens are put on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TokenFormat {
    /// 16 raw random bytes (the module stores tokens as binary).
    #[default]
    Raw,
    /// The same 16 random bytes as 32 lowercase hex characters, convenient when a person or
    /// a shell script must pass the token to `redis-cli`.
    Hex,
}

/// A lease token: 1 to [`MAX_TOKEN_LEN`] bytes, usually 128 bits from a CSPRNG.
///
/// Tokens are secrets (anyone holding one can renew or release the lease), so `Debug` does not
/// print them; use [`Token::to_hex`] deliberately.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Token(Box<[u8]>);

impl Token {
    /// A fresh 128-bit token from the thread-local CSPRNG, encoded as `format` says.
    pub fn generate(format: TokenFormat) -> Token {
        let mut bytes = [0u8; TOKEN_BYTES];
        rand::rng().fill_bytes(&mut bytes);
        match format {
            TokenFormat::Raw => Token(Box::new(bytes)),
            TokenFormat::Hex => Token(hex(&bytes).into_bytes().into_boxed_slice()),
        }
    }

    /// A token from existing bytes (for example one printed by another process).
    ///
    /// Fails with [`Error::Config`] unless it is 1 to [`MAX_TOKEN_LEN`] bytes long.
    pub fn from_bytes(bytes: impl Into<Vec<u8>>) -> Result<Token, Error> {
        let bytes = bytes.into();
        if !token_len_ok(&bytes) {
            return Err(Error::Config(format!(
                "a token must be 1 to {MAX_TOKEN_LEN} bytes, got {}",
                bytes.len()
            )));
        }
        Ok(Token(bytes.into_boxed_slice()))
    }

    /// Parses the output of [`Token::to_hex`].
    pub fn from_hex(text: &str) -> Result<Token, Error> {
        let text = text.trim();
        if text.len() % 2 != 0 {
            return Err(Error::Config("a hex token needs an even number of digits".into()));
        }
        // The message names the position, never the text: a mistyped token is nearly a token.
        let bytes = (0..text.len())
            .step_by(2)
            .map(|i| {
                text.get(i..i + 2).and_then(|pair| u8::from_str_radix(pair, 16).ok()).ok_or_else(|| {
                    Error::Config(format!(
                        "not a hex token: no hex digit pair at position {i} of {}",
                        text.len()
                    ))
                })
            })
            .collect::<Result<Vec<u8>, Error>>()?;
        Token::from_bytes(bytes)
    }

    /// The bytes sent to the server.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The token's bytes as lowercase hex.
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Token(<{} bytes redacted>)", self.0.len())
    }
}

/// `bytes` as lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn generated_tokens_have_the_right_length() {
        assert_eq!(Token::generate(TokenFormat::Raw).as_bytes().len(), 16);
        let hex = Token::generate(TokenFormat::Hex);
        assert_eq!(hex.as_bytes().len(), 32);
        assert!(hex.as_bytes().iter().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn generated_tokens_do_not_repeat_and_use_every_bit() {
        let tokens: Vec<Token> = (0..10_000).map(|_| Token::generate(TokenFormat::Raw)).collect();
        let distinct: HashSet<&Token> = tokens.iter().collect();
        assert_eq!(distinct.len(), tokens.len());
        // Every bit position is set in roughly half of the tokens.
        for bit in 0..128 {
            let ones = tokens.iter().filter(|t| t.as_bytes()[bit / 8] >> (bit % 8) & 1 == 1).count();
            assert!((4_000..6_000).contains(&ones), "bit {bit} set in {ones} of 10000");
        }
    }

    #[test]
    fn hex_round_trips() {
        let t = Token::generate(TokenFormat::Raw);
        assert_eq!(Token::from_hex(&t.to_hex()).unwrap(), t);
        assert_eq!(Token::from_hex("00ff10").unwrap().as_bytes(), &[0, 255, 16]);
        assert!(matches!(Token::from_hex("abc"), Err(Error::Config(_))));
        assert!(matches!(Token::from_hex("zz"), Err(Error::Config(_))));
        assert!(matches!(Token::from_hex(""), Err(Error::Config(_))));
        let Err(err) = Token::from_hex("00112233445566778899aabbccddeefX") else {
            panic!("a bad digit is refused");
        };
        assert!(!err.to_string().contains("00112233"), "the almost-token is not echoed: {err}");
    }

    #[test]
    fn token_length_is_validated() {
        assert!(Token::from_bytes(vec![]).is_err());
        assert!(Token::from_bytes(vec![7; 512]).is_ok());
        assert!(Token::from_bytes(vec![7; 513]).is_err());
        assert!(Token::from_bytes(b"\0\xff binary ok".to_vec()).is_ok());
    }

    #[test]
    fn debug_does_not_leak_the_token() {
        let t = Token::from_bytes(b"supersecret".to_vec()).unwrap();
        let shown = format!("{t:?}");
        assert!(!shown.contains("supersecret"), "{shown}");
        assert!(!shown.contains(&t.to_hex()), "{shown}");
    }
}
