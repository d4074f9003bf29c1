//! The byte layout of composite store keys: text parts separated by a NUL byte, numbers
//! big-endian so that keys sort by them. Names never contain NUL (the topology
//! language refuses it), so a prefix of parts selects exactly their keys.

/// A composite key under construction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key(Vec<u8>);

impl Key {
    /// A key starting with `part`.
    pub fn text(part: &str) -> Key {
        Key(part.as_bytes().to_vec())
    }

    /// Appends a NUL separator and `part`.
    pub fn then(mut self, part: &str) -> Key {
        self.0.push(0);
        self.0.extend_from_slice(part.as_bytes());
        self
    }

    /// Appends a NUL separator (what follows is a number, or nothing: a prefix).
    pub fn sep(mut self) -> Key {
        self.0.push(0);
        self
    }

    /// Appends `n`, big-endian.
    pub fn u32(mut self, n: u32) -> Key {
        self.0.extend_from_slice(&n.to_be_bytes());
        self
    }

    /// Appends `n`, big-endian.
    pub fn u64(mut self, n: u64) -> Key {
        self.0.extend_from_slice(&n.to_be_bytes());
        self
    }

    pub fn bytes(self) -> Vec<u8> {
        self.0
    }
}

/// The big-endian number at the end of a key, if it ends with 8 bytes.
pub fn trailing_u64(key: &[u8]) -> Option<u64> {
    let at = key.len().checked_sub(8)?;
    Some(u64::from_be_bytes(key[at..].try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_nul_separated_and_numbers_big_endian() {
        assert_eq!(Key::text("fed").then("m").then("r").bytes(), b"fed\0m\0r");
        assert_eq!(
            Key::text("t").sep().u64(258).bytes(),
            [b't', 0, 0, 0, 0, 0, 0, 0, 1, 2]
        );
        assert_eq!(trailing_u64(&Key::text("t").sep().u64(7).bytes()), Some(7));
        assert_eq!(trailing_u64(b"short"), None);
    }
}
