//! Compiles the Sparkplug B schema (proto/sparkplug_b.proto) into prost types, with
//! protox as the compiler: no system `protoc` is needed to build Grid.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/sparkplug_b.proto");
    let descriptors = protox::compile(["sparkplug_b.proto"], ["proto"])?;
    prost_build::Config::new().compile_fds(descriptors)?;
    Ok(())
}
