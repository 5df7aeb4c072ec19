//! The node: the data directory, Raft on the redb log and the state-machine store, the
//! proposer and the reader, and the client port. [`node`] wires them and stops them.

pub mod admin;
pub mod client_port;
pub mod data_dir;
pub mod leader;
pub mod node;
pub mod proposer;
pub mod reader;

pub use data_dir::{IDENTITY_FILE, prepare_data_dir};
pub use node::{Node, serve};
