//! Compiles `proto/` with protox (pure Rust) so building needs no `protoc`.

use std::{env, fs, path::PathBuf};

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let file = root.join("shopeasy/inventory/v1/inventory.proto");
    println!("cargo:rerun-if-changed={}", root.display());

    let fds = protox::compile([&file], [&root])?;
    // `compile_fds` ignores `file_descriptor_set_path`, so the set that server
    // reflection serves is written out here.
    let out = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(out.join("inventory_descriptor.bin"), fds.encode_to_vec())?;

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
