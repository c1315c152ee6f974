//! Servers behind Redis Sentinel: the `redis+sentinel://` URL and the primary it names now.
//!
//! ```text
//! redis+sentinel://[user:password@]host:port[,host:port…]/service_name[/db][?sentinel_username=…&sentinel_password=…]
//! rediss+sentinel://…   TLS to the sentinels and to the primary
//! ```
//!
//! The credentials before `@` and the db are the primary's (the lock server's ACL user); the
//! sentinels' own credentials, if they have any, go in the query. The port defaults to 26379.
//!
//! The primary is asked of the sentinels at every connect, and the `redis` crate checks with
//! `ROLE` that the server they name is a primary. The node drops its connection and asks
//! again when the server answers `READONLY` (an old primary back as a replica), stops
//! answering, or refuses the connection: a failover is followed without restarting anything.

use std::sync::Arc;

use percent_encoding::percent_decode_str;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{ConnectionAddr, RedisError, TlsMode};
use tokio::sync::Mutex;

use crate::error::Error;
use crate::tls::Tls;

/// The Sentinel URL schemes, plaintext and TLS.
const SCHEMES: [(&str, bool); 2] = [("redis+sentinel://", false), ("rediss+sentinel://", true)];

/// The sentinels' default port.
const DEFAULT_PORT: u16 = 26379;

/// Whether `url` names a primary through sentinels.
pub(crate) fn is_sentinel_url(url: &str) -> bool {
    scheme(url).is_some()
}

/// The URL's scheme length and whether it asks for TLS.
fn scheme(url: &str) -> Option<(usize, bool)> {
    SCHEMES.iter().find_map(|(scheme, tls)| {
        let head = url.get(..scheme.len())?;
        head.eq_ignore_ascii_case(scheme).then_some((scheme.len(), *tls))
    })
}

/// A parsed `redis+sentinel://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SentinelUrl {
    /// The sentinels, `(host, port)`.
    pub(crate) sentinels: Vec<(String, u16)>,
    /// The name the sentinels monitor the primary under.
    pub(crate) service: String,
    pub(crate) db: i64,
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) sentinel_username: Option<String>,
    pub(crate) sentinel_password: Option<String>,
    pub(crate) tls: bool,
}

