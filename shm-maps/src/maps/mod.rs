//! Maps in shared memory (placeholder; the implementation lands with the shared-map work).
