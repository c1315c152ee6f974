//! Requests as values: the one type per command that both builds its words (clients, the test
//! harness) and parses them (the module), so the two sides cannot drift apart. The rules every
//! command shares (a token's length, a ttl, a decimal) are written once, here.

use std::borrow::Cow;

use crate::command::{
    label_len_ok, permits_ok, token_len_ok, Command, ACQUIRE, ACQUIREALL, BLOCK, CAD, LABEL, PERMITS, RAISE,
    RELEASE, RENEW, SHARED, SHARED_PERMITS, STATUS,
};
use crate::error::ReplyError;
use crate::limits::{MAX_ACQUIRE_KEYS, MAX_BLOCK_MS, MAX_FENCE};

/// What every request shares: the command it calls and its words, the name first and the key
/// second, which is how an engine other than the module (the Functions library) rewrites the
/// call into its own form.
pub trait Request<'a> {
    /// The command this request calls.
    const COMMAND: Command;
    /// The words, the command's name first, then the key (`ACQUIREALL`: the keys' count,
    /// then the keys).
    fn words(&self) -> Vec<Cow<'a, [u8]>>;
}

/// `FENCEDLOCK.ACQUIRE key token ttl_ms [LABEL label] [PERMITS n] [BLOCK timeout_ms]`, see
/// [`ACQUIRE`] for what each part means.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Acquire<'a> {
    /// The lock key.
    pub key: &'a [u8],
    /// The caller's token: a secret, so `Debug` shows only its length.
    pub token: &'a [u8],
    /// The lease time in milliseconds.
    pub ttl_ms: u64,
    /// `BLOCK timeout_ms`: wait in the key's queue up to that long (`0`: no limit).
    pub block_ms: Option<u64>,
    /// `LABEL label`: the lease's public label, shown by `STATUS`.
    pub label: Option<&'a [u8]>,
    /// `PERMITS n`: how many holders the key admits; 1 is the mutex.
    pub permits: u32,
    /// `SHARED`: a read lease of a read-write lock (`permits` is then 1: the two exclude
    /// each other).
    pub shared: bool,
}

impl<'a> Acquire<'a> {
    /// A plain mutex request: no wait, no label, one permit.
    pub const fn mutex(key: &'a [u8], token: &'a [u8], ttl_ms: u64) -> Acquire<'a> {
        Acquire { key, token, ttl_ms, block_ms: None, label: None, permits: 1, shared: false }
    }

    /// The permit count the key is held with once this request is granted: `permits`, or
    /// [`SHARED_PERMITS`] for a read lease.
    pub const fn capacity(&self) -> u32 {
        if self.shared {
            SHARED_PERMITS
        } else {
            self.permits
        }
    }

    /// Parses the arguments after the command name (the key first), refusing what the module
    /// refuses, checked in the module's order: the token, the ttl (a positive integer up to
    /// `max_ttl_ms`, the server's `fencedlock.max-ttl-ms`), then the options, the words in any
    /// case and order, each at most once (the first bad one decides the error). Too few
    /// arguments, a word without its value, or `SHARED` with `PERMITS`, is
    /// [`ReplyError::Syntax`] (the server's arity check refuses too few before any parsing).
    pub fn parse(args: &[&'a [u8]], max_ttl_ms: u64) -> Result<Acquire<'a>, ReplyError> {
        let [key, token, ttl, options @ ..] = args else { return Err(ReplyError::Syntax) };
        let mut options: &[&'a [u8]] = options;
        let mut request = Acquire::mutex(key, parse_token(token)?, parse_ttl_ms(ttl, max_ttl_ms)?);
        let mut permits = None;
        while let [word, rest @ ..] = options {
            let word: &[u8] = word;
            if word.eq_ignore_ascii_case(SHARED.as_bytes()) && !request.shared && permits.is_none() {
                request.shared = true;
                options = rest;
                continue;
            }
            let [value, rest @ ..] = rest else { return Err(ReplyError::Syntax) };
            options = rest;
            if word.eq_ignore_ascii_case(BLOCK.as_bytes()) && request.block_ms.is_none() {
                let ms = parse_u64(value).filter(|ms| *ms <= MAX_BLOCK_MS);
                request.block_ms = Some(ms.ok_or(ReplyError::BadTimeout)?);
            } else if word.eq_ignore_ascii_case(LABEL.as_bytes()) && request.label.is_none() {
                if !label_len_ok(value) {
                    return Err(ReplyError::BadLabel);
                }
                request.label = Some(value);
            } else if word.eq_ignore_ascii_case(PERMITS.as_bytes()) && permits.is_none() && !request.shared {
                let n = parse_u64(value).filter(|n| permits_ok(*n)).ok_or(ReplyError::BadPermits)?;
                permits = Some(u32::try_from(n).map_err(|_| ReplyError::BadPermits)?);
            } else {
                return Err(ReplyError::Syntax);
            }
        }
        request.permits = permits.unwrap_or(1);
        Ok(request)
    }
}

impl<'a> Request<'a> for Acquire<'a> {
    const COMMAND: Command = ACQUIRE;

    /// `PERMITS` is sent only above 1, so a mutex request stays byte for byte what it always
    /// was (and what modules older than semaphores accept); `BLOCK` goes last, so a caller that
    /// re-sends with less time left changes only the last word.
    fn words(&self) -> Vec<Cow<'a, [u8]>> {
        let mut words: Vec<Cow<'a, [u8]>> = vec![
            Cow::Borrowed(ACQUIRE.name.as_bytes()),
            Cow::Borrowed(self.key),
            Cow::Borrowed(self.token),
            decimal(self.ttl_ms),
        ];
        if let Some(label) = self.label {
            words.extend([Cow::Borrowed(LABEL.as_bytes()), Cow::Borrowed(label)]);
        }
        if self.permits > 1 {
            words.extend([Cow::Borrowed(PERMITS.as_bytes()), decimal(u64::from(self.permits))]);
        }
        if self.shared {
            words.push(Cow::Borrowed(SHARED.as_bytes()));
        }
        if let Some(ms) = self.block_ms {
            words.extend([Cow::Borrowed(BLOCK.as_bytes()), decimal(ms)]);
        }
        words
    }
}

