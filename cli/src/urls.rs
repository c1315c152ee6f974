//! The `--redis` values as server URLs: where one value holds several, which schemes are
//! servers, and whether any URL carries credentials.

use crate::args::ServerArgs;

/// Whether any `--redis` URL carries a user or password (`redis://USER:PASS@HOST`).
pub fn has_credentials(server: &ServerArgs) -> bool {
    server.redis.iter().flat_map(|value| split(value)).any(|url| {
        let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
        let authority = rest.split(['/', '?']).next().unwrap_or_default();
        authority.contains('@')
    })
}

/// The URL schemes `--redis` takes.
pub const SCHEMES: [&str; 9] = [
    "redis://",
    "rediss://",
    "redis+sentinel://",
    "rediss+sentinel://",
    "unix://",
    "redis+unix://",
    "valkey+unix://",
    "valkey://",
    "valkeys://",
];

/// One `--redis` value as server URLs. A comma separates servers only before a scheme: a
/// Sentinel URL lists its sentinels with commas (`redis+sentinel://a:26379,b:26379/m`).
pub fn split(value: &str) -> Vec<&str> {
    let mut urls = Vec::new();
    let mut start = 0;
    for (at, _) in value.match_indices(',') {
        let next = value[at + 1..].trim_start();
        if next.is_empty() || SCHEMES.iter().any(|scheme| next.starts_with(scheme)) {
            urls.push(&value[start..at]);
            start = at + 1;
        }
    }
    urls.push(&value[start..]);
    urls.into_iter().map(str::trim).filter(|url| !url.is_empty()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_comma_separates_servers_only_before_a_scheme() {
        assert_eq!(
            split("redis://a:1,redis://b:2 , rediss://c:3"),
            ["redis://a:1", "redis://b:2", "rediss://c:3"]
        );
        assert_eq!(
            split("redis+sentinel://s1:26379,s2:26379/m,redis://b:2,redis+sentinel://s3,s4/n"),
            ["redis+sentinel://s1:26379,s2:26379/m", "redis://b:2", "redis+sentinel://s3,s4/n"]
        );
        assert_eq!(split(" redis://a:1, "), ["redis://a:1"]);
        assert!(split("").is_empty());
    }
}
