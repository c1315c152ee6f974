//! Dataset digests (`DEBUG DIGEST`, `DEBUG DIGEST-VALUE`): how tests check that a replica,
//! a reload or a refused command left exactly the same data.

use crate::reply::error_text;
use crate::server::Server;

impl Server {
    /// `DEBUG DIGEST`: one hash over the whole dataset.
    pub fn digest(&self) -> String {
        self.admin_query(redis::cmd("DEBUG").arg("DIGEST"))
            .unwrap_or_else(|e| panic!("DEBUG DIGEST on {}: {}", self.addr(), error_text(&e)))
    }

    /// `DEBUG DIGEST-VALUE key`: the hash of one key's value.
    pub fn digest_value(&self, key: &str) -> String {
        let digests: Vec<String> = self
            .admin_query(redis::cmd("DEBUG").arg("DIGEST-VALUE").arg(key))
            .unwrap_or_else(|e| panic!("DEBUG DIGEST-VALUE {key} on {}: {}", self.addr(), error_text(&e)));
        digests.into_iter().next().unwrap_or_else(|| panic!("DEBUG DIGEST-VALUE {key}: no digest"))
    }
}
