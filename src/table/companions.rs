//! The table's side of row companions (`rowstore/` holds their format):
//! where a table keeps them, writing one with each new current file,
//! reading the current rows a run needs from them, and rebuilding the ones
//! that are missing or damaged from their data files (docs/scd2.md,
//! "Closing without reading column chunks").

use std::collections::BTreeMap;

use deltalake::arrow::array::{BinaryArray, RecordBatch};

use super::briefs::{split_brief_column, with_brief_column};
use super::files::SelectedRows;
use super::rowstore::{self, RowStore};
use super::Result;
use super::TableStore;
use crate::config::Strategy;
use crate::par::par_map;

/// Data files whose missing row companion one run builds (see
/// [`TableStore::build_missing_companions`]).
const REBUILDS_PER_RUN: usize = 16;

impl TableStore {
    /// Where this table keeps row companions for scd2 closes (merge-on-read
    /// scd2 tables only, see `rowstore/`): with `row_companions: auto`,
    /// under `_changelake/rows` in the table directory when the table is on
    /// a local disk (a prefix Delta readers ignore) and nowhere otherwise;
    /// with a directory, in its subdirectory named after the table.
    pub(super) fn row_store(&self) -> RowStore {
        use crate::config::RowCompanions;
        if self.meta.strategy != Strategy::Scd2 || !self.meta.layout.deletion_vectors {
            return RowStore::none();
        }
        let uri = self.loc.uri();
        let local = match uri.strip_prefix("file://") {
            Some(path) => Some(path),
            None => (!uri.contains("://")).then_some(uri),
        };
        match (&self.meta.layout.row_companions, local) {
            (RowCompanions::Off, _) | (RowCompanions::Auto, None) => RowStore::none(),
            (RowCompanions::Auto, Some(root)) => {
                RowStore::at(std::path::Path::new(root).join("_changelake/rows"), &self.meta.name)
            }
            (RowCompanions::Dir(dir), _) => {
                RowStore::at(dir.join(&self.meta.name), &self.meta.name)
            }
        }
    }

    /// The row companion of a new data file, written under a temporary
    /// name by the thread that encodes the file: current files of a table
    /// that keeps companions (see `rowstore/`). Failing to write one only
    /// costs speed later, so it is logged, not an error.
    pub(super) fn companion(
        &self,
        current: bool,
        batch: &RecordBatch,
        briefs: Option<&BinaryArray>,
    ) -> Option<rowstore::Staged> {
        if !current || !self.rows.enabled() {
            return None;
        }
        let with_briefs;
        let batch = match briefs {
            Some(b) => {
                with_briefs = with_brief_column(batch, b);
                &with_briefs
            }
            None => batch,
        };
        rowstore::encode(batch)
            .and_then(|c| self.rows.stage(&c))
            .inspect_err(|e| tracing::warn!(target: "changelake::table", table = %self.meta.name, error = %e, "row companion not written; closes of its rows will read parquet"))
            .ok()
    }

    /// Chosen physical rows of current files: from their row companions
    /// where they have one (a few small reads per row), else from parquet
    /// with row selections (every page holding a chosen row is decoded).
    /// A companion that cannot be read is rebuilt from its data file once;
    /// rows it still cannot give are read from parquet.
    pub(super) async fn read_current_rows(
        &self,
        want: BTreeMap<u32, Vec<u32>>,
    ) -> Result<Vec<SelectedRows>> {
        let (held, rest): (BTreeMap<u32, Vec<u32>>, BTreeMap<u32, Vec<u32>>) =
            want.into_iter().partition(|(id, _)| self.has_companion(*id));
        let (mut out, failed) = self.read_companions(held, true)?;
        let rebuilt: Vec<u32> = failed.keys().copied().collect();
        self.build_missing_companions(rebuilt).await;
        let (again, mut rest_too) = self.read_companions(failed, false)?;
        out.extend(again);
        rest_too.extend(rest);
        out.extend(self.read_selected(rest_too).await?);
        Ok(out)
    }

