//! The runtime for tests, shared with the library's own tests: it lives in `dsh-test-support`
//! (feature `runtime`).

pub use dsh_test_support::runtime::*;