/// `FENCEDLOCK.ACQUIREALL numkeys key [key ...] token ttl_ms [LABEL label] [PERMITS n |
/// SHARED]`, see [`ACQUIREALL`]: the keys, and the `ACQUIRE` every one of them is decided as.
#[derive(Clone, PartialEq, Eq)]
pub struct AcquireAll<'a> {
    /// 1 to [`MAX_ACQUIRE_KEYS`] distinct keys, in the order their fences are replied.
    pub keys: Vec<&'a [u8]>,
    /// The token, ttl and options each key is asked with (never `BLOCK`); its own `key` is
    /// the first key, and [`AcquireAll::of`] gives each key's.
    pub each: Acquire<'a>,
}

impl<'a> AcquireAll<'a> {
    /// Asks for every key of `keys` as `each` asks for its own.
    pub fn new(keys: Vec<&'a [u8]>, each: Acquire<'a>) -> AcquireAll<'a> {
        AcquireAll { keys, each }
    }

    /// The `ACQUIRE` that `key` is decided as.
    pub fn of(&self, key: &'a [u8]) -> Acquire<'a> {
        Acquire { key, ..self.each }
    }

    /// Where a call's keys are among its words (the name first): the `numkeys` words after the
    /// count, or none when the count is not a number from 1 to [`MAX_ACQUIRE_KEYS`] or more
    /// keys than there are words (the call will be refused when it runs).
    pub fn key_positions(words: &[&[u8]]) -> std::ops::Range<usize> {
        let count = words.get(1).and_then(|count| parse_u64(count)).and_then(|n| usize::try_from(n).ok());
        match count {
            Some(n) if (1..=MAX_ACQUIRE_KEYS).contains(&n) && 2 + n <= words.len() => 2..2 + n,
            _ => 0..0,
        }
    }

    /// Parses the arguments after the command name: `numkeys` and the keys first
    /// ([`ReplyError::BadKeys`] for a count out of range, fewer keys than it says, or a key
    /// named twice), then the rest exactly as [`Acquire::parse`] does; `BLOCK` is
    /// [`ReplyError::Syntax`] (the command never waits).
    pub fn parse(args: &[&'a [u8]], max_ttl_ms: u64) -> Result<AcquireAll<'a>, ReplyError> {
        let [count, rest @ ..] = args else { return Err(ReplyError::Syntax) };
        let count = parse_u64(count)
            .and_then(|n| usize::try_from(n).ok())
            .filter(|n| (1..=MAX_ACQUIRE_KEYS).contains(n))
            .ok_or(ReplyError::BadKeys)?;
        // The keys, then at least the token and the ttl.
        if rest.len() < count + 2 {
            return Err(ReplyError::BadKeys);
        }
        let (keys, terms) = rest.split_at(count);
        if keys.iter().enumerate().any(|(i, key)| keys[..i].contains(key)) {
            return Err(ReplyError::BadKeys);
        }
        let first_and_terms: Vec<&'a [u8]> = keys[..1].iter().chain(terms).copied().collect();
        let each = Acquire::parse(&first_and_terms, max_ttl_ms)?;
        if each.block_ms.is_some() {
            return Err(ReplyError::Syntax);
        }
        Ok(AcquireAll { keys: keys.to_vec(), each })
    }
}

impl<'a> Request<'a> for AcquireAll<'a> {
    const COMMAND: Command = ACQUIREALL;

    /// The keys after their count, then `ACQUIRE`'s words after its key (`BLOCK` left out).
    fn words(&self) -> Vec<Cow<'a, [u8]>> {
        let mut words = vec![Cow::Borrowed(ACQUIREALL.name.as_bytes()), decimal(self.keys.len() as u64)];
        words.extend(self.keys.iter().map(|key| Cow::Borrowed(*key)));
        words.extend(Acquire { block_ms: None, ..self.each }.words().into_iter().skip(2));
        words
    }
}

