//! [`BackupSlot`]: where a node holds the one backup being read (`backup_export.rs`), as
//! the `Ctx` of its client connections (`ctx.rs`) carries it. It holds the bytes and
//! nothing else: the rules of a begin and a chunk are the export's.

use std::sync::Arc;

/// The backup held for its chunks: its index and its bytes.
#[derive(Default)]
pub struct BackupSlot(pub(super) std::sync::Mutex<Option<(u64, Arc<Vec<u8>>)>>);
