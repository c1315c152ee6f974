//! What the runnable examples share: where they find the server. A folder, not a file beside
//! them, so that Cargo does not take it for an example of its own.

/// The server's URL: the first argument, else `FENCEDLOCK_URL`, else `redis://127.0.0.1:6379`,
/// so `cargo run --example X` works against a local server and `-- URL` against any other.
pub fn url() -> String {
    std::env::args()
        .nth(1)
        .or_else(|| std::env::var("FENCEDLOCK_URL").ok())
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned())
}
