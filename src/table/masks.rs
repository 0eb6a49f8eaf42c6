//! Merge-on-read staging (`layout.deletion_vectors`): a touched file keeps
//! its rows and gets the replaced and deleted ones masked.
//!
//! Copy-on-write pays for every file a run touches, and uniformly spread
//! updates touch all of them, so a run's cost grows with the table. With
//! deletion vectors a touched file is not rewritten: the physical rows of
//! replaced and deleted keys are added to its Delta deletion vector (one DV
//! file per run, the standard RoaringTreemap format, see [`super::dv`]) and
//! the new versions are appended to new files, so a run costs what the batch
//! changes. Which files are masked and which rewritten is decided in
//! [`super::plan`]. Readers need the `deletionVectors` table feature (Spark,
//! delta-kernel, delta-rs' `scan`; not pyarrow datasets), hence opt-in.

use deltalake::Path;
use object_store::ObjectStoreExt;

use super::actions::{self, DataChange, FileAction};
use super::commit::{DvUpdate, PendingCommit};
use super::plan::Masked;
use super::Result;
use super::{dv, TableStore};

impl TableStore {
    /// Writes one deletion-vector file for the run and stages, per file, the
    /// remove of its old `add` and an `add` of the same path with the new DV.
    pub(super) async fn stage_deletion_vectors(
        &mut self,
        masked: Vec<Masked>,
        pc: &mut PendingCommit,
    ) -> Result<()> {
        let encoded = dv::encode(masked.iter().map(|m| &m.dv))
            .map_err(|e| self.data_err(format!("deletion vector: {e}")))?;
        self.store()?
            .put(&Path::from(encoded.path.as_str()), encoded.bytes.into())
            .await
            .map_err(|e| self.io_err(format!("writing {}", encoded.path), e))?;
        for (m, descriptor) in masked.into_iter().zip(encoded.descriptors) {
            let f = self.files[m.file as usize].as_ref().expect("live file");
            pc.actions.push(actions::remove(self.file_action(f), DataChange::Rows));
            // Rows masked: the bounds still hold, but are no longer tight.
            let stats = f.stats.as_deref().map(super::file_stats::widened);
            let now = FileAction {
                deletion_vector: Some(descriptor.clone()),
                stats: stats.as_deref(),
                ..self.file_action(f)
            };
            pc.actions.push(actions::add(now, DataChange::Rows));
            pc.dv_updates.push(DvUpdate { file: m.file, dv: m.dv, descriptor });
            pc.files_masked += 1;
        }
        Ok(())
    }
}