    /// Rows of files from their companions (`RowStore::read_many`); the
    /// files whose companion could not give them come back (the companion
    /// deleted).
    #[allow(clippy::type_complexity)]
    fn read_companions(
        &self,
        want: BTreeMap<u32, Vec<u32>>,
        warn: bool,
    ) -> Result<(Vec<SelectedRows>, BTreeMap<u32, Vec<u32>>)> {
        let path = |id: u32| self.files[id as usize].as_ref().expect("live file").path.as_str();
        let asked: Vec<(&str, &[u32])> =
            want.iter().map(|(&id, rows)| (path(id), rows.as_slice())).collect();
        let read = self.rows.read_many(&asked);
        let (mut out, mut failed) = (vec![], BTreeMap::new());
        for ((id, rows), batch) in want.into_iter().zip(read) {
            match batch {
                // A companion gives exactly the rows asked for, or an error.
                Ok(batch) => {
                    let (batch, briefs) = split_brief_column(batch);
                    let batch = self.as_held(batch)?;
                    out.push(SelectedRows { file: id, rows, batch, briefs })
                }
                Err(error) => {
                    if warn {
                        tracing::warn!(target: "changelake::table", table = %self.meta.name, file = %path(id), %error, "row companion not usable; rebuilding it");
                    }
                    self.rows.remove(path(id));
                    failed.insert(id, rows);
                }
            }
        }
        Ok((out, failed))
    }

    /// Does this live file have a row companion (`rowstore/`)?
    pub(super) fn has_companion(&self, id: u32) -> bool {
        self.files[id as usize].as_ref().is_some_and(|f| self.rows.holds(&f.path))
    }

    /// Builds the row companions of the files holding closed versions that
    /// lack one (written before companions existed, rewritten without one,
    /// or one found damaged): each such file is read whole once, which is
    /// what reading its closed rows from parquet would cost anyway. Failures
    /// are logged; those rows are then read from parquet. At most
    /// [`REBUILDS_PER_RUN`] files per run: a large table written before
    /// companions existed gets them over its next runs instead of in one
    /// run that reads and rewrites everything.
    pub(super) async fn build_missing_companions(&self, mut lacking: Vec<u32>) {
        lacking.retain(|&id| !self.has_companion(id));
        if lacking.is_empty() {
            return;
        }
        let later = lacking.len().saturating_sub(REBUILDS_PER_RUN);
        lacking.truncate(REBUILDS_PER_RUN);
        if later > 0 {
            tracing::info!(target: "changelake::table", table = %self.meta.name, files = later, "row companions left to build in later runs");
        }
        let started = std::time::Instant::now();
        let mut built = 0usize;
        for wave in lacking.chunks(4) {
            let mut todo = vec![];
            for &id in wave {
                todo.push((id, self.fetch(id).await));
            }
            for done in par_map(todo, |(id, bytes)| self.build_companion(id, bytes?)) {
                match done {
                    Ok(()) => built += 1,
                    Err(e) => {
                        tracing::warn!(target: "changelake::table", table = %self.meta.name, error = %e, "row companion not built")
                    }
                }
            }
        }
        tracing::info!(target: "changelake::table", table = %self.meta.name, files = built, duration_ms = started.elapsed().as_millis() as u64, "row companions built for files that had none");
    }

    /// A data file's companion from the file's bytes: all its physical rows.
    fn build_companion(&self, id: u32, bytes: bytes::Bytes) -> Result<()> {
        let batches = self.decode_file(id, bytes, None)?;
        let all = deltalake::arrow::compute::concat_batches(&self.arrow_schema(), &batches)
            .map_err(|e| self.data_err(e.to_string()))?;
        let path = &self.files[id as usize].as_ref().expect("live file").path;
        rowstore::encode(&all)
            .and_then(|c| self.rows.put(path, &c))
            .map_err(|e| self.data_err(e.to_string()))
    }
}
