//! Generated gRPC code for ShopEasy's Inventory API.
//!
//! The source of truth is `proto/shopeasy/inventory/v1/inventory.proto`; this
//! crate only compiles it (with `protox`, so no `protoc` is needed) and
//! re-exports the result. Services and clients depend on it; nothing else
//! lives here.

#![allow(missing_docs, unreachable_pub, clippy::unwrap_used)]

/// `shopeasy.inventory.v1`: stock and reservations.
pub mod inventory {
    /// Version 1 of the Inventory API.
    pub mod v1 {
        tonic::include_proto!("shopeasy.inventory.v1");
    }
}

/// Encoded `FileDescriptorSet` of every ShopEasy proto, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/inventory_descriptor.bin"));