impl std::fmt::Debug for AcquireAll<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let keys: Vec<_> = self.keys.iter().map(|key| String::from_utf8_lossy(key)).collect();
        f.debug_struct("AcquireAll").field("keys", &keys).field("each", &self.each).finish()
    }
}

/// `FENCEDLOCK.RENEW key token ttl_ms`, see [`RENEW`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Renew<'a> {
    /// The lock key.
    pub key: &'a [u8],
    /// The holder's token (a secret).
    pub token: &'a [u8],
    /// The new lease time in milliseconds, from now.
    pub ttl_ms: u64,
}

impl<'a> Renew<'a> {
    /// Parses the arguments after the command name, checked as [`Acquire::parse`] checks its
    /// first three.
    pub fn parse(args: &[&'a [u8]], max_ttl_ms: u64) -> Result<Renew<'a>, ReplyError> {
        let [key, token, ttl] = args else { return Err(ReplyError::Syntax) };
        Ok(Renew { key, token: parse_token(token)?, ttl_ms: parse_ttl_ms(ttl, max_ttl_ms)? })
    }
}

impl<'a> Request<'a> for Renew<'a> {
    const COMMAND: Command = RENEW;

    fn words(&self) -> Vec<Cow<'a, [u8]>> {
        vec![
            Cow::Borrowed(RENEW.name.as_bytes()),
            Cow::Borrowed(self.key),
            Cow::Borrowed(self.token),
            decimal(self.ttl_ms),
        ]
    }
}

/// `FENCEDLOCK.RELEASE key token`, see [`RELEASE`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Release<'a> {
    /// The lock key.
    pub key: &'a [u8],
    /// The holder's token (a secret).
    pub token: &'a [u8],
}

impl<'a> Release<'a> {
    /// Parses the arguments after the command name.
    pub fn parse(args: &[&'a [u8]]) -> Result<Release<'a>, ReplyError> {
        let [key, token] = args else { return Err(ReplyError::Syntax) };
        Ok(Release { key, token: parse_token(token)? })
    }
}

impl<'a> Request<'a> for Release<'a> {
    const COMMAND: Command = RELEASE;

    fn words(&self) -> Vec<Cow<'a, [u8]>> {
        vec![Cow::Borrowed(RELEASE.name.as_bytes()), Cow::Borrowed(self.key), Cow::Borrowed(self.token)]
    }
}

/// `FENCEDLOCK.RAISE key token fence`, see [`RAISE`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Raise<'a> {
    /// The lock key.
    pub key: &'a [u8],
    /// The holder's token (a secret).
    pub token: &'a [u8],
    /// The fence to raise the key's to: 1 to [`MAX_FENCE`].
    pub fence: u64,
}

impl<'a> Raise<'a> {
    /// Parses the arguments after the command name: the token, then the fence.
    pub fn parse(args: &[&'a [u8]]) -> Result<Raise<'a>, ReplyError> {
        let [key, token, fence] = args else { return Err(ReplyError::Syntax) };
        let token = parse_token(token)?;
        let fence = parse_u64(fence).filter(|f| (1..=MAX_FENCE).contains(f)).ok_or(ReplyError::BadFence)?;
        Ok(Raise { key, token, fence })
    }
}

impl<'a> Request<'a> for Raise<'a> {
    const COMMAND: Command = RAISE;

    fn words(&self) -> Vec<Cow<'a, [u8]>> {
        vec![
            Cow::Borrowed(RAISE.name.as_bytes()),
            Cow::Borrowed(self.key),
            Cow::Borrowed(self.token),
            decimal(self.fence),
        ]
    }
}

/// `FENCEDLOCK.STATUS key`, see [`STATUS`]. (Its reply is [`LockStatus`](crate::LockStatus) or
/// [`SemaphoreStatus`](crate::SemaphoreStatus).)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status<'a> {
    /// The lock key.
    pub key: &'a [u8],
}

