//! TODO

use deltalake::kernel::{DeletionVectorDescriptor, StorageType};
use deltalake::{DeltaTable, Path};
use object_store::ObjectStoreExt;

/// Magic number of a portable RoaringBitmapArray in a Delta deletion vector.
pub(super) const DV_MAGIC: u32 = 1_681_511_377;

/// The table-relative file of a `u` (UUID relative path) deletion vector.
pub(super) fn dv_file(path_or_inline: &str) -> std::result::Result<String, String> {
    if path_or_inline.len() < 20 {
        return Err(format!("deletion vector id `{path_or_inline}` is too short"));
    }
    let (prefix, z) = path_or_inline.split_at(path_or_inline.len() - 20);
    let raw = z85::decode(z).map_err(|e| format!("deletion vector id: {e}"))?;
    let uuid = uuid::Uuid::from_slice(&raw).map_err(|e| format!("deletion vector id: {e}"))?;
    Ok(if prefix.is_empty() {
        format!("deletion_vector_{uuid}.bin")
    } else {
        format!("{prefix}/deletion_vector_{uuid}.bin")
    })
}

/// Reads a deletion vector written as `changelake` writes them (stored
/// relative to the table, `u`): other storage types are refused.
pub(super) async fn read_dv(
    table: &DeltaTable,
    d: &DeletionVectorDescriptor,
) -> std::result::Result<roaring::RoaringTreemap, String> {
    if d.storage_type != StorageType::UuidRelativePath || d.path_or_inline_dv.len() < 20 {
        return Err(format!(
            "deletion vector storage {:?} is not supported (only relative `u` files)",
            d.storage_type
        ));
    }
    let path = dv_file(&d.path_or_inline_dv)?;
    let bytes = table
        .object_store()
        .get(&Path::from(path.as_str()))
        .await
        .map_err(|e| format!("reading {path}: {e}"))?
        .bytes()
        .await
        .map_err(|e| format!("reading {path}: {e}"))?;
    let start = d.offset.unwrap_or(1) as usize;
    let size = d.size_in_bytes as usize;
    if bytes.first() != Some(&1) {
        return Err(format!("{path}: unknown deletion vector file version"));
    }
    if bytes.len() < start + 4 + size + 4 || size < 4 {
        return Err(format!("{path}: deletion vector out of bounds"));
    }
    if u32::from_be_bytes(bytes[start..start + 4].try_into().expect("4 bytes")) as usize != size {
        return Err(format!("{path}: deletion vector size does not match the log"));
    }
    let body = &bytes[start + 4..start + 4 + size];
    if u32::from_le_bytes(body[0..4].try_into().expect("4 bytes")) != DV_MAGIC {
        return Err(format!("{path}: not a portable roaring bitmap"));
    }
    let crc =
        u32::from_be_bytes(bytes[start + 4 + size..start + 8 + size].try_into().expect("4 bytes"));
    if crc != crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC).checksum(body) {
        return Err(format!("{path}: deletion vector checksum mismatch"));
    }
    roaring::RoaringTreemap::deserialize_from(&body[4..]).map_err(|e| format!("{path}: {e}"))
}
