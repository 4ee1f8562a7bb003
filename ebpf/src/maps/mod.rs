//! Maps as the interpreter sees them (API skeleton; the implementation lands with the
//! interpreter work).

use crate::program::MapDef;
use std::sync::Arc;

/// A failed map operation, with the errno the helper returns.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    /// Placeholder.
    #[error("map operation failed: {0}")]
    Failed(String),
}

/// A live map.
pub trait MapOps: Send + Sync {
    /// The definition.
    fn def(&self) -> &MapDef;
}

/// Creates in-process storage for a map definition.
pub fn create_local(def: &MapDef) -> Result<Arc<dyn MapOps>, MapError> {
    let _ = def;
    todo!("maps")
}
