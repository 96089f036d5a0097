//! Compiles `proto/` with protox (a protobuf compiler in Rust), so no `protoc` has to be installed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Read at run time: a build script compiled for another checkout (a shared target
    // directory) must not keep that checkout's path.
    let root = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let file = root.join("hookstream/v1/messages.proto");
    println!("cargo:rerun-if-changed={}", root.display());
    let descriptors = protox::compile([&file], [&root])?;
    prost_build::Config::new().bytes(["."]).compile_fds(descriptors)?;
    Ok(())
}
