//! SHA-256 digests as text, the way Docker, the Hub and spark-launch's own keys write them:
//! lowercase hex, `sha256:`-prefixed where Docker names a layer or an image. One place for
//! what several modules compare and print. Pure.

use sha2::{Digest, Sha256};

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The lowercase hex SHA-256 of `data`.
pub fn sha256_hex(data: impl AsRef<[u8]>) -> String {
    hex(&Sha256::digest(data.as_ref()))
}

/// 64 hex digits: the hex of a SHA-256.
pub fn is_hex64(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The hex of a `sha256:<64 hex digits>` digest, or `None` for anything else.
pub fn sha256_hex_of(digest: &str) -> Option<&str> {
    digest.strip_prefix("sha256:").filter(|h| is_hex64(h))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_lowercase_hex_and_only_sha256_prefixed_ones_are_read_back() {
        assert_eq!(hex(&[0x00, 0xab, 0x7f]), "00ab7f");
        // The SHA-256 of "abc" (FIPS 180-2, appendix B.1).
        let abc = sha256_hex("abc");
        assert_eq!(
            abc,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(sha256_hex_of(&format!("sha256:{abc}")), Some(abc.as_str()));
        assert_eq!(sha256_hex_of(&abc), None);
        assert_eq!(sha256_hex_of("sha256:abc"), None);
        assert!(!is_hex64(&format!("{}g", &abc[..63])));
    }
}
