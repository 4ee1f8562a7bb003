//! The attach side of bpftime-super: what the shim loaded into CUDA applications needs
//! (image parsing now; probes and the interception layer are added by others).

#![deny(missing_docs)]

pub mod image;
