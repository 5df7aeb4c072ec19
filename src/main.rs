//! The `weir` binary: parses the command line and hands it to the library.

fn main() {
    println!("weir {}", env!("CARGO_PKG_VERSION"));
}