impl<'a> Request<'a> for Status<'a> {
    const COMMAND: Command = STATUS;

    fn words(&self) -> Vec<Cow<'a, [u8]>> {
        vec![Cow::Borrowed(STATUS.name.as_bytes()), Cow::Borrowed(self.key)]
    }
}

/// `FENCEDLOCK.CAD key value`, see [`CAD`]: compare-and-delete of a plain string key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Cad<'a> {
    /// The string key.
    pub key: &'a [u8],
    /// The value it must hold to be deleted (often a `SET NX` lock's secret, so `Debug` shows
    /// only its length).
    pub value: &'a [u8],
}

impl<'a> Request<'a> for Cad<'a> {
    const COMMAND: Command = CAD;

    fn words(&self) -> Vec<Cow<'a, [u8]>> {
        vec![Cow::Borrowed(CAD.name.as_bytes()), Cow::Borrowed(self.key), Cow::Borrowed(self.value)]
    }
}

impl std::fmt::Debug for Cad<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cad")
            .field("key", &String::from_utf8_lossy(self.key))
            .field("value_len", &self.value.len())
            .finish()
    }
}

/// A token: 1 to [`MAX_TOKEN_LEN`](crate::limits::MAX_TOKEN_LEN) opaque bytes.
fn parse_token(token: &[u8]) -> Result<&[u8], ReplyError> {
    token_len_ok(token).then_some(token).ok_or(ReplyError::BadToken)
}

/// A ttl: a positive decimal number of milliseconds up to `max_ttl_ms` (the server's
/// `fencedlock.max-ttl-ms`), and small enough that the module's microseconds cannot overflow.
/// The one ttl rule of every command that takes one.
pub fn parse_ttl_ms(ttl: &[u8], max_ttl_ms: u64) -> Result<u64, ReplyError> {
    let ttl_ms = parse_u64(ttl).filter(|ms| *ms > 0).ok_or(ReplyError::BadTtl)?;
    if ttl_ms > max_ttl_ms || ttl_ms.checked_mul(1000).is_none() {
        return Err(ReplyError::TtlTooLarge);
    }
    Ok(ttl_ms)
}

impl std::fmt::Debug for Acquire<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acquire")
            .field("key", &String::from_utf8_lossy(self.key))
            .field("token_len", &self.token.len())
            .field("ttl_ms", &self.ttl_ms)
            .field("block_ms", &self.block_ms)
            .field("label", &self.label.map(String::from_utf8_lossy))
            .field("permits", &self.permits)
            .field("shared", &self.shared)
            .finish()
    }
}

/// `Debug` for the requests that carry a token: the key and the other fields as they are, the
/// token only by its length (it is a secret).
macro_rules! debug_without_token {
    ($($request:ident { $($field:ident),* }),*) => {$(
        impl std::fmt::Debug for $request<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($request))
                    .field("key", &String::from_utf8_lossy(self.key))
                    .field("token_len", &self.token.len())
                    $(.field(stringify!($field), &self.$field))*
                    .finish()
            }
        }
    )*};
}

debug_without_token!(Renew { ttl_ms }, Release {}, Raise { fence });

/// `n` in decimal ASCII, as the server reads integers.
fn decimal(n: u64) -> Cow<'static, [u8]> {
    Cow::Owned(n.to_string().into_bytes())
}

