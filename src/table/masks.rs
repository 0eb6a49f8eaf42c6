//! TODO

use super::commit::PendingCommit;
use super::dv::DV_MAGIC;
use super::Result;
use super::{TableError, TableStore};
use deltalake::kernel::{Action, Add, DeletionVectorDescriptor, Remove, StorageType};
use deltalake::Path;
use object_store::ObjectStoreExt;
use std::collections::HashMap;

impl TableStore {
    /// Writes one deletion-vector file for the run (Delta format: version
    /// byte, then per vector its big-endian size, the portable RoaringTreemap
    /// with its magic, and a big-endian CRC-32) and stages, per file, the
    /// remove of its old `add` and an `add` of the same path with the new DV.
    pub(super) async fn stage_deletion_vectors(
        &mut self,
        dvs: Vec<(u32, roaring::RoaringTreemap)>,
        pc: &mut PendingCommit,
    ) -> Result<()> {
        let data_err = |msg: String| TableError::Data { uri: self.uri.clone(), msg };
        let crc = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);
        let mut buf = vec![1u8];
        let mut spans = vec![];
        for (_, dv) in &dvs {
            let mut body = DV_MAGIC.to_le_bytes().to_vec();
            dv.serialize_into(&mut body).map_err(|e| data_err(format!("deletion vector: {e}")))?;
            spans.push((buf.len() as i32, body.len() as i32));
            buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
            buf.extend_from_slice(&body);
            buf.extend_from_slice(&crc.checksum(&body).to_be_bytes());
        }
        let uuid = uuid::Uuid::new_v4();
        let path = format!("deletion_vector_{uuid}.bin");
        self.store()?
            .put(&Path::from(path.as_str()), buf.into())
            .await
            .map_err(|e| data_err(format!("writing {path}: {e}")))?;
        let z = z85::encode(uuid.as_bytes());
        for ((id, dv), (offset, size)) in dvs.into_iter().zip(spans) {
            let f = self.files[id as usize].clone().expect("live file");
            let desc = DeletionVectorDescriptor {
                storage_type: StorageType::UuidRelativePath,
                path_or_inline_dv: z.clone(),
                offset: Some(offset),
                size_in_bytes: size,
                cardinality: dv.len() as i64,
            };
            let mut pv = HashMap::new();
            if let Some(p) = self.meta.partition() {
                pv.insert(p.to_string(), Some(f.current.to_string()));
            }
            pc.actions.push(Action::Remove(Remove {
                path: f.path.clone(),
                data_change: true,
                deletion_timestamp: Some(chrono::Utc::now().timestamp_millis()),
                extended_file_metadata: Some(true),
                partition_values: Some(pv.clone()),
                size: Some(f.size),
                tags: None,
                deletion_vector: f.dv_desc.clone(),
                base_row_id: None,
                default_row_commit_version: None,
            }));
            pc.actions.push(Action::Add(Add {
                path: f.path.clone(),
                partition_values: pv,
                size: f.size,
                modification_time: chrono::Utc::now().timestamp_millis(),
                data_change: true,
                stats: Some(format!("{{\"numRecords\":{}}}", f.rows)),
                tags: None,
                deletion_vector: Some(desc.clone()),
                base_row_id: None,
                default_row_commit_version: None,
                clustering_provider: None,
            }));
            pc.dv_updates.push((id, dv, desc));
            pc.files_masked += 1;
        }
        Ok(())
    }
}
