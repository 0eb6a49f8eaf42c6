//! The deletion-vector codec: Delta's on-disk format for the rows a
//! merge-on-read table masks, without any I/O.
//!
//! A deletion-vector file is one version byte (1) followed, per vector, by
//! its big-endian size, the body (the portable RoaringTreemap serialisation
//! prefixed with a little-endian magic number) and a big-endian CRC-32 of the
//! body. The Delta log points at one vector with a descriptor: storage type
//! `u` (a file next to the table named by a z85-encoded UUID), offset of the
//! size field, body size and cardinality. Kept apart from the code that
//! reads and writes these files so the format can be checked on its own.

use deltalake::kernel::{DeletionVectorDescriptor, StorageType};
use roaring::RoaringTreemap;

/// Magic number of a portable RoaringBitmapArray in a Delta deletion vector.
const DV_MAGIC: u32 = 1_681_511_377;
/// The only deletion-vector file version the protocol defines.
const FILE_VERSION: u8 = 1;
/// Length of the z85 encoding of a UUID at the end of a `u` descriptor.
const Z85_UUID: usize = 20;

/// The table-relative file of a `u` (UUID relative path) deletion vector.
pub(super) fn dv_file(path_or_inline: &str) -> Result<String, String> {
    if path_or_inline.len() < Z85_UUID {
        return Err(format!("deletion vector id `{path_or_inline}` is too short"));
    }
    let (prefix, z) = path_or_inline.split_at(path_or_inline.len() - Z85_UUID);
    let raw = z85::decode(z).map_err(|e| format!("deletion vector id: {e}"))?;
    let uuid = uuid::Uuid::from_slice(&raw).map_err(|e| format!("deletion vector id: {e}"))?;
    Ok(if prefix.is_empty() {
        format!("deletion_vector_{uuid}.bin")
    } else {
        format!("{prefix}/deletion_vector_{uuid}.bin")
    })
}

/// The file a descriptor points at, refusing storage types this crate does
/// not write (inline and absolute-path vectors).
pub(super) fn descriptor_file(d: &DeletionVectorDescriptor) -> Result<String, String> {
    if d.storage_type != StorageType::UuidRelativePath || d.path_or_inline_dv.len() < Z85_UUID {
        return Err(format!(
            "deletion vector storage {:?} is not supported (only relative `u` files)",
            d.storage_type
        ));
    }
    dv_file(&d.path_or_inline_dv)
}

/// Decodes the vector a descriptor points at out of its file's bytes,
/// checking version, bounds, size, magic and checksum.
pub(super) fn decode(bytes: &[u8], d: &DeletionVectorDescriptor) -> Result<RoaringTreemap, String> {
    let start = d.offset.unwrap_or(1) as usize;
    let size = d.size_in_bytes as usize;
    if bytes.first() != Some(&FILE_VERSION) {
        return Err("unknown deletion vector file version".into());
    }
    if bytes.len() < start + 4 + size + 4 || size < 4 {
        return Err("deletion vector out of bounds".into());
    }
    if u32::from_be_bytes(bytes[start..start + 4].try_into().expect("4 bytes")) as usize != size {
        return Err("deletion vector size does not match the log".into());
    }
    let body = &bytes[start + 4..start + 4 + size];
    if u32::from_le_bytes(body[0..4].try_into().expect("4 bytes")) != DV_MAGIC {
        return Err("not a portable roaring bitmap".into());
    }
    let crc =
        u32::from_be_bytes(bytes[start + 4 + size..start + 8 + size].try_into().expect("4 bytes"));
    if crc != crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC).checksum(body) {
        return Err("deletion vector checksum mismatch".into());
    }
    RoaringTreemap::deserialize_from(&body[4..]).map_err(|e| e.to_string())
}

/// One deletion-vector file holding several vectors.
pub(super) struct EncodedFile {
    /// The file name, relative to the table.
    pub(super) path: String,
    pub(super) bytes: Vec<u8>,
    /// Per vector, in input order, the descriptor the log records.
    pub(super) descriptors: Vec<DeletionVectorDescriptor>,
}

/// Encodes vectors into one new file (a fresh UUID names it).
pub(super) fn encode<'a>(
    dvs: impl IntoIterator<Item = &'a RoaringTreemap>,
) -> Result<EncodedFile, String> {
    let uuid = uuid::Uuid::new_v4();
    let z = z85::encode(uuid.as_bytes());
    let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);
    let mut bytes = vec![FILE_VERSION];
    let mut descriptors = vec![];
    for dv in dvs {
        let mut body = DV_MAGIC.to_le_bytes().to_vec();
        dv.serialize_into(&mut body).map_err(|e| format!("deletion vector: {e}"))?;
        descriptors.push(DeletionVectorDescriptor {
            storage_type: StorageType::UuidRelativePath,
            path_or_inline_dv: z.clone(),
            offset: Some(bytes.len() as i32),
            size_in_bytes: body.len() as i32,
            cardinality: dv.len() as i64,
        });
        bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
        bytes.extend_from_slice(&body);
        bytes.extend_from_slice(&crc.checksum(&body).to_be_bytes());
    }
    Ok(EncodedFile { path: format!("deletion_vector_{uuid}.bin"), bytes, descriptors })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deletion_vectors_decode_to_what_was_encoded() {
        let a: RoaringTreemap = [0u64, 5, 6, 1 << 33].into_iter().collect();
        let b: RoaringTreemap = (100u64..2000).step_by(3).collect();
        let file = encode([&a, &b]).unwrap();
        assert_eq!(file.descriptors.len(), 2);
        for (d, want) in file.descriptors.iter().zip([&a, &b]) {
            assert_eq!(descriptor_file(d).unwrap(), file.path);
            assert_eq!(d.cardinality, want.len() as i64);
            assert_eq!(&decode(&file.bytes, d).unwrap(), want);
        }
    }

    #[test]
    fn deletion_vectors_refuse_damaged_files() {
        let a: RoaringTreemap = [1u64, 2, 3].into_iter().collect();
        let file = encode([&a]).unwrap();
        let d = &file.descriptors[0];
        let mut flipped = file.bytes.clone();
        let last_body_byte = flipped.len() - 5;
        flipped[last_body_byte] ^= 0xff;
        assert!(decode(&flipped, d).unwrap_err().contains("checksum"));
        assert!(decode(&file.bytes[..file.bytes.len() - 1], d).unwrap_err().contains("bounds"));
        let mut version = file.bytes.clone();
        version[0] = 2;
        assert!(decode(&version, d).unwrap_err().contains("version"));
        let inline = DeletionVectorDescriptor { storage_type: StorageType::Inline, ..d.clone() };
        assert!(descriptor_file(&inline).is_err());
    }
}
