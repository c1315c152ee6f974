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

/// Redis's CRC-64 (Jones polynomial, reflected): the trailer of `DUMP` payloads and RDB files.
pub fn crc64_jones(data: &[u8]) -> u64 {
    const POLY_REFLECTED: u64 = 0x95ac_9329_ac4b_c9b5;
    data.iter().fold(0u64, |mut crc, b| {
        crc ^= u64::from(*b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ POLY_REFLECTED } else { crc >> 1 };
        }
        crc
    })
}

/// A `DUMP` payload's body (everything before its 8-byte CRC) sealed with a valid checksum, so
/// a tampered value passes the server's check and reaches the module's loader.
pub fn seal_dump(body: &[u8]) -> Vec<u8> {
    let mut out = body.to_vec();
    out.extend_from_slice(&crc64_jones(body).to_le_bytes());
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn crc64_is_redis_check_value() {
        assert_eq!(super::crc64_jones(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    }
}