/// A strict unsigned decimal: ASCII digits only, no sign, no spaces, no overflow. The one
/// integer rule of the protocol's arguments and the module's state records.
pub fn parse_u64(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() || bytes.len() > 20 {
        return None;
    }
    bytes.iter().try_fold(0u64, |acc, b| {
        let digit = b.checked_sub(b'0').filter(|d| *d <= 9)?;
        acc.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::{MAX_ACQUIRE_KEYS, MAX_LABEL_LEN, MAX_TOKEN_LEN};

    const MAX: u64 = 86_400_000;

    fn words(request: &Acquire<'_>) -> Vec<String> {
        request.words().iter().map(|w| String::from_utf8_lossy(w).into_owned()).collect()
    }

    fn parse<'a>(args: &[&'a [u8]]) -> Result<Acquire<'a>, ReplyError> {
        Acquire::parse(args, MAX)
    }

    /// `key token 500` followed by `options`.
    fn with(options: &[&'static [u8]]) -> Result<Acquire<'static>, ReplyError> {
        let args: Vec<&'static [u8]> =
            [&b"k"[..], b"t", b"500"].into_iter().chain(options.iter().copied()).collect();
        Acquire::parse(&args, MAX)
    }

    #[test]
    fn permits_are_sent_only_above_one_and_block_last() {
        let mutex = Acquire::mutex(b"k", b"t", 500);
        assert_eq!(words(&mutex), [ACQUIRE.name, "k", "t", "500"]);
        let one = Acquire { permits: 1, ..mutex };
        assert_eq!(words(&one), words(&mutex), "PERMITS 1 is the mutex: byte for byte the same");
        let all = Acquire { label: Some(b"w"), permits: 3, block_ms: Some(0), ..mutex };
        assert_eq!(words(&all), [ACQUIRE.name, "k", "t", "500", LABEL, "w", PERMITS, "3", BLOCK, "0"]);
        let waiting = Acquire { block_ms: Some(250), ..mutex };
        assert_eq!(words(&waiting), [ACQUIRE.name, "k", "t", "500", BLOCK, "250"]);
    }

    #[test]
    fn built_words_parse_back_to_the_request() {
        let mutex = Acquire::mutex(b"k", b"\x00\xfftoken", 500);
        for request in [
            mutex,
            Acquire { label: Some(b"node-a"), ..mutex },
            Acquire { permits: 7, block_ms: Some(MAX_BLOCK_MS), ..mutex },
            Acquire { label: Some(b"l"), permits: 2, block_ms: Some(0), ..mutex },
            Acquire { shared: true, ..mutex },
            Acquire { label: Some(b"SHARED"), shared: true, block_ms: Some(5), ..mutex },
        ] {
            let words = request.words();
            let args: Vec<&[u8]> = words[1..].iter().map(|w| &w[..]).collect();
            assert_eq!(Acquire::parse(&args, MAX), Ok(request));
        }
    }

    #[test]
    fn tokens_and_ttls_are_refused_as_the_module_does() {
        assert_eq!(parse(&[b"k", b"", b"5"]), Err(ReplyError::BadToken));
        assert_eq!(parse(&[b"k", &[0; MAX_TOKEN_LEN + 1], b"5"]), Err(ReplyError::BadToken));
        assert!(parse(&[b"k", &[0; MAX_TOKEN_LEN], b"5"]).is_ok());
        // The token is checked before the ttl.
        assert_eq!(parse(&[b"k", b"", b"x"]), Err(ReplyError::BadToken));
        assert_eq!(parse(&[b"k", b"t", b"0010"]).map(|r| r.ttl_ms), Ok(10));
        for bad in [&b""[..], b"0", b"-5", b"+5", b" 5", b"5 ", b"1.5", b"1e3", b"abc", b"\xff"] {
            assert_eq!(parse(&[b"k", b"t", bad]), Err(ReplyError::BadTtl), "{bad:?}");
        }
        assert_eq!(Acquire::parse(&[b"k", b"t", b"101"], 100), Err(ReplyError::TtlTooLarge));
        assert_eq!(Acquire::parse(&[b"k", b"t", b"100"], 100).map(|r| r.ttl_ms), Ok(100));
        let huge: &[&[u8]] = &[b"k", b"t", b"9223372036854775808"];
        assert_eq!(Acquire::parse(huge, u64::MAX), Err(ReplyError::TtlTooLarge));
        let overflow: &[&[u8]] = &[b"k", b"t", b"99999999999999999999"];
        assert_eq!(Acquire::parse(overflow, u64::MAX), Err(ReplyError::BadTtl));
        assert_eq!(parse(&[b"k", b"t"]), Err(ReplyError::Syntax));
    }

    #[test]
    fn permits_are_bounded() {
        let permits = |n: &'static [u8]| with(&[b"PERMITS", n]).map(|r| r.permits);
        assert_eq!(permits(b"1"), Ok(1));
        assert_eq!(permits(b"1024"), Ok(1024));
        for bad in
            [&b"0"[..], b"1025", b"-1", b"", b"x", b"2.5", b" 2", b"4294967298", b"99999999999999999999"]
        {
            assert_eq!(permits(bad), Err(ReplyError::BadPermits), "{bad:?}");
        }
    }

    #[test]
    fn shared_is_a_word_alone_once_and_never_with_permits() {
        let shared = Acquire { shared: true, ..Acquire::mutex(b"k", b"t", 500) };
        assert_eq!(with(&[b"SHARED"]), Ok(shared));
        assert_eq!(with(&[b"shared", b"BLOCK", b"10"]), Ok(Acquire { block_ms: Some(10), ..shared }));
        assert_eq!(with(&[b"BLOCK", b"10", b"Shared"]), Ok(Acquire { block_ms: Some(10), ..shared }));
        assert_eq!(shared.capacity(), SHARED_PERMITS);
        assert_eq!(Acquire::mutex(b"k", b"t", 500).capacity(), 1);
        assert_eq!(
            words(&Acquire { block_ms: Some(1), ..shared }),
            [ACQUIRE.name, "k", "t", "500", SHARED, BLOCK, "1"]
        );
        for bad in [
            &[&b"SHARED"[..], b"SHARED"][..],
            &[b"SHARED", b"PERMITS", b"2"],
            &[b"PERMITS", b"1", b"SHARED"],
            &[b"SHARED", b"BLOCK"],
            &[b"SHARED", b"5"],
        ] {
            assert_eq!(with(bad), Err(ReplyError::Syntax), "{bad:?}");
        }
    }

    #[test]
    fn block_takes_the_word_in_any_case_and_a_bounded_timeout() {
        let block = |word: &'static [u8], ms: &'static [u8]| with(&[word, ms]).map(|r| r.block_ms);
        assert_eq!(block(b"BLOCK", b"0"), Ok(Some(0)));
        assert_eq!(block(b"block", b"250"), Ok(Some(250)));
        let max = MAX_BLOCK_MS.to_string().into_bytes().leak();
        assert_eq!(block(b"BlOcK", max), Ok(Some(MAX_BLOCK_MS)));
        for bad in [&b"-1"[..], b"", b"1.5", b"abc", b" 5", b"9223372036854775808"] {
            assert_eq!(block(b"BLOCK", bad), Err(ReplyError::BadTimeout), "{bad:?}");
        }
        let above = (MAX_BLOCK_MS + 1).to_string().into_bytes().leak();
        assert_eq!(block(b"BLOCK", above), Err(ReplyError::BadTimeout));
        for bad in [&b"BLOK"[..], b"", b"BLOCKS", b"WAIT", b"LABELS"] {
            assert_eq!(block(bad, b"10"), Err(ReplyError::Syntax), "{bad:?}");
        }
    }

    #[test]
    fn options_come_in_any_order_each_at_most_once() {
        let both = Acquire { block_ms: Some(10), label: Some(b"node-a"), ..Acquire::mutex(b"k", b"t", 500) };
        assert_eq!(with(&[]), Ok(Acquire::mutex(b"k", b"t", 500)));
        assert_eq!(with(&[b"BLOCK", b"10", b"LABEL", b"node-a"]), Ok(both));
        assert_eq!(with(&[b"label", b"node-a", b"block", b"10"]), Ok(both));
        let all = with(&[b"permits", b"3", b"BLOCK", b"10", b"LABEL", b"node-a"]);
        assert_eq!(all, Ok(Acquire { permits: 3, ..both }));
        for repeated in [
            &[&b"BLOCK"[..], b"10", b"BLOCK", b"10"][..],
            &[b"LABEL", b"a", b"label", b"b"],
            &[b"LABEL", b"a", b"BLOCK", b"1", b"LABEL", b"a"],
            &[b"PERMITS", b"2", b"PERMITS", b"2"],
        ] {
            assert_eq!(with(repeated), Err(ReplyError::Syntax), "{repeated:?}");
        }
        assert_eq!(with(&[b"LABEL"]), Err(ReplyError::Syntax));
        assert_eq!(with(&[b"BLOCK", b"1", b"LABEL"]), Err(ReplyError::Syntax));
    }

    #[test]
    fn labels_are_1_to_max_label_len_opaque_bytes() {
        let label = |l: &'static [u8]| with(&[b"LABEL", l]).map(|r| r.label);
        assert_eq!(label(b"\x00\xff \r\n"), Ok(Some(&b"\x00\xff \r\n"[..])));
        let longest: &'static [u8] = vec![b'x'; MAX_LABEL_LEN].leak();
        assert_eq!(label(longest), Ok(Some(longest)));
        assert_eq!(label(b""), Err(ReplyError::BadLabel));
        assert_eq!(label(vec![b'x'; MAX_LABEL_LEN + 1].leak()), Err(ReplyError::BadLabel));
        // The first bad option decides the error.
        assert_eq!(with(&[b"LABEL", b"", b"BLOCK", b"x"]), Err(ReplyError::BadLabel));
        assert_eq!(with(&[b"BLOCK", b"x", b"LABEL", b""]), Err(ReplyError::BadTimeout));
    }

    #[test]
    fn renew_release_and_raise_build_and_parse_back() {
        let renew = Renew { key: b"k", token: b"\x00t", ttl_ms: 500 };
        let release = Release { key: b"k", token: b"\x00t" };
        let raise = Raise { key: b"k", token: b"\x00t", fence: MAX_FENCE };
        let args = |words: Vec<Cow<'static, [u8]>>| {
            words.into_iter().skip(1).map(Cow::into_owned).collect::<Vec<_>>()
        };
        let (r, l, f) = (args(renew.words()), args(release.words()), args(raise.words()));
        assert_eq!(Renew::parse(&r.iter().map(Vec::as_slice).collect::<Vec<_>>(), MAX), Ok(renew));
        assert_eq!(Release::parse(&l.iter().map(Vec::as_slice).collect::<Vec<_>>()), Ok(release));
        assert_eq!(Raise::parse(&f.iter().map(Vec::as_slice).collect::<Vec<_>>()), Ok(raise));
        assert_eq!(renew.words()[0], RENEW.name.as_bytes());
        assert_eq!(Status { key: b"k" }.words(), [STATUS.name.as_bytes(), b"k"]);
    }

    #[test]
    fn renew_takes_the_ttl_rule_of_acquire() {
        assert_eq!(Renew::parse(&[b"k", b"t", b"0010"], MAX).map(|r| r.ttl_ms), Ok(10));
        assert_eq!(Renew::parse(&[b"k", b"", b"x"], MAX), Err(ReplyError::BadToken), "the token first");
        for bad in [&b""[..], b"0", b"-5", b"+5", b" 5", b"1.5", b"abc", b"99999999999999999999"] {
            assert_eq!(Renew::parse(&[b"k", b"t", bad], MAX), Err(ReplyError::BadTtl), "{bad:?}");
        }
        assert_eq!(Renew::parse(&[b"k", b"t", b"101"], 100), Err(ReplyError::TtlTooLarge));
        assert_eq!(
            Renew::parse(&[b"k", b"t", b"9223372036854775808"], u64::MAX),
            Err(ReplyError::TtlTooLarge)
        );
        assert_eq!(Renew::parse(&[b"k", b"t"], MAX), Err(ReplyError::Syntax));
    }

    #[test]
    fn a_fence_to_raise_to_is_1_to_max_fence() {
        let fence = |f: &'static [u8]| Raise::parse(&[b"k", b"t", f]).map(|r| r.fence);
        assert_eq!(fence(b"1"), Ok(1));
        assert_eq!(fence(b"9223372036854775807"), Ok(MAX_FENCE));
        for bad in [&b"0"[..], b"9223372036854775808", b"-1", b"x", b""] {
            assert_eq!(fence(bad), Err(ReplyError::BadFence), "{bad:?}");
        }
        assert_eq!(Raise::parse(&[b"k", b"", b"x"]), Err(ReplyError::BadToken), "the token first");
        assert_eq!(Release::parse(&[b"k", &[0; MAX_TOKEN_LEN + 1]]), Err(ReplyError::BadToken));
        assert_eq!(Release::parse(&[b"k"]), Err(ReplyError::Syntax));
    }

    #[test]
    fn decimals_round_trip_and_nothing_else_parses() {
        for n in [0, 1, 9, 10, 4_294_967_296, u64::MAX] {
            assert_eq!(parse_u64(n.to_string().as_bytes()), Some(n));
        }
        for bad in [&b""[..], b"-1", b"+1", b" 1", b"1 ", b"1.0", b"18446744073709551616", b"\xff"] {
            assert_eq!(parse_u64(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn debug_never_shows_the_token() {
        let shown = format!("{:?}", Acquire::mutex(b"k", b"s3cret", 5));
        assert!(!shown.contains("s3cret") && shown.contains("token_len: 6"), "{shown}");
        for shown in [
            format!("{:?}", Renew { key: b"k", token: b"s3cret", ttl_ms: 5 }),
            format!("{:?}", Release { key: b"k", token: b"s3cret" }),
            format!("{:?}", Raise { key: b"k", token: b"s3cret", fence: 5 }),
        ] {
            assert!(!shown.contains("s3cret") && shown.contains("token_len: 6"), "{shown}");
        }
    }

    #[test]
    fn parsing_never_panics_on_any_bytes() {
        let samples: [&[u8]; 6] = [b"", b"\xff", b"0", b"BLOCK", b"18446744073709551616", b"LABEL"];
        for a in samples {
            for b in samples {
                let _ = parse(&[a, b, a, b]);
                let _ = parse(&[b"k", b"t", b"1", a, b, a]);
                let _ = (Renew::parse(&[a, b, a], MAX), Raise::parse(&[a, b, b]), Release::parse(&[a, b]));
            }
        }
    }

    fn all_words(request: &AcquireAll<'_>) -> Vec<String> {
        request.words().iter().map(|w| String::from_utf8_lossy(w).into_owned()).collect()
    }

    #[test]
    fn acquire_all_round_trips_and_sends_the_keys_after_their_count() {
        let each = Acquire { label: Some(b"job"), shared: true, ..Acquire::mutex(b"a", b"t", 500) };
        let request = AcquireAll::new(vec![b"a", b"b"], each);
        let words = request.words();
        assert_eq!(
            all_words(&request),
            [ACQUIREALL.name, "2", "a", "b", "t", "500", "LABEL", "job", "SHARED"]
        );
        let args: Vec<&[u8]> = words[1..].iter().map(|w| &w[..]).collect();
        assert_eq!(AcquireAll::parse(&args, MAX), Ok(request.clone()));
        assert_eq!(request.of(b"b"), Acquire { key: b"b", ..each });
        // BLOCK is never sent: the command does not wait.
        let blocking =
            AcquireAll::new(vec![b"a"], Acquire { block_ms: Some(5), ..Acquire::mutex(b"a", b"t", 5) });
        assert_eq!(all_words(&blocking), [ACQUIREALL.name, "1", "a", "t", "5"]);
    }

    #[test]
    fn acquire_all_finds_its_keys_after_their_count() {
        let words: [&[u8]; 6] = [b"FENCEDLOCK.ACQUIREALL", b"2", b"a", b"b", b"t", b"5"];
        assert_eq!(AcquireAll::key_positions(&words), 2..4);
        assert_eq!(AcquireAll::key_positions(&[b"X", b"5", b"a", b"t", b"5"]), 0..0, "more than the words");
        assert_eq!(AcquireAll::key_positions(&[b"X", b"0", b"a", b"t", b"5"]), 0..0);
        assert_eq!(AcquireAll::key_positions(&[b"X", b"x", b"a", b"t", b"5"]), 0..0);
        assert_eq!(AcquireAll::key_positions(&[b"X"]), 0..0);
    }

    #[test]
    fn acquire_all_refuses_bad_counts_repeated_keys_and_block() {
        let parse_all = |args: &[&[u8]]| AcquireAll::parse(args, MAX).map(drop);
        let too_many = (MAX_ACQUIRE_KEYS + 1).to_string();
        for count in [&b"0"[..], b"-1", b"x", b"", too_many.as_bytes()] {
            assert_eq!(parse_all(&[count, b"a", b"t", b"5"]), Err(ReplyError::BadKeys));
        }
        assert_eq!(parse_all(&[b"3", b"a", b"b", b"t", b"5"]), Err(ReplyError::BadKeys), "fewer keys");
        assert_eq!(parse_all(&[b"2", b"a", b"a", b"t", b"5"]), Err(ReplyError::BadKeys), "a key twice");
        assert_eq!(parse_all(&[b"1", b"a", b"t", b"5", b"BLOCK", b"10"]), Err(ReplyError::Syntax));
        assert_eq!(parse_all(&[b"1", b"a", b"", b"5"]), Err(ReplyError::BadToken));
        assert_eq!(parse_all(&[b"1", b"a", b"t", b"0"]), Err(ReplyError::BadTtl));
        assert_eq!(parse_all(&[b"1", b"a", b"t", b"5", b"PERMITS", b"0"]), Err(ReplyError::BadPermits));
        assert_eq!(parse_all(&[]), Err(ReplyError::Syntax));
        let most: Vec<String> = (0..MAX_ACQUIRE_KEYS).map(|i| format!("k{i}")).collect();
        let count = MAX_ACQUIRE_KEYS.to_string();
        let args: Vec<&[u8]> = std::iter::once(count.as_bytes())
            .chain(most.iter().map(|k| k.as_bytes()))
            .chain([&b"t"[..], b"5"])
            .collect();
        assert_eq!(AcquireAll::parse(&args, MAX).map(|r| r.keys.len()), Ok(MAX_ACQUIRE_KEYS));
    }

    proptest::proptest! {
        #[test]
        fn no_bytes_make_a_parser_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..40)) {
            let _ = parse_ttl_ms(&bytes, u64::MAX);
            let _ = Raise::parse(&[b"k", b"t", &bytes]);
            let _ = Renew::parse(&[b"k", &bytes, &bytes], u64::MAX);
            let _ = Acquire::parse(&[b"k", b"t", b"1", &bytes, &bytes], u64::MAX);
            let _ = AcquireAll::parse(&[&bytes, b"k", &bytes, b"1", &bytes], u64::MAX);
        }

        #[test]
        fn every_fence_round_trips(fence in 1u64..=MAX_FENCE) {
            let raise = Raise { key: b"k", token: b"t", fence };
            let words = raise.words();
            proptest::prop_assert_eq!(Raise::parse(&[&words[1], &words[2], &words[3]]), Ok(raise));
        }
    }
}