impl SentinelUrl {
    /// Parses `url`; [`Error::Config`] says what is wrong with it.
    pub(crate) fn parse(url: &str) -> Result<SentinelUrl, Error> {
        let bad = |why: &str| {
            Error::Config(format!(
                "bad Sentinel URL: {why}; use redis+sentinel://[user:password@]host:port[,host:port…]/service_name[/db]"
            ))
        };
        let (skip, tls) =
            scheme(url).ok_or_else(|| bad("the scheme must be redis+sentinel:// or rediss+sentinel://"))?;
        let rest = &url[skip..];
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.split_once('/').ok_or_else(|| bad("no service name"))?;
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let decode = |s: &str| {
            percent_decode_str(s)
                .decode_utf8()
                .map(|s| s.into_owned())
                .map_err(|_| bad("bad percent-encoding"))
        };
        let (username, password) = match userinfo {
            None => (None, None),
            Some(userinfo) => {
                let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
                let nonempty = |s: String| (!s.is_empty()).then_some(s);
                (nonempty(decode(user)?), nonempty(decode(password)?))
            }
        };
        let sentinels = hosts
            .split(',')
            .map(|host| host_port(host).ok_or_else(|| bad(&format!("bad sentinel address {host:?}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let mut path = path.split('/');
        let service = decode(path.next().unwrap_or_default())?;
        if service.is_empty() {
            return Err(bad("no service name"));
        }
        let db = match path.next() {
            None | Some("") => 0,
            Some(db) => db.parse().map_err(|_| bad(&format!("bad db {db:?}")))?,
        };
        if path.next().is_some() {
            return Err(bad("too many path segments"));
        }
        let (mut sentinel_username, mut sentinel_password) = (None, None);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            match name {
                "sentinel_username" => sentinel_username = Some(decode(value)?),
                "sentinel_password" => sentinel_password = Some(decode(value)?),
                other => {
                    return Err(bad(&format!(
                        "unknown option {other:?} (sentinel_username, sentinel_password)"
                    )))
                }
            }
        }
        Ok(SentinelUrl {
            sentinels,
            service,
            db,
            username,
            password,
            sentinel_username,
            sentinel_password,
            tls,
        })
    }

    /// The node's name in reports and errors: the service and its sentinels, no credentials.
    pub(crate) fn name(&self) -> String {
        let hosts: Vec<String> = self.sentinels.iter().map(|(host, port)| format!("{host}:{port}")).collect();
        format!("{}@sentinel({})", self.service, hosts.join(","))
    }

    /// A client that asks these sentinels for the primary, with `tls` for `rediss+sentinel`.
    fn client(&self, tls: &Tls) -> Result<SentinelClient, RedisError> {
        let addrs = self.sentinels.iter().map(|(host, port)| match self.tls {
            true => {
                ConnectionAddr::TcpTls { host: host.clone(), port: *port, insecure: false, tls_params: None }
            }
            false => ConnectionAddr::Tcp(host.clone(), *port),
        });
        let mut builder = SentinelClientBuilder::new(addrs, &self.service, SentinelServerType::Master)?
            .set_client_to_redis_db(self.db);
        if let Some(username) = &self.username {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = &self.password {
            builder = builder.set_client_to_redis_password(password);
        }
        if let Some(username) = &self.sentinel_username {
            builder = builder.set_client_to_sentinel_username(username);
        }
        if let Some(password) = &self.sentinel_password {
            builder = builder.set_client_to_sentinel_password(password);
        }
        if self.tls {
            builder = tls.sentinel_client(
                builder
                    .set_client_to_redis_tls_mode(TlsMode::Secure)
                    .set_client_to_sentinel_tls_mode(TlsMode::Secure),
            );
        }
        builder.build()
    }
}

/// `host:port` or `[v6]:port`, the port optional.
fn host_port(text: &str) -> Option<(String, u16)> {
    let (host, port) = match text.strip_prefix('[') {
        Some(v6) => {
            let (host, rest) = v6.split_once(']')?;
            (host, rest.strip_prefix(':'))
        }
        None => match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        },
    };
    let port = match port {
        Some(port) => port.parse().ok()?,
        None => DEFAULT_PORT,
    };
    (!host.is_empty() && port != 0).then(|| (host.to_owned(), port))
}

/// Finds the current primary of one sentinel-monitored service.
#[derive(Clone)]
pub(crate) struct Primary {
    client: Arc<Mutex<SentinelClient>>,
}

impl Primary {
    /// For `url`, with `tls`'s settings on a `rediss+sentinel://` URL (refused on a plaintext one).
    pub(crate) fn new(url: &SentinelUrl, tls: &Tls) -> Result<Primary, Error> {
        if url.tls {
            crate::tls::supported()?;
        }
        if tls.is_configured() && !url.tls {
            return Err(Error::Config(
                "TLS options were given but the Sentinel URL is plaintext: use rediss+sentinel:// for TLS"
                    .into(),
            ));
        }
        let client = url.client(tls).map_err(|e| Error::Config(format!("bad Sentinel URL: {e}")))?;
        Ok(Primary { client: Arc::new(Mutex::new(client)) })
    }

    /// A client for the server the sentinels name as primary now (checked with `ROLE`).
    /// Boxed: the `redis` crate's lookup is a deep future, which would otherwise be inlined
    /// into every request's.
    pub(crate) async fn client(&self) -> Result<redis::Client, RedisError> {
        let lookup: std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send + '_>> =
            Box::pin(async move { self.client.lock().await.async_get_client().await });
        lookup.await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_urls_are_parsed_with_every_part() {
        let url = SentinelUrl::parse(
            "redis+sentinel://app:p%40ss@10.0.0.1:26379,10.0.0.2,[::1]:26380/locks/2?sentinel_password=s3",
        )
        .unwrap();
        assert_eq!(
            url.sentinels,
            [("10.0.0.1".into(), 26379), ("10.0.0.2".into(), DEFAULT_PORT), ("::1".into(), 26380)]
        );
        assert_eq!((url.service.as_str(), url.db, url.tls), ("locks", 2, false));
        assert_eq!((url.username.as_deref(), url.password.as_deref()), (Some("app"), Some("p@ss")));
        assert_eq!((url.sentinel_username.as_deref(), url.sentinel_password.as_deref()), (None, Some("s3")));
        assert_eq!(url.name(), "locks@sentinel(10.0.0.1:26379,10.0.0.2:26379,::1:26380)");
        let tls = SentinelUrl::parse("rediss+sentinel://h:1/m").unwrap();
        assert!(tls.tls && tls.username.is_none() && tls.db == 0);
        assert!(is_sentinel_url("REDIS+SENTINEL://h/m") && !is_sentinel_url("redis://h"));
    }

    #[test]
    fn bad_sentinel_urls_say_what_is_wrong() {
        for url in [
            "redis+sentinel://h:1",
            "redis+sentinel://h:1/",
            "redis+sentinel://h:notaport/m",
            "redis+sentinel://h:1,/m",
            "redis+sentinel://h:1/m/x",
            "redis+sentinel://h:1/m/1/2",
            "redis+sentinel://h:1/m?what=1",
            "redis://h:1/m",
        ] {
            assert!(matches!(SentinelUrl::parse(url), Err(Error::Config(_))), "{url}");
        }
    }

    #[test]
    fn tls_options_need_a_tls_sentinel_url() {
        let plain = SentinelUrl::parse("redis+sentinel://127.0.0.1:1/m").unwrap();
        let tls = Tls::new().ca_cert_pem("x");
        assert!(matches!(Primary::new(&plain, &tls), Err(Error::Config(_))));
        assert!(Primary::new(&plain, &Tls::new()).is_ok());
    }
}
