//! AES-256-GCM, the one AEAD of sealed content and sealed rows, through `ring`.
//!
//! `ring` picks its implementation when it runs (CPUID): AES-NI with CLMUL/AVX/MOVBE
//! (its stitched AES-CTR + GHASH over six blocks) where the CPU has them, a
//! constant-time fallback elsewhere. The extension is therefore one portable x86-64 (or
//! other) build that needs no RUSTFLAGS: docs/adr/0011's addendum ("the AEAD") has the
//! instruction counts against the RustCrypto `aes-gcm` crate it replaced (with and
//! without compile-time target features).

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};

pub const NONCE_BYTES: usize = 12;
pub const TAG_BYTES: usize = 16;
pub const KEY_BYTES: usize = 32;

/// One data key, ready to seal and open (the key schedule and GHASH table are built
/// once, here).
#[derive(Clone)]
pub struct Aes256Gcm(LessSafeKey);

fn nonce(bytes: &[u8]) -> Option<Nonce> {
    Nonce::try_assume_unique_for_key(bytes).ok()
}

impl Aes256Gcm {
    /// None: not a 32-byte key.
    pub fn new(key: &[u8]) -> Option<Self> {
        if key.len() != KEY_BYTES {
            return None;
        }
        UnboundKey::new(&AES_256_GCM, key).ok().map(|k| Self(LessSafeKey::new(k)))
    }

    /// `plain` sealed: ciphertext || tag appended to `out` (false: a nonce that is not
    /// 12 bytes; `out` is then as it was).
    pub fn seal_into(&self, nonce_bytes: &[u8], plain: &[u8], ad: &[u8], out: &mut Vec<u8>)
                     -> bool {
        let Some(n) = nonce(nonce_bytes) else { return false };
        let start = out.len();
        out.extend_from_slice(plain);
        match self.0.seal_in_place_separate_tag(n, Aad::from(ad), &mut out[start..]) {
            Ok(tag) => {
                out.extend_from_slice(tag.as_ref());
                true
            }
            Err(_) => {
                out.truncate(start);
                false
            }
        }
    }

    /// `plain` sealed: ciphertext || tag.
    pub fn seal(&self, nonce_bytes: &[u8], plain: &[u8], ad: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(plain.len() + TAG_BYTES);
        self.seal_into(nonce_bytes, plain, ad, &mut out).then_some(out)
    }

    /// `sealed` (ciphertext || tag) opened into `out` (cleared first, reused per part:
    /// no allocation once it is large enough); false on a bad nonce or length or a tag
    /// that does not verify (`out` then holds no plaintext).
    pub fn open_into(&self, nonce_bytes: &[u8], sealed: &[u8], ad: &[u8], out: &mut Vec<u8>)
                     -> bool {
        out.clear();
        let Some(n) = nonce(nonce_bytes) else { return false };
        if sealed.len() < TAG_BYTES {
            return false;
        }
        out.extend_from_slice(sealed);
        match self.0.open_in_place(n, Aad::from(ad), out) {
            Ok(plain) => {
                let len = plain.len();
                out.truncate(len);
                true
            }
            Err(_) => {
                out.clear();
                false
            }
        }
    }

    /// `sealed` (ciphertext || tag) opened (None: as `open_into`'s false).
    pub fn open(&self, nonce_bytes: &[u8], sealed: &[u8], ad: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        self.open_into(nonce_bytes, sealed, ad, &mut out).then_some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // NIST SP 800-38D / the GCM spec's test case 16 (AES-256, 60-byte plaintext, 20-byte
    // associated data): the wire format (ciphertext || tag) is the standard one.
    fn hex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn seals_the_standard_test_vector_and_opens_it_back() {
        let key = hex("feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308");
        let nonce = hex("cafebabefacedbaddecaf888");
        let plain = hex("d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72\
                         1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39");
        let ad = hex("feedfacedeadbeeffeedfacedeadbeefabaddad2");
        let want = hex("522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa\
                        8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662\
                        76fc6ece0f4e1768cddf8853bb2d551b");
        let c = Aes256Gcm::new(&key).unwrap();
        assert_eq!(c.seal(&nonce, &plain, &ad).unwrap(), want);
        let mut out = b"left over".to_vec();
        assert!(c.open_into(&nonce, &want, &ad, &mut out));
        assert_eq!(out, plain);
    }

    #[test]
    fn refuses_a_flipped_byte_other_associated_data_and_bad_shapes() {
        let c = Aes256Gcm::new(&[1u8; 32]).unwrap();
        let sealed = c.seal(&[2u8; 12], b"hello", b"ad").unwrap();
        assert_eq!(sealed.len(), 5 + TAG_BYTES);
        let mut out = Vec::new();
        for i in 0..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 1;
            assert!(!c.open_into(&[2u8; 12], &bad, b"ad", &mut out), "byte {i}");
            assert!(out.is_empty(), "no plaintext is left behind by a failed tag");
        }
        assert!(c.open(&[2u8; 12], &sealed, b"ae").is_none());
        assert!(c.open(&[3u8; 12], &sealed, b"ad").is_none());
        assert!(c.open(&[2u8; 11], &sealed, b"ad").is_none());
        assert!(c.open(&[2u8; 12], &sealed[..TAG_BYTES - 1], b"ad").is_none());
        assert!(Aes256Gcm::new(&[1u8; 31]).is_none());
        assert!(c.seal(&[2u8; 13], b"x", b"").is_none());
        assert_eq!(c.open(&[2u8; 12], &sealed, b"ad").unwrap(), b"hello");
    }
}
